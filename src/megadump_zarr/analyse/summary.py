"""Summary comparison: a record pair where at least one side stored statistics only (``payload`` False).

Without both payloads there is no element-wise comparison; what can be compared is what both sides
know: dtype, shape, NaN/Inf counts, element count, the record digest (:mod:`megadump_zarr.layout.digest`)
and the statistics over finite elements. Rules:

* dtypes of different kinds → ``dtype_mismatch``; shapes that differ → ``shape_mismatch``;
* both digests known and equal (and the element counts) → ``pass``: the bytes are identical;
* both digests known and different: never a pass. Integers and bools → ``fail``; floats holding NaN or
  Inf on a side → ``fail`` (the statistics cover finite elements only, so they cannot show that the
  non-finite elements agree: ``+inf`` against ``-inf`` keeps every one of them); other floats →
  ``fail`` naming the statistics beyond tolerance, or ``differs_within_stats`` when all are within;
* a side without a digest (msprobe statistics): compared by its statistics alone:
  NaN or Inf counts differ → ``fail``; min, max, mean and L2 norm each within ``atol + rtol * |b|``
  (the per-dtype tolerances of :mod:`megadump_zarr.analyse.verdict`, or the caller's; exact for
  integers) → ``pass``, else ``fail`` naming the statistics beyond tolerance.

``max_abs``/``max_rel`` are then the largest absolute/relative difference among those statistics
(not among elements), and ``note`` starts with ``summary:`` so a reader can tell the two apart.
"""

from __future__ import annotations

import math
from typing import Any

from megadump_zarr.analyse.pairs import empty_row
from megadump_zarr.analyse.verdict import WITHIN_STATS, kinds_compatible, resolve_tolerance
from megadump_zarr.layout.statistics import DIGEST_COLUMN, MD5_COLUMN

__all__ = ["SUMMARY_STATISTICS", "is_summary_pair", "summary_row"]

SUMMARY_STATISTICS = ("min", "max", "mean", "l2norm")
"""The statistics a summary comparison checks against the tolerances."""


def _value(row: Any, name: str) -> Any:
    try:
        value = row[name]
    except (KeyError, IndexError):
        return None
    try:
        if value is None or value != value:  # NaN, pandas NA
            return None
    except (TypeError, ValueError):
        return None
    return value


def is_summary_pair(row_a: Any, row_b: Any) -> bool:
    """Whether a matched pair of records rows needs a summary comparison (a side without payload).

    Args:
        row_a: The record's row in dump A (``records()``).
        row_b: Its row in dump B.
    """
    return not (_payload(row_a) and _payload(row_b))


def _payload(row: Any) -> bool:
    """Whether a records row has its payload stored (rows without the column: tensor-mode dumps)."""
    value = _value(row, "payload")
    return True if value is None else bool(value)


def _shape(row: Any) -> tuple[int, ...] | None:
    value = _value(row, "shape")
    return None if value is None else tuple(int(d) for d in value)


def _int(row: Any, name: str) -> int | None:
    value = _value(row, name)
    return None if value is None else int(value)


def summary_row(
    keys: dict[str, Any], row_a: Any, row_b: Any, rtol: float | None = None, atol: float | None = None
) -> dict[str, Any]:
    """The compare result row of a statistics-only (or mixed) pair.

    Args:
        keys: The result's key columns.
        row_a: The record's row in dump A.
        row_b: Its row in dump B.
        rtol: Relative tolerance (None: the dtype's default).
        atol: Absolute tolerance (None: the dtype's default).
    """
    sides = "statistics only in " + " and ".join(name for name, r in (("a", row_a), ("b", row_b)) if not _payload(r))
    dtype_a, dtype_b = str(_value(row_a, "dtype")), str(_value(row_b, "dtype"))
    shape_a, shape_b = _shape(row_a), _shape(row_b)
    counts = {
        "nan_a": _int(row_a, "nan_count"),
        "inf_a": _int(row_a, "inf_count"),
        "nan_b": _int(row_b, "nan_count"),
        "inf_b": _int(row_b, "inf_count"),
    }
    extra = {
        "shape_a": shape_a,
        "shape_b": shape_b,
        "dtype_a": dtype_a,
        "dtype_b": dtype_b,
        "elements": _int(row_a, "element_count"),
        **counts,
    }
    if not kinds_compatible(dtype_a, dtype_b):
        return empty_row(keys, "dtype_mismatch", f"summary: {sides}; dtype {dtype_a} vs {dtype_b}", **extra)
    if shape_a != shape_b:
        return empty_row(keys, "shape_mismatch", f"summary: {sides}; shape {shape_a} vs {shape_b}", **extra)
    try:
        rtol_, atol_, exact = resolve_tolerance(dtype_a, dtype_b, rtol, atol)
    except ValueError as error:
        return empty_row(keys, "error", f"summary: {sides}; {error}", **extra)
    extra.update(rtol=rtol_, atol=atol_)
    mismatch = sum(abs((counts[f"{k}_a"] or 0) - (counts[f"{k}_b"] or 0)) for k in ("nan", "inf"))
    extra["nonfinite_mismatch"] = mismatch
    same_count = _int(row_a, "element_count") == _int(row_b, "element_count")
    md5_a, md5_b = _value(row_a, MD5_COLUMN), _value(row_b, MD5_COLUMN)
    if isinstance(md5_a, str) and isinstance(md5_b, str):  # msprobe summary_mode "md5": its digest decides
        if md5_a == md5_b and same_count:
            return empty_row(
                keys,
                "pass",
                f"summary: {sides}; md5 equal (msprobe's digest of the bytes)",
                **extra,
                max_abs=0.0,
                max_rel=0.0,
                allclose=True,
                mismatches=0,
            )
        return empty_row(
            keys,
            "fail",
            f"summary: {sides}; md5 differs (msprobe's digest of the bytes): the tensors differ",
            **extra,
            allclose=False,
        )
    digest_a, digest_b = _value(row_a, DIGEST_COLUMN), _value(row_b, DIGEST_COLUMN)
    proven = digest_a is not None and digest_b is not None
    if proven and int(digest_a) == int(digest_b) and same_count:
        return empty_row(
            keys,
            "pass",
            f"summary: {sides}; digests equal",
            **extra,
            max_abs=0.0,
            max_rel=0.0,
            allclose=True,
            mismatches=0,
        )
    if proven and exact:
        note = f"summary: {sides}; digest differs ({int(digest_a):#018x} vs {int(digest_b):#018x})"
        return empty_row(keys, "fail", note, **extra, allclose=False)
    reasons = []
    if mismatch:
        reasons.append(
            f"NaN/Inf counts differ ({counts['nan_a']}/{counts['inf_a']} vs {counts['nan_b']}/{counts['inf_b']})"
        )
    max_abs, max_rel, beyond = _statistics_beyond(row_a, row_b, rtol_, atol_)
    if beyond:
        reasons.append(f"{', '.join(beyond)} beyond rtol={rtol_:g}, atol={atol_:g}")
    within = "; ".join(reasons) if reasons else "statistics within tolerance"
    if not proven:
        verdict_ = "fail" if reasons else "pass"
        return empty_row(
            keys,
            verdict_,
            f"summary: {sides}; {within}",
            **extra,
            max_abs=max_abs,
            max_rel=max_rel,
            allclose=not reasons,
        )
    # the bits differ: never a pass; within tolerance only where every element is finite on both sides
    nonfinite = any((value or 0) != 0 for value in counts.values())
    if nonfinite and not reasons:
        within = "statistics within tolerance, but the record holds NaN/Inf, which they do not describe"
    verdict_ = "fail" if reasons or nonfinite else WITHIN_STATS
    note = f"summary: {sides}; digest differs ({int(digest_a):#018x} vs {int(digest_b):#018x}), {within}"
    return empty_row(keys, verdict_, note, **extra, max_abs=max_abs, max_rel=max_rel, allclose=not reasons)


def _statistics_beyond(row_a: Any, row_b: Any, rtol: float, atol: float) -> tuple[float, float, list[str]]:
    """``(max_abs, max_rel, names beyond tolerance)`` of the pair's statistics (a statistic known on one
    side only, or non-finite on a side and not equal, is beyond)."""
    max_abs = max_rel = 0.0
    beyond = []
    for name in SUMMARY_STATISTICS:
        a, b = _value(row_a, name), _value(row_b, name)
        if a is None or b is None:
            if (a is None) != (b is None):
                beyond.append(name)
            continue
        a, b = float(a), float(b)
        if not (math.isfinite(a) and math.isfinite(b)):
            if a != b:
                beyond.append(name)
            continue
        diff = abs(a - b)
        max_abs = max(max_abs, diff)
        if b != 0:
            max_rel = max(max_rel, diff / abs(b))
        elif diff:
            max_rel = math.inf
        if diff > atol + rtol * abs(b):
            beyond.append(name)
    return max_abs, max_rel, beyond
