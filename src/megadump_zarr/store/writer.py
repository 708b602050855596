"""The window writer: persist one rank's window as a Zarr v3 hierarchy, then commit it.

Layout below the dump root (all Zarr v3; see DESIGN.md "Store layout")::

    zarr.json                        root group, created if missing, never rewritten
    rank_{r}/zarr.json               rank group, created if missing, never rewritten
    rank_{r}/window_{wwww}/          window group: attrs + status/createdAt/committedAt
        invocation_.../              invocation group (InvocationWrite.attrs)
            <groups>/ <arrays>       GroupWrite / ArrayWrite paths, coordinates as sibling arrays
            stages/{s}/pack_{pppp}/  packs layout: the stage's small task records as task-record packs
                                     (``store/packs.py``; ``pack=False`` keeps a group per task)

Protocol:

1. ``begin`` claims the window (local: ``os.mkdir``, so exactly one process wins; fsspec: existence
   check of ``window/zarr.json``) and writes the window ``zarr.json`` with status ``"writing"``.
2. ``write_invocation`` validates the whole invocation first, then writes every array (chunks, then the
   array's ``zarr.json`` once its statistics are known) from a thread pool; nothing else. A pack's
   ``task`` array is written before its record arrays, each record array's document after its shards
   (``store/pack_writer.py``), so a torn window's packs still read.
3. ``commit`` writes each group's ``zarr.json`` below the window with inline consolidated metadata of
   its descendants, then the window ``zarr.json`` last, atomically, with the final status. Every data
   group then opens with plain ``xr.open_zarr(path)`` (no consolidated-metadata warning). The root and
   rank groups are shared by concurrent writers: they carry consolidated metadata only while no session
   writes (a session registers a marker at its first ``begin``, then drops the index; ``index_root`` at
   its end indexes when no other session is registered; see ``store/root_index.py``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from concurrent.futures import Future, ThreadPoolExecutor, wait
from datetime import UTC, datetime
import gc
import json
import os
import threading
import uuid
from typing import Any

import numpy as np

from megadump_zarr.codecs import parse_compressor
from megadump_zarr.layout.write_model import InvocationWrite, WindowWrite
from megadump_zarr.store.backend import Backend, LocalBackend
from megadump_zarr.store.roots import open_backend
from megadump_zarr.store.encoding import NO_COMPRESSION, RAW_BELOW_BYTES, Encoder, joined
from megadump_zarr.store.metadata import (
    array_document_bytes,
    consolidated_group_bytes,
    dumps,
    flat_group_bytes,
    group_document,
    plain_group_bytes,
    stats_bytes,
)
from megadump_zarr.store.pack_writer import row_stats, submit_pack
from megadump_zarr.layout.paths import rank_dir, window_path
from megadump_zarr.layout.schema import (
    FORMAT_ATTR,
    FORMAT_VERSION,
    L0_STORAGE,
    PACK_STORAGE,
    STORAGE_ATTR,
    STORAGE_KINDS,
    TASK_STORAGE,
)
from megadump_zarr.store.nodes import ArrayJob, invocation_nodes
from megadump_zarr.store.tensor_stats import StatsAccumulator
from megadump_zarr.store.root_index import close_session, index_root, open_session, strip_index
from megadump_zarr.store.statistics_table import STATISTICS_GROUP, statistics_nodes
from megadump_zarr.store.window_inventory import ChunkDigests, inventory_bytes
from megadump_zarr.layout.inventory import INVENTORY_DIGEST_ATTR, INVENTORY_FILE, inventory_digest


__all__ = ["LAYOUT_VERSION", "WindowSession", "WindowWriter", "window_key", "window_status"]

LAYOUT_VERSION = 1
_STATUSES = ("complete", "aborted")
# Single-chunk arrays are written in batches (fewer pool round trips; one fs.pipe call for fsspec).
_BATCH_ARRAYS = 16
_BATCH_BYTES = 4 << 20
# One syncfs measured cheaper than an fsync per file and directory (see benchmarks/export.py --durability).
_DURABLE_DEFAULT = "syncfs"


def window_key(rank: int, window_index: int) -> str:
    """Key of a window group relative to the dump root (``rank_{r}/window_{wwww}``).

    Args:
        rank: Job-global rank (>= 0).
        window_index: Zero-based window index.
    """
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or rank < 0:
        raise ValueError(f"rank must be a non-negative integer, got {rank!r}")
    if isinstance(window_index, bool) or not isinstance(window_index, (int, np.integer)) or window_index < 0:
        raise ValueError(f"window_index must be a non-negative integer, got {window_index!r}")
    return window_path(int(rank), int(window_index))


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _stored_raw(job: ArrayJob) -> bool:
    """Whether an array is stored uncompressed: one chunk of fewer than ``RAW_BELOW_BYTES``.

    Compressors cannot win there (blosc adds a 16-byte header and copies such small inputs), and
    the shorter codec chain keeps the array's document, repeated in its group's and its window's
    consolidated metadata, about 110 bytes smaller: per-task coordinate arrays are this small.
    """
    return job.chunks.count <= 1 and job.data.nbytes < RAW_BELOW_BYTES


class WindowWriter:
    """Writes tensor-dump windows below one root.

    Args:
        root: Local directory, ``file://`` URL, or fsspec URL (``s3://bucket/prefix``, ``memory://x``).
        storage_options: fsspec options for URL roots.
        compressor: Compressor name (see :mod:`megadump_zarr.codecs`); ``None`` or ``"none"`` stores raw.
        chunk_bytes: Target uncompressed bytes per chunk (whole rows along axis 0).
        stats: Store ``stats`` (see :mod:`megadump_zarr.store.tensor_stats`) in every data array's attributes.
        max_workers: Threads overlapping file-system operations and compression (default
            one per core (at least 2) for local roots, 32 for fsspec roots).
        checksum: End every array's codec chain with ``crc32c`` (a CRC-32C per chunk that zarr-python,
            tensorstore and our reader check); ``False`` only to measure what it costs.
        durable: Before a local window's final status is written, make everything written for it
            durable, then write the status document durably (see :meth:`WindowSession.commit`).
            ``True`` uses the measured cheaper way, one ``syncfs`` of the file system (``"fsync"``:
            an fsync of every file and directory instead); ``False`` skips it (scratch runs).
            Object stores acknowledge writes once durable: nothing extra is done for them.
        pack: Store the small records of L1 task groups (``GroupWrite.task``) as task-record packs, one
            sharded array per stage, signature and record (opt-in, ``TensorDumpConfig(layout="packs")``,
            see :mod:`.packs`); ``False`` (the default) writes a group per task and an array per
            record, a group plain ``xr.open_zarr`` opens. An L1 window's ``stageViewStorage`` records which.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        storage_options: dict[str, Any] | None = None,
        compressor: str | None = "default",
        chunk_bytes: int = 4 << 20,
        stats: bool = True,
        max_workers: int | None = None,
        checksum: bool = True,
        durable: bool | str = True,
        pack: bool = False,
    ) -> None:
        if chunk_bytes < 1:
            raise ValueError(f"chunk_bytes must be positive, got {chunk_bytes}")
        if not (isinstance(durable, bool) or durable in ("syncfs", "fsync")):
            raise ValueError(f"durable must be True, False, 'syncfs' or 'fsync', got {durable!r}")
        self.backend: Backend = open_backend(root, storage_options)
        self._root_url, self._storage_options = os.fspath(root), storage_options
        self._unindexed: set[int] = set()  # ranks whose root/rank index this writer has dropped (store.root_index)
        self._session: str | None = None  # this writer's session marker while it writes (store.root_index)
        self._sidecars = False
        self.durable = bool(durable)
        if isinstance(self.backend, LocalBackend):
            self.backend.sync = (_DURABLE_DEFAULT if durable is True else durable) if durable else None
        self.compressor = parse_compressor(compressor)
        self.chunk_bytes = int(chunk_bytes)
        self.stats = bool(stats)
        if max_workers is None:  # local file-system calls are CPU work in the kernel; remote calls wait
            local = isinstance(self.backend, LocalBackend)
            # one thread per core measured fastest for 4096 x 8 KiB windows on 2 cores (1.45 s; 4 threads
            # 2.0 s, 16 threads 2.6 s): the work is kernel CPU time, extra threads only contend
            max_workers = min(32, max(2, os.cpu_count() or 1)) if local else 32
        self.max_workers = max_workers
        self.checksum = bool(checksum)
        self.pack = bool(pack)
        self._encoder = Encoder(self.compressor, self.checksum)
        # the local backend writes a sealed chunk's parts with one writev; others take one buffer
        self._seal = (
            self._encoder.seal
            if isinstance(self.backend, LocalBackend)
            else (lambda encoded: joined(self._encoder.seal(encoded)))
        )
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._chunk_digests = ChunkDigests()  # every chunk written, for the window inventory

    @property
    def pool(self) -> ThreadPoolExecutor:
        """The shared worker pool (created on first use)."""
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.max_workers, thread_name_prefix="megadump-store")
            return self._pool

    def close(self) -> None:
        """Stop the worker threads and remove the session marker (the writer can still be used: a new pool
        is made and a new session registered on demand)."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        self._end_session()

    def index_root(self) -> bool:
        """Give the root and rank groups consolidated metadata of the complete windows, so plain
        ``xr.open_datatree(root, engine="zarr")`` opens without a warning (see :mod:`.root_index`); call
        once a session's windows are committed.

        Returns:
            Whether an index was written.
        """
        self._end_session()
        added, self._unindexed = bool(self._unindexed or self._sidecars), set()
        if not added:  # this writer added nothing to list
            return False
        return index_root(self.backend, self._root_url, self._storage_options)

    def _end_session(self) -> None:
        """Remove this writer's session marker (it writes no more until its next ``begin``)."""
        session, self._session = self._session, None
        if session is not None:
            close_session(self.backend, session)

    def __enter__(self) -> WindowWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def probe(self) -> None:
        """Write and delete a probe object at the root; raise OSError when the root is not writable."""
        key = f".megadump-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.backend.put(key, b"")
        self.backend.delete_prefix(key)

    def _ensure_root(self, rank: int | None = None) -> None:
        """Write the root group document (and ``rank_{rank}``'s) where missing."""
        groups = [("zarr.json", dumps(group_document({"megadump_zarr": {"layoutVersion": LAYOUT_VERSION}})))]
        if rank is not None:
            groups.append((f"{rank_dir(int(rank))}/zarr.json", dumps(group_document({}))))
        for group_key, doc in groups:
            if not self.backend.exists(group_key):
                self.backend.put(group_key, doc, atomic=True)

    def put_sidecar(self, key: str, data: bytes) -> str:
        """Store a small file beside the dump (an L1 plan), atomically; return its path or URL.

        Args:
            key: Relative key; sidecars live below dot-directories that Zarr readers never list.
            data: File content.
        """
        if not self._sidecars:
            # A plan is saved before its launch: if the launch hangs and the process dies, the root must still
            # be a dump root (zarr, xarray, `megadump info` open it) and keep its index of committed windows
            # (a stale index only hides this plan group, which no reader needs; index_root lists it later).
            self._ensure_root()
            self._sidecars = True
        self.backend.put(key, data, atomic=True)
        return self.backend.location(key)

    def remove_sidecars(self, prefix: str) -> None:
        """Remove the sidecar files below ``prefix``.

        Args:
            prefix: Relative key prefix.
        """
        self.backend.delete_prefix(prefix)

    def begin(self, rank: int, window_index: int, attrs: dict[str, Any]) -> WindowSession:
        """Claim a window and mark it ``"writing"``.

        Args:
            rank: Job-global rank.
            window_index: Zero-based window index.
            attrs: Window manifest attributes; ``status``, ``createdAt`` and ``committedAt`` are added.

        Raises:
            FileExistsError: ``"Tensor dump window already exists: {url}"``; nothing existing is touched.
        """
        key = window_key(rank, window_index)
        url = self.backend.location(key)
        attrs = dict(attrs)
        attrs.pop("committedAt", None)
        attrs.update(status="writing", createdAt=_now())
        attrs[FORMAT_ATTR] = FORMAT_VERSION  # the format this writer writes, whatever the caller said
        if attrs.get("level") == "L1" or self.pack:  # the layout this writer stores the window's task groups in
            attrs[STORAGE_ATTR] = PACK_STORAGE if self.pack else TASK_STORAGE
        elif attrs.get(STORAGE_ATTR) not in STORAGE_KINDS:
            attrs[STORAGE_ATTR] = L0_STORAGE if attrs.get("level") == "L0" else TASK_STORAGE
        document = dumps(group_document(attrs))  # validates the attributes before claiming
        opened = self._session is None
        if opened:  # registered before any index is dropped (see store.root_index)
            try:
                self._session = open_session(self.backend)
            except BaseException as error:
                error.add_note(f"while registering the writing session of Tensor dump window {url}")
                raise
        try:
            self.backend.claim(key)
        except FileExistsError:
            if opened:  # nothing was written: the session ends as it began
                self._end_session()
            raise FileExistsError(f"Tensor dump window already exists: {url}") from None
        self._ensure_root(rank)
        self.backend.observer = self._chunk_digests  # (again: a backend swapped in after construction listens too)
        if int(rank) not in self._unindexed:  # a session is writing: no stale root snapshot meanwhile
            strip_index(self.backend, (rank_dir(int(rank)),))
            self._unindexed.add(int(rank))
        self.backend.put(f"{key}/zarr.json", document, atomic=True)
        return WindowSession(self, key, url, attrs)

    def write_window(self, window: WindowWrite, *, status: str = "complete") -> str:
        """Write a whole window: begin, every invocation, commit.

        If writing an invocation fails, whatever was written is committed with status ``"aborted"`` and
        the error is re-raised.

        Args:
            window: The window description.
            status: Final status, ``"complete"`` or ``"aborted"``.

        Returns:
            The window group's path (local) or URL.
        """
        if status not in _STATUSES:
            raise ValueError(f"status must be one of {list(_STATUSES)}, got {status!r}")
        return self.begin(window.rank, window.window_index, window.attrs).write_all(window.invocations, status)

    # -- workers -----------------------------------------------------------------------------------

    def _chunk(self, job: ArrayJob, index: int, stats: bool = True) -> tuple[Any, StatsAccumulator | None]:
        """Encode chunk ``index`` of an array (zero-copy view unless it is a padded edge chunk).

        Args:
            job: The array.
            index: The chunk's index.
            stats: Compute the chunk's partial statistics (False: the caller has them).

        Returns:
            The stored chunk (see :meth:`Encoder.seal`) and the chunk's partial statistics (``None``
            when disabled).
        """
        data, plan = job.data, job.chunks
        if not plan.shape:
            piece = payload = data
        else:
            start, stop = plan.rows(index)
            piece = payload = data[start:stop]
            if stop - start < plan.chunks[0]:  # edge chunk: pad to the full chunk shape with the fill (0)
                payload = np.zeros(plan.chunks, dtype=data.dtype)
                payload[: stop - start] = piece
        acc = StatsAccumulator(data.dtype).update(piece) if job.stats and stats else None
        raw = _stored_raw(job)
        return self._seal(self._encoder.encode(payload.reshape(-1).view(np.uint8), data.dtype.itemsize, raw)), acc

    def _document(self, job: ArrayJob, acc: StatsAccumulator | None, result: dict[str, Any] | None = None) -> bytes:
        """The array's ``zarr.json`` bytes, with statistics spliced into the attributes.

        Args:
            job: The array.
            acc: Its statistics accumulated over its chunks (``None``: none yet).
            result: Its statistics already computed (``StatsAccumulator.result()``; wins over ``acc``).
        """
        attrs_json = job.attrs_json
        if job.stats:
            if result is None:
                result = (acc if acc is not None else StatsAccumulator(job.data.dtype)).result()
            sep = b"," if attrs_json != b"{}" else b""
            attrs_json = attrs_json[:-1] + sep + b'"stats":' + stats_bytes(result) + b"}"
        plan = job.chunks
        return array_document_bytes(
            plan.shape,
            job.data.dtype,
            plan.chunks,
            NO_COMPRESSION if _stored_raw(job) else self.compressor,
            attrs_json,
            job.dims,
            self.checksum,
        )

    def _write_small(self, batch: list[tuple[ArrayJob, str]]) -> None:
        """Write arrays of at most one chunk: chunk then ``zarr.json`` of each, as one backend batch."""
        items: list[tuple[str, Any]] = []
        known = _batch_stats(batch)
        for position, (job, prefix) in enumerate(batch):
            acc = None
            result = known.get(position)
            if job.chunks.count:
                encoded, acc = self._chunk(job, 0, stats=result is None)
                items.append((f"{prefix}/{job.chunks.key(0)}", encoded))
            job.document = self._document(job, acc, result)
            items.append((f"{prefix}/zarr.json", job.document))
        self.backend.put_many(items)
        for job, _ in batch:
            job.written = True

    def _write_chunked(self, job: ArrayJob, prefix: str) -> list[Future[Any]]:
        """One task per chunk; the task finishing last merges the statistics and writes ``zarr.json``."""
        lock = threading.Lock()
        state: dict[str, Any] = {"left": job.chunks.count, "acc": None}

        def run(index: int) -> None:
            encoded, part = self._chunk(job, index)
            self.backend.put(f"{prefix}/{job.chunks.key(index)}", encoded)
            with lock:
                if part is not None:
                    state["acc"] = part if state["acc"] is None else state["acc"].merge(part)
                state["left"] -= 1
                last = state["left"] == 0
            if last:
                job.document = self._document(job, state["acc"])
                self.backend.put(f"{prefix}/zarr.json", job.document)
                job.written = True

        return [self.pool.submit(run, index) for index in job.chunks]


class WindowSession:
    """One claimed window being written. Not thread-safe: one thread drives a session.

    Args:
        writer: The owning writer.
        key: Window key relative to the root.
        url: Window path (local) or URL.
        attrs: Window attributes including ``status`` and ``createdAt``.
    """

    def __init__(self, writer: WindowWriter, key: str, url: str, attrs: dict[str, Any]) -> None:
        self.writer = writer
        self.key = key
        self.url = url
        self.attrs = attrs
        self.status = "writing"
        # path relative to the window -> ("group", encoded attrs) | ("array", encoded document)
        self._nodes: dict[str, tuple[str, bytes]] = {}
        self._invocations: set[str] = set()
        # data groups whose zarr.json was written with their arrays (see _write_leaf_groups); commit skips them
        self._early: set[str] = set()
        self._early_lock = threading.Lock()

    def write_invocation(self, invocation: InvocationWrite) -> None:
        """Validate and write one invocation's arrays (group documents follow at commit).

        Args:
            invocation: The invocation to persist.

        Raises:
            ValueError: Bad paths, collisions, dimension or coordinate clashes (nothing written).
            RuntimeError: The session is already committed.
        """
        if self.status != "writing":
            raise RuntimeError(f"window {self.url} is already committed ({self.status})")
        with _collection_paused():
            self._write_invocation(invocation)

    def _write_invocation(self, invocation: InvocationWrite) -> None:
        w = self.writer
        nodes = invocation_nodes(invocation, chunk_bytes=w.chunk_bytes, stats=w.stats, pack=w.pack)
        if nodes.name in self._invocations:
            raise ValueError(f"invocation {nodes.name!r} would collide with invocation {nodes.name!r} in {self.url}")
        self._invocations.add(nodes.name)
        for path, attrs_json in nodes.groups.items():
            self._nodes[f"{nodes.name}/{path}" if path else nodes.name] = ("group", attrs_json)

        base = f"{self.key}/{nodes.name}"
        futures: list[Future[Any]] = []
        batch: list[tuple[ArrayJob, str]] = []
        batch_bytes = 0
        try:
            for pack in nodes.packs:
                futures.extend(submit_pack(w, pack, base))
        except BaseException:  # a pack's arrays failed: let the submitted shards end, keep what was written
            wait(futures)
            self._register(nodes)
            raise
        leaves = _leaf_groups(nodes)
        for group_batch in _group_batches(leaves):  # whole leaf groups: arrays, then the group's document
            futures.append(w.pool.submit(self._write_leaf_groups, nodes.name, base, group_batch))
        for job in nodes.arrays:
            if job.path.rpartition("/")[0] in leaves:
                continue
            prefix = f"{base}/{job.path}"
            if job.chunks.count > 1:
                futures.extend(w._write_chunked(job, prefix))
                continue
            batch.append((job, prefix))
            batch_bytes += job.data.nbytes
            if len(batch) >= _BATCH_ARRAYS or batch_bytes >= _BATCH_BYTES:
                futures.append(w.pool.submit(w._write_small, batch))
                batch, batch_bytes = [], 0
        if batch:
            futures.append(w.pool.submit(w._write_small, batch))
        try:
            _wait_all(futures)  # re-raises the first failure after every task has stopped
        finally:  # arrays that were fully written stay part of the window (an aborted commit keeps them)
            self._register(nodes)
        if invocation.statistics is not None:  # statistics-first modes: the invocation's statistics table
            self._write_statistics(nodes.name, invocation.statistics)

    def _write_leaf_groups(self, name: str, base: str, groups: list[tuple[str, bytes, list[ArrayJob]]]) -> None:
        """Write whole leaf data groups (an L1 task group): their arrays as one batch, then each group's
        ``zarr.json`` with inline consolidated metadata of its arrays, which is what :meth:`commit`
        would write for it; the group is then left out of the commit's work (its documents were built
        here, on the pool, beside the file writes, instead of after every invocation).

        Args:
            name: Invocation group name.
            base: Invocation key relative to the root.
            groups: ``(path, encoded attributes, single-chunk arrays)`` per group, paths relative to the invocation.
        """
        self.writer._write_small([(job, f"{base}/{job.path}") for _, _, jobs in groups for job in jobs])
        documents = [
            (path, consolidated_group_bytes(attrs, [(job.path.rpartition("/")[2], job.document) for job in jobs]))
            for path, attrs, jobs in groups
        ]
        self.writer.backend.put_many([(f"{base}/{path}/zarr.json", document) for path, document in documents])
        with self._early_lock:
            self._early.update(f"{name}/{path}" for path, _ in documents)

    def _register(self, nodes: Any) -> None:
        """List the invocation's fully written arrays (pack arrays included) as window nodes."""
        for job in nodes.arrays:
            if job.written:
                self._nodes[f"{nodes.name}/{job.path}"] = ("array", job.document)
        for pack in nodes.packs:
            for column in [*pack.columns, *(r.stats for r in pack.records if r.stats is not None)]:
                if column.written:
                    self._nodes[f"{nodes.name}/{pack.path}/{column.name}"] = ("array", column.document)
            for record in pack.records:
                if record.written:
                    self._nodes[f"{nodes.name}/{pack.path}/{record.name}"] = ("array", record.document)

    def _write_statistics(self, name: str, table: Any) -> None:
        """Write one invocation's ``statistics`` group (see :mod:`megadump_zarr.store.statistics_table`)."""
        group = f"{name}/{STATISTICS_GROUP}"
        if any(path == group or path.startswith(group + "/") for path in self._nodes):
            raise ValueError(f"{group!r} is reserved for the statistics table in {self.url}")
        w = self.writer
        items, nodes = statistics_nodes(table, w.compressor, w.checksum)
        w.backend.put_many([(f"{self.key}/{group}/{key}", data) for key, data in items])
        for path, node in nodes.items():
            self._nodes[f"{group}/{path}" if path else group] = node

    def write_all(
        self, invocations: Iterable[InvocationWrite], status: str = "complete", *, on_error: str = "keep"
    ) -> str:
        """Write every invocation and commit; if writing fails, keep or drop what was written, and re-raise.

        Args:
            invocations: The window's invocations.
            status: Final status when all were written.
            on_error: ``"keep"`` commits what was written as ``"aborted"``; ``"discard"`` removes the window
                (nothing of it stays; when the removal fails too, the window stays ``"writing"``, which
                every reader treats as torn, and the error's notes say so).

        Returns:
            The window group's path (local) or URL.
        """
        if status not in _STATUSES:
            raise ValueError(f"status must be one of {list(_STATUSES)}, got {status!r}")
        if on_error not in ("keep", "discard"):
            raise ValueError(f"on_error must be 'keep' or 'discard', got {on_error!r}")
        try:
            with _collection_paused():  # the invocations and the commit: one pause, no collection in between
                for invocation in invocations:
                    self.write_invocation(invocation)
                return self.commit(status)
        except BaseException as error:
            error.add_note(f"while exporting Tensor dump window {self.url}")
            if on_error == "discard":
                self._discard(error)
            elif self.status == "writing":
                try:
                    self.commit("aborted")
                except Exception as commit_error:  # keep the original error; note the failed commit
                    error.add_note(f"committing {self.url} as aborted also failed: {commit_error!r}")
            raise

    def _discard(self, error: BaseException) -> None:
        """Remove the failed window (``on_error="discard"``), noting on ``error`` what became of it."""
        try:
            self.writer.backend.delete_prefix(self.key)
        except Exception as remove_error:  # noqa: BLE001 - keep the original error; note this one
            error.add_note(
                f"discarding {self.url} (on_error='discard') also failed: {remove_error!r}; it stays 'writing' "
                "(torn), which readers never show as committed"
            )
        else:
            self.status = "discarded"
            error.add_note(f"{self.url} was discarded (on_error='discard'): nothing of it was kept")

    def commit(self, status: str = "complete") -> str:
        """Write every group document, then the window document, last.

        Data groups (the groups that hold arrays: L1 task groups, L0 invocation groups) carry inline
        consolidated metadata of their descendants, so each opens with plain ``xr.open_zarr``; the
        window document carries it for everything below it (the reader's one ``get``). Groups in
        between (an L1 invocation, ``stages``, a stage) are plain: repeating every descendant in each
        of them was most of a small-record window's bytes.

        With ``durable``, everything written for the window is made durable before the window
        document is written, and the window document is then synced itself (see
        :meth:`Backend.barrier` and :meth:`Backend.put_durable`).

        Args:
            status: ``"complete"``, or ``"aborted"`` to keep whatever was written after a failure.

        Returns:
            The window group's path (local) or URL.
        """
        if status not in _STATUSES:
            raise ValueError(f"status must be one of {list(_STATUSES)}, got {status!r}")
        if self.status != "writing":
            raise RuntimeError(f"window {self.url} is already committed ({self.status})")
        with _collection_paused():
            return self._commit(status)

    def _commit(self, status: str) -> str:
        w = self.writer
        data_groups = {path.rpartition("/")[0] for path, (kind, _) in self._nodes.items() if kind == "array"}
        entries: dict[str, list[tuple[str, bytes]]] = defaultdict(list)
        # the data groups whose document is written here (a task group's was written with its arrays)
        pending = data_groups - self._early
        window_entries = entries[""]
        for path, (kind, payload) in self._nodes.items():
            flat = flat_group_bytes(payload) if kind == "group" else payload
            window_entries.append((path, flat))
            if not pending:  # the tasks layout: every data group was written early, no ancestor to find
                continue
            cut = path.rfind("/")
            while cut > 0:
                parent = path[:cut]
                if parent in pending:
                    entries[parent].append((path[cut + 1 :], flat))
                cut = path.rfind("/", 0, cut)
        groups = sorted(
            (p for p, (kind, _) in self._nodes.items() if kind == "group" and p not in self._early),
            key=lambda p: -p.count("/"),
        )

        def document(path: str) -> bytes:
            attrs = self._nodes[path][1]
            return consolidated_group_bytes(attrs, entries[path]) if path in data_groups else plain_group_bytes(attrs)

        def write_groups(paths: list[str]) -> None:
            w.backend.put_many([(f"{self.key}/{path}/zarr.json", document(path)) for path in paths])

        _wait_all(
            [w.pool.submit(write_groups, groups[i : i + _BATCH_ARRAYS]) for i in range(0, len(groups), _BATCH_ARRAYS)]
        )
        self._write_inventory()
        self.attrs.update(status=status, committedAt=_now())
        window_document = consolidated_group_bytes(dumps(self.attrs), entries[""])
        if w.durable:  # every byte of the window is on disk before the status says it is whole
            w.backend.barrier(self.key)
            w.backend.put_durable(f"{self.key}/zarr.json", window_document)
        else:
            w.backend.put(f"{self.key}/zarr.json", window_document, atomic=True)
        self.status = status
        return self.url

    def _write_inventory(self) -> None:
        """Write the window inventory (``layout.inventory``) of every array listed, and note its digest in the
        window's attributes (the window document, written next, carries it)."""
        arrays = {path: payload for path, (kind, payload) in self._nodes.items() if kind == "array"}
        data = inventory_bytes(arrays, self.writer._chunk_digests.take(self.key))
        self.writer.backend.put(f"{self.key}/{INVENTORY_FILE}", data)
        self.attrs[INVENTORY_DIGEST_ATTR] = inventory_digest(data)


def _batch_stats(batch: list[tuple[ArrayJob, str]]) -> dict[int, dict[str, Any]]:
    """Statistics of a batch's one-chunk arrays, computed block-wise for arrays of one dtype and size
    (:func:`~megadump_zarr.store.pack_writer.row_stats`, equal to each array's own accumulator bit for bit):
    position in ``batch`` -> ``StatsAccumulator.result()``. Arrays alone of their kind are left out.

    Args:
        batch: ``(array, key prefix)`` pairs of :meth:`WindowWriter._write_small`.
    """
    alike: dict[tuple[np.dtype, int], list[int]] = {}
    for position, (job, _) in enumerate(batch):
        if job.stats and job.chunks.count == 1 and job.data.size and job.data.flags.c_contiguous:
            alike.setdefault((job.data.dtype, job.data.size), []).append(position)
    known: dict[int, dict[str, Any]] = {}
    for positions in alike.values():
        if len(positions) > 1:
            known.update(zip(positions, row_stats([batch[p][0].data for p in positions]), strict=True))
    return known


@contextmanager
def _collection_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a window's nodes are planned, written and committed.

    Every object planned for a window lives until the window is committed, so a cyclic collection frees
    none of them; one running in between scans them all (a window of 4096 small records triggers full
    collections of ~0.1 s CPU each, measured in benchmarks/export.py P2). Once the caller drops the window,
    reference counting frees its objects and later collections never see them. Nested pauses leave the
    collector to the outermost one.
    """
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def _leaf_groups(nodes: Any) -> dict[str, tuple[bytes, list[ArrayJob]]]:
    """The invocation's groups that hold only single-chunk arrays of ``nodes`` and no other node (an L1 task group
    of the tasks layout): path -> (encoded attributes, arrays). The invocation group itself is never one
    (its statistics table may follow), nor is a group holding a pack or a chunked array.

    Args:
        nodes: An :class:`~megadump_zarr.store.nodes.InvocationNodes`.
    """
    excluded = {path.rpartition("/")[0] for path in nodes.groups if path}
    for pack in nodes.packs:
        excluded.add(pack.path)
    leaves: dict[str, tuple[bytes, list[ArrayJob]]] = {}
    for job in nodes.arrays:
        parent = job.path.rpartition("/")[0]
        if not parent or parent in excluded or parent not in nodes.groups:
            continue
        if job.chunks.count > 1:
            excluded.add(parent)
            leaves.pop(parent, None)
            continue
        entry = leaves.get(parent)
        if entry is None:
            entry = leaves[parent] = (nodes.groups[parent], [])
        entry[1].append(job)
    return leaves


def _group_batches(leaves: dict[str, tuple[bytes, list[ArrayJob]]]) -> list[list[tuple[str, bytes, list[ArrayJob]]]]:
    """Leaf groups cut into pool tasks of about ``_BATCH_ARRAYS`` arrays (or ``_BATCH_BYTES``), whole groups each.

    Args:
        leaves: From :func:`_leaf_groups`.
    """
    batches: list[list[tuple[str, bytes, list[ArrayJob]]]] = []
    batch: list[tuple[str, bytes, list[ArrayJob]]] = []
    count = size = 0
    for path, (attrs, jobs) in leaves.items():
        batch.append((path, attrs, jobs))
        count += len(jobs)
        size += sum(job.data.nbytes for job in jobs)
        if count >= _BATCH_ARRAYS or size >= _BATCH_BYTES:
            batches.append(batch)
            batch, count, size = [], 0, 0
    if batch:
        batches.append(batch)
    return batches


def _wait_all(futures: list[Future[Any]]) -> None:
    if not futures:
        return
    wait(futures)
    for future in futures:
        error = future.exception()
        if error is not None:
            raise error


def window_status(
    root: str | os.PathLike[str],
    rank: int,
    window_index: int,
    *,
    storage_options: dict[str, Any] | None = None,
) -> str | None:
    """The status of a window: ``"writing"``, ``"complete"``, ``"aborted"``, or ``None`` if absent.

    Args:
        root: Dump root (local path or URL).
        rank: Job-global rank.
        window_index: Zero-based window index.
        storage_options: fsspec options for URL roots.
    """
    raw = open_backend(root, storage_options).get(f"{window_key(rank, window_index)}/zarr.json")
    if raw is None:
        return None
    status = json.loads(raw).get("attributes", {}).get("status")
    return status if isinstance(status, str) else None
