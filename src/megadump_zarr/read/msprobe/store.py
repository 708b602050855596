"""msprobe dumps read in place: a read-only zarr store presenting them as ``megadump convert`` would write them.

:class:`MsprobeStore` parses every ``dump.json`` below an msprobe directory (:func:`.dump_json.msprobe_windows`:
validated, every ``data_name`` confined to its ``dump_tensor_data`` directory, nothing loaded) and builds,
in memory, the documents :func:`~megadump_zarr.interop.msprobe.convert_msprobe` would write: the root and
rank groups, one window per (rank, step) with the same attributes, one invocation per API call, one array
per tensor leaf with the same attributes and the same chunk grid (whole rows, about 4 MiB a chunk). Every
reader (``open_dump``, ``compare``, ``stats``, ``ls``, ``show``, ``report``, the xarray engine) then works
unchanged, with no conversion step.

What differs from a converted dump, on purpose:

- record chunks are the tensor files' raw bytes, served lazily: a chunk ``get`` loads its file
  (``torch.load(weights_only=True, mmap=True)`` or ``np.load(allow_pickle=False, mmap_mode="r")``, so no
  code runs and only the chunk's rows are read), checks its dtype and shape against ``dump.json`` and
  returns those rows. Reads of several chunks run concurrently in threads.
- the arrays' codec chain is a plain ``bytes`` codec: no compressor and **no crc32c**, so ``verify`` and
  the integrity checks see "no checksum stored", never a checksum that passes;
- a record's ``stats`` are msprobe's own (``Max``/``Min``/``Mean``/``|Norm|``, NaN/Inf counts 0 when all
  four are finite; an integer tensor's ``Max``/``Min`` and counts 0), not ones recomputed from the bytes:
  a float tensor holding NaN or Inf gets no ``stats``;
- ``createdAt``/``committedAt`` are the ``dump.json`` file's modification time.

The statistics task has no tensor files: its statistics tables are generated in memory, exactly as
``convert`` writes them (with their crc32c).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from datetime import UTC, datetime
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, Store, SuffixByteRequest
from zarr.core.buffer import Buffer, BufferPrototype

from megadump_zarr.read.msprobe.attrs import invocation_attrs, invocation_name, record_attrs, window_attrs
from megadump_zarr.read.msprobe.documents import window_documents
from megadump_zarr.read.msprobe.load import load_tensor
from megadump_zarr.read.msprobe.dump_json import Tensor, Window, msprobe_windows
from megadump_zarr.layout.paths import window_path

__all__ = ["MsprobeStore"]

_CHUNK_BYTES = 4 << 20  # the writer's default chunk size: the same chunk grid as a converted dump


def _stats(item: Tensor) -> dict[str, Any] | None:
    """msprobe's statistics as a record's ``stats``: all of them when all four are finite numbers; for an
    integer or bool tensor (msprobe gives it no Mean/Norm, and it holds no NaN/Inf) the counts and what
    msprobe gives; otherwise none (a NaN or Inf makes msprobe's reductions unusable)."""

    def number(key: str) -> float | None:
        value = item.stats.get(key)
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        return float(value) if ok else None

    values = {"min": number("Min"), "max": number("Max"), "mean": number("Mean"), "l2norm": number("Norm")}
    if item.dtype == "bool" or item.dtype.startswith(("int", "uint")):
        return {
            **{k: v for k, v in values.items() if v is not None and k in ("min", "max")},
            "nanCount": 0,
            "infCount": 0,
        }
    if any(v is None for v in values.values()):
        return None
    return {**values, "l2norm": abs(values["l2norm"]), "nanCount": 0, "infCount": 0}


def _mtime(path: Path) -> str:
    stamp = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _slice(data: bytes | memoryview, byte_range: ByteRequest | None) -> bytes | memoryview:
    if byte_range is None:
        return data
    if isinstance(byte_range, RangeByteRequest):
        return data[byte_range.start : byte_range.end]
    if isinstance(byte_range, OffsetByteRequest):
        return data[byte_range.offset :]
    if isinstance(byte_range, SuffixByteRequest):
        return data[-byte_range.suffix :] if byte_range.suffix else data[len(data) :]
    raise TypeError(f"unexpected byte range {byte_range!r}")


class MsprobeStore(Store):
    """A read-only zarr store over an msprobe dump directory (see the module docstring).

    Args:
        root: msprobe's ``dump_path``, one ``step{N}`` directory or one ``step{N}/rank{R}|proc{PID}`` one.
        chunk_bytes: Target bytes per record chunk (whole rows; the writer's default).
        validate: Check every tensor file when the store opens (memory-mapped, so only the archive's
            structure is read, no data): a file that is no plain tensor (a pickle that would run code),
            or whose dtype or shape is not what ``dump.json`` states, is refused here, naming it, rather
            than as one unreadable record of a comparison. Every chunk read checks its file again.

    Raises:
        ValueError: An invalid ``dump.json``, a ``data_name`` escaping its directory, or (``validate``) a
            refused tensor file (naming the file).
        FileNotFoundError: ``root`` is not a directory.
    """

    made_in_memory = True
    """Its documents are made in memory from msprobe's files: no window inventory binds them (the readers
    check what msprobe stores, and ``verify`` says it holds no checksums)."""

    supports_writes = False
    supports_deletes = False
    supports_partial_writes = False
    supports_listing = True

    def __init__(self, root: str | os.PathLike[str], *, chunk_bytes: int = _CHUNK_BYTES, validate: bool = True) -> None:
        super().__init__(read_only=True)
        self.root = Path(os.path.abspath(os.fspath(root)))
        if not self.root.is_dir():
            raise FileNotFoundError(f"msprobe dump directory not found: {self.root}")
        if chunk_bytes < 1:
            raise ValueError(f"MsprobeStore.chunk_bytes must be positive, got {chunk_bytes}")
        self._chunk_bytes = int(chunk_bytes)
        self._docs: dict[str, bytes] = {}
        self._chunks: dict[str, tuple[Tensor, tuple[int, int, int]]] = {}
        windows = msprobe_windows(self.root)
        if validate:
            _validate(windows)
        self._build(windows)
        self._listing = self._children()

    # ------------------------------------------------------------------ the virtual key space
    def _build(self, windows: list[Window]) -> None:
        from megadump_zarr.read.msprobe.documents import rank_and_root_documents

        for window in windows:
            self._add_window(window)
        self._docs.update(rank_and_root_documents(self._docs, [(w.rank, w.index) for w in windows]))

    def _add_window(self, window: Window) -> None:
        from megadump_zarr.read.msprobe.documents import record_node, statistics_node

        key = window_path(window.rank, window.index)
        nodes: dict[str, tuple[str, bytes]] = {}
        extra: dict[str, bytes] = {}
        for i, call in enumerate(window.calls):
            name = invocation_name(i, call)
            attrs = invocation_attrs(window, i, call)
            components = _components(name, window, call)
            if window.task != "tensor":
                attrs["records"] = [record_attrs(window, call, p, t) for p, t in enumerate(call.tensors)]
                if call.tensors:
                    items, stat_nodes = statistics_node(call, components)
                    extra.update({f"{key}/{name}/statistics/{k}": v for k, v in items})
                    nodes.update(
                        {f"{name}/statistics/{p}" if p else f"{name}/statistics": n for p, n in stat_nodes.items()}
                    )
            nodes[name] = ("group", _dumps(attrs))
            if window.task == "tensor":
                for position, (item, component) in enumerate(zip(call.tensors, components)):
                    rattrs = record_attrs(window, call, position, item)
                    stats = _stats(item)
                    if stats is not None:
                        rattrs["stats"] = stats
                    doc, chunks = record_node(item, component, rattrs, self._chunk_bytes)
                    nodes[f"{name}/{component}"] = ("array", doc)
                    for chunk_key, rows in chunks:
                        self._chunks[f"{key}/{name}/{component}/{chunk_key}"] = (item, rows)
        wattrs = window_attrs(window)
        stamp = _mtime(window.source)
        wattrs.update(status="complete", createdAt=stamp, committedAt=stamp)
        self._docs.update(window_documents(key, _dumps(wattrs), nodes))
        self._docs.update(extra)

    def _children(self) -> dict[str, set[str]]:
        listing: dict[str, set[str]] = {}
        for key in [*self._docs, *self._chunks]:
            parts = key.split("/")
            for depth in range(len(parts)):
                listing.setdefault("/".join(parts[:depth]), set()).add(parts[depth])
        return listing

    # ------------------------------------------------------------------ reading a chunk (untrusted files)
    def _chunk(self, key: str) -> memoryview:
        item, (start, stop, rows) = self._chunks[key]
        data = load_tensor(item, mmap=True)  # checked again: dtype, shape, a plain tensor (nothing read yet)
        if data.ndim == 0:
            return memoryview(np.ascontiguousarray(data).reshape(-1).view(np.uint8))
        out = np.empty(rows * data.dtype.itemsize * math.prod(data.shape[1:]), dtype=np.uint8)
        self._fill(item, data, start, stop, out)
        return memoryview(out)

    def read_chunk_into(self, key: str, out: np.ndarray) -> bool:
        """Chunk ``key``'s bytes read straight into ``out`` in the calling thread (no event loop, no copy):
        what :meth:`get` returns, for :mod:`megadump_zarr.read.chunks`. False (``out`` untouched) when
        ``key`` is no tensor chunk or ``out`` is not exactly its size, so the caller reads it through zarr.

        Args:
            key: A chunk key of this store.
            out: A C-contiguous uint8 array of one chunk's bytes.

        Raises:
            ValueError: The tensor file is refused or ends early (as :meth:`get` would raise).
        """
        found = self._chunks.get(key)
        if found is None or out.dtype != np.uint8 or not out.flags.c_contiguous:
            return False
        item, (start, stop, rows) = found
        data = load_tensor(item, mmap=True)  # checked again: dtype, shape, a plain tensor (nothing read yet)
        if data.ndim == 0 or out.size != rows * data.dtype.itemsize * math.prod(data.shape[1:]):
            return False
        self._fill(item, data, start, stop, out)
        return True

    @staticmethod
    def _fill(item: Tensor, data: np.ndarray, start: int, stop: int, out: np.ndarray) -> None:
        """Rows ``start:stop`` of ``data`` (the file's tensor, memory-mapped) as little-endian bytes at the head
        of ``out`` (one chunk); the rest of an edge chunk is the fill value (0)."""
        row_bytes = data.dtype.itemsize * math.prod(data.shape[1:])
        used = (stop - start) * row_bytes
        where = _file_offset(data)
        if where is not None and item.file is not None:  # whole rows in one read (kernel readahead, no GIL)
            _pread_into(item.file, out[:used], where + start * row_bytes)
        else:
            piece = np.ascontiguousarray(data[start:stop])
            if piece.dtype.byteorder == ">":
                piece = piece.astype(piece.dtype.newbyteorder("<"))
            out[:used] = piece.reshape(-1).view(np.uint8)
        out[used:] = 0

    # ------------------------------------------------------------------ zarr Store interface
    def __eq__(self, value: object) -> bool:
        return isinstance(value, MsprobeStore) and value.root == self.root

    def __hash__(self) -> int:
        return hash(("MsprobeStore", str(self.root)))

    def __str__(self) -> str:
        return str(self.root)

    def __repr__(self) -> str:
        return f"MsprobeStore({str(self.root)!r})"

    async def get(self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None) -> Buffer | None:
        doc = self._docs.get(key)
        if doc is not None:
            return prototype.buffer.from_bytes(_slice(doc, byte_range))
        if key not in self._chunks:
            return None
        data = await asyncio.to_thread(self._chunk, key)
        return prototype.buffer.from_bytes(_slice(data, byte_range))

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        return list(await asyncio.gather(*(self.get(k, prototype, r) for k, r in key_ranges)))

    async def exists(self, key: str) -> bool:
        return key in self._docs or key in self._chunks

    async def set(self, key: str, value: Buffer) -> None:
        raise PermissionError(f"{self} is read-only (an msprobe dump read in place); convert it to write")

    async def delete(self, key: str) -> None:
        raise PermissionError(f"{self} is read-only (an msprobe dump read in place)")

    async def list(self) -> AsyncIterator[str]:
        for key in sorted([*self._docs, *self._chunks]):
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        for key in sorted(k for k in [*self._docs, *self._chunks] if k.startswith(prefix)):
            yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        for name in sorted(self._listing.get(prefix.rstrip("/"), ())):
            yield name


def _file_offset(data: np.ndarray) -> int | None:
    """The file offset of ``data``'s first element when it is a C-contiguous little-endian view of a memory
    map (what :func:`.load.load_tensor` gives for a plain tensor file), else ``None``."""
    if not data.flags.c_contiguous or data.dtype.byteorder == ">" or not data.size:
        return None
    root: Any = data
    while (
        isinstance(getattr(root, "base", None), np.ndarray)
        or type(getattr(root, "base", None)).__name__ == "DummyArray"
    ):
        root = root.base
    if not isinstance(root, np.memmap) or root.base is None or type(root.base).__name__ != "mmap":
        return None
    return int(root.offset) + data.__array_interface__["data"][0] - root.__array_interface__["data"][0]


def _pread_into(file: Path, out: np.ndarray, offset: int) -> None:
    """Fill ``out`` (bytes) from ``file`` at ``offset``; a short file (changed since it was checked) is refused."""
    view = memoryview(out)
    with open(file, "rb", buffering=0) as handle:
        done = 0
        while done < len(view):
            got = os.preadv(handle.fileno(), [view[done:]], offset + done)
            if got <= 0:
                raise ValueError(
                    f"msprobe tensor file {file} ends before the tensor it declares (at byte {offset + done})"
                )
            done += got


def _validate(windows: list[Window]) -> None:
    """Load every tensor file of ``windows`` once, memory-mapped (no data read), and drop it again.

    Raises:
        ValueError: The first file refused (see :func:`.load.load_tensor`).
    """
    for window in windows:
        for call in window.calls:
            for item in call.tensors:
                if item.file is not None:
                    load_tensor(item, mmap=True)


def _dumps(value: Any) -> bytes:
    from megadump_zarr.store.metadata import dumps

    return dumps(value)


def _components(name: str, window: Window, call: Any) -> list[str]:
    """The record arrays' names in the invocation group (what convert's ``NameTable`` gives)."""
    from megadump_zarr.layout.names import NameTable

    table = NameTable(f"{name} of {window.source}")
    return [table.add(item.name) for item in call.tensors]
