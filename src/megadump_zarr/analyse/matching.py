"""Matching the two sides of a comparison: a dump's records in execution order, the records of two dumps
matched by path (:func:`match_records`), the names of a dump and a reference (:func:`reference_order`),
the key columns that identify each compared pair, and a full-length reference aligned with a stitched L1
tensor.

What a side is (dump, reference, array) is :mod:`megadump_zarr.analyse.side`'s business; which records a
selection keeps is :mod:`megadump_zarr.read.select`'s (the one filter engine); metrics and verdicts are
:mod:`megadump_zarr.analyse.pairs`' and :mod:`megadump_zarr.analyse.verdict`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
import math
from typing import Any

import numpy as np
import pandas as pd

from megadump_zarr.analyse.metrics import shape_of

__all__ = [
    "KEY_COLUMNS",
    "RecordMatch",
    "align_reference",
    "common_keys",
    "execution_order",
    "holds_payload",
    "match_records",
    "merged_order",
    "name_filter",
    "record_keys",
    "reference_order",
    "scalar",
    "selected_keys",
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


def holds_payload(row: Mapping[str, Any]) -> bool:
    """Whether a ``records()`` row stored its payload (False: statistics only; a table without the
    ``payload`` column is a tensor-mode dump, every record has one).

    Args:
        row: A ``records()`` row.
    """
    value = scalar(row.get("payload"))
    return True if value is None else bool(value)


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


_LISTS = (list, tuple, set, frozenset, range)


def selected_keys(select: Mapping[str, Any]) -> dict[str, Any]:
    """The key columns a selection names with one value each (``rank=0`` → ``rank``; ``task=3`` → ``task_id``);
    a dump-vs-reference row takes them where its records leave a key unknown. A list of values, a task
    group name, an invocation group name and the filters that are no key column (``owner``, ``core``) name none.

    Args:
        select: The record selection of ``compare`` (None values already left out).
    """
    out = {}
    for key, value in select.items():
        if isinstance(value, _LISTS) or (key in ("task", "invocation") and isinstance(value, str)):
            continue
        column = "task_id" if key == "task" else key
        if column in KEY_COLUMNS:
            out[column] = value
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


@dataclass(frozen=True)
class RecordMatch:
    """One record path of a dump comparison with its ``records()`` row on each side.

    Args:
        path: The record path, relative to both dump roots.
        row_a: Its row in dump A (under test), None when only B has it.
        row_b: Its row in dump B (reference), None when only A has it.
    """

    path: str
    row_a: dict[str, Any] | None
    row_b: dict[str, Any] | None

    def __post_init__(self) -> None:
        if self.row_a is None and self.row_b is None:
            raise ValueError(f"RecordMatch {self.path!r}: row_a and row_b are both None (a record is on a side)")

    @property
    def present(self) -> dict[str, Any]:
        """The row of A when A has the record, else B's."""
        return self.row_a if self.row_a is not None else self.row_b  # type: ignore[return-value]

    @property
    def only(self) -> str | None:
        """``"a"`` or ``"b"`` when one side only has the record, None when both have it."""
        if self.row_a is not None and self.row_b is not None:
            return None
        return "a" if self.row_a is not None else "b"


def match_records(records_a: pd.DataFrame, records_b: pd.DataFrame) -> list[RecordMatch]:
    """The records of two dumps matched by path, in A's execution order with B-only records placed after
    their predecessor in B (:func:`merged_order`).

    Args:
        records_a: Dump A's selected records, in execution order (:func:`execution_order`).
        records_b: Dump B's.
    """
    rows_a = {str(row["path"]): row for row in records_a.to_dict("records")}
    rows_b = {str(row["path"]): row for row in records_b.to_dict("records")}
    return [RecordMatch(path, rows_a.get(path), rows_b.get(path)) for path in merged_order(list(rows_a), list(rows_b))]


def reference_order(records: pd.DataFrame, wanted: list[str]) -> tuple[list[str], set[str]]:
    """The order a dump is compared with a reference in: the wanted names by their first record in
    execution order, names the dump does not hold last (in the order wanted); and the names it holds.

    Args:
        records: The dump's selected records, in execution order.
        wanted: The names to compare.
    """
    first_seen: dict[str, int] = {}
    for position, name in enumerate(records["name"]):
        first_seen.setdefault(str(name), position)
    asked: dict[str, int] = {}
    for position, name in enumerate(wanted):
        asked.setdefault(name, position)
    ordered = sorted(wanted, key=lambda n: (first_seen.get(n, math.inf), asked[n]))
    return ordered, set(first_seen)
