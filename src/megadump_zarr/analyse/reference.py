"""A dump compared with named tensors (a mapping or an ``xarray.Dataset``): ``compare(dump, reference)``.

Each name is compared with ``dump.tensor(name, **select)``, in the dump's execution order. A stitched L1
tensor holds only the rows its records captured: the reference is taken at those global rows
(:func:`~megadump_zarr.analyse.matching.align_reference`), and a failing element is traced to the task,
owner and core that produced it from the tensor's per-row coordinates.

:func:`reference_pairs` opens each name's tensor (lazily: metadata and the row coordinates) and makes it an
:class:`~megadump_zarr.analyse.lanes.ArrayPair`; :func:`~megadump_zarr.analyse.lanes.compare_arrays` then
reads every chunk-aligned block of every name in one queue of lanes, the lanes of a dump-against-dump
comparison, and merges each name's blocks in block order (the bits of :func:`~megadump_zarr.analyse.pairs.compare_pair`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

from megadump_zarr.analyse.matching import align_reference, common_keys, reference_order, scalar, selected_keys
from megadump_zarr.analyse.metrics import dtype_name, shape_of
from megadump_zarr.analyse.lanes import ArrayPair
from megadump_zarr.analyse.pairs import compare_pair, empty_row
from megadump_zarr.analyse.side import DumpSide, ReferenceSide

__all__ = ["reference_pairs"]


def reference_pairs(
    dump: DumpSide,
    reference: ReferenceSide,
    names: list[str] | None,
    select: dict[str, Any],
    tol: dict[str, Any],
) -> list[dict[str, Any] | ArrayPair]:
    """A dump compared with named tensors: one slot per row, a row already made (a name one side lacks, a
    tensor the dump cannot give) or the pair to compare (:func:`~megadump_zarr.analyse.lanes.compare_arrays`).

    The names come in the dump's execution order (names it does not hold last), each compared with the
    dump's tensor of that name (``Dump.tensor(name, **select)``); a name one side lacks is a ``missing`` row.

    Args:
        dump: The dump under test.
        reference: The named tensors.
        names: The names to compare; None: every name of the reference.
        select: The record selection (None values left out).
        tol: ``rtol`` and ``atol`` (None: the dtype default).
    """
    records = dump.records(select)
    ordered, in_dump = reference_order(records, names if names is not None else reference.names())
    chosen = selected_keys(select)
    slots: list[dict[str, Any] | ArrayPair] = []
    for name in ordered:
        mine = records[records["name"] == name]
        keys = common_keys(mine, name)
        keys.update({k: v for k, v in chosen.items() if keys[k] is None})
        ref = reference.get(name)
        if ref is None:
            slots.append(empty_row(keys, "missing", "not in the reference"))
        elif name not in in_dump:
            slots.append(empty_row(keys, "missing", "not in the dump", shape_b=shape_of(ref), dtype_b=dtype_name(ref)))
        else:
            slots.append(_tensor_pair(dump, name, select, keys, ref, mine, tol))
    return slots


def _tensor_pair(
    dump: DumpSide,
    name: str,
    select: dict[str, Any],
    keys: dict[str, Any],
    ref: Any,
    mine: pd.DataFrame,
    tol: dict[str, Any],
) -> dict[str, Any] | ArrayPair:
    """The pair (or the row, when the dump cannot give the tensor) of one name a dump and a reference both hold."""
    try:
        tensor = dump.tensor(name, **select)
    except Exception as exc:
        return compare_pair(keys, _Raising(exc), ref)
    ref, aligned = align_reference(tensor, ref)
    return ArrayPair(
        keys,
        tensor,
        ref,
        tol.get("rtol"),
        tol.get("atol"),
        (aligned, _truncation_note(tensor)),
        _stitched_locator(tensor, mine),
    )


class _Raising:
    """An array-like whose reading raises ``exc`` (so :func:`compare_pair` classifies the failure)."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    @property
    def shape(self) -> Any:
        raise self.exc


def _truncation_note(x: Any) -> str:
    attrs = getattr(x, "attrs", None) or {}
    if attrs.get("truncated") or attrs.get("truncatedRecords"):
        return "truncated record(s): NaN where not captured"
    return ""


def _stitched_locator(tensor: Any, records: pd.DataFrame) -> Callable[[tuple[int, ...]], dict[str, Any]] | None:
    """Worst element → producing task/owner/core, from a stitched L1 tensor's per-row coordinates."""
    import numpy as np

    if getattr(tensor, "attrs", {}).get("level") != "L1" or not getattr(tensor, "dims", ()):
        return None
    dim = tensor.dims[0]
    coords = {}
    for name in ("task_id", "owner_id", "core_id"):
        if name in tensor.coords and tensor.coords[name].dims == (dim,):
            coords[name] = np.asarray(tensor.coords[name].values)
    core_types = {}
    if "task_id" in records.columns and "core_type" in records.columns:
        for task, core_type in zip(records["task_id"], records["core_type"]):
            if scalar(task) is not None:
                core_types[int(task)] = scalar(core_type)

    def locate(index: tuple[int, ...]) -> dict[str, Any]:
        row = int(index[0])
        out: dict[str, Any] = {}
        for name, values in coords.items():
            value = int(values[row])
            out[f"worst_{name}"] = value if value >= 0 else None
        task = out.get("worst_task_id")
        if task is not None:
            out["worst_core_type"] = core_types.get(task)
        return out

    return locate
