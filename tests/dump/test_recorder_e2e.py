"""The flight recorder end to end, as a user runs it: the demo block run forward for 200 steps in one process
with the recorder armed, a NaN injected into one expert's task at a known step and a slow blow-up of another
expert's weights. The recorder commits exactly the ring's steps, the triggering step and the after-steps;
``compare`` + ``root_cause`` against a clean run name the injected task and core."""

from __future__ import annotations

import json

import pytest

from megadump_zarr import compare, open_dump, root_cause
from tests.dump import _recorder_run as scenario


def _window_attrs(root, window):
    return json.loads((root / "rank_0" / f"window_{window:04d}" / "zarr.json").read_text())["attributes"]


def _task_of(records, stage, owner):
    rows = records[(records["stage"] == stage) & (records["owner_id"] == owner)]
    assert len(rows), (stage, owner)
    found = set(zip(rows["task_id"], rows["core_type"], rows["core_id"]))
    assert len(found) == 1, found
    task, core_type, core_id = found.pop()
    return int(task), str(core_type), int(core_id)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    root = tmp_path_factory.mktemp("recorder") / "run"
    scenario.run(root)
    return root


def test_the_recorder_commits_exactly_the_ring_the_trigger_and_the_after_steps(recorded):
    dump = open_dump(recorded)
    windows = dump.windows()
    assert list(windows["window"]) == sorted(scenario.EXPECTED_WINDOWS) and set(windows["status"]) == {"complete"}
    records = dump.records()
    for window, (kind, part, steps) in scenario.EXPECTED_WINDOWS.items():
        attrs = _window_attrs(recorded, window)
        assert attrs["recorderTrigger"]["kind"] == kind
        assert attrs["recorderPart"] == part
        assert attrs["recorderSteps"] == steps
        assert sorted(set(records.loc[records["window"] == window, "step"])) == steps
    # every record of every committed step holds its payload: a tensor-mode window, not statistics only
    assert (records["stored_bytes"] > 0).all()


def test_the_triggers_name_the_injected_step_task_and_core(recorded):
    records = open_dump(recorded).records()
    nan_trigger = _window_attrs(recorded, 0)["recorderTrigger"]
    task, core_type, core_id = _task_of(records, "expert_up", scenario.NAN_EXPERT)
    assert nan_trigger == {
        "kind": "nonfinite",
        "step": scenario.NAN_STEP,
        "rank": 0,
        "kernel": "moe_experts",
        "direction": "forward",
        "stage": "expert_up",
        "task": task,
        "owner": scenario.NAN_EXPERT,
        "coreType": core_type,
        "coreId": core_id,
        "core": f"{core_type}{core_id}",
        "record": "w_up",
        "io": "input",
        "index": 2,
        "value": 1.0,
        "threshold": None,
    }
    norm_trigger = _window_attrs(recorded, 2)["recorderTrigger"]
    task, core_type, core_id = _task_of(records, "expert_down", scenario.BLOW_EXPERT)
    assert (norm_trigger["kind"], norm_trigger["step"], norm_trigger["stage"]) == (
        "norm",
        scenario.FIRST_BLOW_STEP,
        "expert_down",
    )
    assert (norm_trigger["task"], norm_trigger["owner"], norm_trigger["core"]) == (
        task,
        scenario.BLOW_EXPERT,
        f"{core_type}{core_id}",
    )
    assert (norm_trigger["record"], norm_trigger["io"]) == ("w_down", "input")
    assert norm_trigger["value"] > norm_trigger["threshold"] > 0
    # the stored statistics agree: the NaN step's w_up of that expert holds one NaN, the step before none
    w_up = records[(records["name"] == "w_up") & (records["owner_id"] == scenario.NAN_EXPERT) & (records["window"] < 2)]
    assert dict(zip(w_up["step"], w_up["nan_count"])) == {s: int(s == scenario.NAN_STEP) for s in range(56, 63)}


def test_root_cause_against_a_clean_run_names_the_injected_task_and_core(recorded, tmp_path):
    golden = tmp_path / "golden"
    # the same inputs without the NaN; a predicate fires at the same step, so the windows line up
    scenario.run(
        golden,
        steps=scenario.NAN_STEP + 1 + scenario.AFTER,
        poison=False,
        nonfinite=False,
        norm_k=None,
        predicate=lambda row: row["step"] == scenario.NAN_STEP,
    )
    assert _window_attrs(golden, 0)["recorderTrigger"]["kind"] == "predicate"
    result = compare(open_dump(recorded), open_dump(golden), window=0)
    cause = root_cause(result)
    records = open_dump(recorded).records()
    task, core_type, core_id = _task_of(records, "expert_up", scenario.NAN_EXPERT)
    assert cause is not None
    assert (cause["step"], cause["stage"], cause["task_id"], cause["owner_id"]) == (
        scenario.NAN_STEP,
        "expert_up",
        task,
        scenario.NAN_EXPERT,
    )
    assert (cause["core_type"], cause["core_id"], cause["name"]) == (core_type, core_id, "w_up")
    # steps before the NaN are equal in both runs
    assert (result.loc[result["step"] < scenario.NAN_STEP, "verdict"] == "pass").all()
