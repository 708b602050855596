"""The records table of some windows: one row per stored tensor, built from metadata only.

A window's rows come from its nodes (flat relative path -> ``zarr.json`` document): each record array's
attributes and its invocation and task groups' (:mod:`megadump_zarr.read.group_attrs`); a packed window's packs
give their records' rows one block per record array (:mod:`megadump_zarr.read.pack_records`); statistics tables
add their statistics-only rows (:mod:`megadump_zarr.read.statistics_table`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
import math
from typing import Any, Protocol

import numpy as np
import pandas as pd

from megadump_zarr.layout.dtypes import itemsize
from megadump_zarr.layout.statistics import DIGEST_COLUMN, MD5_COLUMN
from megadump_zarr.read.documents import check_attributes, count_field, int_field, optional_str, shape_field
from megadump_zarr.read.group_attrs import group_attrs as _group_attrs
from megadump_zarr.read.group_attrs import invocation_info as _invocation_info
from megadump_zarr.read.group_attrs import task_info as _task_info
from megadump_zarr.read.pack_checks import PackTable, rest_nodes
from megadump_zarr.read.pack_records import pack_columns
from megadump_zarr.read.statistics_table import STATISTICS_COLUMNS, merge_statistics
from megadump_zarr.read.truncated import stats_scope

__all__ = ["EXTRA_COLUMNS", "RECORD_COLUMNS", "Window", "records_frame"]

RECORD_COLUMNS = (
    "rank",
    "window",
    "invocation",
    "step",
    "direction",
    "kernel",
    "level",
    "stage",
    "task_id",
    "stage_task_index",
    "owner_label",
    "owner_id",
    "core_type",
    "core_id",
    "worker",
    "io",
    "index",
    "name",
    "dtype",
    "shape",
    "stored_shape",
    "truncated",
    "bytes",
    "stored_bytes",
    "min",
    "max",
    "mean",
    "l2norm",
    "nan_count",
    "inf_count",
    "path",
)
"""The records table's required columns, in order."""

EXTRA_COLUMNS = (
    "role",
    "capture_phase",
    "status",
    "param_position",
    "note",
    "invocation_name",
    "group",
    "partial",
    "pack_array",
    "pack_row",
    "stats_scope",
    "zarr_group",
    "variable",
)
"""Columns that follow the required ones: L0 role, capture phase, window status, ABI parameter position,
the record's note, the invocation group's name, the data group's path (relative to the root),
``partial`` (True for a record salvaged from a launch that failed, kept with ``on_error="keep"``) and, for a
record stored in a task-record pack (``layout="packs"``), the pack's record array (``pack_array``, relative
to the root) and the record's row in it (``pack_row``); missing (``None``, NaN once frames are joined) and -1
for every other record; ``stats_scope``: what ``min``/``max``/``mean``/``l2norm``/``nan_count``/``inf_count``
cover, ``"whole"`` (every element of the tensor), ``"prefix"`` (a truncated record without device statistics:
its stored elements only) or None (no statistics). Where its stored values open with plain xarray: ``zarr_group``, the group (relative to
the root) that ``xr.open_zarr`` opens, and ``variable``, the variable in it
(``xr.open_zarr(f"{root}/{zarr_group}")[variable]``, then ``.isel(task=pack_row)`` for a packed record); missing
for a record that stores no payload (statistics-first modes)."""

EXTRA_COLUMNS = (*EXTRA_COLUMNS, *STATISTICS_COLUMNS)  # payload, digest, element_count (read.statistics)
_INT_COLUMNS = (
    "step",
    "task_id",
    "stage_task_index",
    "owner_id",
    "core_id",
    "worker",
    "index",
    "nan_count",
    "inf_count",
    "param_position",
    "bytes",
    "stored_bytes",
)
_FLOAT_COLUMNS = ("min", "max", "mean", "l2norm")


class Window(Protocol):
    """What the records table reads of a window (:class:`~megadump_zarr.read.catalog.WindowInfo`)."""

    rank: int
    window: int
    key: str
    status: str
    nodes: dict[str, dict[str, Any]] | None
    pack_rows: dict[str, tuple[str, int]]
    tables: list[PackTable] | None
    stored: dict[str, dict[str, Any]] | None

    @property
    def level(self) -> str | None: ...


def _stats_value(stats: Mapping[str, Any], key: str) -> float | None:
    value = stats.get(key)
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _window_rows(
    info: Window,
    nodes: Mapping[str, dict[str, Any]],
    columns: dict[str, list[Any]],
    pack_rows: Mapping[str, tuple[str, int]] | None = None,
) -> None:
    """Append one row per stored tensor of a window to ``columns`` (``pack_rows``: where its packed records are,
    ``info.pack_rows`` when not given)."""
    pack_rows = info.pack_rows if pack_rows is None else pack_rows
    invocations: dict[str, dict[str, Any]] = {}
    tasks: dict[str, dict[str, Any]] = {}
    window_level = info.level
    for path, doc in nodes.items():
        if doc.get("node_type") != "array":
            continue
        where = f"{info.key}/{path}/zarr.json"
        attrs = check_attributes(doc, where)
        if not attrs or "name" not in attrs:
            continue  # coordinate arrays carry no record attributes
        parts = path.split("/")
        inv = invocations.get(parts[0])
        if inv is None:
            inv = invocations[parts[0]] = _invocation_info(parts[0], nodes, info.key)
        is_l1 = len(parts) >= 5 and parts[1] == "stages"
        data_type = optional_str(attrs.get("originalDtype"), where, "attributes.originalDtype") or optional_str(
            doc.get("data_type"), where, "data_type"
        )
        size = itemsize(doc.get("data_type"))
        stored_shape = shape_field(doc.get("shape"), where, "shape", size)  # the rest is checked when opened
        actual = attrs.get("actualShape")
        shape = shape_field(actual, where, "attributes.actualShape", size) if actual is not None else stored_shape
        full = count_field(attrs.get("fullBytes"), where, "attributes.fullBytes")
        stored = count_field(attrs.get("storedBytes"), where, "attributes.storedBytes")
        stats = attrs.get("stats") or {}
        if not isinstance(stats, dict):
            raise ValueError(f"{where}: attributes.stats {str(stats)[:60]!r} is not a JSON object")
        columns["stats_scope"].append(stats_scope(attrs, bool(stats)))
        nan_count = count_field(stats.get("nanCount"), where, "attributes.stats.nanCount")
        inf_count = count_field(stats.get("infCount"), where, "attributes.stats.infCount")
        name = attrs["name"]
        if not isinstance(name, str):
            raise ValueError(f"{where}: attributes.name {str(name)[:60]!r} is not a string")
        group = "/".join(parts[:-1])
        if is_l1:
            task = tasks.get(group)
            if task is None:
                task = tasks[group] = _task_info(nodes, "/".join(parts[:4]), info.key)
        else:
            task = _NO_TASK
        row = columns
        row["rank"].append(info.rank)
        row["window"].append(info.window)
        row["invocation"].append(inv["invocation"])
        row["step"].append(inv["step"])
        row["direction"].append(inv["direction"])
        row["kernel"].append(inv["kernel"])
        row["level"].append(inv["level"] or window_level or ("L1" if is_l1 else "L0"))
        for key in (
            "stage",
            "task_id",
            "stage_task_index",
            "owner_label",
            "owner_id",
            "core_type",
            "core_id",
            "worker",
        ):
            row[key].append(task[key])
        row["io"].append(optional_str(attrs.get("io"), where, "attributes.io") if is_l1 else None)
        row["index"].append(int_field(attrs.get("index"), where, "attributes.index") if is_l1 else None)
        row["name"].append(name)
        row["dtype"].append(data_type)
        row["shape"].append(shape)
        row["stored_shape"].append(stored_shape)
        row["truncated"].append(bool(attrs.get("truncated", False)))
        row["bytes"].append(int(full) if full is not None else math.prod(shape) * size)
        row["stored_bytes"].append(int(stored) if stored is not None else math.prod(stored_shape) * size)
        for key in _FLOAT_COLUMNS:
            row[key].append(_stats_value(stats, key))
        row["nan_count"].append(nan_count)
        row["inf_count"].append(inf_count)
        row["path"].append(f"{info.key}/{path}")
        row["role"].append(attrs.get("role"))
        row["capture_phase"].append(attrs.get("capturePhase"))
        row["status"].append(info.status)
        row["param_position"].append(int_field(attrs.get("paramPosition"), where, "attributes.paramPosition"))
        row["note"].append(attrs.get("note") if is_l1 else None)
        row["invocation_name"].append(parts[0])
        row["group"].append(f"{info.key}/{group}")
        row["payload"].append(True)
        row[DIGEST_COLUMN].append(None)  # the device digest comes from a statistics table, when there is one
        row[MD5_COLUMN].append(None)  # msprobe's digest: statistics-only rows of its statistics tables only
        row["element_count"].append(math.prod(shape))
        row["partial"].append(attrs.get("partial") is True)  # salvaged from a failed launch (on_error="keep")
        stored_at = pack_rows.get(row["path"][-1]) if pack_rows else None
        row["pack_array"].append(None if stored_at is None else stored_at[0])
        row["pack_row"].append(-1 if stored_at is None else stored_at[1])
        opened = row["path"][-1] if stored_at is None else stored_at[0]  # the array plain xarray shows
        row["zarr_group"].append(opened.rpartition("/")[0])
        row["variable"].append(opened.rpartition("/")[2])


_NO_TASK = dict.fromkeys(
    ("stage", "task_id", "stage_task_index", "owner_label", "owner_id", "core_type", "core_id", "worker")
)


def _packed_rows(info: Window, nodes: Mapping[str, dict[str, Any]], columns: dict[str, list[Any]]) -> bool:
    """Append the rows of a committed packed window to ``columns``: its stored records one by one, its packs'
    records one block per record array (:func:`~megadump_zarr.read.pack_records.pack_columns`); ``False`` (nothing
    appended) where a value does not fit the table."""
    found: dict[str, list[Any]] = {name: [] for name in columns}
    try:
        _window_rows(info, rest_nodes(nodes), found, {})
        invocations: dict[str, dict[str, Any]] = {}
        for table in info.tables or ():
            name, _, stage = table.pack.split("/")[:3]
            if name not in invocations:
                invocations[name] = _invocation_info(name, nodes, info.key)
            stage_attrs = _group_attrs(nodes, f"{name}/stages/{stage}", info.key)
            block = pack_columns(
                (info.rank, info.window, info.key), table, invocations[name], info.level, info.status, stage_attrs
            )
            for key, values in block.items():
                found[key].extend(values)
    except ValueError:
        return False
    for key, values in found.items():
        columns[key].extend(values)
    return True


def _execution_order(columns: Mapping[str, list[Any]]) -> list[int]:
    """The rows' order by rank, window, invocation, task id, worker, inputs before outputs, port index, ABI
    parameter position, then path (a missing number counts as -1): one stable sort over whole columns."""

    def number(name: str) -> np.ndarray:
        return np.array([-1 if value is None else int(value) for value in columns[name]], dtype=np.int64)

    paths = np.array(columns["path"], dtype=str) if columns["path"] else np.zeros(0, dtype=str)
    outputs = np.array([io == "output" for io in columns["io"]], dtype=bool)
    keys = (paths, number("param_position"), number("index"), outputs, number("worker"), number("task_id"))
    return np.lexsort((*keys, number("invocation"), number("window"), number("rank"))).tolist()


def records_frame(
    windows: Iterable[tuple[Window, Mapping[str, dict[str, Any]]]], tables: Mapping[str, list[Any]] | None = None
) -> pd.DataFrame:
    """The records table of some windows: one row per stored tensor (coordinate arrays excluded).

    Rows are in execution order: rank, window, invocation, task id (the compiler numbers tasks in
    topological stage order and the executor runs them in that order), worker, inputs (captured before
    the task) before outputs, port index; L0 tensors by parameter position. Integer columns that can be missing use pandas' nullable
    ``Int64``; ``min``/``max``/``mean``/``l2norm`` are float64 (NaN when the writer stored no value);
    ``shape``/``stored_shape`` are tuples; ``path`` and ``group`` are relative to the dump root.

    Statistics-first dumps: ``payload`` is False for a statistics-only record (its row comes from the
    invocation's statistics table), ``digest`` is the device record digest (``UInt64``, :mod:`megadump_zarr.layout.digest`; missing
    for tensor-mode records), ``element_count`` the logical element count, ``md5`` msprobe's digest of a
    statistics-only record (``summary_mode: "md5"``; None elsewhere).

    Args:
        windows: ``(window, nodes)`` pairs (see :func:`window_nodes`).
        tables: Window key -> its statistics tables (``read.statistics.load_tables``), when read.
    """
    columns: dict[str, list[Any]] = {name: [] for name in (*RECORD_COLUMNS, *EXTRA_COLUMNS)}
    for info, nodes in windows:
        if info.tables is not None and info.stored is not None:
            nodes = info.stored
            if not _packed_rows(info, nodes, columns):
                task_nodes = getattr(info, "task_nodes", None)  # a packed WindowInfo's per-task tree
                _window_rows(
                    info, task_nodes() if task_nodes is not None else info.nodes or {}, columns
                )  # a value the table cannot hold: named there
        else:
            _window_rows(info, nodes, columns)
        if tables and tables.get(info.key):
            invocations = {
                name: {**_invocation_info(name, nodes), "rank": info.rank, "window": info.window}
                for name, _ in tables[info.key]
            }
            merge_statistics(info.key, info.status, invocations, tables[info.key], columns)
    order = _execution_order(columns)
    data: dict[str, Any] = {}
    for name, values in columns.items():
        values = list(map(values.__getitem__, order))
        if name in ("rank", "window"):
            data[name] = np.array(values, dtype=np.int64)
        elif name == "invocation":
            data[name] = pd.array(values, dtype="Int64")
        elif name == DIGEST_COLUMN:
            data[name] = pd.array(values, dtype="UInt64")
        elif name == "element_count":
            data[name] = pd.array(values, dtype="Int64")
        elif name in _INT_COLUMNS:
            data[name] = pd.array([None if v is None else int(v) for v in values], dtype="Int64")
        elif name in _FLOAT_COLUMNS:
            data[name] = np.array([np.nan if v is None else v for v in values], dtype=np.float64)
        elif name == "pack_row":
            data[name] = np.array([-1 if v is None else int(v) for v in values], dtype=np.int64)
        elif name in ("truncated", "partial", "payload"):
            data[name] = np.array(values, dtype=bool)
        elif name in ("shape", "stored_shape"):
            array = np.empty(len(values), dtype=object)
            array[:] = values
            data[name] = array
        else:
            data[name] = pd.array(values, dtype=object)
    return pd.DataFrame(data, columns=[*RECORD_COLUMNS, *EXTRA_COLUMNS])
