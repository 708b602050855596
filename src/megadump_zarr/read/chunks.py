"""Row blocks of a stored array read straight from its chunks, decoded in the calling thread.

zarr's synchronous API runs every read on its one event-loop thread: that thread verifies checksums,
copies each decoded chunk into the output and runs the asyncio machinery of every chunk, so readers in
several threads still queue behind it (measured on the P7 compare benchmark: about half of all CPU time of a
read ran on that thread). A :class:`ChunkReader` reads rows ``start:stop`` of a plain array itself, for the
record's lazy array (:class:`~megadump_zarr.read.lazy.RecordArray`):

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
optionally ``crc32c`` last (:func:`zarr_reader`, :func:`row_reader`: None otherwise). A range the reader
cannot read (a chunk that is absent, does not decode or fails its checksum) raises :class:`Fallback`: the lazy
array then reads it through zarr, so every error and every fill value is zarr's own: the fast path never decides a
failure.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

__all__ = ["ChunkReader", "Fallback", "fetch", "row_reader", "zarr_reader"]


class Fallback(Exception):
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


def zarr_reader(array: Any) -> ChunkReader | None:
    """A :class:`ChunkReader` of a zarr v3 array when its layout takes the fast path, else None (reads metadata
    only: a few attribute lookups).

    Args:
        array: The zarr array.
    """
    try:
        metadata, store_path = array.metadata, array.store_path
        dtype = np.dtype(array.dtype)
        shape, chunks = tuple(int(s) for s in array.shape), tuple(int(c) for c in array.chunks)
    except (TypeError, ValueError, AttributeError):
        return None
    from zarr.core.chunk_grids import RegularChunkGrid

    if not shape or len(chunks) != len(shape) or type(getattr(metadata, "chunk_grid", None)) is not RegularChunkGrid:
        return None
    if chunks[1:] != shape[1:] or dtype.hasobject or dtype.fields is not None or dtype.kind in "OSU":
        return None
    plan = _codec_plan(metadata, dtype.itemsize)
    if plan is None:
        return None
    return ChunkReader(
        store_path.store, store_path.path, dtype, shape, chunks, plan[0], plan[1], encode=metadata.encode_chunk_key
    )


def row_reader(row: Any) -> ChunkReader | None:
    """A packed record's :class:`ChunkReader` (its one chunk read with one ranged read of its shard), else None.

    Args:
        row: The record's :class:`~megadump_zarr.read.pack_arrays.RowArray`.
    """
    from types import SimpleNamespace

    dtype, shape = np.dtype(row.dtype), tuple(int(s) for s in row.shape)
    if not shape or 0 in shape or dtype.hasobject or dtype.fields is not None or dtype.kind in "OSU":
        return None
    codecs = getattr(row.pack.metadata, "codecs", None) or ()
    inner = getattr(codecs[0], "codecs", None) if len(codecs) == 1 else None
    plan = None if inner is None else _codec_plan(SimpleNamespace(codecs=inner), dtype.itemsize)
    if plan is None:
        return None
    return ChunkReader(row.store, row.key, dtype, shape, shape, plan[0], plan[1], locate=row.locate)


class ChunkReader:
    """Rows ``start:stop`` of one record's chunk grid, fetched and decoded here (see the module docstring).

    Args:
        store: The store the array lives in (the dump's stack: integrity checks).
        key: The array's key in that store.
        dtype: Its numpy dtype.
        shape: Its shape.
        chunks: Its chunk shape (spanning every axis but the first).
        compressor: ``"blosc"``, ``"zstd"`` or None.
        crc32c: The chunks end with a crc32c checksum.
        encode: ``encode(chunk coordinates) -> chunk key`` below ``key`` (a plain array's grid).
        locate: For a packed record (one chunk): ``locate() -> (shard key, offset, nbytes)`` of its inner chunk,
            index checked (``None``: absent, read by zarr).
    """

    def __init__(
        self,
        store: Any,
        key: str,
        dtype: np.dtype,
        shape: tuple[int, ...],
        chunks: tuple[int, ...],
        compressor: str | None,
        crc32c: bool,
        encode: Any = None,
        locate: Any = None,
    ) -> None:
        self.store, self.key, self.encode, self.locate = store, key, encode, locate
        self.dtype, self.shape, self.ndim, self.chunks = dtype, shape, len(shape), chunks
        self.compressor, self.crc32c = compressor, crc32c
        self._chunk_bytes = math.prod(chunks) * dtype.itemsize
        self.direct = _direct_reader(store) if compressor is None and not crc32c and locate is None else None

    def requests(self, start: int, stop: int) -> tuple[int, list[tuple[Any, str, Any]]]:
        """``(first, requests)``: the first chunk holding rows ``start:stop`` and the reads of every chunk holding
        them, ``(store, key, byte range or None)`` each (a packed record's: a range of its shard).

        Raises:
            Fallback: A packed record whose inner chunk is absent (a torn window).
        """
        step = self.chunks[0]
        first, last = start // step, (stop - 1) // step
        if self.locate is not None:
            from zarr.abc.store import RangeByteRequest

            found = self.locate()
            if found is None:
                raise Fallback("an absent inner chunk of a torn window")
            shard, offset, nbytes = found
            return first, [(self.store, shard, RangeByteRequest(offset, offset + nbytes))]
        prefix = f"{self.key}/" if self.key else ""
        keys = [f"{prefix}{self.encode((i,) + (0,) * (self.ndim - 1))}" for i in range(first, last + 1)]
        return first, [(self.store, key, None) for key in keys]

    def read(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` (``stop > start``), as stored.

        Raises:
            Fallback: The fast path cannot read them (zarr reads them, and says why).
        """
        from zarr.core.sync import sync

        first, requests = self.requests(start, stop)
        if self.direct is not None:
            out = np.empty((stop - start,) + self.shape[1:], dtype=self.dtype)
            self._read_direct([key for _, key, _ in requests], first, start, stop, out)
            return out
        raws = sync(fetch(requests))
        return self.assemble(start, stop, first, raws, self.store_checks(requests))

    def store_checks(self, requests: list[tuple[Any, str, Any]]) -> bool:
        """Whether the store checked the trailing crc32c of every chunk it returned for ``requests`` (whole chunks
        of one array the dump's integrity store checks against its window's inventory): one check per chunk.

        Args:
            requests: What :meth:`requests` gave.
        """
        checks = getattr(self.store, "checks", None)
        return (
            self.crc32c
            and callable(checks)
            and all(byte_range is None for _, _, byte_range in requests)
            and checks(requests[0][1])
        )

    def assemble(self, start: int, stop: int, first: int, raws: list[Any], checked: bool = False) -> np.ndarray:
        """Rows ``start:stop`` decoded from the stored chunks ``raws``.

        Args:
            start: First row.
            stop: Row past the last.
            first: The chunk ``raws[0]`` is.
            raws: The fetched chunks (a failed fetch: its exception).
            checked: Their crc32c was checked where they were read.

        Raises:
            Fallback: A chunk is absent, failed to fetch, or does not decode here.
        """
        step = self.chunks[0]
        out = np.empty((stop - start,) + self.shape[1:], dtype=self.dtype)
        for i, raw in enumerate(raws, start=first):
            if isinstance(raw, BaseException):
                raise Fallback("the chunk's get failed") from raw
            lo, hi = max(start, i * step), min(stop, (i + 1) * step)
            inside = lo == i * step and hi == (i + 1) * step
            target = out[lo - start : hi - start] if inside else np.empty(self.chunks, dtype=self.dtype)
            self._decode(raw, target, checked)
            if not inside:
                out[lo - start : hi - start] = target[lo - i * step : hi - i * step]
        return out

    def _read_direct(self, keys: list[str], first: int, start: int, stop: int, out: np.ndarray) -> None:
        """Chunks ``first..`` (``keys``) read by the store itself into ``out`` (rows ``start:stop``)."""
        step = self.chunks[0]
        for i, key in enumerate(keys, start=first):
            lo, hi = max(start, i * step), min(stop, (i + 1) * step)
            inside = lo == i * step and hi == (i + 1) * step
            target = out[lo - start : hi - start] if inside else np.empty(self.chunks, dtype=self.dtype)
            dest = target.reshape(-1).view(np.uint8)
            if dest.size != self._chunk_bytes or not self.direct(key, dest):
                raise Fallback("not a stored chunk of the store")
            if not inside:
                out[lo - start : hi - start] = target[lo - i * step : hi - i * step]

    def _decode(self, raw: Any, target: np.ndarray, checked: bool = False) -> None:
        """Decode one stored chunk into ``target`` (C-contiguous, exactly one chunk's bytes; ``checked``: its crc32c
        was checked where it was read)."""
        if raw is None:
            raise Fallback("chunk absent")
        data = raw.as_numpy_array().view(np.uint8).reshape(-1)
        if self.crc32c:
            if not checked:
                import google_crc32c

                if data.size < 4 or int.from_bytes(bytes(data[-4:]), "little") != int(google_crc32c.value(data[:-4])):
                    raise Fallback("checksum")
            data = data[:-4]
        dest = target.reshape(-1).view(np.uint8)
        if dest.size != self._chunk_bytes:
            raise Fallback("chunk size")
        if self.compressor == "blosc":
            from numcodecs.blosc import decompress

            decompress(data, dest)
        elif self.compressor == "zstd":
            from numcodecs.zstd import decompress as zstd_decompress

            zstd_decompress(data, dest)
        else:
            if data.size != dest.size:
                raise Fallback("raw size")
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


async def fetch(requests: list[tuple[Any, str, Any]]) -> list[Any]:
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
