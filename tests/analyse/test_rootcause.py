"""root_cause on real dumps of the reference runtime with a fault injected into one task of one stage."""

from __future__ import annotations

from pathlib import Path

import pytest

from megadump_zarr.analyse import compare, first_divergence, root_cause
from tests._faults import dump_demo_step


def run(root: Path, level: str, fault: dict | None = None, weight_bump: float = 0.0) -> dict:
    return {"fault": dump_demo_step(root, level, fault=fault, weight_bump=weight_bump)}


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("clean")
    run(base / "l0", "L0")
    run(base / "l1", "L1")
    return {"l0": base / "l0", "l1": base / "l1"}


def test_identical_runs_have_no_root_cause(clean, tmp_path):
    run(tmp_path / "again", "L1")
    result = compare(tmp_path / "again", clean["l1"])
    assert (result.verdict == "pass").all()
    assert root_cause(result) is None and first_divergence(result) is None


def test_l1_root_cause_names_the_faulty_task_output(clean, tmp_path):
    info = run(tmp_path / "bad", "L1", dict(stage="expert_down", owner=1, delta=0.5))
    fault = info["fault"]
    assert fault.calls == 1
    result = compare(tmp_path / "bad", clean["l1"])
    failing = result[result.verdict != "pass"]
    # the faulty task's output, then every consumer of its rows downstream
    assert failing.iloc[0][["stage", "task_id", "io", "name"]].tolist() == [
        "expert_down",
        fault.task_ids[0],
        "output",
        "ys",
    ]
    assert set(failing.stage) == {"expert_down", "combine"}
    cause = root_cause(result)
    assert (cause.stage, cause.task_id, cause.owner_id, cause.io, cause["name"]) == (
        "expert_down",
        fault.task_ids[0],
        1,
        "output",
        "ys",
    )
    assert cause.core_type == "AIC" and cause.core_id is not None and cause.path.endswith("output_00_ys")
    assert "every input of task" in cause.root_reason
    assert cause.root_stage == "expert_down"
    assert first_divergence(result).path == cause.path
    # where in the tensor: the worst element and the task/owner/core that produced it
    assert cause.worst_task_id == fault.task_ids[0] and cause.worst_owner_id == 1 and cause.worst_core_type == "AIC"
    assert cause.max_abs == pytest.approx(0.5, rel=1e-6) and cause.mismatches > 0
    # a downstream combine task's input fails too, but it is not the cause
    combine_in = failing[(failing.stage == "combine") & (failing.io == "input")]
    assert len(combine_in) >= 1


def test_l0_root_cause_differs_from_first_divergence(clean, tmp_path):
    run(tmp_path / "bad", "L0", dict(stage="expert_down", owner=1, delta=0.5))
    result = compare(tmp_path / "bad", clean["l0"], kernel="moe_experts")
    assert result[result.verdict != "pass"]["name"].tolist() == ["ws", "ys", "out"]
    first = first_divergence(result)
    cause = root_cause(result)
    assert first["name"] == "ws"  # the reused workspace, final value written by unpermute: a symptom
    assert cause["name"] == "ys" and cause.producers == ("expert_down",)
    assert "ws" in cause.root_reason and "overwritten" in cause.root_reason
    assert cause.stage is None and cause.root_stage == "expert_down"  # an L0 record: the stage that wrote it


def test_l0_root_cause_summary_names_the_stage_that_wrote_it(clean, tmp_path, capsys, monkeypatch):
    from tests.cli._helpers import cli_runner

    run(tmp_path / "bad", "L0", dict(stage="expert_down", owner=1, delta=0.5))
    cli = cli_runner(capsys, monkeypatch, columns=120)
    result = cli("compare", tmp_path / "bad", clean["l0"])
    assert result.code == 1
    assert "root cause: ys (fail) at r0 w0 i2 moe_experts, written by stage expert_down" in result.out.splitlines()
    assert "first divergence: ws (fail) at r0 w0 i2 moe_experts" in result.out.splitlines()  # not the root cause
    report = cli("compare", tmp_path / "bad", clean["l0"], "--json").json()
    assert (report["root_cause"]["stage"], report["root_cause"]["root_stage"]) == (None, "expert_down")


def test_l0_root_cause_in_a_row_split_stage(clean, tmp_path):
    run(tmp_path / "bad", "L0", dict(kernel="router_kernel", stage="norm", start=0, delta=0.25))
    result = compare(tmp_path / "bad", clean["l0"])
    assert result[result.verdict != "pass"]["name"].tolist()[:2] == ["h", "logits"]
    cause = root_cause(result)
    assert (cause["name"], cause.kernel, cause.invocation) == ("h", "moe_router", 0)
    assert cause.root_reason.startswith("every input of stage norm passes (x, norm_weight)")
    assert cause.root_stage == "norm"


def test_a_wrong_weight_is_its_own_root_cause(clean, tmp_path):
    run(tmp_path / "bad", "L0", weight_bump=0.1)
    result = compare(tmp_path / "bad", clean["l0"], kernel="moe_experts")
    cause = root_cause(result)
    assert (cause["name"], cause.role) == ("w_down", "external_input")
    assert cause.root_stage is None  # an input: no stage of the kernel wrote it
    assert first_divergence(result).path == cause.path
    assert cause.worst_index[0] == 1  # the bumped expert's slice


@pytest.fixture(scope="module")
def demo_pair(tmp_path_factory) -> tuple[Path, Path]:
    from megadump_zarr.demo.run import run_demo

    base = tmp_path_factory.mktemp("demo")
    return run_demo(base / "bf16", dtype="bfloat16").root, run_demo(base / "fp32").root


def test_bfloat16_demo_against_float32_blames_the_routing_counts(demo_pair):
    """The issue's report: expert_counts [8,13,7,9] vs [8,12,8,9] passed; xs's shape mismatch was "first"."""
    bf16, fp32 = demo_pair
    result = compare(bf16 / "l1", fp32 / "l1", invocation=0)
    counts = result[(result["name"] == "expert_counts") & (result.task_id == 0)].iloc[0]
    assert counts.verdict == "fail" and counts.mismatches == 2 and counts.first_mismatch == (1,)
    assert counts.note == "2 of 4 elements differ, first at (1,)"
    assert (counts.worst_index, counts.worst_a, counts.worst_b) == ((1,), 13.0, 12.0)
    xs = result[(result["name"] == "xs") & (result.task_id == 1)].iloc[0]
    assert xs.verdict == "shape_mismatch" and xs.note == "shape 13×16 vs 12×16; not compared"
    first, cause = first_divergence(result), root_cause(result)
    assert first.path == cause.path == counts.path
    assert cause.io == "input" and "is an input" in cause.root_reason
    # the float tensors of task 0 (bf16 rounding against fp32) pass at bfloat16's tolerance
    task0 = result[(result.task_id == 0) & (result["name"] != "expert_counts")]
    assert set(task0.verdict) == {"pass"} and set(task0.rtol) == {1.6e-2}


def test_compare_selects_by_owner_and_core_as_dump_tensor_does(clean, tmp_path):
    """``compare(a, b, owner=1)`` / ``core="AIC1"`` select like ``Dump.tensor`` and ``--owner``/``--core``
    (QA: they raised "unknown selection 'owner'"); the faulty owner's task is the one failing record."""
    info = run(tmp_path / "bad", "L1", dict(stage="expert_down", owner=1, delta=0.5))
    task = info["fault"].task_ids[0]
    by_owner = compare(tmp_path / "bad", clean["l1"], owner=1)
    assert set(by_owner.owner_id) == {1} and set(by_owner.stage) == {"expert_up", "expert_down"}
    assert by_owner[by_owner.verdict != "pass"][["task_id", "name"]].values.tolist() == [[task, "ys"]]
    by_core = compare(tmp_path / "bad", clean["l1"], core="AIC1")
    assert set(zip(by_core.core_type, by_core.core_id)) == {("AIC", 1)} and set(by_core.task_id) == {task}
    assert root_cause(by_core).task_id == task
    assert set(compare(tmp_path / "bad", clean["l1"], owner=[0, 2]).owner_id) == {0, 2}
    with pytest.raises(ValueError, match="unknown record filter 'bogus'"):
        compare(tmp_path / "bad", clean["l1"], bogus=1)
