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

from collections.abc import Iterable, Mapping
import contextlib
import math
import os
from typing import Any

import numpy as np
import pandas as pd

from megadump_zarr.analyse.metrics import DEFAULT_BLOCK_BYTES, compute_metrics, dtype_name, shape_of
from megadump_zarr.analyse.verdict import verdict

__all__ = ["KEY_COLUMNS", "RESULT_COLUMNS", "compare", "execution_order", "first_divergence", "first_nonfinite"]

KEY_COLUMNS = ("rank", "window", "invocation", "direction", "kernel", "stage", "task_id", "io", "index", "name", "path")
"""Columns identifying the compared tensor (None where they do not apply)."""

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
def _is_dump(x: Any) -> bool:
    return all(callable(getattr(x, m, None)) for m in ("records", "record_array", "tensor"))


def _is_path(x: Any) -> bool:
    return isinstance(x, (str, os.PathLike))


def _open(x: Any) -> Any:
    if not _is_path(x):
        return x
    try:
        from megadump_zarr.read import open_dump
    except ImportError as exc:  # pragma: no cover - depends on the read layer being installed
        raise ImportError(f"comparing dump paths needs megadump_zarr.read.open_dump: {exc}") from exc
    return open_dump(x)


def _is_reference_collection(x: Any) -> bool:
    import xarray as xr

    return isinstance(x, (Mapping, xr.Dataset))


def _reference_names(x: Any) -> list[str]:
    import xarray as xr

    if isinstance(x, xr.Dataset):
        return [str(n) for n in x.data_vars]
    return [str(n) for n in x]


def _reference_get(x: Any, name: str) -> Any:
    import xarray as xr

    if isinstance(x, xr.Dataset):
        return x.data_vars[name] if name in x.data_vars else None
    return x.get(name)


def _scalar(value: Any) -> Any:
    """A plain Python value for a key cell (NaN / NA → None)."""
    if value is None:
        return None
    try:
        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        pass
    if isinstance(value, np.generic):
        return value.item()
    return value


def _name_filter(names: str | Iterable[str] | None) -> list[str] | None:
    if names is None:
        return None
    if isinstance(names, str):
        return [names]
    return [str(n) for n in names]


def _clean_select(select: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in select.items() if v is not None}


def _filter_records(records: pd.DataFrame, select: dict[str, Any], names: list[str] | None = None) -> pd.DataFrame:
    """Rows of ``records`` matching ``select`` (equality, or membership for list/tuple/set/range) and ``names``."""
    mask = pd.Series(True, index=records.index)
    for key, value in select.items():
        if key not in records.columns:
            raise ValueError(f"unknown selection {key!r}; records() has columns {list(records.columns)}")
        if isinstance(value, (list, tuple, set, frozenset, range)):
            mask &= records[key].isin(list(value))
        else:
            mask &= records[key] == value
    if names is not None:
        mask &= records["name"].isin(names)
    return records[mask.fillna(False).astype(bool)]


_PHASES = {"before": 0, "input": 0, "after": 1, "output": 1}


def execution_order(records: pd.DataFrame) -> pd.DataFrame:
    """``records`` stably sorted into execution order.

    The key is (rank, window, invocation, task id, worker, capture phase), ties kept in the given
    order. Task ids are assigned in the kernel graph's topological order and tasks run in id order,
    so this is "stage groups in the order they were executed, then task"; within a task (or an L0
    invocation) tensors captured before the task ran (inputs) come before those captured after it
    (outputs); an ``aiv_pipeline`` task's workers run one after the other. A ``records()`` table that
    is already in execution order is returned unchanged.

    Args:
        records: A ``records()`` table (or a filtered part of it).
    """
    if records.empty:
        return records

    def column(name: str, fill: float) -> np.ndarray:
        if name not in records.columns:
            return np.full(len(records), fill)
        return pd.to_numeric(records[name], errors="coerce").astype("float64").fillna(fill).to_numpy()

    if "capture_phase" in records.columns:
        phase_source = records["capture_phase"]
    elif "io" in records.columns:
        phase_source = records["io"]
    else:
        phase_source = pd.Series([None] * len(records), index=records.index)
    phase = np.array([_PHASES.get(v, 0) if isinstance(v, str) else 0 for v in phase_source], dtype=np.float64)
    keys = [np.arange(len(records)), phase, column("worker", -1), column("task_id", -1), column("invocation", -1),
            column("window", -1), column("rank", -1)]
    return records.iloc[np.lexsort(keys)]


def _record_select(select: dict[str, Any]) -> dict[str, Any]:
    """``Dump.tensor`` selection arguments as ``records()`` column filters."""
    out = {}
    for key, value in select.items():
        if key == "task":
            key = "task_id" if not isinstance(value, str) else "group"
            if isinstance(value, str):
                continue  # a task group name; tensor() resolves it
        elif key == "invocation" and isinstance(value, str):
            key = "invocation_name"
        out[key] = value
    return out


def _record_keys(row: pd.Series) -> dict[str, Any]:
    return {k: _scalar(row[k]) if k in row.index else None for k in KEY_COLUMNS}


def _common_keys(rows: pd.DataFrame, name: str) -> dict[str, Any]:
    """Key columns shared by every row of ``rows`` (None where they differ)."""
    keys: dict[str, Any] = dict.fromkeys(KEY_COLUMNS)
    for k in KEY_COLUMNS:
        if k in rows.columns and len(rows):
            values = {_scalar(v) for v in rows[k]}
            if len(values) == 1:
                keys[k] = values.pop()
    keys["name"] = name
    return keys


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


def _take_rows(x: Any, rows: np.ndarray) -> Any:
    """``x`` restricted to the given indices along axis 0 (lazy inputs stay lazy)."""
    import xarray as xr

    if isinstance(x, xr.DataArray):
        return x.isel({x.dims[0]: rows})
    if type(x).__module__.startswith("torch"):
        import torch

        return x[torch.as_tensor(rows, device=x.device)]
    if hasattr(x, "oindex"):  # zarr arrays: orthogonal (integer array) indexing
        return x.oindex[rows]
    if hasattr(x, "shape") and hasattr(x, "__getitem__"):
        return x[rows]
    return np.asarray(x)[rows]


def _align_reference(tensor: Any, ref: Any) -> tuple[Any, str]:
    """Align a full-length reference with a stitched L1 tensor that holds only the captured rows.

    ``Dump.tensor`` stitches an L1 tensor from its task records: rows no selected task captured are
    absent, and the global row index is the coordinate named like the first dimension. The
    reference's rows are taken at those indices, so a dump of some owners/tasks compares with a whole
    eager tensor.
    """
    import xarray as xr

    if not isinstance(tensor, xr.DataArray) or tensor.attrs.get("level") != "L1" or not tensor.dims:
        return ref, ""
    dim = tensor.dims[0]
    shape_t, shape_r = shape_of(tensor), shape_of(ref)
    if dim not in tensor.coords or not shape_r or shape_t[1:] != shape_r[1:]:
        return ref, ""
    rows = np.asarray(tensor.coords[dim].values)
    if rows.dtype.kind not in "iu":
        return ref, ""
    n = shape_r[0]
    if rows.size == n and np.array_equal(rows, np.arange(n)):
        return ref, ""
    if rows.size and (rows.min() < 0 or rows.max() >= n):
        return ref, ""
    return _take_rows(ref, rows.astype(np.int64)), f"reference rows aligned to the {rows.size} captured rows of {n}"


def _truncation_note(x: Any) -> str:
    attrs = getattr(x, "attrs", None) or {}
    if attrs.get("truncated") or attrs.get("truncatedRecords"):
        return "truncated record(s): NaN where not captured"
    return ""


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=list(RESULT_COLUMNS))
    for col in _INT_COLUMNS:
        df[col] = pd.array([None if _scalar(v) is None else int(v) for v in df[col]], dtype="Int64")
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


def _merged_order(keys_a: list[Any], keys_b: list[Any]) -> list[Any]:
    """``keys_a`` in order, with keys found only in ``keys_b`` placed after their predecessor in ``keys_b``."""
    in_a = set(keys_a)
    after: dict[Any, list[Any]] = {}
    previous = None
    for key in keys_b:
        if key in in_a:
            previous = key
        else:
            after.setdefault(previous, []).append(key)
    order = list(after.get(None, []))
    for key in keys_a:
        order.append(key)
        order.extend(after.get(key, []))
    return order


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
    a, b = _open(a), _open(b)
    name_list = _name_filter(names)
    select = _clean_select(select)
    tol = dict(rtol=rtol, atol=atol)
    if _is_dump(a) and _is_dump(b):
        return _compare_dumps(a, b, name_list, select, progress, tol)
    if _is_dump(a):
        if not _is_reference_collection(b):
            raise TypeError(
                f"a dump can be compared with a dump, a mapping or an xarray.Dataset, not {type(b).__name__}")
        return _compare_dump_reference(a, b, name_list, select, progress, tol)
    if _is_dump(b):
        raise TypeError("pass the dump under test first and the reference second: compare(dump, reference)")
    if select:
        raise TypeError(f"selection {sorted(select)} only applies to dumps")
    if _is_reference_collection(a) and _is_reference_collection(b):
        return _compare_collections(a, b, name_list, progress, tol)
    label = name_list[0] if name_list and len(name_list) == 1 else None
    return _frame([_pair_row({**dict.fromkeys(KEY_COLUMNS), "name": label}, a, b, **tol)])


def _compare_dumps(a: Any, b: Any, names: list[str] | None, select: dict[str, Any], progress: bool,
                   tol: dict[str, Any]) -> pd.DataFrame:
    ra = execution_order(_filter_records(a.records(), _record_select(select), names))
    rb = execution_order(_filter_records(b.records(), _record_select(select), names))
    rows_a = {str(p): row for p, (_, row) in zip(ra["path"], ra.iterrows())}
    rows_b = {str(p): row for p, (_, row) in zip(rb["path"], rb.iterrows())}
    order = _merged_order(list(rows_a), list(rows_b))
    rows: list[dict[str, Any]] = []
    with _progress(progress, len(order), "comparing records") as advance:
        for path in order:
            ra_row, rb_row = rows_a.get(path), rows_b.get(path)
            keys = _record_keys(ra_row if ra_row is not None else rb_row)
            if ra_row is None or rb_row is None:
                present = ra_row if ra_row is not None else rb_row
                side = "a" if ra_row is not None else "b"
                extra = {}
                if "shape" in present.index:
                    extra[f"shape_{side}"] = tuple(int(s) for s in present["shape"])
                if "dtype" in present.index:
                    extra[f"dtype_{side}"] = _scalar(present["dtype"])
                rows.append(_empty_row(keys, "missing", f"only in dump {side}", **extra))
            else:
                try:
                    xa, xb = a.record_array(path), b.record_array(path)
                except Exception as exc:
                    rows.append(_empty_row(keys, "error", f"{type(exc).__name__}: {exc}"))
                else:
                    truncated = any(bool(_scalar(r.get("truncated"))) for r in (ra_row, rb_row))
                    note = "truncated record: NaN where not captured" if truncated else ""
                    rows.append(_pair_row(keys, xa, xb, notes=[note], **tol))
            advance()
    return _frame(rows)


def _compare_dump_reference(dump: Any, reference: Any, names: list[str] | None, select: dict[str, Any],
                            progress: bool, tol: dict[str, Any]) -> pd.DataFrame:
    records = execution_order(_filter_records(dump.records(), _record_select(select)))
    wanted = names if names is not None else _reference_names(reference)
    record_names = list(records["name"])
    first_seen = {}
    for position, name in enumerate(record_names):
        first_seen.setdefault(str(name), position)
    ordered = sorted(wanted, key=lambda n: (first_seen.get(n, math.inf), wanted.index(n)))
    rows: list[dict[str, Any]] = []
    with _progress(progress, len(ordered), "comparing tensors") as advance:
        for name in ordered:
            keys = _common_keys(records[records["name"] == name], name)
            for k, v in _record_select(select).items():
                if k in keys and keys[k] is None and not isinstance(v, (list, tuple, set, frozenset, range)):
                    keys[k] = v
            ref = _reference_get(reference, name)
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
                    ref, aligned = _align_reference(tensor, ref)
                    rows.append(_pair_row(keys, tensor, ref, notes=[aligned, _truncation_note(tensor)], **tol))
            advance()
    return _frame(rows)


def _compare_collections(a: Any, b: Any, names: list[str] | None, progress: bool,
                         tol: dict[str, Any]) -> pd.DataFrame:
    if names is None:
        names_a, names_b = _reference_names(a), _reference_names(b)
        names = names_a + [n for n in names_b if n not in set(names_a)]
    rows: list[dict[str, Any]] = []
    with _progress(progress, len(names), "comparing tensors") as advance:
        for name in names:
            keys = {**dict.fromkeys(KEY_COLUMNS), "name": name}
            xa, xb = _reference_get(a, name), _reference_get(b, name)
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
    records = execution_order(_filter_records(_open(dump).records(), _record_select(_clean_select(select))))
    if records.empty:
        return None
    nan = pd.to_numeric(records["nan_count"], errors="coerce")
    inf = pd.to_numeric(records["inf_count"], errors="coerce")
    if nan.isna().all() and inf.isna().all():
        raise ValueError("the selected records have no NaN/Inf statistics (dump written with stats=False?)")
    hits = records[(nan.fillna(0) > 0) | (inf.fillna(0) > 0)]
    return None if hits.empty else hits.iloc[0]

