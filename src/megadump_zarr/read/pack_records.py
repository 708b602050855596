"""A committed packed window's records, built from its packs' arrays along ``task`` (one block of rows per record
array of a pack, never a document per record).

:func:`pack_tables` reads every pack of a window (one concurrent batch of its arrays along ``task``), decodes them
(:func:`~megadump_zarr.read.pack_columns.decode_columns`) and checks, with whole-column numpy reads, everything the
rows must satisfy to stand for task groups: ids, row bounds against the records' shapes and offsets, group names
unique in the window. It answers ``None`` where a check fails: the catalogue then describes the window through
:mod:`megadump_zarr.read.pack_rows`, which names the problem. :func:`pack_columns` gives the records table's columns
of one pack's records, value for value what the catalogue gives a record of a task group.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
import math
from typing import Any

import numpy as np

from megadump_zarr.layout.packs import (
    CORE_TYPE_ARRAY,
    NONE,
    RECORD_ATTRIBUTES_ATTR,
    STATISTICS,
    TASK_ARRAY,
    TASK_COLUMNS,
    TILE_ROWS,
    offset_array,
    row_bound_arrays,
    stats_array,
)
from megadump_zarr.layout.paths import task_dir
from megadump_zarr.layout.statistics import DIGEST_COLUMN, MD5_COLUMN
from megadump_zarr.read.documents import count_field, int_field, itemsize, optional_str, shape_field
from megadump_zarr.read.pack_columns import column_keys, decode_columns
from megadump_zarr.read.pack_nodes import PACK, PACK_PATH, PACK_TASK, Fetch
from megadump_zarr.read.truncated import stats_scope

__all__ = ["PackTable", "pack_columns", "pack_tables", "rest_nodes"]

_FLOATS = ("min", "max", "mean", "l2norm")


@dataclass(frozen=True)
class PackTable:
    """One pack of a window, decoded and checked.

    Args:
        pack: The pack's path relative to the window (``invocation_.../stages/{stage}/pack_0000``).
        count: Its rows (``taskCount``).
        shared: What its tasks hold alike (``taskAttributes``).
        columns: Its arrays along ``task`` (component -> values).
        records: Its record arrays' documents (component -> document).
        groups: Each row's task group name (``task_000003``, ``task_000003_worker_001``).
    """

    pack: str
    count: int
    shared: dict[str, Any]
    columns: dict[str, np.ndarray]
    records: dict[str, dict[str, Any]]
    groups: list[str]

    def __post_init__(self) -> None:
        if len(self.groups) != self.count:
            raise ValueError(f"PackTable.groups: {len(self.groups)} names for {self.count} rows")


def _packs(nodes: Mapping[str, Any]) -> dict[str, dict[str, dict[str, Any]]] | None:
    """Pack path -> its nodes (the pack group's own among them); ``None`` when a node below a pack belongs to
    none the window lists (a pack without its task id array)."""
    packs: dict[str, dict[str, dict[str, Any]]] = {}
    for path, node in nodes.items():
        match = PACK_TASK.match(path)
        if match and isinstance(node, dict) and node.get("node_type") == "array":
            packs[match.group(1)] = {}
    for path, node in nodes.items():
        match = PACK_PATH.match(path) if PACK.match(path) else None
        if match is None:
            continue
        if match.group(1) not in packs or not isinstance(node, dict):
            return None
        packs[match.group(1)][path] = node
    return packs


def rest_nodes(nodes: Mapping[str, Any]) -> dict[str, Any]:
    """A window's nodes that are not at or below a pack (invocation groups, stored arrays, statistics tables)."""
    return {path: node for path, node in nodes.items() if not (PACK.match(path) and PACK_PATH.match(path))}


def pack_tables(window: str, nodes: Mapping[str, Any], fetch: Fetch) -> list[PackTable] | None:
    """Every pack of a committed window, decoded and checked; ``None`` where anything fails (a malformed pack, a
    row the task groups it stands for could not hold, a group name twice): :mod:`megadump_zarr.read.pack_rows`
    then names it.

    Args:
        window: The window key.
        nodes: Its consolidated nodes (path relative to the window -> document).
        fetch: Reads keys relative to the root (the packs' arrays along ``task``, one batch).
    """
    packs = _packs(nodes)
    if packs is None:
        return None
    root = f"{window}/" if window else ""
    keys = {(pack, name): root + key for pack in sorted(packs) for name, key in column_keys(pack, packs[pack]).items()}
    fetched = dict(zip(keys, fetch(list(keys.values())))) if keys else {}
    tables = []
    seen: set[str] = set()
    for pack in sorted(packs):
        chunks = {name: raw for (owner, name), raw in fetched.items() if owner == pack}
        try:
            count, shared, columns, records = decode_columns(pack, packs[pack], chunks, root + pack)
            groups = _groups(count, shared, columns, records)
        except ValueError:
            return None
        if groups is None:
            return None
        stage = pack.rpartition("/")[0]
        paths = {f"{stage}/{group}" for group in groups}
        if len(paths) != count or paths & seen:
            return None  # a task group twice, in one pack or two
        seen |= paths
        tables.append(PackTable(pack, count, shared, columns, records, groups))
    stored = {"/".join(path.split("/")[:4]) for path in rest_nodes(nodes)}
    return None if stored & seen else tables  # a task group both stored and packed


def _holds(shared: Mapping[str, Any], path: tuple[str, ...]) -> bool:
    holder: Any = shared
    for step in path[:-1]:
        holder = holder.get(step) if isinstance(holder, dict) else None
    return isinstance(holder, dict)


def _groups(
    count: int, shared: dict[str, Any], columns: Mapping[str, np.ndarray], records: Mapping[str, dict[str, Any]]
) -> list[str] | None:
    """Each row's task group name, after every check of the rows (``None``: one fails)."""
    for name, path in TASK_COLUMNS:
        if name in columns:
            values = columns[name]
            if values.dtype.kind != "i" or values.ndim != 1 or bool(np.any(values < NONE)) or not _holds(shared, path):
                return None
    _, start, stop = TILE_ROWS
    if (start in columns) != (stop in columns):
        return None
    if CORE_TYPE_ARRAY in columns and columns[CORE_TYPE_ARRAY].dtype.kind != "U":
        return None
    ids = columns[TASK_ARRAY]
    workers = columns.get("worker_id", np.full(count, NONE))
    cores = columns.get("core_id", np.full(count, NONE))
    if bool(np.any(ids < 0)) or bool(np.any((workers != NONE) & (cores < 0))):
        return None
    if not _records_hold(count, columns, records):
        return None
    return [
        task_dir(t) if w == NONE else task_dir(t, c) for t, w, c in zip(ids.tolist(), workers.tolist(), cores.tolist())
    ]


def _records_hold(count: int, columns: Mapping[str, np.ndarray], records: Mapping[str, dict[str, Any]]) -> bool:
    """The pack's records are what task groups hold: their documents, offsets and statistics, and each row
    coordinate's bounds against the records along it (their length, and a whole-row slice's first row)."""
    dims: set[str] = set()
    for name, doc in records.items():
        shared = doc["attributes"][RECORD_ATTRIBUTES_ATTR]
        if not isinstance(shared, dict) or not _sharded(doc, count):
            return False
        offsets = columns.get(offset_array(name))
        if offsets is not None and (offsets.dtype.kind != "i" or offsets.ndim != 1):
            return False
        stats = columns.get(stats_array(name))
        if stats is not None:
            if stats.dtype.kind != "f" or stats.shape != (count, len(STATISTICS)):
                return False
            counts = stats[:, [i for i, key in enumerate(STATISTICS) if key.endswith("Count")]]
            if not bool(np.all((counts >= 0) & (counts <= 2**53) & (counts == np.trunc(counts)))):
                return False
        names = doc.get("dimension_names")
        if isinstance(names, list) and len(names) > 1 and isinstance(names[1], str):
            dims.add(names[1])
    coordinates = [dim for dim in dims if any(name in columns for name in row_bound_arrays(dim))]
    for dim in coordinates:  # (both bounds of each: decode_columns checks it)
        starts, stops = (columns[name] for name in row_bound_arrays(dim))
        if starts.dtype.kind != "i" or stops.dtype.kind != "i" or starts.ndim != 1 or stops.ndim != 1:
            return False
        if bool(np.any(stops < starts)):
            return False
        for name, doc in records.items():
            names = doc.get("dimension_names") or []
            if dim in names[2:]:
                return False  # a row coordinate must be no record's later dimension
            if len(names) < 2 or names[1] != dim:
                continue
            if bool(np.any(stops - starts != doc["shape"][1])):
                return False
            shared = doc["attributes"][RECORD_ATTRIBUTES_ATTR]
            if not shared.get("truncated") and not _first_rows_hold(
                shared, doc, columns.get(offset_array(name)), starts
            ):
                return False
    return True


def _sharded(doc: dict[str, Any], count: int) -> bool:
    """A record array's document is ``count`` rows of one record each, sharded (index at the end)."""
    shape = doc.get("shape")
    if not isinstance(shape, list) or len(shape) < 2 or shape[0] != count:
        return False
    try:
        (sharding,) = doc.get("codecs")
        config = sharding["configuration"]
        inner, shard = list(config["chunk_shape"]), list(doc["chunk_grid"]["configuration"]["chunk_shape"])
        list(config["codecs"])
        ok = sharding["name"] == "sharding_indexed" and config.get("index_location", "end") == "end"
    except (TypeError, ValueError, KeyError):
        return False
    return (
        ok
        and inner == [1, *shape[1:]]
        and len(shard) == len(shape)
        and shard[1:] == shape[1:]
        and isinstance(shard[0], int)
        and shard[0] >= 1
    )


def _first_rows_hold(
    shared: dict[str, Any], doc: dict[str, Any], offsets: np.ndarray | None, starts: np.ndarray
) -> bool:
    """Each row's whole-row slice (where its record is one) starts at its row coordinate's start (the writer's
    rule, ``read.pack_nodes.first_row``)."""
    actual, declared = shared.get("actualShape"), shared.get("declaredShape")
    shape = doc["shape"][1:]
    if (
        offsets is None
        or not isinstance(actual, list)
        or not isinstance(declared, list)
        or not actual
        or len(actual) != len(declared)
        or list(actual[1:]) != list(declared[1:])
        or list(actual) != list(shape)
    ):
        return True
    try:
        row_bytes = math.prod(int(d) for d in actual[1:]) * itemsize(doc.get("data_type"))
    except (TypeError, ValueError):
        return False
    if row_bytes <= 0:
        return True
    whole = (offsets != NONE) & (offsets % row_bytes == 0)
    return not bool(np.any(whole & (offsets // row_bytes != starts)))


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
