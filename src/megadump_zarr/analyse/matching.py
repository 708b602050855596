"""The two sides of a comparison: recognising and opening the inputs (dump, path, mapping, Dataset),
selecting and ordering a dump's records, matching records and names between the sides, and the
key columns that identify each compared pair.

Only ``records()``/``tensor()`` results and reference containers are touched here; metrics and
verdicts are :mod:`megadump_zarr.analyse.compare`'s business.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
import os
from typing import Any

import numpy as np
import pandas as pd

from megadump_zarr.analyse.metrics import shape_of

__all__ = [
    "KEY_COLUMNS",
    "align_reference",
    "clean_select",
    "common_keys",
    "execution_order",
    "filter_records",
    "is_dump",
    "is_reference_collection",
    "merged_order",
    "name_filter",
    "open_side",
    "record_keys",
    "record_select",
    "reference_get",
    "reference_names",
    "scalar",
]

KEY_COLUMNS = (
    "rank",
    "window",
    "invocation",
    "step",
    "direction",
    "kernel",
    "level",
    "stage",
    "task_id",
    "worker",
    "owner_id",
    "core_type",
    "core_id",
    "io",
    "index",
    "name",
    "path",
)
"""Columns identifying the compared tensor (None where they do not apply)."""


def is_dump(x: Any) -> bool:
    """Whether ``x`` has the three dump methods this package uses (``records``, ``record_array``, ``tensor``).

    Args:
        x: Either side of a comparison.
    """
    return all(callable(getattr(x, m, None)) for m in ("records", "record_array", "tensor"))


def _is_path(x: Any) -> bool:
    return isinstance(x, (str, os.PathLike))


def open_side(x: Any) -> Any:
    """``x`` itself, or the dump it names when it is a path/URL (opened with ``open_dump``).

    Args:
        x: Either side of a comparison.
    """
    if not _is_path(x):
        return x
    try:
        from megadump_zarr.read import open_dump
    except ImportError as exc:  # pragma: no cover - depends on the read layer being installed
        raise ImportError(f"comparing dump paths needs megadump_zarr.read.open_dump: {exc}") from exc
    return open_dump(x)


def is_reference_collection(x: Any) -> bool:
    """Whether ``x`` is a name → tensor collection (a mapping or an ``xarray.Dataset``).

    Args:
        x: Either side of a comparison.
    """
    import xarray as xr

    return isinstance(x, (Mapping, xr.Dataset))


def reference_names(x: Any) -> list[str]:
    """The tensor names of a reference collection (a Dataset's data variables, a mapping's keys).

    Args:
        x: A mapping or ``xarray.Dataset``.
    """
    import xarray as xr

    if isinstance(x, xr.Dataset):
        return [str(n) for n in x.data_vars]
    return [str(n) for n in x]


def reference_get(x: Any, name: str) -> Any:
    """Tensor ``name`` of a reference collection, or None.

    Args:
        x: A mapping or ``xarray.Dataset``.
        name: The tensor name.
    """
    import xarray as xr

    if isinstance(x, xr.Dataset):
        return x.data_vars[name] if name in x.data_vars else None
    return x.get(name)


def scalar(value: Any) -> Any:
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


def name_filter(names: str | Iterable[str] | None) -> list[str] | None:
    """``compare``'s ``names`` argument as a list (None: no filter).

    Args:
        names: One name, several, or None.
    """
    if names is None:
        return None
    if isinstance(names, str):
        return [names]
    return [str(n) for n in names]


def clean_select(select: dict[str, Any]) -> dict[str, Any]:
    """``select`` without the choices left at None.

    Args:
        select: Record selection keyword arguments.
    """
    return {k: v for k, v in select.items() if v is not None}


_READ_FILTERS = ("owner", "core")
"""Selections that are not ``records()`` columns, read as :func:`megadump_zarr.read.select.filter_mask` reads
them (the same meaning as ``Dump.tensor(owner=, core=)`` and the CLI's ``--owner``/``--core``)."""


def filter_records(records: pd.DataFrame, select: dict[str, Any], names: list[str] | None = None) -> pd.DataFrame:
    """Rows of ``records`` matching ``select`` (equality, or membership for list/tuple/set/range) and ``names``;
    ``owner`` (an owner id) and ``core`` (``5`` or ``"MIX5"``) as in ``Dump.tensor``."""
    mask = pd.Series(True, index=records.index)
    for key, value in select.items():
        if key in _READ_FILTERS and key not in records.columns:  # owner=2, core="MIX5" or 5: as Dump.tensor
            from megadump_zarr.read.select import filter_mask

            mask &= pd.Series(filter_mask(records, key, value), index=records.index)
            continue
        if key not in records.columns:
            raise ValueError(
                f"unknown selection {key!r}; records() has columns {list(records.columns)} "
                f"(or {', '.join(_READ_FILTERS)})"
            )
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
    keys = [
        np.arange(len(records)),
        phase,
        column("worker", -1),
        column("task_id", -1),
        column("invocation", -1),
        column("window", -1),
        column("rank", -1),
    ]
    return records.iloc[np.lexsort(keys)]


def record_select(select: dict[str, Any]) -> dict[str, Any]:
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


def record_keys(row: pd.Series | Mapping[str, Any]) -> dict[str, Any]:
    """The key columns of one ``records()`` row (None where absent or missing).

    Args:
        row: A ``records()`` row (a Series, or a dict of ``to_dict("records")``).
    """
    return {k: scalar(row.get(k)) for k in KEY_COLUMNS}


def common_keys(rows: pd.DataFrame, name: str) -> dict[str, Any]:
    """Key columns shared by every row of ``rows`` (None where they differ)."""
    keys: dict[str, Any] = dict.fromkeys(KEY_COLUMNS)
    for k in KEY_COLUMNS:
        if k in rows.columns and len(rows):
            values = {scalar(v) for v in rows[k]}
            if len(values) == 1:
                keys[k] = values.pop()
    keys["name"] = name
    return keys


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


def align_reference(tensor: Any, ref: Any) -> tuple[Any, str]:
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


def merged_order(keys_a: list[Any], keys_b: list[Any]) -> list[Any]:
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
