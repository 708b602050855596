"""Checks of a window's chunks: every chunk the grid implies is there, its checksum holds, it is in its place.

A chunk whose codec chain ends with ``crc32c`` has that checksum verified over its stored bytes and is
bound to its place (:mod:`~megadump_zarr.verify.placement`); a chunk without a checksum must decode.
With ``deep`` the statistics stored in each record (``stats``: min, max, mean, l2norm, nanCount, infCount,
see :mod:`megadump_zarr.store.stats`) are recomputed from the data and compared (counts, min and max
exactly; mean and l2norm to a relative 1e-9, the float64 rounding of merging per-chunk sums).
"""

from __future__ import annotations

from collections.abc import Callable
import itertools
import math
from typing import Any

import numpy as np

from megadump_zarr.verify.placement import check_place, placement
from megadump_zarr.verify.report import CheckState, short

__all__ = ["check_chunks", "expected_chunks", "open_array"]

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
) -> None:
    """Every chunk of every array is present, its crc32c holds and it is in its place; the rest must decode.

    Args:
        state: The window's check state.
        store: The dump store.
        window: The window key.
        arrays: The arrays to check (path below the window -> document).
        deep: Also recompute the stored statistics.
        tick: Called with the number of chunk bytes checked.
    """
    from megadump_zarr.read.integrity import has_crc32c, verify_crc32c
    from megadump_zarr.read.errors import DumpIntegrityError
    from megadump_zarr.read.location import get_many, list_prefix

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
        place = placement(state, array_key, doc, keys)
        missing = [k for k in keys if k not in present]
        for k in missing[:_MAX_LISTED]:
            state.add(k, "chunk is missing")
        if len(missing) > _MAX_LISTED:
            state.add(array_key, f"and {len(missing) - _MAX_LISTED} more chunks are missing")
        keys = [k for k in keys if k in present]
        checksum = has_crc32c(doc)
        bad = False
        for start in range(0, len(keys), _BATCH):
            batch = keys[start : start + _BATCH]
            try:
                raws: list[Any] = get_many(store, batch)
            except DumpIntegrityError:  # a pack's shard index is corrupt (read.packs): name each chunk it fails
                raws = [_get_or_problem(store, key) for key in batch]
            for key, raw in zip(batch, raws):
                state.chunks += 1
                if isinstance(raw, DumpIntegrityError):
                    state.add(key, str(raw).removeprefix(f"chunk {key} is ").strip())
                    bad = True
                    continue
                if raw is None:
                    state.add(key, "chunk is missing")
                    bad = True
                    continue
                state.stored_bytes += len(raw)
                if tick is not None:
                    tick(len(raw))
                if checksum:
                    try:
                        verify_crc32c(key, np.frombuffer(raw, dtype=np.uint8))
                    except DumpIntegrityError as error:
                        state.add(key, str(error).removeprefix(f"chunk {key} is ").strip())
                        bad = True
                        continue
                    bad = check_place(state, key, raw, place) or bad
        if bad or missing:
            continue
        if not checksum or deep:
            _check_decode(state, zarray, array_key, doc, deep)


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


def _check_decode(state: CheckState, zarray: Any, array_key: str, doc: dict[str, Any], deep: bool) -> None:
    """Decode every chunk (row block by row block); with ``deep`` recompute the statistics."""
    from megadump_zarr.store.stats import StatsAccumulator

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
            block = zarray[start : start + step] if shape else zarray[...]
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
        _compare_stats(state, f"{array_key}/zarr.json", stored, acc.result())


def _compare_stats(state: CheckState, key: str, stored: dict[str, Any], computed: dict[str, Any]) -> None:
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
                same = math.isclose(float(have), float(value), rel_tol=_REL, abs_tol=1e-300)
            except (TypeError, ValueError):
                same = False
        if not same:
            state.add(key, f"attributes.stats.{name} is {short(have)} but the data give {short(value)}")
