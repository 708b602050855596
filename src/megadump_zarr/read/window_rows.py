"""The records-table rows of a window's record arrays, read from its nodes a whole column at a time.

One pass over a window's nodes (flat relative path -> ``zarr.json`` document) keeps its record arrays (those whose
attributes carry a ``name``); each field is then read for every record at once and checked as a column (types,
int64 ranges, shapes), with the checks of :mod:`megadump_zarr.read.documents`. A value a check refuses is named as
a record-by-record read names it: the first record in node order that holds one, and its first such field in the
order :func:`check_in_order` reads them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import repeat
import math
from operator import itemgetter
from typing import Any, Protocol

from megadump_zarr.layout.dtypes import itemsize
from megadump_zarr.layout.statistics import DIGEST_COLUMN, MD5_COLUMN
from megadump_zarr.read.documents import (
    INT64_MAX,
    check_attributes,
    count_field,
    int_field,
    optional_str,
    shape_field,
)
from megadump_zarr.read.group_attrs import invocation_info, task_info
from megadump_zarr.read.truncated import stats_scope

__all__ = ["FLOAT_COLUMNS", "TASK_COLUMNS", "RowsWindow", "check_in_order", "stats_value", "window_rows"]

FLOAT_COLUMNS = ("min", "max", "mean", "l2norm")
"""The statistics columns read from a record's ``attributes.stats`` as floats."""

TASK_COLUMNS = ("stage", "task_id", "stage_task_index", "owner_label", "owner_id", "core_type", "core_id", "worker")
"""The columns a record takes from its L1 task group (missing for an L0 record)."""

_RECORD_FIELDS = (  # what a record array's attributes give its row
    "name",
    "originalDtype",
    "actualShape",
    "fullBytes",
    "storedBytes",
    "stats",
    "io",
    "index",
    "paramPosition",
    "truncated",
    "partial",
    "role",
    "capturePhase",
    "note",
)
_STATS_FIELDS = ("nanCount", "infCount", *FLOAT_COLUMNS)
_INVOCATION_COLUMNS = ("invocation", "step", "direction", "kernel", "level")
_NO_TASK = dict.fromkeys(TASK_COLUMNS)
_NONE = type(None)
_INT_TYPES = frozenset((int, _NONE))
_STR_TYPES = frozenset((str, _NONE))


class RowsWindow(Protocol):
    """What the rows read of a window (:class:`~megadump_zarr.read.catalog.WindowInfo`)."""

    rank: int
    window: int
    key: str
    status: str

    @property
    def level(self) -> str | None: ...


def stats_value(value: Any) -> float | None:
    """A statistic as the records table holds it: a number as a float, anything else missing.

    Args:
        value: The value stored in ``attributes.stats`` (``None`` when absent).
    """
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _stats(attrs: Mapping[str, Any], where: str) -> dict[str, Any]:
    stats = attrs.get("stats") or {}
    if not isinstance(stats, dict):
        raise ValueError(f"{where}: attributes.stats {str(stats)[:60]!r} is not a JSON object")
    return stats


def _name(attrs: Mapping[str, Any], where: str) -> str:
    name = attrs["name"]
    if not isinstance(name, str):
        raise ValueError(f"{where}: attributes.name {str(name)[:60]!r} is not a string")
    return name


def check_in_order(info: RowsWindow, nodes: Mapping[str, dict[str, Any]]) -> None:
    """Read a window's records one by one, each field in turn, keeping nothing: the first value refused raises.

    The order every check of :func:`window_rows` names its problem in: records in node order; in each, its
    attributes, its invocation group (the first time), data type, shape, ``actualShape``, byte counts, ``stats``,
    ``nanCount``/``infCount``, ``name``, its task group (the first time), ``io``, ``index``, the statistics,
    ``paramPosition``.

    Args:
        info: The window.
        nodes: Its nodes.
    """
    invocations: set[str] = set()
    tasks: set[str] = set()
    for path, doc in nodes.items():
        if doc.get("node_type") != "array":
            continue
        where = f"{info.key}/{path}/zarr.json"
        attrs = check_attributes(doc, where)
        if not attrs or "name" not in attrs:
            continue
        parts = path.split("/")
        if parts[0] not in invocations:
            invocation_info(parts[0], nodes, info.key)
            invocations.add(parts[0])
        is_l1 = len(parts) >= 5 and parts[1] == "stages"
        if not optional_str(attrs.get("originalDtype"), where, "attributes.originalDtype"):
            optional_str(doc.get("data_type"), where, "data_type")
        size = itemsize(doc.get("data_type"))
        shape_field(doc.get("shape"), where, "shape", size)
        if attrs.get("actualShape") is not None:
            shape_field(attrs.get("actualShape"), where, "attributes.actualShape", size)
        count_field(attrs.get("fullBytes"), where, "attributes.fullBytes")
        count_field(attrs.get("storedBytes"), where, "attributes.storedBytes")
        stats = _stats(attrs, where)
        count_field(stats.get("nanCount"), where, "attributes.stats.nanCount")
        count_field(stats.get("infCount"), where, "attributes.stats.infCount")
        _name(attrs, where)
        group = path.rpartition("/")[0]
        if is_l1:
            if group not in tasks:
                task_info(nodes, "/".join(parts[:4]), info.key)
                tasks.add(group)
            optional_str(attrs.get("io"), where, "attributes.io")
            int_field(attrs.get("index"), where, "attributes.index")
        for key in FLOAT_COLUMNS:
            stats_value(stats.get(key))
        int_field(attrs.get("paramPosition"), where, "attributes.paramPosition")


def window_rows(
    info: RowsWindow, nodes: Mapping[str, dict[str, Any]], pack_rows: Mapping[str, tuple[str, int]]
) -> dict[str, list[Any]]:
    """The rows of a window's record arrays, column by column (the records table's columns, in node order).

    Args:
        info: The window.
        nodes: Its nodes (coordinate arrays, which carry no ``name``, give no row).
        pack_rows: Record path (relative to the root) -> ``(pack array path, row)`` of its packed records.

    Raises:
        ValueError: Naming the document, field and value of the first record (in node order) a check refuses.
    """
    try:
        return _columns(info, nodes, pack_rows)
    except (ValueError, TypeError, OverflowError):
        check_in_order(info, nodes)  # the first problem as a record-by-record read meets it
        raise


def _columns(
    info: RowsWindow, nodes: Mapping[str, dict[str, Any]], pack_rows: Mapping[str, tuple[str, int]]
) -> dict[str, list[Any]]:
    key = info.key
    paths: list[str] = []
    docs: list[dict[str, Any]] = []
    attrs: list[dict[str, Any]] = []
    for path, doc in nodes.items():
        if doc.get("node_type") != "array":
            continue
        found = doc.get("attributes")
        if found is None:
            continue  # coordinate arrays carry no record attributes
        if not isinstance(found, dict):
            check_attributes(doc, f"{key}/{path}/zarr.json")
        if "name" in found:
            paths.append(path)
            docs.append(doc)
            attrs.append(found)

    def where(i: int) -> str:
        return f"{key}/{paths[i]}/zarr.json"

    n = len(paths)
    names = [path.partition("/")[0] for path in paths]
    invocations = {name: invocation_info(name, nodes, key) for name in dict.fromkeys(names)}
    groups = [path.rpartition("/")[0] for path in paths]
    is_l1 = [len(p) >= 4 and p[1] == "stages" for p in map(str.split, groups, repeat("/", n), repeat(4, n))]
    # every field of every record in one pass, then one list per field
    (record_names, original, actual, full, stored, stats, io, index, param, truncated, partial, role, phase, note) = (
        _transpose([tuple(map(a.get, _RECORD_FIELDS)) for a in attrs], len(_RECORD_FIELDS))
    )
    data_types, raw_shapes = _transpose([(d.get("data_type"), d.get("shape")) for d in docs], 2)

    _check(original, _STR_TYPES, where, lambda v, w: optional_str(v, w, "attributes.originalDtype"))
    fallback = [None if o else t for o, t in zip(original, data_types)]  # read where no originalDtype is
    _check(fallback, _STR_TYPES, where, lambda v, w: optional_str(v, w, "data_type"))
    named = {t: itemsize(t) for t in set([t for t in data_types if type(t) is str])}  # each data type sized once
    sizes = [named[t] if type(t) is str else itemsize(t) for t in data_types]
    stored_shapes = _shapes(raw_shapes, sizes, where, "shape")
    if actual.count(None) == n:
        shapes = stored_shapes
    else:
        given = _shapes([() if v is None else v for v in actual], sizes, where, "attributes.actualShape")
        shapes = [stored if v is None else shape for v, stored, shape in zip(actual, stored_shapes, given)]
    _ints(full, where, "attributes.fullBytes", 0)
    _ints(stored, where, "attributes.storedBytes", 0)
    stats = [s or {} for s in stats]
    if not set(map(type, stats)) <= {dict}:
        for i, a in enumerate(attrs):
            _stats(a, where(i))
    nan_count, inf_count, *floats = _transpose([tuple(map(s.get, _STATS_FIELDS)) for s in stats], len(_STATS_FIELDS))
    _ints(nan_count, where, "attributes.stats.nanCount", 0)
    _ints(inf_count, where, "attributes.stats.infCount", 0)
    _check(record_names, frozenset((str,)), where, lambda v, w: _name({"name": v}, w))

    tasks: dict[str, dict[str, Any]] = {}
    for group, l1 in zip(groups, is_l1):
        if l1 and group not in tasks:
            tasks[group] = task_info(nodes, "/".join(group.split("/", 4)[:4]), key)
    if not all(is_l1):  # an L0 record has no task, port or note
        io, index, note = ([v if l1 else None for v, l1 in zip(column, is_l1)] for column in (io, index, note))
    _check(io, _STR_TYPES, where, lambda v, w: optional_str(v, w, "attributes.io"))
    _ints(index, where, "attributes.index")
    _ints(param, where, "attributes.paramPosition")

    task_rows = map(itemgetter(*TASK_COLUMNS), [tasks[g] if l1 else _NO_TASK for g, l1 in zip(groups, is_l1)])
    task_columns = _transpose(list(task_rows), len(TASK_COLUMNS))
    inv_columns = _transpose(list(map(itemgetter(*_INVOCATION_COLUMNS), map(invocations.__getitem__, names))), 5)
    window_level = info.level
    levels = [level or window_level or ("L1" if l1 else "L0") for level, l1 in zip(inv_columns[4], is_l1)]
    full_paths = [f"{key}/{path}" for path in paths]
    stored_at = list(map(pack_rows.get, full_paths)) if pack_rows else [None] * n
    opened = [p if at is None else at[0] for p, at in zip(full_paths, stored_at)]  # the array plain xarray shows
    split = [o.rpartition("/") for o in opened]
    elements = list(map(math.prod, shapes))
    stored_elements = elements if shapes is stored_shapes else list(map(math.prod, stored_shapes))
    return {
        "rank": [info.rank] * n,
        "window": [info.window] * n,
        **dict(zip(_INVOCATION_COLUMNS[:4], inv_columns[:4])),
        "level": levels,
        **dict(zip(TASK_COLUMNS, task_columns)),
        "io": io,
        "index": index,
        "name": record_names,
        "dtype": [o or t for o, t in zip(original, data_types)],
        "shape": shapes,
        "stored_shape": stored_shapes,
        "truncated": list(map(bool, truncated)),
        "bytes": [e * z if f is None else f for f, e, z in zip(full, elements, sizes)],
        "stored_bytes": [e * z if f is None else f for f, e, z in zip(stored, stored_elements, sizes)],
        **{
            column: [v if type(v) is float or v is None else stats_value(v) for v in values]
            for column, values in zip(FLOAT_COLUMNS, floats)
        },
        "nan_count": nan_count,
        "inf_count": inf_count,
        "path": full_paths,
        "role": role,
        "capture_phase": phase,
        "status": [info.status] * n,
        "param_position": param,
        "note": note,
        "invocation_name": names,
        "group": [f"{key}/{group}" for group in groups],
        "payload": [True] * n,
        DIGEST_COLUMN: [None] * n,  # the device digest comes from a statistics table, when there is one
        MD5_COLUMN: [None] * n,  # msprobe's digest: statistics-only rows of its statistics tables only
        "element_count": elements,
        "partial": [p is True for p in partial],  # salvaged from a failed launch (on_error="keep")
        "pack_array": [None if at is None else at[0] for at in stored_at],
        "pack_row": [-1 if at is None else at[1] for at in stored_at],
        "zarr_group": [s[0] for s in split],
        "variable": [s[2] for s in split],
        "stats_scope": list(map(stats_scope, attrs, map(bool, stats))),
    }


def _transpose(rows: list[tuple[Any, ...]], width: int) -> list[list[Any]]:
    """Rows of ``width`` values as ``width`` columns."""
    return [list(column) for column in zip(*rows)] if rows else [[] for _ in range(width)]


def _shapes(values: list[Any], sizes: list[int], where: Callable[[int], str], field: str) -> list[tuple[int, ...]]:
    """A column of shapes, each read by :func:`shape_field` (its byte size, times the record's item size, within
    int64); the record's document is named where one is refused."""
    try:
        return list(map(shape_field, values, repeat("", len(values)), repeat(field, len(values)), sizes))
    except ValueError:
        return [shape_field(v, where(i), field, s) for i, (v, s) in enumerate(zip(values, sizes))]


def _check(
    values: list[Any], types: frozenset[type], where: Callable[[int], str], check: Callable[[Any, str], Any]
) -> None:
    """Refuse a column holding a value of another type than ``types``: ``check`` of each value in turn names the
    first it refuses (a subclass of an allowed type is checked there too)."""
    if not set(map(type, values)) <= types:
        for i, value in enumerate(values):
            check(value, where(i))


def _ints(values: list[Any], where: Callable[[int], str], field: str, minimum: int | None = None) -> list[Any]:
    """A column of optional int64 fields (``>= minimum`` when given), as :func:`int_field` checks each."""
    low = -INT64_MAX - 1 if minimum is None else minimum
    present = [v for v in values if v is not None]
    if not set(map(type, present)) <= _INT_TYPES or (present and (min(present) < low or max(present) > INT64_MAX)):
        for i, value in enumerate(values):
            int_field(value, where(i), field, minimum=minimum)
    return values
