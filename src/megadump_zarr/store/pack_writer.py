"""Writing task-record packs (schema 7): one backend put per shard, then the record array's ``zarr.json``.

Each shard of a pack's record array (see :mod:`megadump_zarr.store.packs`) holds ``shard_rows`` records:
every inner chunk is exactly the chunk schema 6 would have stored for that record (the record's bytes,
encoded with the writer's codec, or raw under 256 bytes, then its crc32c), followed by the shard index.
A shard is one job on the writer's pool and one ``put`` (the local backend writes its parts with
``writev``); the job that finishes a record array's last shard writes its document, whose
``attributes.shardCrc32c`` (:data:`~megadump_zarr.store.packs.SHARD_DIGEST_ATTR`) binds each shard to its
place (:func:`~megadump_zarr.store.packs.shard_digest`, from the crc32c of its chunks and its index). The job
that finishes the pack's last record array then writes ``row_fields`` (:mod:`.pack_fields`): each row's task
attributes and schema-6 record attributes, ``stats`` included, value for value, as columns along ``task``.

Statistics are computed for all rows of a shard at once (:func:`row_stats`), along axis 1, with the
exact arithmetic of :class:`~megadump_zarr.store.tensor_stats.StatsAccumulator` (same casts, same reductions
over the same contiguous rows), so they equal the accumulator's per-record results bit for bit; rows
the vectorised path cannot reproduce exactly (a NaN or Inf, rows longer than one accumulator slice)
use the accumulator itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
import json
import math
import struct
import threading
from typing import Any

import google_crc32c
import numpy as np

from megadump_zarr.store.backend import LocalBackend
from megadump_zarr.store.encoding import NO_COMPRESSION
from megadump_zarr.store.metadata import array_document_bytes, dumps, pack_array_document_bytes
from megadump_zarr.store.pack_fields import (
    FIELDS_ARRAY,
    FIELDS_DIM,
    column_names,
    encode_rows,
    encode_table,
    fields_attributes,
)
from megadump_zarr.store.pack_groups import PackGroup, PackRecord
from megadump_zarr.store.packs import (
    COORDINATES_ATTR,
    SHARD_DIGEST_ATTR,
    TASK_DIM,
    encode_index,
    shard_digest,
    shard_rows,
)
from megadump_zarr.store.tensor_stats import SLICE_ELEMENTS, StatsAccumulator

__all__ = ["row_stats", "submit_pack"]

_CRC = struct.Struct("<I")
_NATIVE_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_MAX_PARTS = 1000  # below IOV_MAX (1024): os.writev refuses more buffers


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def row_stats(rows: Sequence[np.ndarray]) -> list[dict[str, Any]]:
    """``StatsAccumulator(dtype).update(row).result()`` of every row, computed block-wise.

    Args:
        rows: Non-empty arrays of one dtype and one size (C-contiguous).
    """
    dtype = rows[0].dtype
    size = rows[0].size
    if size > SLICE_ELEMENTS:  # the accumulator sums such rows slice by slice: let it
        return [StatsAccumulator(dtype).update(row).result() for row in rows]
    kind = StatsAccumulator(dtype).kind
    step = max(1, SLICE_ELEMENTS // size)
    out: list[dict[str, Any]] = []
    for first in range(0, len(rows), step):
        part = rows[first : first + step]
        out.extend(_block_stats(np.stack([row.reshape(-1) for row in part]), kind, part))
    return out


def _block_stats(x: np.ndarray, kind: str, rows: Sequence[np.ndarray]) -> list[dict[str, Any]]:
    """Statistics of each row of the 2-D block ``x`` (see :meth:`StatsAccumulator._update_flat`)."""
    count = x.shape[1]
    bad: list[bool] | None = None
    if kind == "bool":
        x = x.view(np.uint8)
    if kind == "float":
        if x.dtype not in _NATIVE_FLOATS:
            x = x.astype(np.float32)
        lo, hi = x.min(axis=1), x.max(axis=1)
        finite = np.isfinite(lo) & np.isfinite(hi)
        if not finite.all():
            bad = (~finite).tolist()
    else:
        lo, hi = x.min(axis=1), x.max(axis=1)
    with np.errstate(invalid="ignore", over="ignore"):  # rows with NaN/Inf are redone below; overflow gives None
        if x.dtype == np.float64:
            total = x.sum(axis=1)
            sumsq = np.einsum("ij,ij->i", x, x)
        else:
            x64 = x.astype(np.float64)
            total = x64.sum(axis=1)
            sumsq = np.multiply(x64, x64, out=x64).sum(axis=1)
    out = []
    for i, (low, high, t, s) in enumerate(zip(lo.tolist(), hi.tolist(), total.tolist(), sumsq.tolist())):
        if bad is not None and bad[i]:
            with np.errstate(over="ignore"):
                out.append(StatsAccumulator(rows[i].dtype).update(rows[i]).result())
            continue
        t, s = 0.0 + t, 0.0 + s  # the accumulator starts from 0.0 (so a -0.0 sum becomes 0.0)
        out.append(
            {
                "min": low,
                "max": high,
                "mean": _finite_or_none(t / count),
                "l2norm": _finite_or_none(math.sqrt(s)),
                "nanCount": 0,
                "infCount": 0,
            }
        )
    return out


class _Parts:
    """A shard's bytes as the backend takes them: the encoded chunks themselves (one ``writev``, no copy)
    while they are few enough for one ``writev`` on the local backend, else runs of about 1 MiB copied as
    they come (so a shard is never held twice), joined into one buffer for other backends.

    Args:
        count: Parts that will be added.
        local: The local backend (takes a tuple of buffers).
    """

    _RUN = 1 << 20

    def __init__(self, count: int, local: bool) -> None:
        self.local = local
        self.direct = local and count <= _MAX_PARTS
        self.parts: list[Any] = []
        self._run = bytearray()

    def add(self, part: Any) -> None:
        if self.direct:
            self.parts.append(part)
            return
        self._run += memoryview(part)  # (a raw chunk is a numpy array: no ndarray arithmetic)
        if len(self._run) >= self._RUN:
            self.parts.append(self._run)
            self._run = bytearray()

    def buffers(self) -> Any:
        """What to ``put``."""
        if self._run:
            self.parts.append(self._run)
        return tuple(self.parts) if self.local else b"".join(self.parts)


def _record_rows(record: PackRecord, stats: list[dict[str, Any]] | None) -> bytes:
    """Each row's attributes as one JSON list, with ``stats`` spliced in as the schema-6 writer does."""
    rows = record.attrs_json
    if stats is not None:
        body = dumps(stats)  # one encoding for every row: [{...},{...}]; stats hold numbers and nulls only
        pieces = body[2:-2].split(b"},{")
        if len(pieces) != len(rows):  # pragma: no cover - a stats dictionary never holds braces
            raise AssertionError(f"{len(pieces)} statistics for {len(rows)} records")
        rows = [a[:-1] + (b',"stats":{' if a != b"{}" else b'"stats":{') + p + b"}}" for a, p in zip(rows, pieces)]
    return b"[" + b",".join(rows) + b"]"


def _record_attributes(coordinates: str, crcs: list[int | None]) -> bytes:
    """``{"coordinates": "task_id owner_id core_id global_token row_fields", "shardCrc32c": "..."}``: the pack's
    coordinates (so plain xarray shows them along ``task``), then each shard's digest in grid order (8 hex digits
    each; none without checksums, as the tasks layout's ``chunkCrc32c``)."""
    head = b"{" + dumps(COORDINATES_ATTR) + b":" + dumps(coordinates)
    if any(crc is None for crc in crcs):
        return head + b"}"
    digests = "".join(f"{crc:08x}" for crc in crcs).encode()
    return head + b',"' + SHARD_DIGEST_ATTR.encode() + b'":"' + digests + b'"}'


Encoded = tuple[dict[str, Any], list[list[float]]]
"""A spec and its own columns (numbered from 0): :func:`encode_rows` of one JSON list of rows."""


def _encoded(rows_json: bytes) -> Encoded:
    columns: list[list[float]] = []
    return encode_rows(json.loads(rows_json), columns), columns


def _write_fields(writer: Any, pack: PackGroup, prefix: str, tasks: Encoded, rows: dict[str, Encoded]) -> None:
    """Write ``row_fields``: its chunk, then its document (:mod:`.pack_fields`). Each part was encoded on its own
    (the tasks at submit, each record array by the job that finished it); here their columns are numbered in
    one table, the tasks' first, then the record arrays' in the pack's order."""
    count = len(pack.tasks)
    columns: list[list[float]] = []
    specs: dict[str, Any] = {"tasks": None, "records": {}}
    parts = [("tasks", tasks)] + [(r.name, rows[r.name]) for r in pack.records if r.name in rows]
    for name, (spec, own) in parts:  # (after a failure, only the record arrays that were written)
        base = len(columns)
        spec = dict(spec, columns=[dict(c, column=c["column"] + base) if "column" in c else c for c in spec["columns"]])
        columns.extend(own)
        if name == "tasks":
            specs["tasks"] = spec
        else:
            specs["records"][name] = spec
    chunk = encode_table(columns, count)
    if columns:
        writer.backend.put(f"{prefix}/{FIELDS_ARRAY}/c.0.0", chunk)
    document = array_document_bytes(
        (count, len(columns)),
        np.dtype("<f8"),
        (max(1, count), max(1, len(columns))),
        NO_COMPRESSION,
        dumps(fields_attributes(specs, column_names(specs), chunk)),
        (TASK_DIM, FIELDS_DIM),
        True,
    )
    writer.backend.put(f"{prefix}/{FIELDS_ARRAY}/zarr.json", document)
    pack.fields_document = document
    pack.fields_written = True


def submit_pack(writer: Any, pack: PackGroup, base: str) -> list[Future[Any]]:
    """Write a pack's ``task_id``/``owner_id``/``core_id`` arrays now, and submit its record shards.

    Args:
        writer: The :class:`~megadump_zarr.store.writer.WindowWriter`.
        pack: The pack.
        base: Key of the invocation group.

    Returns:
        The shard jobs; the job finishing a record array's last shard writes its document and marks it written,
        and the job finishing the pack's last record writes ``row_fields`` (each row's varying attributes).
    """
    prefix = f"{base}/{pack.path}"
    # the task array first: a reader of a torn window expands a pack once its row_fields is written too
    writer._write_small([(job, f"{base}/{job.path}") for job in pack.jobs])
    futures: list[Future[Any]] = []
    joined = pack.join = _PackJoin(writer, pack, prefix)
    for record in pack.records:
        futures.extend(
            _submit_record(writer, record, f"{prefix}/{record.name}", len(pack.tasks), pack.coordinates, joined)
        )
    joined.tasks()
    return futures


class _PackJoin:
    """Collects each record array's encoded rows; the last one writes the pack's ``row_fields``."""

    def __init__(self, writer: Any, pack: PackGroup, prefix: str) -> None:
        self.writer, self.pack, self.prefix = writer, pack, prefix
        self.rows: dict[str, Encoded] = {}
        self.lock = threading.Lock()
        self.claimed = False
        self._tasks: Encoded | None = None
        self._tasks_lock = threading.Lock()

    def tasks(self) -> Encoded:
        """The task rows encoded once: by the submitting thread while the shards are written, or by whichever job
        needs them first."""
        with self._tasks_lock:
            if self._tasks is None:
                self._tasks = _encoded(self.pack.task_rows)
            return self._tasks

    def _claim(self) -> bool:
        with self.lock:
            claimed, self.claimed = self.claimed, True
        return not claimed

    def done(self, name: str, rows_json: bytes) -> None:
        encoded = _encoded(rows_json)  # in the job that finished the record array, beside the other shards
        with self.lock:
            self.rows[name] = encoded
            last = len(self.rows) == len(self.pack.records)
        if last and self._claim():
            _write_fields(self.writer, self.pack, self.prefix, self.tasks(), dict(self.rows))

    def finish(self) -> None:
        """After a failed shard (every job has ended): write ``row_fields`` for the record arrays that were
        written, so the aborted window keeps their rows readable."""
        if self._claim():
            _write_fields(self.writer, self.pack, self.prefix, self.tasks(), dict(self.rows))


def _submit_record(
    writer: Any, record: PackRecord, prefix: str, count: int, coordinates: str, joined: _PackJoin
) -> list[Future[Any]]:
    per_shard = shard_rows(record.nbytes, count)
    shards = -(-count // per_shard)
    zeros = ".0" * len(record.shape)
    local = isinstance(writer.backend, LocalBackend)
    lock = threading.Lock()
    state: dict[str, Any] = {"left": shards, "stats": [None] * shards, "crcs": [0] * shards}

    def run(index: int) -> None:
        start = index * per_shard
        rows = record.rows[start : start + per_shard]
        stats = row_stats(rows) if writer.stats else None
        encode, itemsize, raw, checksum = writer._encoder.encode, record.dtype.itemsize, record.raw, writer.checksum
        parts = _Parts(len(rows) * (2 if checksum else 1) + 1, local)
        entries: list[tuple[int, int] | None] = []
        offset = 0
        crcs: list[bytes] = []
        for row in rows:
            encoded = encode(row.reshape(-1).view(np.uint8), itemsize, raw)
            size = encoded.nbytes if isinstance(encoded, np.ndarray) else len(encoded)
            parts.add(encoded)
            if checksum:
                crcs.append(_CRC.pack(google_crc32c.value(encoded)))
                parts.add(crcs[-1])
                size += 4
            entries.append((offset, size))
            offset += size
        entries.extend([None] * (per_shard - len(rows)))
        index_bytes = encode_index(entries)
        parts.add(index_bytes)
        writer.backend.put(f"{prefix}/c.{index}{zeros}", parts.buffers())
        with lock:
            state["stats"][index] = stats
            state["crcs"][index] = shard_digest(b"".join(crcs), index_bytes) if checksum else None
            state["left"] -= 1
            last = state["left"] == 0
        if last:
            merged = None if not writer.stats else [s for part in state["stats"] for s in part]
            document = pack_array_document_bytes(
                (count, *record.shape),
                record.dtype,
                (per_shard, *record.shape),
                NO_COMPRESSION if raw else writer.compressor,
                _record_attributes(coordinates, state["crcs"]),
                (TASK_DIM, *record.dims),
                checksum,
            )
            writer.backend.put(f"{prefix}/zarr.json", document)
            record.document = document
            record.written = True
            joined.done(record.name, _record_rows(record, merged))

    return [writer.pool.submit(run, index) for index in range(shards)]
