"""Where the bytes go: a tiny key/value interface over a local directory or an fsspec file system.

Keys are ``/``-separated paths relative to the dump root (``rank_0/window_0000/zarr.json``). The interface
is small (put, put many, exists, get, claim), so the writer is the same over every backend (object stores:
:mod:`megadump_zarr.store.object_backend`).

- :class:`LocalBackend` (plain paths and ``file://`` URLs) uses ``os`` calls directly: one ``open`` +
  ``write`` + ``close`` per file, parent directories created once and remembered, payloads written from
  any buffer without copying. Calls are thread-safe and release the GIL, so a thread pool overlaps them.
- :class:`FsspecBackend` (``s3://``, ``memory://``, ...) uses ``fsspec.core.url_to_fs`` and writes with
  ``fs.pipe_file`` / ``fs.pipe`` (a batch, concurrent on async file systems). Object stores have no
  directories, so none are created.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
import contextlib
import ctypes
import functools
import os
import shutil
import threading
from typing import Any

__all__ = ["SYNC_MODES", "Backend", "Buffer", "FsspecBackend", "LocalBackend", "as_bytes"]

Buffer = bytes | bytearray | memoryview | Any  # anything exposing the buffer protocol as bytes
"""A value to store: any C-contiguous buffer; the local backend also takes a tuple of buffers (the
parts of one file, written with one ``os.writev``: a chunk and its checksum)."""

_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)


class Backend(ABC):
    """Byte storage below one root.

    Args:
        url: The root as given (local path or URL); used to build user-facing locations.
    """

    observer: Callable[[str, Buffer], None] | None = None
    """Called as ``observer(key, data)`` after each successful ``put`` and each item of ``put_many`` (the window
    writer's chunk digests, ``store.window_inventory``); ``None``: nobody listens."""

    def __init__(self, url: str) -> None:
        self.url = url

    def location(self, key: str) -> str:
        """User-facing path or URL of ``key`` (``url/key``).

        Args:
            key: Relative key.
        """
        return f"{self.url}/{key}" if key else self.url

    @abstractmethod
    def put(self, key: str, data: Buffer, *, atomic: bool = False) -> None:
        """Store ``data`` at ``key``, creating or replacing it.

        Args:
            key: Relative key.
            data: Bytes or any C-contiguous buffer (read, never copied, by the local backend).
            atomic: Readers must see either the old or the new content, never a partial file
                (local: temp file + ``os.replace``; object stores are atomic per object anyway).
        """

    def put_many(self, items: Sequence[tuple[str, Buffer]]) -> None:
        """Store several objects (order is not guaranteed to be observable).

        Args:
            items: ``(key, data)`` pairs.
        """
        for key, data in items:
            self.put(key, data)

    def barrier(self, prefix: str) -> None:
        """Make everything written so far below ``prefix`` (and the path to it) durable.

        Object stores acknowledge a write once it is durable, so the default does nothing.

        Args:
            prefix: Relative key of a window group.
        """

    def put_durable(self, key: str, data: Buffer) -> None:
        """Store ``data`` at ``key`` atomically, and durably before returning (a commit record).

        Args:
            key: Relative key.
            data: Bytes.
        """
        self.put(key, data, atomic=True)

    @abstractmethod
    def exists(self, key: str) -> bool:
        """Whether an object (or, locally, a directory) exists at ``key``.

        Args:
            key: Relative key.
        """

    @abstractmethod
    def get(self, key: str) -> bytes | None:
        """The bytes at ``key``, or ``None`` when absent.

        Args:
            key: Relative key.
        """

    @abstractmethod
    def delete_prefix(self, prefix: str) -> None:
        """Remove the object at ``prefix`` and every object below ``prefix/`` (missing is fine).

        Args:
            prefix: Relative key, or key prefix (a "directory").
        """

    @abstractmethod
    def claim(self, prefix: str) -> None:
        """Reserve ``prefix`` for one writer, raising ``FileExistsError`` if it is already taken.

        Args:
            prefix: Relative key of a window group.
        """


SYNC_MODES = (None, "syncfs", "fsync")
"""How :meth:`LocalBackend.barrier` makes a window durable: not at all, one ``syncfs(2)`` of the file
system holding it, or an ``fsync`` of every file (as it is written) and of every directory it touched."""


class LocalBackend(Backend):
    """A local directory, written with ``os`` calls.

    Args:
        root: Directory path (created on demand).
        sync: Durability of :meth:`barrier` (see :data:`SYNC_MODES`); ``"syncfs"`` falls back to
            ``"fsync"`` where the C library has no ``syncfs`` (non-Linux).
    """

    def __init__(self, root: str | os.PathLike[str], sync: str | None = None) -> None:
        path = os.path.abspath(os.fspath(root))
        super().__init__(path)
        self._root = path
        self._dirs: set[str] = set()
        self._lock = threading.Lock()
        self._dirty: set[str] = set()  # directories whose entries changed since their last fsync ("fsync" mode)
        self.sync = sync

    @property
    def sync(self) -> str | None:
        """The durability mode (see :data:`SYNC_MODES`)."""
        return self._sync

    @sync.setter
    def sync(self, mode: str | None) -> None:
        if mode not in SYNC_MODES:
            raise ValueError(f"sync must be one of {list(SYNC_MODES)}, got {mode!r}")
        self._sync = "fsync" if mode == "syncfs" and _syncfs_function() is None else mode

    def location(self, key: str) -> str:
        return os.path.join(self._root, *key.split("/")) if key else self._root

    def _path(self, key: str) -> str:
        return self._root + "/" + key if key else self._root

    def _ensure_dir(self, path: str) -> None:
        if path in self._dirs:
            return
        parent = path.rpartition("/")[0]
        if parent and parent not in self._dirs and parent != path:
            self._ensure_dir(parent)
        try:
            os.mkdir(path)
        except FileExistsError:
            pass
        except FileNotFoundError:  # a parent vanished or was never recorded: fall back to the slow path
            os.makedirs(path, exist_ok=True)
        if self._sync == "fsync":
            with self._lock:
                self._dirty.add(parent)
        self._dirs.add(path)

    def put(self, key: str, data: Buffer, *, atomic: bool = False) -> None:
        path = self._path(key)
        parent = path.rpartition("/")[0]
        if parent not in self._dirs:
            self._ensure_dir(parent)
        if atomic:
            _replace_from_temp(path, data, self._sync == "fsync")
        else:
            fd = os.open(path, _WRITE_FLAGS, 0o666)
            try:
                _write_all(fd, data)
                if self._sync == "fsync":
                    os.fsync(fd)
            finally:
                os.close(fd)
        if self._sync == "fsync":
            with self._lock:
                self._dirty.add(parent)
        if self.observer is not None:
            self.observer(key, data)

    def put_many(self, items: Sequence[tuple[str, Buffer]]) -> None:
        """Store every pair with one ``open`` + ``write``/``writev`` + ``close`` each (:meth:`put`'s
        work inlined: a window of small records makes thousands of these calls).
        A subclass or an instrumented class that replaces :meth:`put` has it called for every item.

        Args:
            items: ``(key, data)`` pairs.
        """
        # fsync mode: files are fsynced and their directories noted one by one. A put replaced on a subclass
        # or the class (instrumentation, fault injection) sees every item.
        if self._sync == "fsync" or type(self).put is not _LOCAL_PUT:
            for key, data in items:
                self.put(key, data)
            return
        root, dirs = self._root + "/", self._dirs
        for key, data in items:
            path = root + key
            parent = path[: path.rfind("/")]
            if parent not in dirs:
                self._ensure_dir(parent)
            fd = os.open(path, _WRITE_FLAGS, 0o666)
            try:
                _write_all(fd, data)
            finally:
                os.close(fd)
        if self.observer is not None:
            for key, data in items:
                self.observer(key, data)

    def barrier(self, prefix: str) -> None:
        """Make every file and directory written below ``prefix``, and the directories above it, durable.

        ``"syncfs"``: one ``syncfs(2)`` of the file system holding ``prefix`` (every dirty page and
        journal entry of that file system, ours included). ``"fsync"``: the files were fsynced as
        they were written; here every directory whose entries changed below ``prefix`` is fsynced,
        then each directory from ``prefix``'s parent up to the root.

        Args:
            prefix: Relative key of a window group.
        """
        if self._sync is None:
            return
        path = self._path(prefix)
        if self._sync == "syncfs":
            fd = os.open(path, _DIR_FLAGS)
            try:
                _syncfs(fd, path)
            finally:
                os.close(fd)
            return
        with self._lock:
            below = sorted(
                (d for d in self._dirty if d == path or d.startswith(path + "/")), key=lambda d: -d.count("/")
            )
            self._dirty.difference_update(below)
        for directory in below:  # deepest first: a directory's entry is synced after what it names
            _fsync_dir(directory)
        node = path.rpartition("/")[0]
        while len(node) >= len(self._root):
            _fsync_dir(node)
            with self._lock:
                self._dirty.discard(node)
            node = node.rpartition("/")[0]

    def put_durable(self, key: str, data: Buffer) -> None:
        """Write a temporary file, fsync it, rename it over ``key``, then fsync the directory.

        Without a durability mode this is a plain atomic :meth:`put`.

        Args:
            key: Relative key.
            data: Bytes.
        """
        if self._sync is None:
            self.put(key, data, atomic=True)
            return
        target = self._path(key)
        parent, _, name = target.rpartition("/")
        if parent not in self._dirs:
            self._ensure_dir(parent)
        _replace_from_temp(target, data, True)
        _fsync_dir(parent)

    def exists(self, key: str) -> bool:
        return os.path.exists(self._path(key))

    def get(self, key: str) -> bytes | None:
        try:
            with open(self._path(key), "rb") as handle:
                return handle.read()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def delete_prefix(self, prefix: str) -> None:
        path = self._path(prefix)
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
        with self._lock:
            self._dirs = {d for d in self._dirs if d != path and not d.startswith(path + "/")}

    def claim(self, prefix: str) -> None:
        """Create the window directory with ``os.mkdir``: exactly one process can succeed.

        Args:
            prefix: Relative key of the window group.
        """
        path = self._path(prefix)
        parent = path.rpartition("/")[0]
        os.makedirs(parent, exist_ok=True)
        os.mkdir(path)  # raises FileExistsError if the window is already claimed
        with self._lock:
            node = path
            while node.startswith(self._root) and node not in self._dirs:
                self._dirs.add(node)
                node = node.rpartition("/")[0]


_LOCAL_PUT = LocalBackend.put
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)


def _fsync_dir(path: str) -> None:
    """fsync a directory (its entries: names created, renamed or removed in it)."""
    fd = os.open(path, _DIR_FLAGS)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@functools.lru_cache(maxsize=1)
def _syncfs_function() -> Any:
    """The C library's ``syncfs`` (Linux), or ``None``."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function = libc.syncfs
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int]
    function.restype = ctypes.c_int
    return function


def _syncfs(fd: int, path: str) -> None:
    """``syncfs(2)`` of the file system holding the open file ``fd`` (at ``path``, for messages)."""
    if _syncfs_function()(fd) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"syncfs failed: {os.strerror(errno)}", path)


def _replace_from_temp(target: str, data: Buffer, fsync: bool) -> None:
    """Write ``data`` to a temporary file beside ``target`` and rename it over ``target``; on every
    failure (a full disk while writing, fsync or rename failing, an interrupt) the temporary file is
    removed, so no ``.NAME.tmp-*`` debris stays behind.

    Args:
        target: The final path.
        data: Bytes.
        fsync: fsync the temporary file before the rename.
    """
    parent, _, name = target.rpartition("/")
    temp = f"{parent}/.{name}.tmp-{os.getpid()}-{threading.get_ident()}"
    fd = os.open(temp, _WRITE_FLAGS, 0o666)
    try:
        try:
            _write_all(fd, data)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _write_all(fd: int, data: Buffer) -> None:
    """Write ``data`` (a buffer, or a tuple of buffers written in order with ``os.writev``) to ``fd``."""
    # One call and no views in the usual case: a regular file takes a whole write unless the disk fills up.
    if type(data) is bytes:
        written = os.write(fd, data)
        if written != len(data):
            _write_rest(fd, (data,), written)
        return
    if type(data) is tuple:
        written = os.writev(fd, data)
        if written != sum(part.nbytes if hasattr(part, "nbytes") else len(part) for part in data):
            _write_rest(fd, data, written)
        return
    _write_rest(fd, (data,), 0)


def _write_rest(fd: int, parts: tuple[Buffer, ...], written: int) -> None:
    """Write what is left of ``parts`` once their first ``written`` bytes are out."""
    views = [memoryview(part).cast("B") for part in parts]
    while True:
        while views and written >= views[0].nbytes:  # drop the parts written whole, keep the rest
            written -= views[0].nbytes
            views.pop(0)
        if not views:
            return
        if written:
            views[0] = views[0][written:]
        written = os.writev(fd, views)


class FsspecBackend(Backend):
    """Any fsspec file system addressed by URL (``s3://bucket/prefix``, ``memory://x``, ...).

    Args:
        url: Root URL.
        storage_options: Passed to ``fsspec.core.url_to_fs``.
    """

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None) -> None:
        import fsspec.core

        super().__init__(url.rstrip("/"))
        self.fs, path = fsspec.core.url_to_fs(url, **(storage_options or {}))
        self._root = path.rstrip("/")

    def _path(self, key: str) -> str:
        return f"{self._root}/{key}" if key else self._root

    def put(self, key: str, data: Buffer, *, atomic: bool = False) -> None:
        self.fs.pipe_file(self._path(key), as_bytes(data))
        if self.observer is not None:
            self.observer(key, data)

    def put_many(self, items: Sequence[tuple[str, Buffer]]) -> None:
        if len(items) == 1:
            self.put(*items[0])
        elif items:
            self.fs.pipe({self._path(key): as_bytes(data) for key, data in items})
            if self.observer is not None:
                for key, data in items:
                    self.observer(key, data)

    def exists(self, key: str) -> bool:
        return bool(self.fs.exists(self._path(key)))

    def get(self, key: str) -> bytes | None:
        try:
            return bytes(self.fs.cat_file(self._path(key)))
        except FileNotFoundError:
            return None

    def delete_prefix(self, prefix: str) -> None:
        try:
            self.fs.rm(self._path(prefix), recursive=True)
        except FileNotFoundError:
            pass

    def claim(self, prefix: str) -> None:
        """Check that ``prefix/zarr.json`` is absent (the caller writes it right after).

        Object stores offer no portable create-if-absent, so two writers racing for the same window
        between this check and the caller's write could both succeed; the dump schedule gives every
        (rank, window) to exactly one process, which is what makes this safe in practice.

        Args:
            prefix: Relative key of the window group.
        """
        if self.exists(f"{prefix}/zarr.json"):
            raise FileExistsError(self.location(prefix))


def as_bytes(data: Buffer) -> bytes:
    """``data`` as ``bytes`` (copied unless it is ``bytes`` already).

    Args:
        data: Any C-contiguous buffer.
    """
    if isinstance(data, bytes):
        return data
    return memoryview(data).cast("B").tobytes()
