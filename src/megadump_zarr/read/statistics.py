"""Read the per-invocation statistics tables (``invocation_*/statistics``) into the records table.

A statistics-first dump (``mode="statistics" | "nonfinite" | "diff"``) stores one statistics table per
invocation (see :mod:`megadump_zarr.store.statistics`). The records table then shows every record:
records whose payload is stored keep their array row (``payload`` True) and gain the device
``checksum`` and ``element_count``; statistics-only records get a row of their own with ``payload``
False, the device statistics, and as ``path`` the array path the payload would have had (which is
what matches them with the other side of a comparison).

Reading a table costs one small chunk per column; committed windows are read once and cached by the
caller with the rest of the window's rows.
"""

from __future__ import annotations

from collections.abc import Mapping
import json
import math
from typing import Any

import numpy as np
import zarr
from zarr.abc.store import Store

__all__ = ["STATISTICS_COLUMNS", "load_tables", "merge_statistics"]

STATISTICS_GROUP = "statistics"
STATISTICS_COLUMNS = ("payload", "checksum", "element_count")
"""Columns the records table gains (after the other extra columns)."""
_COLUMNS = ("stage", "task_id", "owner_id", "core_type", "core_id", "worker", "io", "index", "name", "param_position",
            "shape", "dtype",
            "path", "payload", "element_count", "nan_count", "inf_count", "min", "max", "mean", "l2norm", "checksum")
_ITEMSIZE = {"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "float16": 2, "bfloat16": 2, "int32": 4,
             "uint32": 4, "float32": 4, "int64": 8, "uint64": 8, "float64": 8, "float8_e4m3fn": 1, "float8_e5m2": 1}


def _table_groups(nodes: Mapping[str, dict[str, Any]]) -> list[str]:
    """Relative paths of the statistics groups of one window (``invocation_x/statistics``)."""
    found = []
    for path, doc in nodes.items():
        parts = path.split("/")
        if len(parts) == 2 and parts[1] == STATISTICS_GROUP and doc.get("node_type") == "group":
            attrs = doc.get("attributes") or {}
            if isinstance(attrs, dict) and "statisticsLayout" in attrs:
                found.append(path)
    return sorted(found)


def load_tables(store: Store, window_key: str, nodes: Mapping[str, dict[str, Any]]) -> list[tuple[str, dict[str, list[Any]]]]:
    """Every statistics table of one window, as ``(invocation group name, {column: values})``.

    Args:
        store: The dump store.
        window_key: The window's key (``rank_0/window_0000``).
        nodes: The window's nodes (see ``read.catalog.window_nodes``).

    Raises:
        ValueError: A table is missing a column, or its columns differ in length (naming the group).
    """
    tables = []
    for path in _table_groups(nodes):
        group = zarr.open_group(store, path=f"{window_key}/{path}", mode="r")
        columns: dict[str, list[Any]] = {}
        for name in _COLUMNS:
            try:
                array = group[name]
            except KeyError:
                raise ValueError(f"statistics table {window_key}/{path} has no column {name!r}") from None
            columns[name] = np.asarray(array[...]).tolist()
        lengths = {len(v) for v in columns.values()}
        if len(lengths) > 1:
            raise ValueError(f"statistics table {window_key}/{path} has columns of different lengths")
        if not _has_checksums(group.attrs):  # e.g. msprobe statistics: the column holds placeholders, not checksums
            columns["checksum"] = [None] * len(columns["checksum"])
        invocation_name = path.split("/")[0]
        # a launch that failed and was kept (on_error="keep"): every record it holds is salvaged, like its arrays
        columns["partial"] = [_launch_failed(nodes, invocation_name)] * len(columns["name"])
        tables.append((invocation_name, columns))
    return tables


def _has_checksums(attrs: Mapping[str, Any]) -> bool:
    """Whether a table's ``checksum`` column holds content checksums (``"checksums": false`` says it does not;
    tables converted from msprobe before that attribute existed are known by their ``source``)."""
    return attrs.get("checksums") is not False and attrs.get("source") != "msprobe statistics task"


def _launch_failed(nodes: Mapping[str, dict[str, Any]], invocation_name: str) -> bool:
    """Whether the invocation's group says its launch failed (``launchFailed: true``)."""
    attrs = (nodes.get(invocation_name) or {}).get("attributes")
    return isinstance(attrs, dict) and attrs.get("launchFailed") is True


def _checksum(value: Any) -> int | None:
    return None if value is None else int(value)


def _none(value: int) -> int | None:
    return None if value == -1 else value


def _float(value: float) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def merge_statistics(window_key: str, status: str, invocations: Mapping[str, dict[str, Any]],
                     tables: list[tuple[str, dict[str, list[Any]]]], columns: dict[str, list[Any]]) -> None:
    """Fold a window's statistics tables into the records table's columns.

    Args:
        window_key: The window's key.
        status: The window's status.
        invocations: Invocation group name -> the invocation's columns (invocation, step, direction,
            kernel, level) and ``rank``/``window``.
        tables: From :func:`load_tables`.
        columns: The records table's column lists (appended to and updated in place).
    """
    by_path = {path: i for i, path in enumerate(columns["path"])}
    for invocation_name, table in tables:
        inv = invocations[invocation_name]
        for i in range(len(table["name"])):
            path = f"{window_key}/{invocation_name}/{table['path'][i]}"
            row = by_path.get(path)
            if table["payload"][i] and row is not None:
                columns["checksum"][row] = _checksum(table["checksum"][i])
                columns["element_count"][row] = int(table["element_count"][i])
                continue
            _append(columns, inv, table, i, path, status, invocation_name, window_key)


def _append(columns: dict[str, list[Any]], inv: dict[str, Any], table: dict[str, list[Any]], i: int, path: str,
            status: str, invocation_name: str, window_key: str) -> None:
    """One statistics-only row."""
    is_l1 = bool(table["stage"][i])
    shape = tuple(int(d) for d in json.loads(table["shape"][i]))
    dtype = table["dtype"][i]
    values: dict[str, Any] = dict.fromkeys(columns)
    values.update(
        rank=inv["rank"], window=inv["window"], invocation=inv["invocation"], step=inv["step"],
        direction=inv["direction"], kernel=inv["kernel"], level=inv["level"] or ("L1" if is_l1 else "L0"),
        stage=table["stage"][i] or None, task_id=_none(table["task_id"][i]) if is_l1 else None,
        owner_id=_none(table["owner_id"][i]), core_type=table["core_type"][i] or None,
        core_id=_none(table["core_id"][i]) if is_l1 else None, worker=_none(table["worker"][i]),
        io=table["io"][i] if is_l1 else None, index=table["index"][i] if is_l1 else None, name=table["name"][i],
        dtype=dtype, shape=shape, stored_shape=(), truncated=False,
        bytes=math.prod(shape) * _ITEMSIZE.get(dtype, 0), stored_bytes=0,
        min=_float(table["min"][i]), max=_float(table["max"][i]), mean=_float(table["mean"][i]),
        l2norm=_float(table["l2norm"][i]), nan_count=int(table["nan_count"][i]), inf_count=int(table["inf_count"][i]),
        path=path, role=None if is_l1 else table["io"][i],
        capture_phase=("before" if table["io"][i] == "input" else "after") if is_l1 else None,
        status=status, invocation_name=invocation_name, param_position=_none(table["param_position"][i]), group=path.rsplit("/", 1)[0],
        payload=False, checksum=_checksum(table["checksum"][i]), element_count=int(table["element_count"][i]),
        partial=bool(table.get("partial", [False] * (i + 1))[i]),
    )
    for name, value in values.items():
        columns[name].append(value)
