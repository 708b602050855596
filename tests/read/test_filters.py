"""Record filters (read.select): the matching rule against a row-by-row reference (hypothesis), the
"which values exist" messages, and Dump.tensor/dataset with owner= and core= on a real L1 dump."""

from __future__ import annotations

import fnmatch

from hypothesis import HealthCheck, given, settings, strategies as st
import numpy as np
import pandas as pd
import pytest

from megadump_zarr.read import open_dump
from megadump_zarr.read.select import FILTERS, filter_mask, no_match_message, select_records

# ------------------------------------------------------------------------------------------ hypothesis
_NAMES = ("ws", "xs", "a/b", "w[0]", "x*", "layer.0/up")
_STAGES = ("expert_up", "expert_down", "s/1")


@st.composite
def record_rows(draw: st.DrawFn) -> dict:
    level = draw(st.sampled_from(("L0", "L1")))
    invocation = draw(st.integers(0, 3))
    direction = draw(st.sampled_from(("forward", "backward")))
    row = {
        "rank": draw(st.integers(0, 2)),
        "window": draw(st.integers(0, 2)),
        "invocation": invocation,
        "invocation_name": f"invocation_{invocation:06d}_{direction}",
        "direction": direction,
        "kernel": draw(st.sampled_from(("moe_experts", "moe_router"))),
        "name": draw(st.sampled_from(_NAMES)),
        "stage": None,
        "task_id": None,
        "owner_id": None,
        "core_type": None,
        "core_id": None,
        "io": None,
    }
    base = f"rank_{row['rank']}/window_{row['window']:04d}/{row['invocation_name']}"
    row["group"] = base
    if level == "L1":
        stage = draw(st.sampled_from(_STAGES))
        task = draw(st.integers(0, 5))
        row.update(
            stage=stage,
            task_id=task,
            owner_id=draw(st.one_of(st.none(), st.integers(0, 3))),
            core_type=draw(st.one_of(st.none(), st.sampled_from(("AIC", "AIV", "MIX")))),
            core_id=draw(st.one_of(st.none(), st.integers(0, 7))),
            io=draw(st.sampled_from(("input", "output"))),
            group=f"{base}/stages/{stage.replace('/', '_')}/task_{task:06d}",
        )
    return row


def frame_of(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(
        rows,
        columns=[
            "rank",
            "window",
            "invocation",
            "invocation_name",
            "direction",
            "kernel",
            "name",
            "stage",
            "task_id",
            "owner_id",
            "core_type",
            "core_id",
            "io",
            "group",
        ],
    )
    for column in ("rank", "window", "invocation", "task_id", "owner_id", "core_id"):
        frame[column] = pd.array([None if v is None or v != v else int(v) for v in frame[column]], dtype="Int64")
    return frame


def _value(draw: st.DrawFn, key: str):
    ints = st.integers(-1, 8)
    return draw(
        {
            "rank": ints,
            "window": ints,
            "owner": ints,
            "invocation": st.one_of(
                ints, st.sampled_from(("invocation_000001_forward", "invocation_000002_backward", "2"))
            ),
            "kernel": st.sampled_from(("moe_experts", "moe_router", "nope")),
            "direction": st.sampled_from(("forward", "backward")),
            "stage": st.sampled_from((*_STAGES, "s_1", "nope")),
            "task": st.one_of(ints, st.sampled_from(("task_000001", "task_000004", "task_9"))),
            "core_type": st.sampled_from(("AIC", "aiv", "MIX", "CUBE")),
            "core": st.one_of(ints, st.sampled_from(("MIX1", "aic0", "AIV7", "MIX"))),
            "io": st.sampled_from(("input", "output")),
            "name": st.lists(st.sampled_from((*_NAMES, "w*", "*/*", "nope")), min_size=1, max_size=2),
        }[key]
    )


@st.composite
def selections(draw: st.DrawFn) -> dict:
    keys = draw(st.lists(st.sampled_from([f.key for f in FILTERS]), unique=True, max_size=4))
    return {k: _value(draw, k) for k in keys}


def _int(value):
    return None if value is None or pd.isna(value) else int(value)


def reference(row: dict, key: str, value) -> bool:
    """The documented rule, one row at a time."""
    if key == "name":
        return any(row["name"] == p or fnmatch.fnmatchcase(row["name"], p) for p in value)
    if isinstance(value, str) and value.lstrip("-").isdigit():
        value = int(value)
    if key in ("rank", "window", "owner", "task", "invocation") and isinstance(value, int):
        column = {"owner": "owner_id", "task": "task_id"}.get(key, key)
        return _int(row[column]) == value
    if key == "invocation":
        return row["invocation_name"] == value
    if key == "task":
        return row["stage"] is not None and row["group"].rpartition("/")[2] == value
    if key == "stage":
        component = row["group"].split("/")[4] if row["group"].count("/") >= 4 else None
        return row["stage"] is not None and value in (row["stage"], component)
    if key == "core_type":
        return row["core_type"] is not None and row["core_type"].upper() == value.upper()
    if key == "core":
        if isinstance(value, int):
            return _int(row["core_id"]) == value
        if row["core_type"] is None or not value[-1].isdigit():
            return False
        wanted = value.rstrip("0123456789").upper() + str(int(value[len(value.rstrip("0123456789")) :]))
        return f"{row['core_type']}{'' if _int(row['core_id']) is None else _int(row['core_id'])}".upper() == wanted
    return row[key] is not None and row[key] == value


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(record_rows(), max_size=12), selections())
def test_filters_match_the_row_by_row_rule(rows, select):
    frame = frame_of(rows)
    kept = select_records(frame, select)
    expected = [i for i, row in enumerate(rows) if all(reference(row, k, v) for k, v in select.items())]
    assert list(kept.index) == expected
    for key, value in select.items():  # each filter alone agrees too
        assert list(np.flatnonzero(filter_mask(frame, key, value))) == [
            i for i, r in enumerate(rows) if reference(r, key, value)
        ]
    message = no_match_message(frame, select)
    if expected:
        assert message is None
    else:
        assert message is not None and message.startswith("no records")
        if rows and select:
            labels = [f.label for f in FILTERS if f.key in select]
            assert any(f"with {label} " in message for label in labels), message


def test_no_match_messages_name_the_filter_and_the_values_that_exist():
    rows = [
        dict(
            rank=0,
            window=0,
            invocation=0,
            invocation_name="invocation_000000_forward",
            direction="forward",
            kernel="k",
            name=n,
            stage="up",
            task_id=t,
            owner_id=t,
            core_type="MIX",
            core_id=t + 4,
            io="output",
            group=f"rank_0/window_0000/invocation_000000_forward/stages/up/task_{t:06d}",
        )
        for t in range(4)
        for n in ("ws", "xs")
    ]
    frame = frame_of(rows)
    assert no_match_message(frame, {"owner": 9}) == "no records with owner 9; owners: 0, 1, 2, 3"
    assert no_match_message(frame, {"core": "AIC4"}) == "no records with core AIC4; cores: MIX4, MIX5, MIX6, MIX7"
    assert no_match_message(frame, {"name": ["ws"], "owner": 1, "core": 4}) == (
        "no records with core 4 among those with owner 1; cores there: MIX5"
    )
    assert no_match_message(frame, {"stage": "down"}) == "no records with stage 'down'; stages: up"
    assert no_match_message(frame, {"owner": 1}) is None
    l0 = frame.assign(stage=None, task_id=pd.NA, owner_id=pd.NA, core_type=None, core_id=pd.NA, io=None)
    assert no_match_message(l0, {"owner": 1}).startswith("no records with owner 1: they have no owner (L0 records")
    with pytest.raises(ValueError, match="unknown record filter 'colour'"):
        select_records(frame, {"colour": 1})


# ------------------------------------------------------------------------------------------ real dumps
def test_tensor_owner_and_core_select_together(demo_dumps):
    dump = open_dump(demo_dumps["l1"].root)
    records = dump.records()
    whole = dump.tensor("ws", stage="expert_up")
    for owner in range(4):
        mine = records[(records["name"] == "ws") & (records["stage"] == "expert_up") & (records["owner_id"] == owner)]
        (core_type,), (core_id,) = set(mine["core_type"]), set(mine["core_id"])
        one = dump.tensor("ws", stage="expert_up", owner=owner)
        expected = whole.sel(owner_id=owner)
        assert one.sizes == expected.sizes
        np.testing.assert_array_equal(one["slot"].values, expected["slot"].values)
        np.testing.assert_array_equal(
            np.asarray(one.values, dtype=np.float64), np.asarray(expected.values, dtype=np.float64)
        )
        assert set(one["owner_id"].values) == {owner}
        assert set(one["core_type"].values) == {core_type} and set(one["core_id"].values) == {core_id}
        assert set(expected["core_type"].values) == {core_type} and set(expected["core_id"].values) == {core_id}
        by_core = dump.tensor("ws", stage="expert_up", core=f"{core_type}{core_id}")
        np.testing.assert_array_equal(by_core["slot"].values, one["slot"].values)
        ds = dump.dataset(stage="expert_up", owner=owner)
        assert ds.attrs["taskId"] == int(mine["task_id"].iloc[0])


def test_tensor_owner_that_does_not_exist_lists_the_owners(demo_dumps):
    dump = open_dump(demo_dumps["l1"].root)
    with pytest.raises(
        ValueError,
        match=r"no records of tensor 'ws' with owner 9 among those with stage 'expert_up'; "
        r"owners there: 0, 1, 2, 3 \(rank 0 window",
    ):
        dump.tensor("ws", stage="expert_up", owner=9)
    with pytest.raises(ValueError, match=r"no data groups with owner 9 .*owners there: 0, 1, 2, 3"):
        dump.dataset(stage="expert_up", owner=9)
    with pytest.raises(ValueError, match=r"with core type AIV .*core types there: MIX"):
        dump.tensor("ws", stage="expert_up", core_type="AIV")
