"""A committed packed window's records, built from its packs' arrays along ``task``: one block of rows per record
array of a pack, never a document per record.

:func:`pack_columns` gives the records table's columns of one checked pack's records
(:class:`~megadump_zarr.read.pack_checks.PackTable`), value for value what the catalogue gives a record of a task
group.
"""

from __future__ import annotations

from collections.abc import Mapping
import math
from typing import Any

import numpy as np

from megadump_zarr.layout.packs import (
    CORE_TYPE_ARRAY,
    NONE,
    RECORD_ATTRIBUTES_ATTR,
    STATISTICS,
    TASK_ARRAY,
    stats_array,
)
from megadump_zarr.layout.statistics import DIGEST_COLUMN, MD5_COLUMN
from megadump_zarr.read.documents import count_field, int_field, itemsize, optional_str, shape_field
from megadump_zarr.read.pack_checks import PackTable
from megadump_zarr.read.truncated import stats_scope

__all__ = ["pack_columns"]

_FLOATS = ("min", "max", "mean", "l2norm")


def _nullable(values: np.ndarray) -> list[int | None]:
    return [None if v == NONE else v for v in values.tolist()]


def _task_values(table: PackTable, where: str, stage_attrs: Mapping[str, Any], stage: str) -> dict[str, list[Any]]:
    """The records table's task columns of each row of a pack (what ``read.catalog`` reads of a task group)."""
    shared, columns, n = table.shared, table.columns, table.count
    owner = shared.get("owner")
    if owner is not None and not isinstance(owner, dict):
        raise ValueError(f"{where}: attributes.owner {str(owner)[:60]!r} is not a JSON object")
    owner = owner or {}

    def per_task(column: str, value: Any, field: str) -> list[Any]:
        if column in columns:
            return _nullable(columns[column])
        return [int_field(value, where, field)] * n

    return {
        "stage": [optional_str(shared.get("stage", stage_attrs.get("stage", stage)), where, "attributes.stage")] * n,
        "task_id": columns[TASK_ARRAY].tolist(),
        "stage_task_index": per_task("stage_task_index", shared.get("stageTaskIndex"), "attributes.stageTaskIndex"),
        "owner_label": [optional_str(owner.get("label"), where, "attributes.owner.label")] * n,
        "owner_id": per_task("owner_id", owner.get("id"), "attributes.owner.id"),
        "core_type": columns[CORE_TYPE_ARRAY].tolist()
        if CORE_TYPE_ARRAY in columns
        else [optional_str(shared.get("coreType"), where, "attributes.coreType")] * n,
        "core_id": per_task("core_id", shared.get("coreId"), "attributes.coreId"),
        "worker": per_task("worker_id", shared.get("workerId"), "attributes.workerId"),
    }


def pack_columns(
    place: tuple[int, int, str],
    table: PackTable,
    invocation: Mapping[str, Any],
    level: str | None,
    status: str,
    stage_attrs: Mapping[str, Any],
) -> dict[str, list[Any]]:
    """The records table's columns (name -> one value per record) of every record of one pack.

    Args:
        place: The window's ``(rank, window index, key)``.
        table: The pack.
        invocation: The columns of its invocation (``invocation``, ``step``, ``direction``, ``kernel``, ``level``).
        level: The window's level (``None``: unknown).
        status: The window's status.
        stage_attrs: Its stage group's attributes.

    Raises:
        ValueError: A record or task attribute the records table cannot hold (naming the field).
    """
    rank, index, window = place
    stage = table.pack.rpartition("/")[0]
    inv_name, _, stage_component = stage.split("/")
    n = table.count
    group_paths = [f"{window}/{stage}/{group}" for group in table.groups]
    tasks = _task_values(table, f"{group_paths[0]}/zarr.json" if n else window, stage_attrs, stage_component)
    found: dict[str, list[Any]] = {}
    for component in sorted(table.records):
        doc = table.records[component]
        attrs = doc["attributes"][RECORD_ATTRIBUTES_ATTR]
        where = f"{group_paths[0]}/{component}/zarr.json" if n else window
        if "name" not in attrs:
            continue  # not a record (as a stored array without attributes.name)
        name = attrs["name"]
        if not isinstance(name, str):
            raise ValueError(f"{where}: attributes.name {str(name)[:60]!r} is not a string")
        size = itemsize(doc.get("data_type"))
        stored_shape = shape_field(doc["shape"][1:], where, "shape", size)
        actual = attrs.get("actualShape")
        shape = shape_field(actual, where, "attributes.actualShape", size) if actual is not None else stored_shape
        full = count_field(attrs.get("fullBytes"), where, "attributes.fullBytes")
        stored = count_field(attrs.get("storedBytes"), where, "attributes.storedBytes")
        dtype = optional_str(attrs.get("originalDtype"), where, "attributes.originalDtype") or optional_str(
            doc.get("data_type"), where, "data_type"
        )
        block = {
            "rank": [rank] * n,
            "window": [index] * n,
            "invocation": [invocation["invocation"]] * n,
            "step": [invocation["step"]] * n,
            "direction": [invocation["direction"]] * n,
            "kernel": [invocation["kernel"]] * n,
            "level": [invocation["level"] or level or "L1"] * n,
            **tasks,
            "io": [optional_str(attrs.get("io"), where, "attributes.io")] * n,
            "index": [int_field(attrs.get("index"), where, "attributes.index")] * n,
            "name": [name] * n,
            "dtype": [dtype] * n,
            "shape": [shape] * n,
            "stored_shape": [stored_shape] * n,
            "truncated": [bool(attrs.get("truncated", False))] * n,
            "bytes": [int(full) if full is not None else math.prod(shape) * size] * n,
            "stored_bytes": [int(stored) if stored is not None else math.prod(stored_shape) * size] * n,
            **_stats_values(table, component, attrs, where),
            "path": [f"{group}/{component}" for group in group_paths],
            "role": [attrs.get("role")] * n,
            "capture_phase": [attrs.get("capturePhase")] * n,
            "status": [status] * n,
            "param_position": [int_field(attrs.get("paramPosition"), where, "attributes.paramPosition")] * n,
            "note": [attrs.get("note")] * n,
            "invocation_name": [inv_name] * n,
            "group": group_paths,
            "payload": [True] * n,
            DIGEST_COLUMN: [None] * n,
            MD5_COLUMN: [None] * n,
            "element_count": [math.prod(shape)] * n,
            "partial": [attrs.get("partial") is True] * n,
            "pack_array": [f"{window}/{table.pack}/{component}"] * n,
            "pack_row": list(range(n)),
            "zarr_group": [f"{window}/{table.pack}"] * n,
            "variable": [component] * n,
        }
        for key, values in block.items():
            found.setdefault(key, []).extend(values)
    return found


def _stats_values(table: PackTable, component: str, attrs: Mapping[str, Any], where: str) -> dict[str, list[Any]]:
    """The statistics columns of a pack's record (its ``{record}_stats`` rows, else what its attributes hold)."""
    n = table.count
    stats = table.columns.get(stats_array(component))
    if stats is None:
        held = attrs.get("stats") or {}
        if not isinstance(held, dict):
            raise ValueError(f"{where}: attributes.stats {str(held)[:60]!r} is not a JSON object")
        found: dict[str, list[Any]] = {"stats_scope": [stats_scope(dict(attrs), bool(held))] * n}
        for key in _FLOATS:
            value = held.get(key)
            try:
                value = None if value is None or isinstance(value, bool) else float(value)
            except (TypeError, ValueError):
                value = None
            found[key] = [value] * n
        found["nan_count"] = [count_field(held.get("nanCount"), where, "attributes.stats.nanCount")] * n
        found["inf_count"] = [count_field(held.get("infCount"), where, "attributes.stats.infCount")] * n
        return found
    found = {"stats_scope": [stats_scope(dict(attrs), True)] * n}
    for i, key in enumerate(STATISTICS):
        values = stats[:, i]
        if key in _FLOATS:
            found[key] = values.tolist()  # NaN stays NaN: the table's float columns hold missing as NaN
        else:
            found["nan_count" if key == "nanCount" else "inf_count"] = [
                None if v != v else int(v) for v in values.tolist()
            ]
    return found
