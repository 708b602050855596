"""The records table of some windows: one row per stored tensor, built from metadata only.

A window's rows come from its nodes (flat relative path -> ``zarr.json`` document): each record array's
attributes and its invocation and task groups' (:mod:`megadump_zarr.read.group_attrs`); a packed window's packs
give their records' rows one block per record array (:mod:`megadump_zarr.read.pack_records`); statistics tables
add their statistics-only rows (:mod:`megadump_zarr.read.statistics_table`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
import gc
from typing import Any, Protocol

import numpy as np
import pandas as pd

from megadump_zarr.layout.statistics import DIGEST_COLUMN
from megadump_zarr.read.group_attrs import group_attrs, invocation_info
from megadump_zarr.read.pack_checks import PackTable, rest_nodes
from megadump_zarr.read.pack_records import pack_columns
from megadump_zarr.read.statistics_table import STATISTICS_COLUMNS, merge_statistics
from megadump_zarr.read.window_rows import FLOAT_COLUMNS, RowsWindow, window_rows

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


class Window(RowsWindow, Protocol):
    """What the records table reads of a window (:class:`~megadump_zarr.read.catalog.WindowInfo`)."""

    nodes: dict[str, dict[str, Any]] | None
    pack_rows: dict[str, tuple[str, int]]
    tables: list[PackTable] | None
    stored: dict[str, dict[str, Any]] | None


def _window_rows(
    info: Window,
    nodes: Mapping[str, dict[str, Any]],
    columns: dict[str, list[Any]],
    pack_rows: Mapping[str, tuple[str, int]] | None = None,
) -> None:
    """Append one row per stored tensor of a window to ``columns`` (``pack_rows``: where its packed records are,
    ``info.pack_rows`` when not given)."""
    block = window_rows(info, nodes, info.pack_rows if pack_rows is None else pack_rows)
    for key, values in block.items():
        columns[key].extend(values)


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
                invocations[name] = invocation_info(name, nodes, info.key)
            stage_attrs = group_attrs(nodes, f"{name}/stages/{stage}", info.key)
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
    paused = gc.isenabled()
    if paused:  # every row built here lives in the table: a collection frees none, and rescans the window's documents
        gc.disable()
    try:
        return _frame(windows, tables)
    finally:
        if paused:
            gc.enable()


def _frame(
    windows: Iterable[tuple[Window, Mapping[str, dict[str, Any]]]], tables: Mapping[str, list[Any]] | None
) -> pd.DataFrame:
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
                name: {**invocation_info(name, nodes), "rank": info.rank, "window": info.window}
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
            data[name] = _int64(values)
        elif name in FLOAT_COLUMNS:
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


def _int64(values: list[Any]) -> Any:
    """A nullable ``Int64`` column of whole numbers (``None``: missing); a column of Python ints in one conversion."""
    if set(map(type, values)) <= {int}:
        try:
            return pd.arrays.IntegerArray(np.array(values, dtype=np.int64), np.zeros(len(values), dtype=bool))
        except OverflowError:
            pass  # beyond int64: refused below, as any other column
    return pd.array([None if v is None else int(v) for v in values], dtype="Int64")
