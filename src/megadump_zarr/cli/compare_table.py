"""The table ``megadump compare`` prints: failures first, one line per record, fitted to the console.

Columns (left out from the right-most priority when the console is narrow, see
:func:`megadump_zarr.cli.render.fit_table`): verdict, name, where (invocation, stage, task, port; parts
every row shares are printed once above), shape, dtype (``a/b`` when they differ), ``1-cos`` in
scientific notation (a cosine of 0.99999 is unreadable once cut), max_abs, max_rel, rmse, mismatches
(exact comparisons), worst (logical index of the largest absolute error and, for stitched L1 tensors,
the owner and core that produced it) and note (shared notes printed once below, repeated ones as
``[k]`` markers).
"""

from __future__ import annotations

import math
from typing import Any

from megadump_zarr.tables import failures_first  # shared with the report
from megadump_zarr.cli.render import Column, Fitted, fit_table, is_missing, location, location_parts, shape_text

__all__ = ["COLUMNS", "compare_table", "failures_first", "one_minus_cos", "worst_text"]

_VERDICT_STYLE = {
    "pass": "green",
    "fail": "bold red",
    "error": "bold magenta",
    "missing": "yellow",
    "differs_within_stats": "bold yellow",
    "shape_mismatch": "bold red",
    "dtype_mismatch": "bold red",
    "missing_data": "bold magenta",
}


def _get(row: Any, key: str) -> Any:
    value = row.get(key) if hasattr(row, "get") else None
    return None if is_missing(value) else value


def _shape(row: Any) -> str:
    a, b = _get(row, "shape_a"), _get(row, "shape_b")
    if a is None:
        return shape_text(b)
    if b is None or tuple(a) == tuple(b):
        return shape_text(a)
    return f"{shape_text(a)} vs {shape_text(b)}"


def _dtype(row: Any) -> str:
    a, b = _get(row, "dtype_a"), _get(row, "dtype_b")
    if a is None or b is None or a == b:
        return str(a if a is not None else b if b is not None else "")
    return f"{a}/{b}"


def one_minus_cos(value: Any) -> str:
    """``1 - cosine`` in scientific notation with 3 significant digits (``0`` when exactly 1)."""
    if is_missing(value):
        return ""
    if isinstance(value, str):
        return value
    v = 1.0 - float(value)
    if math.isnan(v):
        return "nan"
    if v == 0:
        return "0"
    return f"{v:.2e}"


def worst_text(row: Any) -> str:
    """Where the largest absolute error is: ``3,7``, then the owner and core of its record (``o2 MIX5``) and,
    for a stitched tensor (no task of its own), the task that produced it (``3,7 t4 o2 MIX5``)."""
    index = _get(row, "worst_index")
    if index is None:
        return ""
    if isinstance(index, (list, tuple)):
        text = ",".join(str(int(i)) for i in index) or "()"
    else:
        text = str(index)
    owner, core_type, core_id = _get(row, "worst_owner_id"), _get(row, "worst_core_type"), _get(row, "worst_core_id")
    extra = []
    task = _get(row, "worst_task_id")
    if task is not None and _get(row, "task_id") is None:  # a stitched tensor: which task produced it
        extra.append(f"t{int(task)}")
    if owner is not None and int(owner) >= 0:
        extra.append(f"o{int(owner)}")
    if core_type is not None:
        extra.append(f"{core_type}{'' if core_id is None else int(core_id)}")
    return " ".join([text, *extra])


def _mismatches(row: Any) -> str:
    value = _get(row, "mismatches")
    if value is None or _get(row, "verdict") == "pass":
        return ""
    return str(int(value))


_NOT_COMPARED = ("shape_mismatch", "dtype_mismatch", "missing", "missing_data", "error")


NOT_AVAILABLE = "n/a"
"""The cell of a metric that is NaN on a compared record (its NaN/Inf patterns differ)."""


def _metric(key: str) -> Any:
    """A metric cell, blank for a record whose values were not compared (not the NaN its row holds),
    ``n/a`` for a compared record whose metric is NaN (never a number over the finite pairs alone)."""

    def get(r: Any) -> Any:
        if r.get("verdict") in _NOT_COMPARED:
            return None
        value = r.get(key)
        return NOT_AVAILABLE if is_missing(value) and r.get("verdict") is not None else value

    return get


COLUMNS = (
    Column("verdict", style=lambda r: _VERDICT_STYLE.get(str(r.get("verdict")))),
    Column("name", style="bold", elide=True),
    Column("where", location, parts=lambda r: location_parts(r, kernel_with_stage=False)),
    Column("shape", _shape, fmt=str, hoist=True, drop=4),
    Column("dtype", _dtype, fmt=str, hoist=True, drop=1),
    Column("1-cos", _metric("cosine"), key="cosine", justify="right", fmt=one_minus_cos),
    Column("max_abs", _metric("max_abs"), key="max_abs", justify="right"),
    Column("max_rel", _metric("max_rel"), key="max_rel", justify="right", drop=5),
    Column("rmse", _metric("rmse"), key="rmse", justify="right", drop=7),
    Column("mism", _mismatches, key="mismatches", justify="right", fmt=str, drop=6),
    Column("worst", worst_text, key="worst_index", fmt=str, drop=2),  # kept longer than max_rel and note: where it is
    Column("note", footnote=True, drop=3),
)


def compare_table(result: Any, *, width: int, failures_only: bool = False) -> Fitted:
    """The fitted compare table of ``analyse.compare`` results (failures first; ``failures_only`` hides passes)."""
    shown = result[result["verdict"] != "pass"] if failures_only else failures_first(result)
    fitted = fit_table(shown, COLUMNS, width=width)
    if failures_only and len(shown) < len(result):
        fitted.below.append(f"{len(result) - len(shown)} passing records not shown (--failures-only)")
    return fitted
