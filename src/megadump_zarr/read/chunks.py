"""Row blocks of a stored array read straight from its chunks, decoded in the calling thread.

zarr's synchronous API runs every read on its one event-loop thread: that thread verifies checksums,
copies each decoded chunk into the output and runs the asyncio machinery of every chunk, so readers in
several threads still queue behind it (measured on the P7 compare benchmark: about half of all CPU time of a
read ran on that thread). :class:`ChunkRows` reads a chunk-aligned row range ``x[start:stop]`` of a
plain array itself:

* the chunk bytes of the range come from the dump's store in one ``get`` per chunk, all issued at once
  (the store stack is the dump's own, :class:`~megadump_zarr.read.integrity.IntegrityStore`, so a missing
  chunk of a committed window is refused exactly as for zarr); a packed record's one chunk is a ranged read
  of its shard, after the shard index check (:mod:`megadump_zarr.read.pack_rows`);
* the trailing ``crc32c`` is verified once (by the integrity store, in the same pass as the chunk's inventory
  digest, for a whole chunk of a committed window; here otherwise) and the chunk decompressed (blosc, zstd, or
  none) in the calling thread, straight into the output block where the chunk lies inside it: C code that releases the GIL,
  so several readers use several cores.
* a store that can fill a buffer itself (an msprobe dump read in place:
  :meth:`~megadump_zarr.read.msprobe.store.MsprobeStore.read_chunk_into`, found below the dump's
  wrapper stores) is asked to read each uncompressed chunk straight into the output block, in the calling
  thread: no event-loop round trip, no intermediate buffer, one ``preadv`` per chunk.

Only the simplest layout takes this path: a regular grid whose chunks span every axis but the first, the
codecs ``bytes`` (little endian on a little-endian host), at most one of ``blosc``/``zstd``, and
optionally ``crc32c`` last. Anything else (other selections, other codecs, a chunk that is absent, does
not decode or fails its checksum) is read by the wrapped :class:`~megadump_zarr.read.integrity.GuardedArray`
through zarr, so every error and every fill value is zarr's own: the fast path never decides a failure.
"""

from __future__ import annotations

import math
import sys
import threading
from typing import Any

import numpy as np

__all__ = ["ChunkRows", "chunk_rows", "read_many"]


class _Fallback(Exception):
    """The fast path cannot read this range; zarr reads it."""


def _codec_plan(metadata: Any, itemsize: int) -> tuple[str | None, bool] | None:
    """``(compressor or None, has crc32c)`` for a codec chain the fast path decodes, else None.

    Args:
        metadata: The zarr array's (v3) metadata.
        itemsize: Bytes per element of the array's dtype.
    """
    from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, ZstdCodec

    codecs = tuple(getattr(metadata, "codecs", None) or ())
    if not codecs or type(codecs[0]) is not BytesCodec:
        return None
    endian = getattr(codecs[0].endian, "value", codecs[0].endian)
    if itemsize > 1 and (endian != "little" or sys.byteorder != "little"):
        return None
    rest, crc = codecs[1:], False
    if rest and type(rest[-1]) is Crc32cCodec:
        rest, crc = rest[:-1], True
    if not rest:
        return None, crc
    if len(rest) == 1 and type(rest[0]) in (BloscCodec, ZstdCodec):
        return ("blosc" if type(rest[0]) is BloscCodec else "zstd"), crc
    return None


def chunk_rows(guarded: Any) -> Any:
    """``guarded`` wrapped in a :class:`ChunkRows` when its layout takes the fast path, else ``guarded``
    (reads metadata only: a few attribute lookups).

    Args:
        guarded: A :class:`~megadump_zarr.read.integrity.GuardedArray` of a zarr v3 array, or of a packed record
            (:class:`~megadump_zarr.read.pack_arrays.RowArray`: its one chunk is its row's inner chunk).
    """
    array = getattr(guarded, "array", None)
    if getattr(array, "pack_row", False):  # a RowArray: a packed record
        return _row_chunks(guarded, array)
    try:
        metadata, store_path = array.metadata, array.store_path
        dtype = np.dtype(guarded.dtype)
        shape, chunks = tuple(int(s) for s in guarded.shape), tuple(int(c) for c in guarded.chunks)
    except (TypeError, ValueError, AttributeError):
        return guarded
    from zarr.core.chunk_grids import RegularChunkGrid

    if not shape or len(chunks) != len(shape) or type(getattr(metadata, "chunk_grid", None)) is not RegularChunkGrid:
        return guarded
    if chunks[1:] != shape[1:] or dtype.hasobject or dtype.fields is not None or dtype.kind in "OSU":
        return guarded
    plan = _codec_plan(metadata, dtype.itemsize)
    if plan is None:
        return guarded
    return ChunkRows(guarded, store_path.store, store_path.path, dtype, shape, chunks, plan[0], plan[1])


def _row_chunks(guarded: Any, row: Any) -> Any:
    """A packed record's :class:`ChunkRows`: its one chunk is read with one ranged read of its shard."""
    from types import SimpleNamespace

    dtype, shape = np.dtype(row.dtype), tuple(int(s) for s in row.shape)
    if not shape or 0 in shape or dtype.hasobject or dtype.fields is not None or dtype.kind in "OSU":
        return guarded
    codecs = getattr(row.pack.metadata, "codecs", None) or ()
    inner = getattr(codecs[0], "codecs", None) if len(codecs) == 1 else None
    plan = None if inner is None else _codec_plan(SimpleNamespace(codecs=inner), dtype.itemsize)
    if plan is None:
        return guarded
    return ChunkRows(guarded, row.store, row.key, dtype, shape, shape, plan[0], plan[1], locate=row.locate)


class ChunkRows:
    """A record array whose chunk-aligned row slices are read and decoded here (see the module docstring).

    Args:
        guarded: The record's :class:`~megadump_zarr.read.integrity.GuardedArray` (every other read).
        store: The store the array lives in (the dump's stack: integrity checks).
        key: The array's key in that store.
        dtype: Its numpy dtype.
        shape: Its shape.
        chunks: Its chunk shape (spanning every axis but the first).
        compressor: ``"blosc"``, ``"zstd"`` or None.
        crc32c: The chunks end with a crc32c checksum.
        locate: For a packed record (one chunk): ``locate() -> (shard key, offset, nbytes)`` of its inner chunk,
            index checked (``None``: absent, read by zarr).
    """

    def __init__(
        self,
        guarded: Any,
        store: Any,
        key: str,
        dtype: np.dtype,
        shape: tuple[int, ...],
        chunks: tuple[int, ...],
        compressor: str | None,
        crc32c: bool,
        locate: Any = None,
    ) -> None:
        self.guarded, self.store, self.key, self.locate = guarded, store, key, locate
        self.dtype, self.shape, self.ndim, self.chunks = dtype, shape, len(shape), chunks
        self.compressor, self.crc32c = compressor, crc32c
        self.fast_reads = 0  # row ranges this path read itself (the rest went through zarr)
        self._lock = threading.Lock()
        self._chunk_bytes = math.prod(chunks) * dtype.itemsize
        self._direct = _direct_reader(store) if compressor is None and not crc32c and locate is None else None

    def __getstate__(self) -> dict[str, Any]:  # dask may pickle it to a worker: the lock stays behind
        state = dict(self.__dict__)
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __getitem__(self, selection: Any) -> Any:
        rows = self._rows(selection)
        if rows is not None:
            try:
                out = self._read(*rows)
            except Exception:  # zarr reads it again and raises (or fills) exactly as it would have
                pass
            else:
                with self._lock:
                    self.fast_reads += 1
                return out
        return self.guarded[selection]

    def _rows(self, selection: Any) -> tuple[int, int] | None:
        """``(start, stop)`` of a plain row slice (``x[a:b]``, ``x[a:b, :]``, ``x[a:b, 0:n]`` with ``n`` the whole
        axis, as dask asks for a chunk), else None."""
        if not isinstance(selection, tuple):
            selection = (selection,)
        if not selection or not all(isinstance(s, slice) for s in selection):
            return None
        first, rest = selection[0], selection[1:]
        if len(rest) >= self.ndim or first.step not in (None, 1):
            return None
        if any(s.indices(n) != (0, n, 1) for s, n in zip(rest, self.shape[1:])):  # each a whole trailing axis
            return None
        start, stop, _ = first.indices(self.shape[0])
        return (start, stop) if stop > start else None

    def _keys(self, start: int, stop: int) -> tuple[int, int, list[tuple[Any, str, Any]]]:
        """``(first, last, requests)``: the chunks holding rows ``start:stop`` and their reads, ``(store, key,
        byte range or None)`` each (a packed record's: a range of its shard)."""
        step = self.chunks[0]
        first, last = start // step, (stop - 1) // step
        if self.locate is not None:
            from zarr.abc.store import RangeByteRequest

            found = self.locate()
            if found is None:
                raise _Fallback("an absent inner chunk of a torn window")
            shard, offset, nbytes = found
            return first, last, [(self.store, shard, RangeByteRequest(offset, offset + nbytes))]
        encode = self.guarded.array.metadata.encode_chunk_key
        prefix = f"{self.key}/" if self.key else ""
        keys = [f"{prefix}{encode((i,) + (0,) * (self.ndim - 1))}" for i in range(first, last + 1)]
        return first, last, [(self.store, key, None) for key in keys]

    def _read(self, start: int, stop: int) -> np.ndarray:
        from zarr.core.sync import sync

        first, last, requests = self._keys(start, stop)
        if self._direct is not None:
            out = np.empty((stop - start,) + self.shape[1:], dtype=self.dtype)
            self._read_direct([key for _, key, _ in requests], first, last, start, stop, out)
            return out
        raws = sync(_fetch(requests))
        return self._assemble(start, stop, first, raws, self._store_checks(requests))

    def _store_checks(self, requests: list[tuple[Any, str, Any]]) -> bool:
        """Whether the store checked the trailing crc32c of every chunk it returned for ``requests`` (whole chunks
        of one array the dump's integrity store checks against its window's inventory): one check per chunk."""
        checks = getattr(self.store, "checks", None)
        return (
            self.crc32c
            and callable(checks)
            and all(byte_range is None for _, _, byte_range in requests)
            and checks(requests[0][1])
        )

    def _assemble(self, start: int, stop: int, first: int, raws: list[Any], checked: bool = False) -> np.ndarray:
        """Rows ``start:stop`` decoded from the stored chunks ``raws`` (chunk ``first`` onwards; ``checked``: their
        crc32c was checked where they were read)."""
        step = self.chunks[0]
        out = np.empty((stop - start,) + self.shape[1:], dtype=self.dtype)
        for i, raw in enumerate(raws, start=first):
            if isinstance(raw, BaseException):
                raise _Fallback("the chunk's get failed") from raw
            lo, hi = max(start, i * step), min(stop, (i + 1) * step)
            inside = lo == i * step and hi == (i + 1) * step
            target = out[lo - start : hi - start] if inside else np.empty(self.chunks, dtype=self.dtype)
            self._decode(raw, target, checked)
            if not inside:
                out[lo - start : hi - start] = target[lo - i * step : hi - i * step]
        return out

    def _read_direct(self, keys: list[str], first: int, last: int, start: int, stop: int, out: np.ndarray) -> None:
        """Chunks ``first..last`` read by the store itself into ``out`` (rows ``start:stop``)."""
        step = self.chunks[0]
        for i, key in zip(range(first, last + 1), keys):
            lo, hi = max(start, i * step), min(stop, (i + 1) * step)
            inside = lo == i * step and hi == (i + 1) * step
            target = out[lo - start : hi - start] if inside else np.empty(self.chunks, dtype=self.dtype)
            dest = target.reshape(-1).view(np.uint8)
            if dest.size != self._chunk_bytes or not self._direct(key, dest):
                raise _Fallback("not a stored chunk of the store")
            if not inside:
                out[lo - start : hi - start] = target[lo - i * step : hi - i * step]

    def _decode(self, raw: Any, target: np.ndarray, checked: bool = False) -> None:
        """Decode one stored chunk into ``target`` (C-contiguous, exactly one chunk's bytes; ``checked``: its crc32c
        was checked where it was read)."""
        if raw is None:
            raise _Fallback("chunk absent")
        data = raw.as_numpy_array().view(np.uint8).reshape(-1)
        if self.crc32c:
            if not checked:
                import google_crc32c

                if data.size < 4 or int.from_bytes(bytes(data[-4:]), "little") != int(google_crc32c.value(data[:-4])):
                    raise _Fallback("checksum")
            data = data[:-4]
        dest = target.reshape(-1).view(np.uint8)
        if dest.size != self._chunk_bytes:
            raise _Fallback("chunk size")
        if self.compressor == "blosc":
            from numcodecs.blosc import decompress

            decompress(data, dest)
        elif self.compressor == "zstd":
            from numcodecs.zstd import decompress as zstd_decompress

            zstd_decompress(data, dest)
        else:
            if data.size != dest.size:
                raise _Fallback("raw size")
            dest[...] = data


def _direct_reader(store: Any) -> Any:
    """The ``read_chunk_into(key, out) -> bool`` of the innermost store below ``store``'s wrappers (zarr
    ``WrapperStore``: the integrity checks), or None when it has none.

    Args:
        store: The array's store.
    """
    from zarr.storage import WrapperStore

    seen = 0
    while isinstance(store, WrapperStore) and seen < 8:
        store, seen = store._store, seen + 1
    reader = getattr(store, "read_chunk_into", None)
    return reader if callable(reader) else None


async def _fetch(requests: list[tuple[Any, str, Any]]) -> list[Any]:
    """Every ``store.get(key, byte_range)`` at once; a failed get is returned as its exception (its reader falls
    back)."""
    import asyncio

    from zarr.core.buffer import default_buffer_prototype

    prototype = default_buffer_prototype()
    return list(
        await asyncio.gather(
            *(store.get(key, prototype, byte_range) for store, key, byte_range in requests), return_exceptions=True
        )
    )


def read_many(items: list[tuple[Any, tuple[slice, ...]]]) -> list[Any]:
    """``x[index]`` of every ``(x, index)``, the chunk fetches of all the :class:`ChunkRows` row ranges among
    them issued together (one round trip to zarr's event loop, the stores' reads running concurrently),
    each range decoded in the calling thread. A compare lane reads the same block of both sides this way.
    Other items, and a range the fast path cannot read, are read by ``x[index]`` (zarr's own errors).

    Args:
        items: Array-likes and their index tuples.
    """
    from zarr.core.sync import sync

    plans: list[tuple[int, int, int, int, int] | None] = []  # (start, stop, first, key offset, key count)
    keys: list[tuple[Any, str, Any]] = []
    for x, index in items:
        rows = x._rows(index) if isinstance(x, ChunkRows) and x._direct is None else None
        if rows is not None:
            try:
                first, _, requests = x._keys(*rows)
            except Exception:  # a packed record whose index check fails or finds no chunk: zarr's read says so
                rows = None
        if rows is None:
            plans.append(None)
            continue
        plans.append((rows[0], rows[1], first, len(keys), len(requests)))
        keys.extend(requests)
    raws = sync(_fetch(keys)) if keys else []
    out: list[Any] = []
    for (x, index), plan in zip(items, plans):
        if plan is None:
            out.append(x[index] if index else x[...])
            continue
        start, stop, first, at, count = plan
        try:
            block = x._assemble(start, stop, first, raws[at : at + count], x._store_checks(keys[at : at + count]))
        except Exception:  # zarr reads it again and raises (or fills) exactly as it would have
            out.append(x.guarded[index])
            continue
        with x._lock:
            x.fast_reads += 1
        out.append(block)
    return out
