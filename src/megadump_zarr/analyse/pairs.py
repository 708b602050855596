"""One compared pair: how it is compared (:func:`compare_pair`, the single dispatch point) and its result row.

:func:`prepare_pair` decides, for two array-likes, which verdict applies: ``dtype_mismatch`` (kinds
differ), ``shape_mismatch``, or the metrics and rules of :mod:`megadump_zarr.analyse.verdict` (exact for
integers and bools, tolerances by dtype for floats); a missing or corrupt chunk
(:class:`~megadump_zarr.read.errors.DumpIntegrityError`) gives ``missing_data`` naming the key, anything
else that stops the comparison ``error`` (:func:`failed_row`). :func:`metrics_row` turns metrics into the
row's columns (:data:`METRIC_COLUMNS`) and verdict. A new way of comparing a pair (statistics-only records,
for example) is one more branch here.

Many pairs are compared together, block by block, in the lanes of :mod:`megadump_zarr.analyse.lanes`;
the records of two dumps in :mod:`megadump_zarr.analyse.record_pairs`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from megadump_zarr.analyse.metrics import DEFAULT_BLOCK_BYTES, TensorMetrics, compute_metrics, dtype_name, shape_of
from megadump_zarr.analyse.verdict import dtype_kind, resolve_tolerance, verdict

__all__ = [
    "METRIC_COLUMNS",
    "Locator",
    "PairPlan",
    "compare_pair",
    "empty_row",
    "failed_row",
    "metrics_row",
    "prepare_pair",
    "shape_text",
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


def shape_text(shape: tuple[int, ...]) -> str:
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


def failed_row(row: dict[str, Any], exc: BaseException, notes: list[str]) -> dict[str, Any]:
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
                note="; ".join([f"shape {shape_text(shape_a)} vs {shape_text(shape_b)}; not compared", *extra_notes]),
            )
            return PairPlan(row, extra_notes)
        tol_rtol, tol_atol, exact = resolve_tolerance(dtype_a, dtype_b, rtol, atol)
    except Exception as exc:  # one unreadable tensor must not abort a whole comparison
        return PairPlan(failed_row(row, exc, extra_notes), extra_notes)
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
        return failed_row(plan.row, exc, plan.notes)
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
