"""Compare dumps with dumps or with eager references; find the first divergence or NaN.

The dump-level functions use only three methods of a dump (``megadump_zarr.read.Dump``):

* ``records()``: a DataFrame, one row per stored tensor, with the key columns (``rank``,
  ``window``, ``invocation``, ``direction``, ``kernel``, ``stage``, ``task_id``, ``worker``, ``io``,
  ``index``, ``name``, ``path`` relative to the dump root, ``capture_phase``) and the stored
  statistics (``nan_count``, ``inf_count``); its row order does not matter: :func:`execution_order`
  sorts it;
* ``record_array(path)``: one record as a lazy DataArray in its logical shape;
* ``tensor(name, **select)``: a named tensor, L0 array or stitched L1 view, as a lazy DataArray.

Arrays are never loaded whole: :mod:`megadump_zarr.analyse.metrics` reads them block by block.
"""

from __future__ import annotations

from collections.abc import Iterable
import contextlib
import math
from typing import Any

import pandas as pd

from megadump_zarr.analyse.matching import (
    KEY_COLUMNS,
    align_reference,
    clean_select,
    common_keys,
    execution_order,
    filter_records,
    is_dump,
    is_reference_collection,
    merged_order,
    name_filter,
    open_side,
    record_keys,
    record_select,
    reference_get,
    reference_names,
    scalar,
)
from megadump_zarr.analyse.metrics import DEFAULT_BLOCK_BYTES, compute_metrics, dtype_name, shape_of
from megadump_zarr.analyse.verdict import verdict

__all__ = ["KEY_COLUMNS", "RESULT_COLUMNS", "compare", "execution_order", "first_divergence", "first_nonfinite"]

METRIC_COLUMNS = (
    "shape_a", "shape_b", "dtype_a", "dtype_b", "elements", "cosine", "max_abs", "max_rel", "rmse",
    "within_0_1pct", "within_0_5pct", "nan_a", "inf_a", "nan_b", "inf_b", "nonfinite_mismatch", "allclose",
    "verdict", "note",
)
RESULT_COLUMNS = KEY_COLUMNS + METRIC_COLUMNS
"""Columns of :func:`compare`'s DataFrame, in order."""

_INT_COLUMNS = ("rank", "window", "invocation", "task_id", "index", "elements", "nan_a", "inf_a", "nan_b", "inf_b",
                "nonfinite_mismatch")
_FLOAT_COLUMNS = ("cosine", "max_abs", "max_rel", "rmse", "within_0_1pct", "within_0_5pct")
_NOT_PASSING = ("fail", "error")


# ---------------------------------------------------------------------------------------------------- helpers
def _empty_row(keys: dict[str, Any], verdict_: str, note: str, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = dict(keys)
    row.update(dict.fromkeys(METRIC_COLUMNS))
    row.update(extra, verdict=verdict_, note=note)
    return row


def _pair_row(keys: dict[str, Any], a: Any, b: Any, *, rtol: float | None, atol: float | None,
              block_bytes: int = DEFAULT_BLOCK_BYTES, notes: Iterable[str] = ()) -> dict[str, Any]:
    """One result row: metrics and verdict of ``a`` against the reference ``b``; never raises."""
    extra_notes = [n for n in notes if n]
    row = _empty_row(keys, "error", "; ".join(extra_notes))
    try:
        shape_a, shape_b = shape_of(a), shape_of(b)
        row.update(shape_a=shape_a, shape_b=shape_b, dtype_a=dtype_name(a), dtype_b=dtype_name(b))
        if shape_a != shape_b:
            row["note"] = "; ".join([f"shape mismatch: {shape_a} vs {shape_b}", *extra_notes])
            return row
        m = compute_metrics(a, b, rtol=rtol, atol=atol, block_bytes=block_bytes)
    except Exception as exc:  # one unreadable tensor must not abort a whole comparison
        row["note"] = "; ".join([f"{type(exc).__name__}: {exc}", *extra_notes])
        return row
    result, reasons = verdict(m)
    notes = list(reasons) + extra_notes
    if row["dtype_a"] != row["dtype_b"]:
        notes.append(f"dtype {row['dtype_a']} vs {row['dtype_b']}")
    if m.elements and not m.finite_pairs:
        notes.append("no finite element pairs")
    row.update(
        elements=m.elements, cosine=m.cosine, max_abs=m.max_abs, max_rel=m.max_rel, rmse=m.rmse,
        within_0_1pct=m.within_0_1pct, within_0_5pct=m.within_0_5pct, nan_a=m.nan_a, inf_a=m.inf_a,
        nan_b=m.nan_b, inf_b=m.inf_b, nonfinite_mismatch=m.nonfinite_mismatch, allclose=m.allclose,
        verdict=result, note="; ".join(notes),
    )
    return row


def _truncation_note(x: Any) -> str:
    attrs = getattr(x, "attrs", None) or {}
    if attrs.get("truncated") or attrs.get("truncatedRecords"):
        return "truncated record(s): NaN where not captured"
    return ""


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=list(RESULT_COLUMNS))
    for col in _INT_COLUMNS:
        df[col] = pd.array([None if scalar(v) is None else int(v) for v in df[col]], dtype="Int64")
    for col in _FLOAT_COLUMNS:
        df[col] = pd.to_numeric(df[col], errors="coerce").astype("float64")
    df["allclose"] = pd.array([None if v is None else bool(v) for v in df["allclose"]], dtype="boolean")
    return df.reset_index(drop=True)


@contextlib.contextmanager
def _progress(enabled: bool, total: int, description: str) -> Any:
    """Yields an ``advance()`` callable; a rich progress bar when enabled."""
    if not enabled:
        yield lambda: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()) as bar:
        task = bar.add_task(description, total=total)
        yield lambda: bar.advance(task)


# ---------------------------------------------------------------------------------------------------- compare
def compare(
    a: Any,
    b: Any,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    names: str | Iterable[str] | None = None,
    progress: bool = False,
    **select: Any,
) -> pd.DataFrame:
    """Compare tensors of ``a`` (under test) with ``b`` (reference); one row per tensor pair.

    Accepted pairs:

    * two dumps (``Dump`` objects, or paths/URLs opened with ``open_dump``): records are matched by
      their path relative to the dump root (that is, by rank, window, invocation, stage, task,
      io, index and name); a record on one side only gives a ``"missing"`` row. ``select`` filters
      ``records()`` (any column; a list/tuple/set value means "any of").
    * a dump and a reference: a mapping name → tensor/array (e.g. tensors of an eager PyTorch run) or
      an ``xarray.Dataset`` (its data variables). Each name is compared with
      ``dump.tensor(name, **select)`` (``select``: rank, window, invocation, stage, io, kernel, task;
      one value each). A stitched L1 tensor holds only the rows its records captured: the reference
      is compared at those global rows (the tensor's first-dimension coordinate).
    * two mappings / Datasets (compared name by name), or two array-likes (one row).

    Rows come in execution order (see :func:`execution_order`: rank, window, invocation, stage groups
    as executed, task, inputs before outputs); named tensors by their first record. The index is that order, so
    :func:`first_divergence` still works after the frame is re-sorted.

    Metrics (see :mod:`megadump_zarr.analyse.metrics`) are computed block by block over finite pairs;
    the verdict rules are in :mod:`megadump_zarr.analyse.verdict`. ``verdict`` is one of ``"pass"``,
    ``"fail"``, ``"error"`` (shape mismatch or unreadable tensor; see ``note``) and ``"missing"``.

    Args:
        a: The dump (or tensors) under test; a path or URL is opened with ``open_dump``.
        b: The reference dump, mapping, Dataset or array.
        rtol: Optional relative tolerance: also fail unless ``|a - b| <= atol + rtol * |b|`` at every
            finite pair (``allclose`` column). A missing ``atol`` counts as 0.
        atol: Optional absolute tolerance (a missing ``rtol`` counts as 0).
        names: Only these tensor names (default: all records, or every name of the reference).
        progress: Show a rich progress bar.
        **select: Record selection, e.g. ``rank=0, invocation=2, stage="expert_up", io="output"``.

    Returns:
        A DataFrame with columns :data:`RESULT_COLUMNS`.
    """
    a, b = open_side(a), open_side(b)
    name_list = name_filter(names)
    select = clean_select(select)
    tol = dict(rtol=rtol, atol=atol)
    if is_dump(a) and is_dump(b):
        return _compare_dumps(a, b, name_list, select, progress, tol)
    if is_dump(a):
        if not is_reference_collection(b):
            raise TypeError(
                f"a dump can be compared with a dump, a mapping or an xarray.Dataset, not {type(b).__name__}")
        return _compare_dump_reference(a, b, name_list, select, progress, tol)
    if is_dump(b):
        raise TypeError("pass the dump under test first and the reference second: compare(dump, reference)")
    if select:
        raise TypeError(f"selection {sorted(select)} only applies to dumps")
    if is_reference_collection(a) and is_reference_collection(b):
        return _compare_collections(a, b, name_list, progress, tol)
    label = name_list[0] if name_list and len(name_list) == 1 else None
    return _frame([_pair_row({**dict.fromkeys(KEY_COLUMNS), "name": label}, a, b, **tol)])


def _compare_dumps(a: Any, b: Any, names: list[str] | None, select: dict[str, Any], progress: bool,
                   tol: dict[str, Any]) -> pd.DataFrame:
    ra = execution_order(filter_records(a.records(), record_select(select), names))
    rb = execution_order(filter_records(b.records(), record_select(select), names))
    rows_a = {str(p): row for p, (_, row) in zip(ra["path"], ra.iterrows())}
    rows_b = {str(p): row for p, (_, row) in zip(rb["path"], rb.iterrows())}
    order = merged_order(list(rows_a), list(rows_b))
    rows: list[dict[str, Any]] = []
    with _progress(progress, len(order), "comparing records") as advance:
        for path in order:
            ra_row, rb_row = rows_a.get(path), rows_b.get(path)
            keys = record_keys(ra_row if ra_row is not None else rb_row)
            if ra_row is None or rb_row is None:
                present = ra_row if ra_row is not None else rb_row
                side = "a" if ra_row is not None else "b"
                extra = {}
                if "shape" in present.index:
                    extra[f"shape_{side}"] = tuple(int(s) for s in present["shape"])
                if "dtype" in present.index:
                    extra[f"dtype_{side}"] = scalar(present["dtype"])
                rows.append(_empty_row(keys, "missing", f"only in dump {side}", **extra))
            else:
                try:
                    xa, xb = a.record_array(path), b.record_array(path)
                except Exception as exc:
                    rows.append(_empty_row(keys, "error", f"{type(exc).__name__}: {exc}"))
                else:
                    truncated = any(bool(scalar(r.get("truncated"))) for r in (ra_row, rb_row))
                    note = "truncated record: NaN where not captured" if truncated else ""
                    rows.append(_pair_row(keys, xa, xb, notes=[note], **tol))
            advance()
    return _frame(rows)


def _compare_dump_reference(dump: Any, reference: Any, names: list[str] | None, select: dict[str, Any],
                            progress: bool, tol: dict[str, Any]) -> pd.DataFrame:
    records = execution_order(filter_records(dump.records(), record_select(select)))
    wanted = names if names is not None else reference_names(reference)
    record_names = list(records["name"])
    first_seen = {}
    for position, name in enumerate(record_names):
        first_seen.setdefault(str(name), position)
    ordered = sorted(wanted, key=lambda n: (first_seen.get(n, math.inf), wanted.index(n)))
    rows: list[dict[str, Any]] = []
    with _progress(progress, len(ordered), "comparing tensors") as advance:
        for name in ordered:
            keys = common_keys(records[records["name"] == name], name)
            for k, v in record_select(select).items():
                if k in keys and keys[k] is None and not isinstance(v, (list, tuple, set, frozenset, range)):
                    keys[k] = v
            ref = reference_get(reference, name)
            if ref is None:
                rows.append(_empty_row(keys, "missing", "not in the reference"))
            elif name not in first_seen:
                rows.append(_empty_row(keys, "missing", "not in the dump", shape_b=shape_of(ref),
                                       dtype_b=dtype_name(ref)))
            else:
                try:
                    tensor = dump.tensor(name, **select)
                except Exception as exc:
                    rows.append(_empty_row(keys, "error", f"{type(exc).__name__}: {exc}"))
                else:
                    ref, aligned = align_reference(tensor, ref)
                    rows.append(_pair_row(keys, tensor, ref, notes=[aligned, _truncation_note(tensor)], **tol))
            advance()
    return _frame(rows)


def _compare_collections(a: Any, b: Any, names: list[str] | None, progress: bool,
                         tol: dict[str, Any]) -> pd.DataFrame:
    if names is None:
        names_a, names_b = reference_names(a), reference_names(b)
        names = names_a + [n for n in names_b if n not in set(names_a)]
    rows: list[dict[str, Any]] = []
    with _progress(progress, len(names), "comparing tensors") as advance:
        for name in names:
            keys = {**dict.fromkeys(KEY_COLUMNS), "name": name}
            xa, xb = reference_get(a, name), reference_get(b, name)
            if xa is None or xb is None:
                where = "in neither" if xa is None and xb is None else f"only in {'a' if xb is None else 'b'}"
                rows.append(_empty_row(keys, "missing", where))
            else:
                rows.append(_pair_row(keys, xa, xb, **tol))
            advance()
    return _frame(rows)


# ---------------------------------------------------------------------------------------------------- searches
def first_divergence(result: pd.DataFrame, *, include_missing: bool = False) -> pd.Series | None:
    """The first row of a :func:`compare` result, in execution order, that does not pass.

    "Not passing" means verdict ``"fail"`` or ``"error"`` (and ``"missing"`` when
    ``include_missing``). Execution order is the frame's index as :func:`compare` made it, so a
    re-sorted result gives the same answer.

    Args:
        result: A :func:`compare` result.
        include_missing: Count records present on one side only as divergences.

    Returns:
        The row (a Series whose ``name`` is its index), or None when everything passes.
    """
    bad = _NOT_PASSING + (("missing",) if include_missing else ())
    ordered = result.sort_index(kind="stable")
    hits = ordered[ordered["verdict"].isin(bad)]
    return None if hits.empty else hits.iloc[0]


def first_nonfinite(dump: Any, **select: Any) -> pd.Series | None:
    """The first record, in execution order, whose stored statistics count a NaN or an Inf.

    Only ``records()`` is read (the ``nan_count``/``inf_count`` statistics written with the dump); no
    tensor data is loaded.

    Args:
        dump: A dump, or a path/URL opened with ``open_dump``.
        **select: Record selection as in :func:`compare` (e.g. ``rank=0, direction="forward"``).

    Returns:
        The row of ``records()`` (a Series), or None when no selected record holds a NaN or Inf.

    Raises:
        ValueError: The selected records carry no statistics (the dump was written with ``stats=False``).
    """
    records = execution_order(filter_records(open_side(dump).records(), record_select(clean_select(select))))
    if records.empty:
        return None
    nan = pd.to_numeric(records["nan_count"], errors="coerce")
    inf = pd.to_numeric(records["inf_count"], errors="coerce")
    if nan.isna().all() and inf.isna().all():
        raise ValueError("the selected records have no NaN/Inf statistics (dump written with stats=False?)")
    hits = records[(nan.fillna(0) > 0) | (inf.fillna(0) > 0)]
    return None if hits.empty else hits.iloc[0]

