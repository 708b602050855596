"""Checks of a window's chunks: every chunk the grid implies is there, its checksum holds, it is in its place.

Each chunk is read once (batched across arrays, ``_BATCH`` at a time) and checked once: a chunk whose codec chain
ends with ``crc32c`` has that checksum verified, and every chunk has the digest the window inventory records for
its place (:func:`~megadump_zarr.read.inventory.inventory_problems`, from the same crc32c pass); a chunk without
a checksum must also decode. A packed record's chunk is its row's inner chunk, read with its whole shard by
:func:`~megadump_zarr.verify.packs.read_shards` (what the checks need of each is in ``state.read_chunks``): it is
checked from those bytes, not read again, and decoded from its pack array. With ``deep`` the statistics stored in
each record (``stats``: min, max, mean, l2norm, nanCount, infCount, see :mod:`megadump_zarr.store.tensor_stats`; a
packed record's are its row's) are recomputed from the data and compared (counts, min and max exactly; mean and
l2norm to a relative 1e-9, the float64 rounding of merging per-chunk sums).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
import itertools
import math
from typing import Any

import numpy as np

from megadump_zarr.layout.inventory import chunk_digest
from megadump_zarr.read.documents import open_array_checked
from megadump_zarr.read.inventory import inventory_problems
from megadump_zarr.verify.report import CheckState, short

__all__ = ["ChunkRead", "check_chunks", "expected_chunks", "stats_tolerance"]

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
    arrays: dict[str, tuple[dict[str, Any], Any]],
    deep: bool,
    tick: Callable[[int], None] | None,
    msprobe: bool = False,
    stored: dict[str, Any] | None = None,
    packed: Mapping[str, Any] | None = None,
) -> None:
    """Every chunk of every array is present, its crc32c holds and it has its inventory digest; the rest must decode.
    The inventoried arrays the readers describe otherwise (a pack's stored arrays) have their chunks' digests
    compared (the shards the pack checks read whole are not read again, ``state.digested``).

    Args:
        state: The window's check state.
        store: The dump store.
        window: The window key.
        arrays: The arrays to check (path below the window -> (document, its zarr metadata)).
        deep: Also recompute the stored statistics.
        tick: Called with the number of chunk bytes checked.
        msprobe: The window is an msprobe dump read in place: its statistics are msprobe's own, computed in
            the tensor's dtype, so ``deep`` compares mean and l2norm to that rounding (:func:`stats_tolerance`).
        stored: The window's consolidated metadata as stored (``None``: only ``arrays``).
        packed: The window's packed records by path (:class:`~megadump_zarr.read.pack_record.PackedRecord`): each
            one's chunk is its row's inner chunk, read with its shard (``state.read_chunks``,
            :func:`~megadump_zarr.verify.packs.read_shards`), and it is decoded from its pack array.
    """
    from megadump_zarr.read.integrity import has_crc32c
    from megadump_zarr.read.location import list_prefix

    present = set(list_prefix(store, f"{window}/"))
    todo: list[tuple[str, int, str, bool | None]] = []  # (array path, grid index, chunk key, checksum)
    whole = []  # arrays with every chunk present: decoded when they carry no checksum, or with ``deep``
    packed = packed or {}
    for path in sorted({*arrays, *packed}):
        array_key = f"{window}/{path}"
        state.arrays += 1
        if path in packed:  # its one chunk, read with its shard
            doc = packed[path].doc
            keys = [] if 0 in packed[path].shape else [f"{window}/{packed[path].chunk}"]
        else:
            doc, metadata = arrays[path]
            keys = grid_keys(state, array_key, doc, metadata, (state.inventory or {}).get(path))
            if keys is None:
                continue
        missing = [k for k in keys if k not in present and k not in state.read_chunks]
        for k in missing[:_MAX_LISTED]:
            state.add(k, "chunk is missing")
        if len(missing) > _MAX_LISTED:
            state.add(array_key, f"and {len(missing) - _MAX_LISTED} more chunks are missing")
        checksum = has_crc32c(doc)
        found = [(path, i, k, checksum) for i, k in enumerate(keys) if k in present or k in state.read_chunks]
        state.unchecked += 0 if checksum or not found or path in (state.inventory or {}) else 1
        todo += found
        if not missing and (not checksum or deep):
            whole.append(path)
    todo += _stored_chunks(state, store, window, stored or {}, set(arrays))
    bad = set()
    for start in range(0, len(todo), _BATCH):
        batch = todo[start : start + _BATCH]
        fetch = [k for _, _, k, c in batch if k not in (state.read_chunks if c is not None else state.digested)]
        fetched = dict(zip(fetch, _get_many(store, fetch)))
        for path, index, key, checksum in batch:
            if checksum is None:  # absent or unreadable: named by the pack checks, as the readers name it
                raw = fetched.get(key)
                if key in state.digested or isinstance(raw, bytes):
                    digest = state.digested[key] if key in state.digested else chunk_digest(raw)[0]
                    _check_digest(state, window, path, index, key, digest)
                continue
            raw = fetched[key] if key in fetched else state.read_chunks.pop(key)
            if not _check_chunk(state, window, path, index, key, raw, checksum, tick):
                bad.add(path)
    for path in whole:
        if path not in bad and path not in packed:
            doc = arrays[path][0]
            zarray = open_array_checked(store, f"{window}/{path}", doc)
            _check_decode(state, zarray, f"{window}/{path}", doc, deep, msprobe)
    _decode_packed(state, store, window, [packed[p] for p in whole if p in packed and p not in bad], deep)


def grid_keys(state: CheckState, array_key: str, doc: dict[str, Any], metadata: Any, listed: Any) -> list[str] | None:
    """The chunk keys of an array's grid in C order (``None``: it cannot be enumerated, the problem added); a grid
    of another length than the inventory lists is a problem.

    Args:
        state: The window's check state.
        array_key: The array's key.
        doc: Its document.
        metadata: Its zarr metadata (it encodes the keys).
        listed: Its inventory entry (``None``: not listed).
    """
    expected = expected_chunks(doc)
    if expected is None:
        state.add(f"{array_key}/zarr.json", "its chunk grid is not a regular grid this verifier can enumerate")
        return None
    encode = metadata.encode_chunk_key
    keys = [f"{array_key}/{encode(c)}" for c in expected]
    if listed is not None:
        state.extend(inventory_problems(array_key, listed, grid=len(keys)))
    return keys


def _check_chunk(
    state: CheckState, window: str, path: str, index: int, key: str, raw: Any, checksum: bool, tick: Any
) -> bool:
    """One chunk read (bytes, :class:`ChunkRead`, ``None`` or the integrity error its read raised): its crc32c
    holds and it has its inventory digest; returns whether it is good. Row coordinates' bytes are kept."""
    from megadump_zarr.read.errors import DumpIntegrityError

    state.chunks += 1
    if isinstance(raw, DumpIntegrityError):
        state.add(key, str(raw).removeprefix(f"chunk {key} is ").strip())
        return False
    if raw is None:
        state.add(key, "chunk is missing")
        return False
    if path in state.keep and not isinstance(raw, ChunkRead):
        state.kept.setdefault(path, []).append(raw)
    read = raw if isinstance(raw, ChunkRead) else ChunkRead.of(key, raw, checksum)
    state.stored_bytes += read.nbytes
    if tick is not None:
        tick(read.nbytes)
    if checksum and read.error is not None:
        state.add(key, str(read.error).removeprefix(f"chunk {key} is ").strip())
        return False
    return read.digest is None or not _check_digest(state, window, path, index, key, read.digest, checksum)


def _check_digest(
    state: CheckState, window: str, path: str, index: int, key: str, digest: int, trailing: bool = True
) -> bool:
    """Chunk ``index`` of the array at ``path`` has its inventory digest (an array the inventory does not list is
    named once, by the listing check); returns whether it has not."""
    entry = (state.inventory or {}).get(path)
    return entry is not None and state.extend(
        inventory_problems(f"{window}/{path}", entry, chunks=[(key, index, digest, trailing)])
    )


@dataclass(frozen=True)
class ChunkRead:
    """What the chunk check needs of a stored chunk's bytes, so they need not be kept (a pack's record chunks are
    read with their whole shard before the chunk check, :func:`read_shards`).

    Args:
        nbytes: Its stored size.
        error: What :func:`~megadump_zarr.read.integrity.verify_crc32c` raised on it (``None``: it holds, or
            was not checked).
        digest: Its digest (:func:`megadump_zarr.layout.inventory.chunk_digest`, the same crc32c pass that checks
            its checksum; ``None``: not computed).
    """

    nbytes: int
    error: Exception | None = None
    digest: int | None = None

    @classmethod
    def of(cls, key: str, raw: Any, checksum: bool = True) -> ChunkRead:
        """The summary of chunk ``key``'s stored bytes ``raw`` (its trailing crc32c checked with ``checksum``)."""
        from megadump_zarr.read.errors import DumpIntegrityError
        from megadump_zarr.read.integrity import verify_crc32c

        error = None
        digest, trailing = chunk_digest(raw) if len(raw) else (0, False)
        if checksum and not trailing:  # one crc32c pass said the checksum fails: name how
            try:
                verify_crc32c(key, np.frombuffer(raw, dtype=np.uint8))
            except DumpIntegrityError as failed:
                error = failed
        return cls(len(raw), error, digest)


def _get_many(store: Any, keys: list[str]) -> list[Any]:
    """The chunks' bytes (``None`` when absent), or for each the integrity error reading it raised."""
    from megadump_zarr.read.errors import DumpIntegrityError
    from megadump_zarr.read.location import get_many

    try:
        return get_many(store, keys)
    except DumpIntegrityError:  # a damaged read: name each chunk it fails
        found: list[Any] = []
        for key in keys:
            try:
                found += get_many(store, [key])
            except DumpIntegrityError as error:
                found.append(error)
        return found


def _check_decode(
    state: CheckState,
    zarray: Any,
    array_key: str,
    doc: dict[str, Any],
    deep: bool,
    msprobe: bool,
) -> None:
    """Decode every chunk (row block by row block); with ``deep`` recompute the statistics.

    Args:
        state: The window's check state.
        zarray: The array (its metadata names chunks).
        array_key: Its key.
        doc: Its document.
        deep: Recompute the statistics.
        msprobe: An msprobe dump read in place (:func:`stats_tolerance`).
    """
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
        computed = acc.result()
        rel, mean_abs = (_REL, 1e-300) if not msprobe else stats_tolerance(zarray.dtype, computed, math.prod(shape))
        _compare_stats(state, f"{array_key}/zarr.json", stored, computed, rel, mean_abs)


def _decode_packed(state: CheckState, store: Any, window: str, records: list[Any], deep: bool) -> None:
    """Decode packed records from their pack arrays (a shard's rows in one read where all of them are wanted, else
    row by row); with ``deep`` recompute each one's statistics and compare them with its row's.

    Args:
        state: The window's check state.
        store: The dump's store.
        window: The window key.
        records: The records whose chunk the chunk check found good
            (:class:`~megadump_zarr.read.pack_record.PackedRecord`).
        deep: Recompute the statistics.
    """
    by_array: dict[str, dict[int, Any]] = {}
    for record in records:
        by_array.setdefault(record.array, {})[record.row] = record
    for array in sorted(by_array):
        rows = by_array[array]
        doc = next(iter(rows.values())).pack_doc
        try:
            zarray = open_array_checked(store, f"{window}/{array}", doc)
        except ValueError:  # named by the pack's checks
            continue
        per_shard, count = int(doc["chunk_grid"]["configuration"]["chunk_shape"][0]), int(zarray.shape[0])
        for first in sorted({row - row % per_shard for row in rows}):
            last = min(first + per_shard, count)
            block = None
            if all(row in rows for row in range(first, last)):
                try:
                    block = np.asarray(zarray[first:last])
                except Exception:  # noqa: BLE001 - read row by row below, naming the one that fails
                    block = None
            for row in (r for r in range(first, last) if r in rows):
                data = block[row - first] if block is not None else _packed_row(state, window, zarray, rows[row])
                if data is not None and deep:
                    _check_packed_stats(state, window, rows[row], data)


def _packed_row(state: CheckState, window: str, zarray: Any, record: Any) -> np.ndarray | None:
    """One packed record read from its pack array (``None``: it does not decode, the problem added)."""
    try:
        return np.asarray(zarray[record.row])
    except Exception as error:  # a codec failure of a chunk without a checksum
        state.add(
            f"{window}/{record.chunk}",
            f"chunk does not decode ({type(error).__name__}: {' '.join(str(error).split())[:120]})",
        )
        return None


def _check_packed_stats(state: CheckState, window: str, record: Any, data: np.ndarray) -> None:
    """A packed record's statistics (its row's) against those recomputed from its data."""
    from megadump_zarr.store.tensor_stats import StatsAccumulator

    attrs = record.doc.get("attributes")
    stored = attrs.get("stats") if isinstance(attrs, dict) else None
    if not isinstance(stored, dict):
        return
    try:
        acc = StatsAccumulator(data.dtype)
    except TypeError:
        return
    acc.update(data)
    _compare_stats(state, f"{window}/{record.path}/zarr.json", stored, acc.result(), _REL, 1e-300)


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


def _stored_chunks(
    state: CheckState, store: Any, window: str, stored: dict[str, Any], seen: set[str]
) -> list[tuple[str, int, str, None]]:
    """``(array path, grid index, chunk key, None)`` of the chunks of the inventoried arrays not in ``seen``, but
    those of the shards the pack checks found damaged."""
    todo: list[tuple[str, int, str, None]] = []
    for path in sorted(set(state.inventory or {}) - seen):
        doc = stored.get(path)
        if not isinstance(doc, dict) or doc.get("node_type") != "array" or expected_chunks(doc) is None:
            continue
        try:
            metadata = open_array_checked(store, f"{window}/{path}", doc).metadata
        except ValueError:  # a malformed document is named by the document checks
            continue
        keys = grid_keys(state, f"{window}/{path}", doc, metadata, state.inventory[path]) or []
        todo += [(path, i, k, None) for i, k in enumerate(keys) if k not in state.damaged]
    return todo
