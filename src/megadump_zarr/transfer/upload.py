"""Upload a local dump to an object store: committed windows only, parallel, resumable, verified.

Plan. Before the first write, every object the upload would write is checked against the store (read
only): each committed window's remote document, and the root and rank ``zarr.json``. A remote window
document that differs from the local one, or a remote root or rank document whose attributes differ (the
consolidated index aside), is a conflict: another dump lives at this URL, the upload is refused and
nothing remote changes (the conflicting keys are in ``report.failed``, every other window in
``report.skipped``).

Order. The root ``zarr.json`` and each ``rank_{r}/zarr.json`` go first, plain (without consolidated
metadata), where absent remotely or where the remote one carries an index that would not list the windows
about to be added. Then, per window, every object except the window's own ``zarr.json``; the window prefix
is re-listed and every object checked; only then is the window ``zarr.json`` uploaded (and checked). A
window interrupted half-way therefore has no window document remotely and readers see it as torn
(``writing``), never as complete. Last, the remote root's consolidated index is rebuilt from what is
remote (:func:`megadump_zarr.store.root_index.index_root`), so plain ``xr.open_datatree(url)`` shows every
window committed there, never the local root's view.

Which windows. Those whose local ``zarr.json`` says ``complete`` or ``aborted``. A window still
``writing`` (being written, or its writer died) is skipped with a note in the report; hidden files
(``.plans/``, temporary ``.zarr.json.tmp-*``) are never uploaded.

Checksums. Each local file's MD5 is computed while it is read for upload. A remote object counts as
"the same" when its size matches and either its ETag equals the S3 ETag of the local bytes (the MD5 for
single-part uploads; for files above ``multipart_threshold``, uploaded in ``part_bytes`` parts, the MD5
of the parts' MD5 digests followed by ``-{parts}``) or its ``megadump-md5`` user metadata (written on
every upload) equals the MD5. The ETag comparison needs only the listing (one request per 1000 objects);
the metadata one is the fallback for stores whose ETag is not an MD5 (SSE-KMS, other providers) and costs
one request per object. MD5 guards against corruption in transit and against stale objects, not against
an adversary; it is what S3 itself uses for ``Content-MD5``.

Resume. Running the same upload again lists each window prefix, skips every object that is already the
same, and uploads nothing when the dump is already there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
import hashlib
import json
import os
import shutil
import stat
import threading
import time
from typing import Any

from megadump_zarr.store.object_backend import ObjectInfo, ObjectStoreBackend, RetryPolicy
from megadump_zarr.store.root_index import index_root, plain_document
from megadump_zarr.layout.paths import RANK_DIR, WINDOW_DIR
from megadump_zarr.layout.sizes import human_bytes, transfer_rate

__all__ = ["UploadError", "UploadReport", "upload", "upload_windows"]

_COMMITTED = ("complete", "aborted")
_MD5_KEY = "megadump-md5"
_READ_BYTES = 8 << 20


@dataclass
class UploadReport:
    """What an upload did.

    Attributes:
        url: Destination root.
        windows: Window keys (``rank_0/window_0000``) now present and verified remotely.
        skipped: Window key -> why it was not uploaded (not committed, conflict).
        failed: Window key -> error, for windows whose upload or verification failed.
        uploaded_objects: Objects sent.
        uploaded_bytes: Bytes sent.
        present_objects: Objects found already uploaded (same size and checksum) and not sent again.
        present_bytes: Their bytes.
        verified_objects: Objects checked against the remote listing after upload.
        deleted_local: Local window directories removed after verification (``delete_local``).
        seconds: Wall time.
    """

    url: str
    windows: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    uploaded_objects: int = 0
    uploaded_bytes: int = 0
    present_objects: int = 0
    present_bytes: int = 0
    verified_objects: int = 0
    deleted_local: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Whether every committed window is uploaded and verified (skipped windows do not count)."""
        return not self.failed

    def summary(self) -> str:
        """One line for people."""
        rate = transfer_rate(self.uploaded_bytes, self.seconds)
        text = (
            f"{len(self.windows)} window(s) verified at {self.url}: {self.uploaded_objects} object(s) "
            f"({human_bytes(self.uploaded_bytes)}) uploaded, {self.present_objects} already present, "
            f"{self.seconds:.1f} s" + (f" ({rate})" if rate else "")
        )
        if self.skipped:
            text += f"; {len(self.skipped)} skipped"
        if self.failed:
            text += f"; {len(self.failed)} FAILED"
        return text

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {
            "url": self.url,
            "windows": list(self.windows),
            "skipped": dict(self.skipped),
            "failed": dict(self.failed),
            "uploaded_objects": self.uploaded_objects,
            "uploaded_bytes": self.uploaded_bytes,
            "present_objects": self.present_objects,
            "present_bytes": self.present_bytes,
            "verified_objects": self.verified_objects,
            "deleted_local": list(self.deleted_local),
            "seconds": self.seconds,
        }

    def _merge(self, other: UploadReport) -> None:
        self.windows += other.windows
        self.skipped.update(other.skipped)
        self.failed.update(other.failed)
        for name in ("uploaded_objects", "uploaded_bytes", "present_objects", "present_bytes", "verified_objects"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.deleted_local += other.deleted_local
        self.seconds += other.seconds


class UploadError(RuntimeError):
    """Some windows could not be uploaded or verified; ``report`` says which and what else was done."""

    def __init__(self, message: str, report: UploadReport) -> None:
        super().__init__(message)
        self.report = report


# ---------------------------------------------------------------------------------------------- local side
@dataclass
class _File:
    key: str
    path: str
    size: int
    identity: tuple[int, int] | None = None  # (st_dev, st_ino) seen by the scan: the file read must be this one


def _refuse_link(root: str, path: str) -> None:
    """Refuse a symbolic link anywhere below the root (a dump never holds one; upload follows none)."""
    if os.path.islink(path):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        raise ValueError(
            f"refusing to upload {root}: {path} is a symbolic link (to {target}); a dump holds no "
            "links and upload never follows one out of the root"
        )


def _regular(root: str, path: str) -> os.stat_result:
    """``lstat`` of a file to upload: a regular file, never a link, FIFO or device."""
    _refuse_link(root, path)
    info = os.lstat(path)
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"refusing to upload {root}: {path} is not a regular file")
    return info


def _read_status(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            attrs = json.load(handle).get("attributes") or {}
    except (OSError, ValueError, AttributeError):
        return None
    status = attrs.get("status")
    return status if isinstance(status, str) else None


def _files_below(root: str, prefix: str) -> list[_File]:
    """Every non-hidden file below ``root/prefix``, keyed relative to ``root``."""
    found = []
    base = os.path.join(root, prefix)
    parts = prefix.split("/") if prefix else []
    for depth in range(1, len(parts) + 1):
        _refuse_link(root, os.path.join(root, *parts[:depth]))
    for directory, dirnames, filenames in os.walk(base, followlinks=False):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in dirnames:
            _refuse_link(root, os.path.join(directory, name))
        rel = os.path.relpath(directory, root).replace(os.sep, "/")
        for name in filenames:
            if name.startswith("."):
                continue
            path = os.path.join(directory, name)
            info = _regular(root, path)
            found.append(_File(f"{rel}/{name}", path, info.st_size, (info.st_dev, info.st_ino)))
    return found


def _shared_files(root: str, ranks: Sequence[str]) -> list[_File]:
    """The root and rank group documents that exist locally."""
    keys = ["zarr.json"] + [f"{rank}/zarr.json" for rank in ranks]
    paths = [(key, os.path.join(root, *key.split("/"))) for key in keys]
    for rank in ranks:
        _refuse_link(root, os.path.join(root, rank))
    found = []
    for key, path in paths:
        if os.path.lexists(path):
            info = _regular(root, path)
            found.append(_File(key, path, info.st_size, (info.st_dev, info.st_ino)))
    return found


def _windows(root: str) -> list[str]:
    keys = []
    for rank in sorted(os.listdir(root)):
        if not RANK_DIR.match(rank):
            continue
        _refuse_link(root, os.path.join(root, rank))
        if not os.path.isdir(os.path.join(root, rank)):
            continue
        for window in sorted(os.listdir(os.path.join(root, rank))):
            if WINDOW_DIR.match(window):
                _refuse_link(root, os.path.join(root, rank, window))
                if os.path.isdir(os.path.join(root, rank, window)):
                    keys.append(f"{rank}/{window}")
    return sorted(keys, key=lambda k: tuple(int(p.split("_")[1]) for p in k.split("/")))


def _check_root(root: str) -> None:
    marker = os.path.join(root, "zarr.json")
    if not os.path.isdir(root):
        raise ValueError(f"{root} is not a megadump_zarr dump root: the directory does not exist")
    _refuse_link(root, marker)
    try:
        with open(marker, "rb") as handle:
            attrs = json.load(handle).get("attributes") or {}
    except FileNotFoundError:
        raise ValueError(f"{root} is not a megadump_zarr dump root: zarr.json is missing") from None
    except (OSError, ValueError, AttributeError) as error:
        raise ValueError(f"{root} is not a megadump_zarr dump root: zarr.json is unreadable ({error})") from None
    if "megadump_zarr" not in attrs:
        raise ValueError(f"{root} is not a megadump_zarr dump root: zarr.json has no 'megadump_zarr' attribute")


# ---------------------------------------------------------------------------------------------- checksums
class _Digest:
    """MD5 of a file and the S3 ETag it gets when uploaded our way."""

    def __init__(self, part_bytes: int, multipart: bool) -> None:
        self._whole = hashlib.md5(usedforsecurity=False)
        self._multipart = multipart
        self._part_bytes = part_bytes
        self._parts: list[bytes] = []
        self._part = hashlib.md5(usedforsecurity=False)
        self._in_part = 0

    def update(self, data: bytes | memoryview) -> None:
        self._whole.update(data)
        if not self._multipart:
            return
        view = memoryview(data)
        while view.nbytes:
            take = min(view.nbytes, self._part_bytes - self._in_part)
            self._part.update(view[:take])
            self._in_part += take
            view = view[take:]
            if self._in_part == self._part_bytes:
                self._parts.append(self._part.digest())
                self._part, self._in_part = hashlib.md5(usedforsecurity=False), 0

    @property
    def md5(self) -> str:
        return self._whole.hexdigest()

    @property
    def etag(self) -> str:
        if not self._multipart:
            return self.md5
        parts = self._parts + ([self._part.digest()] if self._in_part else [])
        return f"{hashlib.md5(b''.join(parts), usedforsecurity=False).hexdigest()}-{len(parts)}"


# ---------------------------------------------------------------------------------------------- progress
class _Progress:
    def __init__(self, enabled: bool, total: int) -> None:
        self._bar: Any = None
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        self._bar = Progress(
            TextColumn("[bold]upload"),
            BarColumn(),
            DownloadColumn(binary_units=True),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=False,
        )
        self._task = self._bar.add_task("upload", total=total)
        self._bar.start()

    def advance(self, nbytes: int) -> None:
        if self._bar is not None:
            self._bar.advance(self._task, nbytes)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


# ---------------------------------------------------------------------------------------------- uploader
class _Uploader:
    def __init__(
        self,
        local_root: str,
        backend: ObjectStoreBackend,
        *,
        workers: int,
        delete_local: bool,
        multipart_threshold: int,
        part_bytes: int,
        progress: _Progress,
    ) -> None:
        self.root = local_root
        self.backend = backend
        self.workers = workers
        self.delete_local = delete_local
        self.threshold = multipart_threshold
        self.part_bytes = part_bytes
        self.progress = progress
        self.report = UploadReport(backend.url)
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="megadump-upload")
        self._present_shared: list[int] = []  # sizes of the remote root and rank documents left as they are

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def _count(self, name: str, nbytes: int, objects: int = 1) -> None:
        with self._lock:
            setattr(self.report, f"{name}_objects", getattr(self.report, f"{name}_objects") + objects)
            setattr(self.report, f"{name}_bytes", getattr(self.report, f"{name}_bytes") + nbytes)

    # -- one file --------------------------------------------------------------------------------------
    def _digest(self, file: _File) -> tuple[_Digest, bytes | None]:
        """Checksum a file; small files are kept in memory for the upload that may follow."""
        multipart = file.size > self.threshold
        digest = _Digest(self.part_bytes, multipart)
        if not multipart:
            with _open_scanned(file) as handle:
                data = handle.read()
            digest.update(data)
            return digest, data
        with _open_scanned(file) as handle:
            while chunk := handle.read(_READ_BYTES):
                digest.update(chunk)
        return digest, None

    def _same(self, file: _File, digest: _Digest, remote: ObjectInfo | None) -> bool:
        if remote is None or remote.size != file.size:
            return False
        if remote.etag is not None and remote.etag == digest.etag:
            return True
        attributes = self.backend.get_attributes(file.key) or {}
        return attributes.get(_MD5_KEY) == digest.md5

    def _send(self, file: _File, remote: ObjectInfo | None) -> tuple[_File, _Digest]:
        """Upload one file unless the remote copy is the same; returns its digest for verification."""
        digest, data = self._digest(file)
        if self._same(file, digest, remote):
            self._count("present", file.size)
        else:
            attributes = {_MD5_KEY: digest.md5}
            if data is not None:
                self.backend.put(file.key, data, attributes=attributes)
            else:
                self.backend.put_file(file.key, file.path, part_bytes=self.part_bytes, attributes=attributes)
            self._count("uploaded", file.size)
        self.progress.advance(file.size)
        return file, digest

    def _send_all(self, files: Sequence[_File], remote: Mapping[str, ObjectInfo]) -> list[tuple[_File, _Digest]]:
        futures: list[Future[tuple[_File, _Digest]]] = [
            self._pool.submit(self._send, f, remote.get(f.key)) for f in files
        ]
        wait(futures)
        for future in futures:
            error = future.exception()
            if error is not None:
                raise error
        return [future.result() for future in futures]

    def _verify(self, sent: Sequence[tuple[_File, _Digest]], listing: Mapping[str, ObjectInfo]) -> None:
        bad = [file.key for file, digest in sent if not self._same(file, digest, listing.get(file.key))]
        if bad:
            shown = ", ".join(bad[:5]) + (f", ... ({len(bad) - 5} more)" if len(bad) > 5 else "")
            raise OSError(f"verification failed for {len(bad)} object(s) at {self.backend.url}: {shown}")
        with self._lock:
            self.report.verified_objects += len(sent)

    # -- the plan: nothing is written before every object to write is checked ---------------------------
    def plan(self, keys: Sequence[str], ranks: Sequence[str]) -> tuple[dict[str, str], list[tuple[str, bytes]]]:
        """Check every object the upload would write against the store, writing nothing.

        Args:
            keys: The window keys to upload.
            ranks: Their rank directories.

        Returns:
            The conflicts (object key -> reason; empty: the upload may write) and the root and rank group
            documents to write (``(key, bytes)``: absent remotely, or remotely indexed while windows are
            about to be added, so the remote index never lists fewer windows than are committed).
        """
        conflicts: dict[str, str] = {}
        adding = False
        for key in keys:
            status = _read_status(os.path.join(self.root, key, "zarr.json"))
            if status not in _COMMITTED:
                continue
            document_key = f"{key}/zarr.json"
            document = _File(document_key, os.path.join(self.root, key, "zarr.json"), 0)
            info = _regular(self.root, document.path)
            document.size, document.identity = info.st_size, (info.st_dev, info.st_ino)
            try:
                remote = self.backend.head(document_key)
                same = remote is None or self._same(document, self._digest(document)[0], remote)
            except Exception as error:  # this window cannot be checked: it is not sent (no conflict known)
                with self._lock:
                    self.report.failed[key] = f"{type(error).__name__}: {error}"
                continue
            if remote is None:
                adding = True
            elif not same:
                conflicts[key] = (
                    "conflict: the remote window document differs from the local one (another dump at this URL?)"
                )
        writes: list[tuple[str, bytes]] = []
        for file in _shared_files(self.root, ranks):
            with _open_scanned(file) as handle:
                local_raw = handle.read()
            local = plain_document(local_raw)
            if local is None:
                raise ValueError(f"refusing to upload {self.root}: {file.key} is not a Zarr group document")
            remote_raw = self.backend.get(file.key)
            if remote_raw is None:
                writes.append((file.key, local))
            elif plain_document(remote_raw) != local:
                conflicts[file.key] = (
                    f"conflict: the remote {file.key} differs from the local one (another dump at this URL?)"
                )
            elif adding and remote_raw != local:  # an index that would not list the windows added now
                writes.append((file.key, local))
            else:
                self._present_shared.append(len(remote_raw))
        return conflicts, writes

    # -- shared group documents ----------------------------------------------------------------------
    def upload_shared(self, writes: Sequence[tuple[str, bytes]]) -> None:
        """Write the root and rank group documents of the plan (plain: the index is rebuilt at the end)."""
        for size in self._present_shared:
            self._count("present", size)
        for key, data in writes:
            self.backend.put(key, data, attributes={_MD5_KEY: hashlib.md5(data, usedforsecurity=False).hexdigest()})
            self._count("uploaded", len(data))
        bad = [key for key, data in writes if self.backend.get(key) != data]
        if bad:
            raise OSError(f"verification failed for {len(bad)} object(s) at {self.backend.url}: {', '.join(bad)}")
        with self._lock:
            self.report.verified_objects += len(writes)

    # -- one window -----------------------------------------------------------------------------------
    def upload_window(self, key: str) -> None:
        status = _read_status(os.path.join(self.root, key, "zarr.json"))
        if status not in _COMMITTED:
            reason = "no window zarr.json" if status is None else f"status {status!r}"
            with self._lock:
                self.report.skipped[key] = f"{reason}: not committed yet, not uploaded"
            return
        files = _files_below(self.root, key)
        document_key = f"{key}/zarr.json"
        document = next(f for f in files if f.key == document_key)
        body = [f for f in files if f.key != document_key]
        listing = self.backend.list(f"{key}/")
        remote_doc = listing.get(document_key)
        if remote_doc is not None:
            digest, _ = self._digest(document)
            if not self._same(document, digest, remote_doc):
                with self._lock:
                    self.report.failed[key] = (
                        "conflict: the remote window document differs from the local one "
                        "(another dump at this URL?); the window was not touched"
                    )
                self.progress.advance(sum(f.size for f in files))
                return
        sent = self._send_all(body, listing)
        self._verify(sent, self.backend.list(f"{key}/"))
        last = self._send_all([document], listing)  # the window document last: only now does it look committed
        head = self.backend.head(document_key)
        self._verify(last, {document_key: head} if head is not None else {})
        with self._lock:
            self.report.windows.append(key)
        if self.delete_local:
            shutil.rmtree(os.path.join(self.root, key))
            with self._lock:
                self.report.deleted_local.append(os.path.join(self.root, key))


def _open_scanned(file: _File) -> Any:
    """Open a scanned file without following a link, and check it is the very file the scan saw."""
    fd = os.open(file.path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    handle = os.fdopen(fd, "rb")
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or (file.identity is not None and (info.st_dev, info.st_ino) != file.identity):
        handle.close()
        raise ValueError(f"refusing to upload {file.path}: it was replaced after the scan (not the regular file seen)")
    return handle


def _make_backend(
    url: str, storage_options: Mapping[str, Any] | None, workers: int, retry: RetryPolicy | None
) -> ObjectStoreBackend:
    if not isinstance(url, str) or "://" not in url:
        raise ValueError(f"upload destination must be an object-store URL such as s3://bucket/prefix, got {url!r}")
    return ObjectStoreBackend(url, storage_options, retry=retry, max_concurrency=max(workers, 1))


def _threads_of(threads: int, workers: int | None) -> int:
    """The upload threads, from ``threads`` or the deprecated ``workers`` (warned about, for one release).

    Args:
        threads: Objects uploaded concurrently.
        workers: The old name of ``threads`` (``None``: not given).

    Raises:
        ValueError: Not a positive integer (named as the caller spelled it).
    """
    name = "threads"
    if workers is not None:
        import warnings

        warnings.warn(
            "upload(workers=...) is deprecated and goes in the next release: use threads=... (upload "
            "threads; 'workers' means dask workers elsewhere)",
            DeprecationWarning,
            stacklevel=3,
        )
        threads, name = workers, "workers"
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"{name} must be a positive integer, got {threads!r}")
    return threads


def _refuse(report: UploadReport, keys: Sequence[str], conflicts: Mapping[str, str]) -> None:
    """Record a refused upload: the conflicts as failures, every other window as not uploaded."""
    report.failed.update(
        {key: f"{reason}; the upload was refused, nothing was written" for key, reason in conflicts.items()}
    )
    where = ", ".join(sorted(conflicts)[:3]) + (f", ... ({len(conflicts) - 3} more)" if len(conflicts) > 3 else "")
    for key in keys:
        if key not in conflicts:
            report.skipped[key] = f"not uploaded: the destination conflicts at {where}; nothing was written"


def _reindex(
    report: UploadReport, backend: ObjectStoreBackend, url: str, storage_options: Mapping[str, Any] | None
) -> None:
    """Rebuild the remote root's index from what is remote (``store.root_index``); a failure leaves it plain."""
    try:
        index_root(backend, url.rstrip("/"), dict(storage_options or {}))
    except Exception as error:  # noqa: BLE001 - the windows are uploaded; plain readers list the store
        report.skipped["zarr.json"] = f"root index not rebuilt ({type(error).__name__}: {error}); plain readers list"


def upload_windows(
    local_root: str | os.PathLike[str],
    url: str,
    windows: Sequence[str] | None = None,
    *,
    storage_options: Mapping[str, Any] | None = None,
    threads: int = 16,
    delete_local: bool = False,
    progress: bool = False,
    retry: RetryPolicy | None = None,
    multipart_threshold: int = 64 << 20,
    part_bytes: int = 16 << 20,
    backend: ObjectStoreBackend | None = None,
    workers: int | None = None,
    index: bool = True,
) -> UploadReport:
    """Like :func:`upload`, for chosen windows only (``["rank_0/window_0003", ...]``; ``None``: all).

    Returns the report without raising for failed windows (see ``report.failed``). ``workers`` is the
    deprecated name of ``threads``; ``index=False`` leaves the remote root plain after adding windows
    (:class:`~megadump_zarr.transfer.UploadOnReady` indexes once, when it closes).
    """
    threads = _threads_of(threads, workers)
    if part_bytes < 5 << 20:
        raise ValueError(f"part_bytes must be at least 5 MiB (S3's smallest part), got {part_bytes}")
    root = os.path.abspath(os.fspath(local_root))
    _check_root(root)
    keys = _windows(root) if windows is None else [str(w).strip("/") for w in windows]
    for key in keys:
        parts = key.split("/")
        if len(parts) != 2 or not RANK_DIR.match(parts[0]) or not WINDOW_DIR.match(parts[1]):
            raise ValueError(f"not a window key (rank_R/window_WWWW): {key!r}")
        if not os.path.isdir(os.path.join(root, key)):
            raise ValueError(f"no window {key} below {root}")
    backend = backend or _make_backend(url, storage_options, threads, retry)
    ranks = sorted({key.split("/")[0] for key in keys})
    total = sum(f.size for key in keys for f in _files_below(root, key)) + sum(
        f.size for f in _shared_files(root, ranks)
    )
    start = time.perf_counter()
    bar = _Progress(progress, total)
    uploader = _Uploader(
        root,
        backend,
        workers=threads,
        delete_local=delete_local,
        multipart_threshold=multipart_threshold,
        part_bytes=part_bytes,
        progress=bar,
    )
    try:
        keys_to_send: list[str] = []
        try:
            conflicts, writes = uploader.plan(keys, ranks)
        except Exception as error:  # the store cannot be read: nothing was written
            conflicts, writes = {key: f"{type(error).__name__}: {error}" for key in keys}, []
        if conflicts:
            _refuse(uploader.report, keys, conflicts)
            writes = []
        else:
            try:
                uploader.upload_shared(writes)
            except Exception as error:  # without the root and rank documents no window is readable: all fail
                for key in keys:
                    uploader.report.failed[key] = f"{type(error).__name__}: {error}"
            else:
                keys_to_send = [key for key in keys if key not in uploader.report.failed]
        # A few windows at once keep the pool busy across each window's verify / document round trips.
        with ThreadPoolExecutor(min(4, max(len(keys), 1)), thread_name_prefix="megadump-upload-window") as windows_pool:
            futures = {key: windows_pool.submit(uploader.upload_window, key) for key in keys_to_send}
            for key, future in futures.items():
                error = future.exception()
                if error is not None:
                    uploader.report.failed[key] = f"{type(error).__name__}: {error}"
        if index and (writes or uploader.report.uploaded_objects):
            _reindex(uploader.report, backend, url, storage_options)
    finally:
        uploader.close()
        bar.close()
    uploader.report.seconds = time.perf_counter() - start
    order = {key: i for i, key in enumerate(keys)}
    uploader.report.windows.sort(key=lambda k: order.get(k, len(order)))
    return uploader.report


def upload(
    local_root: str | os.PathLike[str],
    url: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    threads: int = 16,
    delete_local: bool = False,
    progress: bool = False,
    retry: RetryPolicy | None = None,
    multipart_threshold: int = 64 << 20,
    part_bytes: int = 16 << 20,
    workers: int | None = None,
) -> UploadReport:
    """Upload a local dump's committed windows to ``url`` (``s3://bucket/prefix``), then verify them.

    See the module documentation for order, resume and checksums.

    Args:
        local_root: The local dump root (the directory holding ``zarr.json`` and ``rank_*/``).
        url: Destination dump root.
        storage_options: fsspec-style options (``{"key", "secret", "endpoint_url", ...}``); never stored or shown.
        threads: Objects uploaded concurrently (upload threads).
        delete_local: Remove each local window directory once its upload is verified.
        progress: Draw a progress bar (bytes) on stderr.
        retry: Retry policy of the requests (default: the object backend's default).
        multipart_threshold: Files larger than this are uploaded in parts.
        part_bytes: Part size of multipart uploads (>= 5 MiB).
        workers: Deprecated name of ``threads`` (a ``DeprecationWarning``; goes in the next release).

    Returns:
        What was uploaded, skipped and verified.

    Raises:
        ValueError: ``local_root`` is not a dump root, or ``url`` is not an object-store URL.
        UploadError: Some committed window could not be uploaded or verified (``error.report`` has details);
            every other window was still uploaded. A conflict (another dump at ``url``) refuses the whole
            upload before anything is written: the remote bytes are unchanged.
    """
    report = upload_windows(
        local_root,
        url,
        None,
        storage_options=storage_options,
        threads=_threads_of(threads, workers),
        delete_local=delete_local,
        progress=progress,
        retry=retry,
        multipart_threshold=multipart_threshold,
        part_bytes=part_bytes,
    )
    if report.failed:
        details = "; ".join(f"{k}: {v}" for k, v in sorted(report.failed.items()))
        raise UploadError(f"upload to {report.url} failed for {len(report.failed)} window(s): {details}", report)
    return report
