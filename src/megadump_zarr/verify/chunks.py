"""Checks of a window's chunks: every chunk the grid implies is there, its checksum holds, it is in its place.

A chunk whose codec chain ends with ``crc32c`` has that checksum verified over its stored bytes and is
bound to its place (:mod:`~megadump_zarr.verify.placement`); a chunk without a checksum must decode. A pack's
record chunks were read with their whole shard by :mod:`~megadump_zarr.verify.packs` (what the checks need of each
is in ``state.read_chunks``): they are checked from those bytes, not read again.
With ``deep`` the statistics stored in each record (``stats``: min, max, mean, l2norm, nanCount, infCount,
see :mod:`megadump_zarr.store.tensor_stats`) are recomputed from the data and compared (counts, min and max
exactly; mean and l2norm to a relative 1e-9, the float64 rounding of merging per-chunk sums).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
import itertools
import math
from typing import Any

import numpy as np

from megadump_zarr.layout.inventory import chunk_digest
from megadump_zarr.verify.inventory import check_chunk_digest
from megadump_zarr.verify.placement import check_place, placement
from megadump_zarr.verify.report import CheckState, short

__all__ = ["ChunkRead", "check_chunks", "check_stored_chunks", "expected_chunks", "open_array", "stats_tolerance"]

_BATCH = 64  # chunks fetched concurrently
_MAX_LISTED = 20  # missing chunks listed per array before "and N more"
_MAX_CHUNKS = 10_000_000
_REL = 1e-9


def expected_chunks(doc: dict[str, Any]) -> list[tuple[int, ...]] | None:
    """The chunk grid positions an array document implies, or ``None`` when its grid cannot be enumerated.

    Args:
        doc: The array document.
    """
    from megadump_zarr.read.integrity import chunk_grid

    grid = chunk_grid(doc)
    if grid is None:
        return None
    shape, chunks = grid
    if 0 in shape:
        return []
    counts = [-(-s // c) for s, c in zip(shape, chunks)]
    if math.prod(counts) > _MAX_CHUNKS:
        return None
    return list(itertools.product(*(range(n) for n in counts)))


def check_chunks(
    state: CheckState,
    store: Any,
    window: str,
    arrays: dict[str, dict[str, Any]],
    deep: bool,
    tick: Callable[[int], None] | None,
    msprobe: bool = False,
    packs: Any = None,
) -> None:
    """Every chunk of every array is present, its crc32c holds and it is in its place; the rest must decode.

    Args:
        state: The window's check state.
        store: The dump store.
        window: The window key.
        arrays: The arrays to check (path below the window -> document).
        deep: Also recompute the stored statistics.
        tick: Called with the number of chunk bytes checked.
        msprobe: The window is an msprobe dump read in place: its statistics are msprobe's own, computed in
            the tensor's dtype, so ``deep`` compares mean and l2norm to that rounding (:func:`stats_tolerance`).
        packs: The window's :class:`~megadump_zarr.read.pack_rows.PackedWindow` (``None``: it holds no pack): a
            packed record's chunk is its row's inner chunk, read with its shard (``state.read_chunks``), and it
            is decoded where it is stored.
    """
    from megadump_zarr.read.integrity import has_crc32c
    from megadump_zarr.read.errors import DumpIntegrityError
    from megadump_zarr.read.location import list_prefix

    present = set(list_prefix(store, f"{window}/"))
    for path in sorted(arrays):
        doc = arrays[path]
        array_key = f"{window}/{path}"
        state.arrays += 1
        expected = expected_chunks(doc)
        if expected is None:
            state.add(f"{array_key}/zarr.json", "its chunk grid is not a regular grid this verifier can enumerate")
            continue
        zarray = open_array(store, array_key, doc)
        keys = [f"{array_key}/{zarray.metadata.encode_chunk_key(c)}" for c in expected]
        grid_index = {k: i for i, k in enumerate(keys)}
        listed = (state.inventory or {}).get(path)
        if listed is not None and len(listed.chunks) != len(keys):
            state.add(
                f"{array_key}/zarr.json",
                f"its grid has {len(keys)} chunk(s) but the window inventory lists {len(listed.chunks)}",
            )
        place = placement(state, array_key, doc, keys)
        missing = [k for k in keys if k not in present and k not in state.read_chunks]
        for k in missing[:_MAX_LISTED]:
            state.add(k, "chunk is missing")
        if len(missing) > _MAX_LISTED:
            state.add(array_key, f"and {len(missing) - _MAX_LISTED} more chunks are missing")
        keys = [k for k in keys if k in present or k in state.read_chunks]
        checksum = has_crc32c(doc)
        state.unchecked += 0 if checksum or not keys or listed is not None else 1  # the inventory binds it
        bad = False
        for start in range(0, len(keys), _BATCH):
            batch = keys[start : start + _BATCH]
            fetch = [k for k in batch if k not in state.read_chunks]  # a pack's: read with its shard
            fetched = dict(zip(fetch, _get_many(store, fetch)))
            for key in batch:
                raw = state.read_chunks.pop(key) if key not in fetched else fetched[key]
                state.chunks += 1
                if isinstance(raw, DumpIntegrityError):
                    state.add(key, str(raw).removeprefix(f"chunk {key} is ").strip())
                    bad = True
                    continue
                if raw is None:
                    state.add(key, "chunk is missing")
                    bad = True
                    continue
                if key in state.keep and not isinstance(raw, ChunkRead):
                    state.kept[key] = raw
                read = raw if isinstance(raw, ChunkRead) else ChunkRead.of(key, raw, checksum)
                state.stored_bytes += read.nbytes
                if tick is not None:
                    tick(read.nbytes)
                if checksum:
                    if read.error is not None:
                        state.add(key, str(read.error).removeprefix(f"chunk {key} is ").strip())
                        bad = True
                        continue
                    if listed is None:  # the inventory binds it otherwise (one problem per chunk)
                        bad = check_place(state, key, read.tail, place) or bad
                if listed is not None and read.digest is not None:  # a whole chunk: is it this place's?
                    bad = check_chunk_digest(state, window, path, grid_index[key], key, read.digest) or bad
        if bad or missing:
            continue
        if not checksum or deep:
            stored = None if packs is None else packs.array(store, path, doc)
            _check_decode(state, zarray, array_key, doc, deep, msprobe, stored)


@dataclass(frozen=True)
class ChunkRead:
    """What the chunk check needs of a stored chunk's bytes, so they need not be kept (a pack's record chunks are
    read with their whole shard before the chunk check, ``verify.packs``).

    Args:
        nbytes: Its stored size.
        tail: Its last 4 bytes (its crc32c when it carries one; all of it when shorter).
        error: What :func:`~megadump_zarr.read.integrity.verify_crc32c` raised on it (``None``: it holds, or
            was not checked).
        digest: Its digest (:func:`megadump_zarr.layout.inventory.chunk_digest`, the same crc32c pass that checks
            its checksum; ``None``: not computed).
    """

    nbytes: int
    tail: bytes
    error: Exception | None = None
    digest: int | None = None

    @classmethod
    def of(cls, key: str, raw: Any, checksum: bool = True) -> ChunkRead:
        """The summary of chunk ``key``'s stored bytes ``raw`` (its trailing crc32c checked with ``checksum``)."""
        from megadump_zarr.layout.inventory import chunk_digest
        from megadump_zarr.read.errors import DumpIntegrityError
        from megadump_zarr.read.integrity import verify_crc32c

        error = None
        digest, trailing = chunk_digest(raw) if len(raw) else (0, False)
        if checksum and not trailing:  # one crc32c pass said the checksum fails: name how
            try:
                verify_crc32c(key, np.frombuffer(raw, dtype=np.uint8))
            except DumpIntegrityError as failed:
                error = failed
        return cls(len(raw), bytes(raw[-4:]), error, digest)


def _get_many(store: Any, keys: list[str]) -> list[Any]:
    """The chunks' bytes (``None`` when absent), or for each the integrity error reading it raised."""
    from megadump_zarr.read.errors import DumpIntegrityError
    from megadump_zarr.read.location import get_many

    try:
        return get_many(store, keys)
    except DumpIntegrityError:  # a damaged read: name each chunk it fails
        return [_get_or_problem(store, key) for key in keys]


def _get_or_problem(store: Any, key: str) -> Any:
    """The chunk's bytes, ``None`` when absent, or the integrity error reading it raised."""
    from megadump_zarr.read.errors import DumpIntegrityError
    from megadump_zarr.read.location import get_bytes

    try:
        return get_bytes(store, key)
    except DumpIntegrityError as error:
        return error


def open_array(store: Any, key: str, doc: dict[str, Any]) -> Any:
    """The zarr array at ``key`` of ``store``, opened from its (already read) document ``doc``."""
    import zarr

    from megadump_zarr.read.location import store_path

    return zarr.Array.from_dict(store_path(store, key), doc)


def _check_decode(
    state: CheckState,
    zarray: Any,
    array_key: str,
    doc: dict[str, Any],
    deep: bool,
    msprobe: bool,
    stored: Any = None,
) -> None:
    """Decode every chunk (row block by row block); with ``deep`` recompute the statistics.

    Args:
        state: The window's check state.
        zarray: The array (its metadata names chunks).
        array_key: Its key.
        doc: Its document.
        deep: Recompute the statistics.
        msprobe: An msprobe dump read in place (:func:`stats_tolerance`).
        stored: Where a packed record is stored (its pack row, read instead of ``zarray``).
    """
    reader = zarray if stored is None else stored
    from megadump_zarr.store.tensor_stats import StatsAccumulator

    shape = tuple(zarray.shape)
    attrs = doc.get("attributes") if isinstance(doc.get("attributes"), dict) else {}
    stored = attrs.get("stats") if deep else None
    try:
        acc = StatsAccumulator(zarray.dtype) if isinstance(stored, dict) else None
    except TypeError:
        acc = None
    step = zarray.chunks[0] if shape else 1
    for start in range(0, shape[0] if shape else 1, step):
        try:
            block = reader[start : start + step] if shape else reader[...]
        except Exception as error:  # a codec failure of a chunk without a checksum
            chunk = zarray.metadata.encode_chunk_key((start // step,) + (0,) * (len(shape) - 1)) if shape else "c"
            state.add(
                f"{array_key}/{chunk}",
                f"chunk does not decode ({type(error).__name__}: {' '.join(str(error).split())[:120]})",
            )
            return
        if acc is not None:
            acc.update(np.asarray(block))
    if acc is not None:
        computed = acc.result()
        rel, mean_abs = (_REL, 1e-300) if not msprobe else stats_tolerance(zarray.dtype, computed, math.prod(shape))
        _compare_stats(state, f"{array_key}/zarr.json", stored, computed, rel, mean_abs)


def stats_tolerance(dtype: Any, computed: dict[str, Any], size: int) -> tuple[float, float]:
    """How far msprobe's own mean and l2norm may be from the float64 ones: ``(relative, absolute for the mean)``.

    msprobe computes them with torch in the tensor's dtype (``torch.mean``/``torch.norm``; float64 tensors get
    none): rounded to that dtype (2 eps) after a float32 accumulation (64 float32 eps covers a tree or cascade
    sum of up to 2**64 terms). The mean of a tensor whose values cancel is only that close to its RMS
    (``l2norm / sqrt(size)``), hence the absolute bound. Min, max and the counts stay exact.

    Args:
        dtype: The tensor's dtype.
        computed: The statistics recomputed from the data (``l2norm`` used).
        size: Its element count.
    """
    import ml_dtypes

    try:
        eps = float(ml_dtypes.finfo(dtype).eps)
    except (TypeError, ValueError):  # an integer tensor: msprobe's float32 arithmetic
        eps = float(np.finfo(np.float32).eps)
    rel = 2 * eps + 64 * float(np.finfo(np.float32).eps)
    norm = computed.get("l2norm")
    rms = float(norm) / math.sqrt(size) if isinstance(norm, (int, float)) and math.isfinite(norm) and size else 0.0
    return rel, max(rel * rms, 1e-300)


def _compare_stats(
    state: CheckState, key: str, stored: dict[str, Any], computed: dict[str, Any], rel: float, mean_abs: float
) -> None:
    """Each stored statistic against the recomputed one (counts, min, max exactly; mean, l2norm to ``rel``)."""
    for name, value in computed.items():
        if name not in stored:
            continue
        have = stored[name]
        if name in ("nanCount", "infCount", "min", "max"):
            same = have == value or (have is None and value is None)
        elif have is None or value is None:
            same = have is None and value is None
        else:
            try:
                same = math.isclose(
                    float(have), float(value), rel_tol=rel, abs_tol=mean_abs if name == "mean" else 1e-300
                )
            except (TypeError, ValueError):
                same = False
        if not same:
            state.add(key, f"attributes.stats.{name} is {short(have)} but the data give {short(value)}")


def check_stored_chunks(state: CheckState, store: Any, window: str, stored: dict[str, Any], seen: set[str]) -> None:
    """Read the chunks of the inventoried arrays the chunk check did not read and compare their digests.

    Args:
        state: The window's check state.
        store: The dump store.
        window: The window key.
        stored: The window's consolidated metadata as stored.
        seen: Paths of the arrays the chunk check read.
    """
    from megadump_zarr.read.location import get_many

    for path in sorted(set(state.inventory or {}) - seen):
        doc = stored.get(path)
        if not isinstance(doc, dict) or doc.get("node_type") != "array":
            continue
        grid = expected_chunks(doc)
        if grid is None:
            continue
        array_key = f"{window}/{path}"
        try:
            zarray = open_array(store, array_key, doc)
        except Exception:  # noqa: BLE001 - a malformed document is named by the document checks
            continue
        keys = [f"{array_key}/{zarray.metadata.encode_chunk_key(c)}" for c in grid]
        if len(keys) != len(state.inventory[path].chunks):
            state.add(
                f"{array_key}/zarr.json",
                f"its grid has {len(keys)} chunk(s) but the window inventory lists {len(state.inventory[path].chunks)}",
            )
        for start in range(0, len(keys), _BATCH):
            batch = keys[start : start + _BATCH]
            fetch = [k for k in batch if k not in state.digested]  # a pack's: read whole by the pack checks
            fetched = dict(zip(fetch, get_many(store, fetch)))
            for offset, key in enumerate(batch):
                if key in state.damaged:
                    continue
                if key in state.digested:
                    digest = state.digested[key]
                elif fetched[key] is None:  # named by the chunk check and the pack checks, as the readers name it
                    continue
                else:
                    digest, _ = chunk_digest(fetched[key])
                check_chunk_digest(state, window, path, start + offset, key, digest)
