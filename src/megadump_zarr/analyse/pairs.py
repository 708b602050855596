"""One compared pair: how it is compared (:func:`compare_pair`, the single dispatch point) and the
picklable per-record unit of a dump-against-dump comparison (:class:`RecordPair`, :func:`compare_record`).

:func:`compare_pair` decides, for two array-likes, which verdict applies: ``dtype_mismatch`` (kinds
differ), ``shape_mismatch``, or the metrics and rules of :mod:`megadump_zarr.analyse.verdict` (exact for
integers and bools, tolerances by dtype for floats); a missing or corrupt chunk
(:class:`~megadump_zarr.read.errors.DumpIntegrityError`) gives ``missing_data`` naming the key, anything
else that stops the comparison ``error``. A new way of comparing a pair (statistics-only records, for
example) is one more branch here.

:func:`compare_record` is what :func:`megadump_zarr.analyse.compare` runs per record pair of two dumps,
through :func:`megadump_zarr.analyse.parallel.map_ordered`: its argument carries the two dumps as
:class:`~megadump_zarr.read.source.DumpSource` (URL + storage options), the record path and the
tolerances, so it runs on a dask worker as well as in this process. It reads both records chunk-aligned,
straight from their zarr arrays, decoding the two sides in parallel threads, and folds block pairs as they
arrive: at most a few blocks per thread are in memory.

:func:`compare_arrays` runs pairs of array-likes (:class:`ArrayPair`: a dump's tensors against an eager
reference, two collections' tensors) through the same lanes: row ``k`` has the bits of :func:`compare_pair`
of pair ``k``, whatever the number of lanes.

A pair with a truncated side (``max_bytes_per_tensor``) is compared on the elements both sides stored
(:func:`stored_prefixes`: flat views of the same length, with a note saying how much is compared); a pass there
is ``pass_partial`` (:func:`as_partial`), never ``pass``: what was not stored was not compared.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
import contextlib
from dataclasses import dataclass, field
import math
import os
import threading
from typing import Any

import numpy as np

from megadump_zarr.analyse.metrics import (
    DEFAULT_BLOCK_BYTES,
    MetricAccumulator,
    TensorMetrics,
    block_offset,
    compute_metrics,
    dtype_name,
    iter_blocks,
    read_native_block,
    row_chunks,
    shape_of,
)
from megadump_zarr.analyse.verdict import PARTIAL, dtype_kind, resolve_tolerance, verdict

__all__ = [
    "METRIC_COLUMNS",
    "ArrayPair",
    "PairPlan",
    "RecordPair",
    "compare_arrays",
    "compare_pair",
    "compare_record",
    "compare_records",
    "empty_row",
    "metrics_row",
    "Prefixes",
    "as_partial",
    "partial_note",
    "prepare_pair",
    "record_source",
    "stored_prefixes",
    "single_threaded_blas",
]

METRIC_COLUMNS = (
    "shape_a",
    "shape_b",
    "dtype_a",
    "dtype_b",
    "elements",
    "cosine",
    "max_abs",
    "max_rel",
    "rmse",
    "within_0_1pct",
    "within_0_5pct",
    "euc_dist",
    "max_rel_eps",
    "one_thousandth_ratio",
    "five_thousandths_ratio",
    "nan_a",
    "inf_a",
    "nan_b",
    "inf_b",
    "nonfinite_mismatch",
    "allclose",
    "mismatches",
    "first_mismatch",
    "worst_index",
    "worst_a",
    "worst_b",
    "worst_task_id",
    "worst_owner_id",
    "worst_core_type",
    "worst_core_id",
    "rtol",
    "atol",
    "verdict",
    "note",
)
"""Metric columns of a compare result row, in order (after the key columns)."""

Locator = Callable[[tuple[int, ...]], dict[str, Any]]
"""``worst_index -> {"worst_task_id": ..., "worst_owner_id": ..., "worst_core_type": ..., "worst_core_id": ...}``."""


def empty_row(keys: dict[str, Any], verdict_: str, note: str, **extra: Any) -> dict[str, Any]:
    """A result row with no metrics.

    Args:
        keys: The key columns.
        verdict_: The verdict.
        note: The note.
        **extra: More columns (``shape_a``, ``dtype_b``, ...).
    """
    row: dict[str, Any] = dict(keys)
    row.update(dict.fromkeys(METRIC_COLUMNS))
    row.update(extra, verdict=verdict_, note=note)
    return row


def _integrity_error() -> type[Exception]:
    try:
        from megadump_zarr.read.errors import DumpIntegrityError
    except ImportError:  # pragma: no cover - the read layer is part of the package
        return LookupError
    return DumpIntegrityError


def _shape_text(shape: tuple[int, ...]) -> str:
    return "×".join(str(s) for s in shape) if shape else "scalar"


@dataclass
class PairPlan:
    """What :func:`prepare_pair` decided: a final ``row`` (``compute`` False), or the tolerances to
    compute the metrics with (then :func:`finish_pair` completes ``row``)."""

    row: dict[str, Any]
    notes: list[str]
    compute: bool = False
    rtol: float | None = None
    atol: float | None = None
    exact: bool = False


def _failed_row(row: dict[str, Any], exc: BaseException, notes: list[str]) -> dict[str, Any]:
    """``row`` as the verdict of an exception: ``missing_data`` for a missing/corrupt chunk, else ``error``."""
    if isinstance(exc, _integrity_error()):
        key = getattr(exc, "key", None)
        row.update(
            verdict="missing_data",
            note="; ".join([f"missing or corrupt data{f' at {key}' if key else ''}: {exc}", *notes]),
        )
    else:
        row.update(verdict="error", note="; ".join([f"{type(exc).__name__}: {exc}", *notes]))
    return row


def prepare_pair(
    keys: dict[str, Any],
    a: Any,
    b: Any,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    notes: Iterable[str] = (),
) -> PairPlan:
    """The dispatch point: how ``a`` is compared with ``b`` (never raises; reads metadata only).

    ``dtype_mismatch`` when the kinds differ, ``shape_mismatch`` when the shapes do, else the
    tolerances of :func:`~megadump_zarr.analyse.verdict.resolve_tolerance` (exact for integers).

    Args:
        keys: The key columns of the row.
        a: The tensor under test.
        b: The reference.
        rtol: User relative tolerance (floats; None: the dtype default).
        atol: User absolute tolerance (floats; None: the dtype default).
        notes: Notes to add (truncation, row alignment).
    """
    extra_notes = [n for n in notes if n]
    row = empty_row(keys, "error", "; ".join(extra_notes))
    try:
        shape_a, shape_b = shape_of(a), shape_of(b)
        dtype_a, dtype_b = dtype_name(a), dtype_name(b)
        row.update(shape_a=shape_a, shape_b=shape_b, dtype_a=dtype_a, dtype_b=dtype_b)
        kind_a, kind_b = dtype_kind(dtype_a), dtype_kind(dtype_b)
        if kind_a != kind_b:
            row.update(
                verdict="dtype_mismatch",
                note="; ".join(
                    [f"dtype kinds differ: {dtype_a} ({kind_a}) vs {dtype_b} ({kind_b}); not compared", *extra_notes]
                ),
            )
            return PairPlan(row, extra_notes)
        if shape_a != shape_b:
            row.update(
                verdict="shape_mismatch",
                note="; ".join([f"shape {_shape_text(shape_a)} vs {_shape_text(shape_b)}; not compared", *extra_notes]),
            )
            return PairPlan(row, extra_notes)
        tol_rtol, tol_atol, exact = resolve_tolerance(dtype_a, dtype_b, rtol, atol)
    except Exception as exc:  # one unreadable tensor must not abort a whole comparison
        return PairPlan(_failed_row(row, exc, extra_notes), extra_notes)
    return PairPlan(row, extra_notes, True, None if exact else tol_rtol, None if exact else tol_atol, exact)


def compare_pair(
    keys: dict[str, Any],
    a: Any,
    b: Any,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    notes: Iterable[str] = (),
    locate: Locator | None = None,
    metrics: Callable[..., TensorMetrics] | None = None,
) -> dict[str, Any]:
    """One result row: ``a`` (under test) against the reference ``b``; never raises.

    :func:`prepare_pair` chooses how the pair is compared; the metrics are then computed and judged.

    Args:
        keys: The key columns of the row.
        a: The tensor under test (any array-like :mod:`megadump_zarr.analyse.metrics` reads).
        b: The reference.
        rtol: User relative tolerance (floats; None: the dtype default).
        atol: User absolute tolerance (floats; None: the dtype default).
        block_bytes: Float64 bytes of one block of one side.
        notes: Notes to add (truncation, row alignment).
        locate: Maps the worst element's logical index to its producing task/owner/core columns.
        metrics: ``metrics(a, b, rtol=, atol=, exact=, block_bytes=) -> TensorMetrics``; default
            :func:`~megadump_zarr.analyse.metrics.compute_metrics`.
    """
    plan = prepare_pair(keys, a, b, rtol=rtol, atol=atol, notes=notes)
    if not plan.compute:
        return plan.row
    try:
        m = (metrics or compute_metrics)(
            a, b, rtol=plan.rtol, atol=plan.atol, exact=plan.exact, block_bytes=block_bytes
        )
    except Exception as exc:
        return _failed_row(plan.row, exc, plan.notes)
    return metrics_row(plan.row, m, plan.notes, locate)


def metrics_row(
    row: dict[str, Any], m: TensorMetrics, notes: list[str], locate: Locator | None = None
) -> dict[str, Any]:
    """Fill ``row`` (keys, shapes, dtypes set) with the metrics, verdict and note of ``m``."""
    result, reasons = verdict(m)
    all_notes = list(reasons) + list(notes)
    if row["dtype_a"] != row["dtype_b"]:
        all_notes.append(f"dtype {row['dtype_a']} vs {row['dtype_b']}")
    if m.elements and not m.finite_pairs:
        all_notes.append("no finite element pairs")
    row.update(
        elements=m.elements,
        cosine=m.cosine,
        max_abs=m.max_abs,
        max_rel=m.max_rel,
        rmse=m.rmse,
        within_0_1pct=m.within_0_1pct,
        within_0_5pct=m.within_0_5pct,
        euc_dist=m.euc_dist,
        max_rel_eps=m.max_rel_eps,
        one_thousandth_ratio=m.one_thousandth_ratio,
        five_thousandths_ratio=m.five_thousandths_ratio,
        nan_a=m.nan_a,
        inf_a=m.inf_a,
        nan_b=m.nan_b,
        inf_b=m.inf_b,
        nonfinite_mismatch=m.nonfinite_mismatch,
        allclose=m.allclose,
        mismatches=m.mismatches,
        first_mismatch=m.first_mismatch,
        rtol=m.rtol,
        atol=m.atol,
        verdict=result,
        note="; ".join(all_notes),
    )
    if result != "pass":
        row.update(worst_index=m.worst_index, worst_a=m.worst_a, worst_b=m.worst_b)
        if locate is not None and m.worst_index is not None:
            try:
                row.update(locate(m.worst_index))
            except Exception:  # locating is a courtesy: never lose the verdict over it
                pass
    return row


# ---------------------------------------------------------------------------------------------------- dump records
_THREADS = max(1, min(4, os.cpu_count() or 1))
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


_BLAS: Any = None
_BLAS_LOCK = threading.Lock()
_BLAS_USERS = 0
_BLAS_LIMIT: Any = None


@contextlib.contextmanager
def single_threaded_blas() -> Any:
    """BLAS limited to one thread while comparisons run (a multi-threaded ``dot`` of 32 Ki elements that
    waits for a busy core costs milliseconds, and our own threads use the cores). Re-entrant and safe
    across threads: the first user sets the limit, the last one restores it. A no-op without threadpoolctl."""
    global _BLAS, _BLAS_USERS, _BLAS_LIMIT
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover - threadpoolctl is a dependency
        yield
        return
    with _BLAS_LOCK:
        if _BLAS is None:
            _BLAS = ThreadpoolController()
        if _BLAS_USERS == 0:
            _BLAS_LIMIT = _BLAS.limit(limits=1, user_api="blas")
        _BLAS_USERS += 1
    try:
        yield
    finally:
        with _BLAS_LOCK:
            _BLAS_USERS -= 1
            if _BLAS_USERS == 0 and _BLAS_LIMIT is not None:
                _BLAS_LIMIT.restore_original_limits()
                _BLAS_LIMIT = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=_THREADS, thread_name_prefix="megadump-compare")
        return _POOL


@dataclass(frozen=True)
class RecordPair:
    """One record of two dumps to compare: what :func:`compare_record` needs, picklable.

    Args:
        a: Where dump A (under test) lives.
        b: Where dump B (the reference) lives.
        path: A's record path relative to its root.
        keys: The key columns of its result row.
        rtol: User relative tolerance (None: dtype default).
        atol: User absolute tolerance (None: dtype default).
        truncated: Either side's record is truncated (read through its logical-shape view).
        block_bytes: Float64 bytes of one block of one side.
        path_b: B's record path (None: the same as ``path``); records pair by step, so it differs from A's
            when the dumps number their windows or invocations differently, or steps are paired explicitly.
    """

    a: Any
    b: Any
    path: str
    keys: dict[str, Any] = field(default_factory=dict)
    rtol: float | None = None
    atol: float | None = None
    truncated: bool = False
    block_bytes: int = DEFAULT_BLOCK_BYTES
    path_b: str | None = None

    @property
    def label(self) -> str:
        """The record path (names a failing item in :func:`~megadump_zarr.analyse.parallel.map_ordered`)."""
        return self.path


def _open(source: Any) -> Any:
    return source.open() if hasattr(source, "open") and not hasattr(source, "records") else source


def record_source(dump: Any, path: str, truncated: bool) -> Any:
    """Record ``path`` of ``dump`` as an array-like for :func:`compare_pair`: its stored zarr array, or its
    pack row (read chunk by chunk through the dump's integrity checks; chunk-aligned row blocks of a plain layout decoded
    in the calling thread, :mod:`megadump_zarr.read.chunks`), or the logical-shape view of a truncated record.

    Args:
        dump: An open ``Dump`` (or anything with ``record_array``).
        path: The record path.
        truncated: The record is truncated.
    """
    if not truncated and hasattr(dump, "_record") and hasattr(dump, "store"):
        from megadump_zarr.read.integrity import GuardedArray

        info, rel, doc = dump._record(path)
        attrs = doc.get("attributes") or {}
        if not attrs.get("truncated"):
            from megadump_zarr.read.chunks import chunk_rows

            key = f"{info.key}/{rel}"
            guarded = GuardedArray(dump._array(info, rel, doc), key, getattr(dump, "root", ""))
            return chunk_rows(guarded)
    return dump.record_array(path)


# ---------------------------------------------------------------------------------------------------- truncated pairs
@dataclass(frozen=True)
class Prefixes:
    """Both sides of a truncated pair as the elements both stored.

    Args:
        a: A's stored elements, flat (the first ``elements`` in C order).
        b: B's, as many.
        note: How much is compared (:func:`partial_note`).
        shape_a: A's logical shape (``actualShape``).
        shape_b: B's logical shape (the pair is a ``shape_mismatch`` when it differs from A's).
        dtype_a: A's stored dtype.
        dtype_b: B's stored dtype.
    """

    a: Any
    b: Any
    note: str
    shape_a: tuple[int, ...]
    shape_b: tuple[int, ...]
    dtype_a: str
    dtype_b: str


def _stored_view(dump: Any, path: str) -> tuple[Any, tuple[int, ...], int, str]:
    """A record's stored array (read through the dump's integrity checks), its logical shape, how many of its
    elements are stored and its stored dtype."""
    from megadump_zarr.read.integrity import GuardedArray

    info, rel, doc = dump._record(path)
    attrs = doc.get("attributes") or {}
    array = GuardedArray(dump._array(info, rel, doc), f"{info.key}/{rel}", getattr(dump, "root", ""))
    stored = tuple(int(d) for d in array.shape)
    actual = attrs.get("actualShape")
    logical = tuple(int(d) for d in actual) if attrs.get("truncated") and isinstance(actual, list) else stored
    return array, logical, math.prod(stored), str(array.dtype)


def stored_prefixes(dump_a: Any, dump_b: Any, path_a: str, path_b: str | None = None) -> Prefixes | None:
    """Record ``path_a`` of A and ``path_b`` of B (default: ``path_a``) as the elements both stored, or None for
    dumps that are not read from a store (without ``_record``/``_array``: their NaN-padded views are compared).

    Args:
        dump_a: The dump under test (an open ``Dump``).
        dump_b: The reference dump.
        path_a: A's record path.
        path_b: B's record path.
    """
    from megadump_zarr.read.truncated import FlatPrefix

    if not all(hasattr(d, "_record") and hasattr(d, "_array") for d in (dump_a, dump_b)):
        return None
    array_a, shape_a, stored_a, dtype_a = _stored_view(dump_a, path_a)
    array_b, shape_b, stored_b, dtype_b = _stored_view(dump_b, path_b or path_a)
    if shape_a != shape_b:
        return Prefixes(None, None, "", shape_a, shape_b, dtype_a, dtype_b)
    elements = min(stored_a, stored_b, math.prod(shape_a))
    a, b = FlatPrefix(array_a, elements), FlatPrefix(array_b, elements)
    return Prefixes(a, b, partial_note(shape_a, elements), shape_a, shape_b, dtype_a, dtype_b)


def partial_note(shape: tuple[int, ...], elements: int) -> str:
    """How much of a truncated pair is compared: ``compared 32 of 2048 rows (16384 of 1048576 elements); ...``.

    Args:
        shape: The logical shape.
        elements: The elements compared (the first, in C order).
    """
    total = math.prod(shape)
    if elements >= total:
        return "truncated record whose stored prefix holds every element: compared whole"
    per_row = math.prod(shape[1:])
    rows = elements // per_row if per_row else shape[0]
    return (
        f"compared {rows} of {shape[0]} rows ({elements} of {total} elements); "
        "the rest was not stored (max_bytes_per_tensor)"
    )


def as_partial(row: dict[str, Any], logical: tuple[int, ...]) -> None:
    """A row compared on flat prefixes, put back in the logical shape: its shapes, its worst and first mismatch
    index (flat positions made logical indices), and a pass on part of the elements made ``pass_partial``.

    Args:
        row: The compared row (updated in place).
        logical: The logical shape of both sides.
    """
    if row.get("verdict") in ("shape_mismatch", "dtype_mismatch"):
        return
    row.update(shape_a=logical, shape_b=logical)
    for column in ("worst_index", "first_mismatch"):
        value = row.get(column)
        if value is not None and logical:
            flat = value[0] if isinstance(value, tuple | list) else value
            row[column] = tuple(int(i) for i in np.unravel_index(int(flat), logical))
    if row.get("verdict") == "pass" and (row.get("elements") or 0) < math.prod(logical):
        row["verdict"] = PARTIAL


def _locator(keys: dict[str, Any], dump: Any = None, path: str | None = None) -> Locator:
    """An L1 record comes from one task: its worst element's producer is the record's own task/owner/core,
    and its ``worst_index`` is given in the whole tensor's coordinates (the record's global row along
    axis 0, read from its row coordinate when ``dump`` and ``path`` are given and it has one).

    Args:
        keys: The record's key columns.
        dump: Dump A (under test), to read the record's row coordinate.
        path: The record's path.
    """

    def locate(index: tuple[int, ...]) -> dict[str, Any]:
        if keys.get("level") != "L1":
            return {}
        out = {
            "worst_task_id": keys.get("task_id"),
            "worst_owner_id": keys.get("owner_id"),
            "worst_core_type": keys.get("core_type"),
            "worst_core_id": keys.get("core_id"),
        }
        rows = _global_rows(dump, path) if dump is not None and path and index else None
        if rows is not None and 0 <= index[0] < len(rows):
            out["worst_index"] = (int(rows[index[0]]), *index[1:])
        return out

    return locate


def _global_rows(dump: Any, path: str) -> np.ndarray | None:
    """The whole tensor's row of each row of record ``path`` (its integer coordinate along its first
    dimension), or None where it has none (an L0 record, or an L1 record read whole: rows are their own).

    Args:
        dump: An open ``Dump``.
        path: The record's path.
    """
    array = dump.record_array(path)
    if not array.dims:
        return None
    coord = array.coords.get(array.dims[0])
    if coord is None or coord.ndim != 1 or np.asarray(coord.values).dtype.kind not in "iu":
        return None
    return np.asarray(coord.values)


def compare_record(pair: RecordPair) -> dict[str, Any]:
    """The result row of one record pair of two dumps (see :class:`RecordPair`); never raises.

    This is the unit :func:`megadump_zarr.analyse.parallel.map_ordered` runs on a worker; its blocks are
    read and folded by this process's threads (:func:`compare_records`).

    Args:
        pair: The record, its two dumps and the tolerances.
    """
    return compare_records([pair])[0]


@dataclass
class ArrayPair:
    """Two array-likes to compare in the lanes of :func:`compare_arrays`: what :func:`compare_pair` takes.

    Args:
        keys: The key columns of its result row.
        a: The tensor under test (any array-like :mod:`megadump_zarr.analyse.metrics` reads; a dump's lazy
            DataArray is read block by block, chunk-aligned).
        b: The reference.
        rtol: User relative tolerance (floats; None: the dtype default).
        atol: User absolute tolerance (floats; None: the dtype default).
        notes: Notes to add (truncation, row alignment).
        locate: Maps the worst element's logical index to its producing task/owner/core columns.
        block_bytes: Float64 bytes of one block of one side.
    """

    keys: dict[str, Any]
    a: Any
    b: Any
    rtol: float | None = None
    atol: float | None = None
    notes: tuple[str, ...] = ()
    locate: Locator | None = None
    block_bytes: int = DEFAULT_BLOCK_BYTES


@dataclass
class _Job:
    a: Any
    b: Any
    plan: PairPlan
    shape: tuple[int, ...]
    blocks: list[tuple[slice, ...]]
    locate: Locator | None = None
    left: int = 0
    failed_at: int | None = None  # the first block (in block order) that raised so far
    error: BaseException | None = None
    partials: dict[int, MetricAccumulator] = field(default_factory=dict)


def block_metrics(job: _Job, i: int, stored: tuple[Any, Any] | None = None) -> MetricAccumulator:
    """Block ``i`` of a pair read from both sides (or given, ``stored``: both sides' stored blocks, fetched by
    :func:`read_batch`) and folded into its own accumulator (any thread)."""
    from megadump_zarr.read.chunks import ChunkRows, read_many

    index = job.blocks[i]
    if stored is not None:
        block_a, block_b = read_native_block(stored[0], ()), read_native_block(stored[1], ())
    elif isinstance(job.a, ChunkRows) and isinstance(job.b, ChunkRows):  # both sides' chunks fetched in one go
        stored_a, stored_b = read_many([(job.a, index), (job.b, index)])
        block_a, block_b = read_native_block(stored_a, ()), read_native_block(stored_b, ())
    else:
        block_a, block_b = read_native_block(job.a, index), read_native_block(job.b, index)
    acc = MetricAccumulator(job.shape, rtol=job.plan.rtol, atol=job.plan.atol, exact=job.plan.exact)
    acc.update(block_a, block_b, block_offset(job.shape, index))
    return acc


_BATCH_BYTES = 1 << 20
"""Stored bytes of the block pairs one lane fetches in one round trip to zarr's event loop (small records:
one round trip per block would cost more than reading and folding it)."""
_BATCH_BLOCKS = 256
"""Block pairs one lane fetches in one round trip, at most."""


def block_bytes(job: _Job, i: int) -> int | None:
    """Stored bytes of block ``i`` of both sides, or None when it is not read through
    :class:`~megadump_zarr.read.chunks.ChunkRows` on both sides (then it is read on its own).

    Args:
        job: The pair.
        i: The block.
    """
    from megadump_zarr.read.chunks import ChunkRows

    if not (isinstance(job.a, ChunkRows) and isinstance(job.b, ChunkRows)):
        return None
    start, stop, _ = job.blocks[i][0].indices(job.shape[0]) if job.shape else (0, 1, 1)
    return (stop - start) * math.prod(job.shape[1:]) * (job.a.dtype.itemsize + job.b.dtype.itemsize)


def read_batch(items: list[tuple[_Job, int]]) -> list[tuple[Any, Any]] | None:
    """Both sides' stored blocks of several block pairs, their chunks fetched together (one round trip:
    :func:`~megadump_zarr.read.chunks.read_many`), or None when any of them raises (each is then read on its
    own, so that each gets its own error).

    Args:
        items: ``(job, block)`` pairs whose sides are both ``ChunkRows`` (:func:`block_bytes` not None).
    """
    from megadump_zarr.read.chunks import read_many

    try:
        stored = read_many([(x, job.blocks[i]) for job, i in items for x in (job.a, job.b)])
    except Exception:
        return None
    return [(stored[2 * n], stored[2 * n + 1]) for n in range(len(items))]


def _take(work: list[tuple[int, int]], at: int, jobs: dict[int, _Job]) -> int:
    """The end of the batch of ``work`` starting at ``at``: consecutive small block pairs read through
    ``ChunkRows``, at most :data:`_BATCH_BYTES` and :data:`_BATCH_BLOCKS` of them (at least one item)."""
    end, size = at + 1, block_bytes(jobs[work[at][0]], work[at][1])
    if size is None:
        return end
    while end < len(work) and end - at < _BATCH_BLOCKS:
        more = block_bytes(jobs[work[end][0]], work[end][1])
        if more is None or size + more > _BATCH_BYTES:
            break
        end, size = end + 1, size + more
    return end


def merge_in_order(shape: tuple[int, ...], plan: PairPlan, partials: list[MetricAccumulator]) -> MetricAccumulator:
    """The record's accumulator: its block partials merged in block order, whichever thread folded which
    block, so the float sums add up in one order and every run gives the same bits (the same fold as
    :func:`~megadump_zarr.analyse.metrics.compute_metrics`)."""
    total = MetricAccumulator(shape, rtol=plan.rtol, atol=plan.atol, exact=plan.exact)
    for part in partials:
        total.merge(part)
    return total


def _job(plan: PairPlan, a: Any, b: Any, block_bytes: int, locate: Locator | None) -> _Job | dict[str, Any]:
    """The blocks of a pair to compute (the block plan of :func:`~megadump_zarr.analyse.metrics.compute_metrics`),
    or its row when they cannot be planned."""
    try:
        shape = shape_of(a)
        blocks = list(iter_blocks(shape, block_bytes, row_chunks(a) or row_chunks(b)))
    except Exception as exc:
        return _failed_row(plan.row, exc, plan.notes)
    return _Job(a, b, plan, shape, blocks, locate, left=len(blocks))


def _run(
    rows: list[dict[str, Any] | _Job], advance: Callable[[], None] | None, threads: int | None, one_blas_thread: bool
) -> list[dict[str, Any]]:
    """Rows and jobs made rows: every block of every job in one queue for ``threads`` lanes, each job's
    block accumulators merged in block order (:func:`merge_in_order`); a job whose blocks raise gets the
    error of its first failing block in block order, as a one-lane run would. ``advance`` is called once
    per row (from a lane thread for a job). ``one_blas_thread``: BLAS limited to one thread meanwhile
    (:func:`single_threaded_blas`), else left as configured."""
    jobs = {k: job for k, job in enumerate(rows) if isinstance(job, _Job)}
    work = [(k, i) for k, job in jobs.items() for i in range(len(job.blocks))]
    if advance is not None:
        for k, slot in enumerate(rows):
            if not isinstance(slot, _Job) or not slot.blocks:
                advance()
    lock = threading.Lock()
    cursor = [0]  # the next item of ``work``

    def fold(k: int, i: int, stored: tuple[Any, Any] | None) -> None:
        job = jobs[k]
        if job.failed_at is None or i < job.failed_at:  # blocks after a failed one are not needed
            try:
                job.partials[i] = block_metrics(job, i, stored)
            except Exception as exc:
                with lock:
                    if job.failed_at is None or i < job.failed_at:
                        job.failed_at, job.error = i, exc
        with lock:
            job.left -= 1
            finished = job.left == 0
        if finished and advance is not None:
            advance()

    def lane() -> None:
        while True:
            with lock:
                at = cursor[0]
                if at >= len(work):
                    break
                cursor[0] = end = _take(work, at, jobs)
            batch = work[at:end]
            stored = read_batch([(jobs[k], i) for k, i in batch]) if len(batch) > 1 else None
            for n, (k, i) in enumerate(batch):
                fold(k, i, None if stored is None else stored[n])

    lanes = max(1, min(threads or _THREADS, len(work)))
    with single_threaded_blas() if one_blas_thread else contextlib.nullcontext():
        if lanes == 1 or threading.current_thread().name.startswith("megadump-compare"):
            lane()
        else:
            for future in [_pool().submit(lane) for _ in range(lanes)]:
                future.result()
    out: list[dict[str, Any]] = []
    for slot in rows:
        if not isinstance(slot, _Job):
            out.append(slot)
            continue
        job = slot
        if job.error is not None:
            out.append(_failed_row(job.plan.row, job.error, job.plan.notes))
            continue
        try:
            total = merge_in_order(job.shape, job.plan, [job.partials[i] for i in range(len(job.blocks))])
            out.append(metrics_row(job.plan.row, total.result(), job.plan.notes, job.locate))
        except Exception as exc:
            out.append(_failed_row(job.plan.row, exc, job.plan.notes))
    return out


def compare_records(
    pairs: list[RecordPair], advance: Callable[[], None] | None = None, *, threads: int | None = None
) -> list[dict[str, Any]]:
    """The result rows of many record pairs, in order, compared in this process; never raises.

    Every chunk-aligned block of every record goes into one queue, in execution order; ``threads``
    lanes take the next block, read it from both dumps (decoded in the lane, in C with the GIL released:
    :mod:`megadump_zarr.read.chunks`) and fold it into an accumulator of its own; each record's block
    accumulators are merged in block order at the end (:func:`merge_in_order`), so the result does not
    depend on the lanes (``threads=1`` gives the same bits). Each lane holds one block pair at a time
    (a few chunks), whatever the tensor sizes, and no lane waits for another at a record boundary.

    Args:
        pairs: The record pairs (their ``a``/``b``: open dumps or ``DumpSource``).
        advance: Called once per record (for a compared one when it is finished, from a lane thread).
        threads: Lanes (default: one per core, at most 4).
    """
    rows: list[dict[str, Any] | _Job] = []
    partial: dict[int, tuple[int, ...]] = {}  # row -> logical shape of a pair compared on its stored prefix
    for pair in pairs:
        note = "truncated record: NaN where not captured" if pair.truncated else ""
        try:
            dump_a = _open(pair.a)
            prefixes = stored_prefixes(dump_a, _open(pair.b), pair.path, pair.path_b) if pair.truncated else None
            if prefixes is None:
                xa = record_source(dump_a, pair.path, pair.truncated)
                xb = record_source(_open(pair.b), pair.path_b or pair.path, pair.truncated)
            else:
                xa, xb, note = prefixes.a, prefixes.b, prefixes.note
        except Exception as exc:
            rows.append(_failed_row(empty_row(pair.keys, "error", ""), exc, []))
            continue
        if prefixes is not None and prefixes.shape_a != prefixes.shape_b:  # logical shapes differ: not compared
            text = f"shape {_shape_text(prefixes.shape_a)} vs {_shape_text(prefixes.shape_b)}; not compared"
            shapes = dict(shape_a=prefixes.shape_a, shape_b=prefixes.shape_b)
            rows.append(
                empty_row(
                    pair.keys, "shape_mismatch", text, **shapes, dtype_a=prefixes.dtype_a, dtype_b=prefixes.dtype_b
                )
            )
            continue
        if prefixes is not None:
            partial[len(rows)] = prefixes.shape_a
        plan = prepare_pair(pair.keys, xa, xb, rtol=pair.rtol, atol=pair.atol, notes=[note])
        locate = _locator(pair.keys, dump_a, pair.path)
        rows.append(_job(plan, xa, xb, pair.block_bytes, locate) if plan.compute else plan.row)
    out = _run(rows, advance, threads, one_blas_thread=True)
    for k, logical in partial.items():
        as_partial(out[k], logical)
    return out


def compare_arrays(
    pairs: Sequence[ArrayPair | dict[str, Any]],
    advance: Callable[[], None] | None = None,
    *,
    threads: int | None = None,
) -> list[dict[str, Any]]:
    """The result rows of many pairs of array-likes, in order, through the lanes of :func:`compare_records`;
    never raises.

    Row ``k`` is :func:`compare_pair` of ``pairs[k]`` (the same bits: the same blocks, folded on their own
    and merged in block order; ``threads=1`` gives the same bits as any other number of lanes), but every
    block of every pair is read and folded by the next free lane. A dict in ``pairs`` is a row already made
    (a missing name): it is returned as it is.

    BLAS keeps the threads it is configured with (:func:`compare_records` limits it to one), as
    :func:`compare_pair` on the calling thread does: a float64 ``dot`` of more than 10 000 elements is split
    over the BLAS threads, and the split shows in the last bits of the sums (cosine, rmse, euc_dist), so one
    BLAS thread would change them. Concurrent calls from the lanes split the same way.

    Args:
        pairs: The pairs (a dump's tensors against a reference, two collections' tensors), or rows.
        advance: Called once per row (for a compared pair when it is finished, from a lane thread).
        threads: Lanes (default: one per core, at most 4).
    """
    rows: list[dict[str, Any] | _Job] = []
    for pair in pairs:
        if isinstance(pair, dict):
            rows.append(pair)
            continue
        plan = prepare_pair(pair.keys, pair.a, pair.b, rtol=pair.rtol, atol=pair.atol, notes=pair.notes)
        rows.append(_job(plan, pair.a, pair.b, pair.block_bytes, pair.locate) if plan.compute else plan.row)
    return _run(rows, advance, threads, one_blas_thread=False)
