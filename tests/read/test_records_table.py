"""The records table of a tasks-layout window, read a whole column at a time (``read.window_rows``): the table a
record-by-record read gives, value for value and dtype for dtype, over generated record documents; a refused value
named as the scalar checks of ``read.documents`` name it, the first record in node order first; and no per-record
work (checker calls, collections of the cyclic GC) while a window's table is built."""

from __future__ import annotations

import gc
import math
import sys
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
import numpy as np
import pandas as pd
import pytest

from megadump_zarr.layout.dtypes import ITEMSIZES
from megadump_zarr.read.catalog import WindowInfo
from megadump_zarr.read.documents import count_field, int_field, optional_str, shape_field
from megadump_zarr.read.records_table import EXTRA_COLUMNS, RECORD_COLUMNS, records_frame

WINDOW = "rank_0/window_0000"
INVOCATION = "invocation_000003_forward"
INT64_MAX = 2**63 - 1

INT_COLUMNS = {
    "invocation",
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
    "element_count",
}
FLOAT_COLUMNS = {"min", "max", "mean", "l2norm"}
BOOL_COLUMNS = {"truncated", "partial", "payload"}


def _absent(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A field's value, or ``_ABSENT`` (the key is left out)."""
    return st.one_of(st.just(_ABSENT), strategy)


_ABSENT = object()
_ints = st.integers(-(2**63), INT64_MAX)
_counts = st.integers(0, INT64_MAX)
_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6)
_dims = st.lists(st.integers(0, 64), min_size=0, max_size=3)
_stats = st.fixed_dictionaries(
    {},
    optional={
        "nanCount": st.one_of(st.none(), st.integers(0, 1000)),
        "infCount": st.one_of(st.none(), st.integers(0, 1000)),
        "min": st.one_of(st.none(), st.floats(allow_nan=True), st.integers(-1000, 1000)),
        "max": st.one_of(st.none(), st.floats(allow_nan=False), st.booleans(), st.just("1.5")),
        "mean": st.floats(width=32),
        "l2norm": st.one_of(st.floats(min_value=0), st.just("x")),
    },
)
_record = st.fixed_dictionaries(
    {"name": _text, "data_type": st.sampled_from(sorted(ITEMSIZES) + ["bfloat16", "custom"]), "shape": _dims},
    optional={
        "originalDtype": st.one_of(st.none(), st.sampled_from(["", "float32", "bfloat16"])),
        "actualShape": st.one_of(st.none(), _dims),
        "fullBytes": st.one_of(st.none(), _counts),
        "storedBytes": st.one_of(st.none(), _counts),
        "stats": st.one_of(st.none(), _stats),
        "io": st.one_of(st.none(), st.sampled_from(["input", "output"])),
        "index": st.one_of(st.none(), _ints),
        "paramPosition": st.one_of(st.none(), _ints),
        "truncated": st.one_of(st.booleans(), st.none(), st.just(1)),
        "partial": st.one_of(st.booleans(), st.just(1)),
        "role": st.one_of(st.none(), _text),
        "capturePhase": st.one_of(st.none(), st.sampled_from(["before", "after"])),
        "note": st.one_of(st.none(), _text),
    },
)
_task = st.fixed_dictionaries(
    {"worker": st.one_of(st.none(), st.integers(0, 3))},
    optional={
        "stageTaskIndex": st.one_of(st.none(), _ints),
        "owner": st.one_of(st.none(), st.fixed_dictionaries({}, optional={"label": _text, "id": _ints})),
        "coreType": st.one_of(st.none(), st.sampled_from(["AIC", "AIV"])),
        "coreId": st.one_of(st.none(), _ints),
        "stage": _text,
    },
)
_invocation = st.fixed_dictionaries(
    {},
    optional={
        "step": st.one_of(st.none(), _ints),
        "kernelName": st.one_of(st.none(), _text),
        "level": st.one_of(st.none(), st.sampled_from(["L0", "L1"])),
    },
)


@st.composite
def windows(draw: st.DrawFn) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]], str | None]:
    """A window's nodes (an invocation with L0 records and L1 task groups), the expected rows, the window level."""
    invocation = draw(_invocation)
    nodes: dict[str, dict[str, Any]] = {INVOCATION: {"node_type": "group", "attributes": invocation}}
    places: list[tuple[str, dict[str, Any] | None, str | None]] = []
    for k in range(draw(st.integers(0, 3))):
        places.append((f"{INVOCATION}/l0_{k}", None, None))
    stage_name = draw(st.one_of(st.none(), _text))
    nodes[f"{INVOCATION}/stages/combine"] = {"node_type": "group", "attributes": {"stage": stage_name}}
    task_ids = draw(st.lists(st.integers(0, 999), max_size=4, unique=True))
    for task_id in task_ids:
        task = draw(_task)
        worker = task.pop("worker")
        name = f"task_{task_id:06d}" + (f"_worker_{worker:03d}" if worker is not None else "")
        group = f"{INVOCATION}/stages/combine/{name}"
        nodes[group] = {"node_type": "group", "attributes": {"taskId": task_id, **task}}
        for k in range(draw(st.integers(1, 3))):
            places.append((f"{group}/r{k}", {**task, "taskId": task_id, "workerId": worker}, stage_name))
        nodes[f"{group}/token"] = {"node_type": "array", "data_type": "int64", "shape": [4]}  # a coordinate
    rows = []
    for path, task, stage in places:
        record = draw(_record)
        doc = {"node_type": "array", "data_type": record.pop("data_type"), "shape": record.pop("shape")}
        nodes[path] = {**doc, "attributes": record}
        rows.append(_expected(path, doc, record, task, stage, invocation))
    window_level = draw(st.one_of(st.none(), st.sampled_from(["L0", "L1"])))
    for row in rows:
        row["level"] = invocation.get("level") or window_level or ("L1" if row["task_id"] is not None else "L0")
    return nodes, rows, window_level


def _number(value: Any) -> float:
    if value is None or isinstance(value, bool):
        return math.nan
    try:
        return float(value)
    except ValueError:
        return math.nan


def _expected(
    path: str,
    doc: dict[str, Any],
    attrs: dict[str, Any],
    task: dict[str, Any] | None,
    stage: str | None,
    invocation: dict[str, Any],
) -> dict[str, Any]:
    """The row the records table documents for one record (``read.records_table.EXTRA_COLUMNS``)."""
    size = ITEMSIZES.get(doc["data_type"], 0)
    stored_shape = tuple(doc["shape"])
    shape = stored_shape if attrs.get("actualShape") is None else tuple(attrs["actualShape"])
    stats = attrs.get("stats") or {}
    owner = (task or {}).get("owner") or {}
    l1 = task is not None
    return {
        "rank": 0,
        "window": 0,
        "invocation": 3,
        "step": invocation.get("step"),
        "direction": "forward",
        "kernel": invocation.get("kernelName"),
        "stage": task.get("stage", stage) if l1 else None,
        "task_id": task["taskId"] if l1 else None,
        "stage_task_index": task.get("stageTaskIndex") if l1 else None,
        "owner_label": owner.get("label") if l1 else None,
        "owner_id": owner.get("id") if l1 else None,
        "core_type": task.get("coreType") if l1 else None,
        "core_id": task.get("coreId") if l1 else None,
        "worker": task["workerId"] if l1 else None,
        "io": attrs.get("io") if l1 else None,
        "index": attrs.get("index") if l1 else None,
        "name": attrs["name"],
        "dtype": attrs.get("originalDtype") or doc["data_type"],
        "shape": shape,
        "stored_shape": stored_shape,
        "truncated": bool(attrs.get("truncated")),
        "bytes": attrs["fullBytes"] if attrs.get("fullBytes") is not None else math.prod(shape) * size,
        "stored_bytes": attrs["storedBytes"]
        if attrs.get("storedBytes") is not None
        else math.prod(stored_shape) * size,
        **{key: _number(stats.get(key)) for key in FLOAT_COLUMNS},
        "nan_count": stats.get("nanCount"),
        "inf_count": stats.get("infCount"),
        "path": f"{WINDOW}/{path}",
        "role": attrs.get("role"),
        "capture_phase": attrs.get("capturePhase"),
        "status": "complete",
        "param_position": attrs.get("paramPosition"),
        "note": attrs.get("note") if l1 else None,
        "invocation_name": INVOCATION,
        "group": f"{WINDOW}/{path.rpartition('/')[0]}",
        "partial": attrs.get("partial") is True,
        "pack_array": None,
        "pack_row": -1,
        "stats_scope": None if not stats else ("prefix" if attrs.get("truncated") else "whole"),
        "zarr_group": f"{WINDOW}/{path.rpartition('/')[0]}",
        "variable": path.rpartition("/")[2],
        "payload": True,
        "digest": None,
        "element_count": math.prod(shape),
        "md5": None,
    }


def _frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The expected table: rows in execution order, each column in its documented dtype."""

    def number(value: Any) -> int:
        return -1 if value is None else value

    rows = sorted(
        rows,
        key=lambda r: (
            number(r["task_id"]),
            number(r["worker"]),
            r["io"] == "output",
            number(r["index"]),
            number(r["param_position"]),
            r["path"],
        ),
    )
    data: dict[str, Any] = {}
    for name in (*RECORD_COLUMNS, *EXTRA_COLUMNS):
        values = [row[name] for row in rows]
        if name in ("rank", "window", "pack_row"):
            data[name] = np.array(values, dtype=np.int64)
        elif name == "digest":
            data[name] = pd.array(values, dtype="UInt64")
        elif name in INT_COLUMNS:
            data[name] = pd.array(values, dtype="Int64")
        elif name in FLOAT_COLUMNS:
            data[name] = np.array(values, dtype=np.float64)
        elif name in BOOL_COLUMNS:
            data[name] = np.array(values, dtype=bool)
        else:
            array = np.empty(len(values), dtype=object)
            array[:] = values
            data[name] = array
    return pd.DataFrame(data, columns=[*RECORD_COLUMNS, *EXTRA_COLUMNS])


def _table(nodes: dict[str, dict[str, Any]], level: str | None = "L1") -> pd.DataFrame:
    info = WindowInfo(0, 0, WINDOW, "complete", {} if level is None else {"level": level}, nodes)
    return records_frame([(info, nodes)])


@settings(max_examples=60, deadline=None)
@given(windows())
def test_the_table_is_the_documented_one_value_for_value(window):
    nodes, rows, level = window
    pd.testing.assert_frame_equal(_table(nodes, level), _frame(rows))  # exact: the documents' own values, none computed


HOSTILE = [True, 1.5, "7", [1], {"a": 1}, 2**63, -(2**63) - 1, -1, float("nan")]
FIELDS = {
    # field: (where it is, the scalar check that names it)
    "originalDtype": lambda v, w: optional_str(v, w, "attributes.originalDtype"),
    "shape": lambda v, w: shape_field(v, w, "shape", 4),
    "actualShape": lambda v, w: shape_field(v, w, "attributes.actualShape", 4),
    "fullBytes": lambda v, w: count_field(v, w, "attributes.fullBytes"),
    "storedBytes": lambda v, w: count_field(v, w, "attributes.storedBytes"),
    "nanCount": lambda v, w: count_field(v, w, "attributes.stats.nanCount"),
    "infCount": lambda v, w: count_field(v, w, "attributes.stats.infCount"),
    "io": lambda v, w: optional_str(v, w, "attributes.io"),
    "index": lambda v, w: int_field(v, w, "attributes.index"),
    "paramPosition": lambda v, w: int_field(v, w, "attributes.paramPosition"),
}


def _window(records: int, tasks: int = 1) -> dict[str, dict[str, Any]]:
    """A valid window: ``tasks`` task groups of ``records`` float32 records each."""
    nodes: dict[str, dict[str, Any]] = {INVOCATION: {"node_type": "group", "attributes": {"invocationId": 3}}}
    for task in range(tasks):
        group = f"{INVOCATION}/stages/combine/task_{task:06d}"
        nodes[group] = {"node_type": "group", "attributes": {"taskId": task, "coreId": task}}
        for k in range(records):
            attrs = {
                "name": f"t{k}",
                "io": "input",
                "index": k,
                "paramPosition": k,
                "fullBytes": 256,
                "stats": {"nanCount": 0, "infCount": 0, "min": -1.0, "max": 1.0},
            }
            nodes[f"{group}/input_{k:02d}"] = {
                "node_type": "array",
                "data_type": "float32",
                "shape": [4, 16],
                "attributes": attrs,
            }
    return nodes


def _set(doc: dict[str, Any], field: str, value: Any) -> None:
    if field == "shape":
        doc["shape"] = value
    elif field in ("nanCount", "infCount"):
        doc["attributes"]["stats"][field] = value
    else:
        doc["attributes"][field] = value


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(FIELDS)), st.sampled_from(HOSTILE), st.integers(0, 5))
def test_a_refused_field_is_named_as_its_scalar_check_names_it(field, value, record):
    nodes = _window(6)
    path = f"{INVOCATION}/stages/combine/task_000000/input_{record:02d}"
    _set(nodes[path], field, value)
    where = f"{WINDOW}/{path}/zarr.json"
    try:
        FIELDS[field](value, where)
    except ValueError as error:
        expected = str(error)
    else:  # a value this field takes: the table holds it
        assert len(_table(nodes)) == 6
        return
    with pytest.raises(ValueError) as raised:
        _table(nodes)
    assert str(raised.value) == expected


def test_the_first_record_in_node_order_is_named_first():
    """The first record's last-checked field is named before a later record's first-checked one."""
    nodes = _window(3)
    first, last = (f"{INVOCATION}/stages/combine/task_000000/input_{k:02d}" for k in (0, 2))
    _set(nodes[first], "paramPosition", "1")  # read last of a record's fields
    _set(nodes[last], "originalDtype", 5)  # read first
    with pytest.raises(ValueError, match=r"input_00/zarr.json: attributes.paramPosition '1' is not an integer"):
        _table(nodes)
    nodes[INVOCATION]["attributes"]["step"] = 1.5  # the invocation group is read before its first record
    with pytest.raises(ValueError, match=rf"{INVOCATION}/zarr.json: attributes.step 1.5 is not an integer"):
        _table(nodes)


def _calls(nodes: dict[str, dict[str, Any]]) -> int:
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        calls += event == "call"

    sys.setprofile(count)
    try:
        _table(nodes)
    finally:
        sys.setprofile(None)
    return calls


def test_a_window_table_calls_no_function_per_field_of_each_record():
    """Each record adds a handful of function calls to a window's table (its shape check, its statistics' scope),
    not one checker call per field (a record-by-record read made ~40)."""
    added = _calls(_window(50, tasks=4)) - _calls(_window(25, tasks=4))
    assert added < 5 * 100, added


def test_no_collection_runs_while_a_window_table_is_built():
    """Every object built lives in the table: the cyclic GC, which would rescan the window's parsed documents
    each time, is paused, and left as it was found."""
    nodes = _window(100, tasks=10)
    collections = []

    def seen(phase, info):
        if phase == "start":
            collections.append(info["generation"])

    gc.collect()
    gc.callbacks.append(seen)
    try:
        table = _table(nodes)
    finally:
        gc.callbacks.remove(seen)
    assert len(table) == 1000 and collections == []
    assert gc.isenabled()
    gc.disable()
    try:
        _table(nodes)
        assert not gc.isenabled()
    finally:
        gc.enable()
