"""``replay``: a task with an injected fault is wrong on its own inputs, clean tasks are right, the
float64 replay runs too, and user references (callable, registered, module:attr) replace the demo's."""

from __future__ import annotations

import re

import pytest
import torch

from megadump_zarr import TensorDumpConfig, open_dump, tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from megadump_zarr.replay import CORRECT, WRONG, clear_references, register_reference, replay
from megadump_zarr.runtime import Graph, MegaKernel, OperatorNode, SplitSpec, TensorSpec
from tests._faults import inject_fault

STAGES = ("expert_up", "expert_down", "unpermute", "combine")


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    """One L1 dump of the demo block with expert_down's task for expert 1 adding 0.5 to what it writes."""
    root = tmp_path_factory.mktemp("faulty")
    block = MoEBlock(DemoConfig())
    with inject_fault(block.expert_kernel, "expert_down", owner=1, delta=0.5) as fault:
        with tensor_dump(TensorDumpConfig(root, level="L1", kernel_names="moe_experts", stages=STAGES)):
            block(block.make_input())
    assert fault.calls == 1 and fault.task_ids == [5]
    return root


def test_the_faulty_task_is_wrong_on_its_own_inputs(faulty):
    result = replay(faulty, "expert_down", owner=1)
    assert result.verdict == WRONG and result.culprit
    assert (result.stage, result.task_id, result.owner_id, result.kernel) == ("expert_down", 5, 1, "moe_experts")
    assert (result.rank, result.window, result.invocation) == (0, 0, 0)
    assert result.reference.startswith("megadump_zarr.demo.MoEBlock")
    (row,) = result.outputs.itertuples()
    assert row.name == "ys" and row.verdict == "fail" and row.dtype == "float32"
    assert row.max_abs == pytest.approx(0.5, abs=1e-6)  # exactly the injected delta, against the float32 replay
    assert row.f64_verdict == "fail" and row.f64_max_abs == pytest.approx(0.5, abs=1e-5)
    assert (row.rtol, row.atol) == (1.3e-6, 1e-5)  # float32's defaults (analyse.verdict.tolerance_for)
    assert any(note.startswith("vs float32 replay: ") for note in row.notes)
    assert sorted(p.rsplit("/", 1)[1] for p in result.inputs) == ["input_00_ws", "input_01_expert_counts",
                                                                   "input_02_w_down"]


def test_clean_tasks_are_correct_on_their_inputs_even_downstream_of_the_fault(faulty):
    same_stage = replay(faulty, "expert_down", owner=0)
    assert same_stage.verdict == CORRECT and not same_stage.culprit
    (row,) = same_stage.outputs.itertuples()
    assert row.verdict == "pass" and row.max_abs == 0.0  # the same operator on the same inputs: bit-exact
    assert row.f64_verdict == "pass" and 0 < row.f64_max_abs < 1e-5  # float64 differs by float32 rounding only
    records = open_dump(faulty).records()
    downstream = records[(records["stage"] == "combine")]
    for task_id in sorted(set(downstream["task_id"])):  # fed the wrong ys, each computes right: look upstream
        assert replay(faulty, "combine", task_id=int(task_id)).verdict == CORRECT


def test_json_document_of_a_replay(faulty):
    document = replay(faulty, "expert_down", task_id=5).to_dict()
    assert document["verdict"] == "wrong on its own inputs" and document["task_id"] == 5
    (output,) = document["outputs"]
    assert set(output) >= {"name", "verdict", "max_abs", "max_rel", "cosine", "float64"}
    assert output["name"] == "ys" and output["verdict"] == "fail" and output["float64"]["verdict"] == "fail"


def test_bfloat16_dump_replays_exactly_in_its_dtype_and_close_in_float64(tmp_path):
    block = MoEBlock(DemoConfig(dtype=torch.bfloat16, tokens=24))
    with tensor_dump(TensorDumpConfig(tmp_path, level="L1", kernel_names="moe_router", stages="norm")):
        block(block.make_input())
    result = replay(tmp_path, "norm", task_id=1)
    (row,) = result.outputs.itertuples()
    assert result.verdict == CORRECT and row.dtype == "bfloat16" and row.max_abs == 0.0
    assert row.f64_verdict == "pass" and row.f64_max_abs > 0  # bf16 rounding, within bfloat16's tolerance
    assert (row.rtol, row.atol) == (1.6e-2, 1e-2)


def test_bad_selectors_list_what_exists(faulty):
    with pytest.raises(ValueError, match=re.escape("no stage 'nope' in the dump; stages: combine, expert_down, "
                                                   "expert_up, unpermute")):
        replay(faulty, "nope", task_id=0)
    with pytest.raises(ValueError, match=re.escape("stage 'expert_down' has no task of owner 9; owners: 0, 1, 2, 3")):
        replay(faulty, "expert_down", owner=9)
    with pytest.raises(ValueError, match=re.escape("stage 'combine' has no task 2; tasks: 13, 14, 15, 16, 17")):
        replay(faulty, "combine", task_id=2)
    with pytest.raises(ValueError, match=re.escape("stage 'combine' is not in invocation 4; invocations: 0")):
        replay(faulty, "combine", task_id=13, invocation=4)
    with pytest.raises(ValueError, match="exactly one of task_id= and owner="):
        replay(faulty, "combine", task_id=13, owner=1)
    with pytest.raises(ValueError, match=r"rtol must be a finite number >= 0, got nan"):
        replay(faulty, "combine", task_id=13, rtol=float("nan"))


# --------------------------------------------------------------------------- user references
def _tiny_dump(root, *, scale: float = 2.0):
    """A kernel no source knows: ``b[rows] = a[rows] * scale`` (a kernel that should double)."""
    a = TensorSpec("a", (8, 4), torch.float32, 0, ("row", "col"))
    b = TensorSpec("b", (8, 4), torch.float32, 1, ("row", "col"))

    def scaled(tile):
        tile.params[1][tile.rows] = tile.params[0][tile.rows] * scale

    kernel = MegaKernel(Graph([OperatorNode("double", "vector", (a,), (b,), scaled, SplitSpec(((0, 0),), (0,)), 4)]),
                        name="tiny")
    with tensor_dump(TensorDumpConfig(root, level="L1", stages="double")):
        kernel.launch([torch.arange(32, dtype=torch.float32).reshape(8, 4), torch.zeros(8, 4)])


def double(tile):
    """The golden: doubles its rows."""
    tile.params[1][tile.rows] = tile.params[0][tile.rows] * 2


def test_a_user_reference_callable_judges_an_unknown_kernel(tmp_path):
    _tiny_dump(tmp_path / "right")
    _tiny_dump(tmp_path / "wrong", scale=2.001)
    with pytest.raises(ValueError, match=re.escape("no reference for kernel 'tiny' stage 'double': pass reference=fn")):
        replay(tmp_path / "right", "double", task_id=1)
    right = replay(tmp_path / "right", "double", task_id=1, reference=double)
    assert right.verdict == CORRECT and right.reference == "reference="
    wrong = replay(tmp_path / "wrong", "double", task_id=1, reference=double)
    assert wrong.verdict == WRONG
    (row,) = wrong.outputs.itertuples()
    assert row.max_abs == pytest.approx(31 * 0.001, rel=1e-3)  # rows 4..7 hold 16..31: worst 31 * 2.001 vs 31 * 2
    assert replay(tmp_path / "wrong", "double", task_id=1, reference="tests.replay.test_replay:double").culprit


def test_a_registered_reference_is_used_for_its_kernel_and_stage(tmp_path):
    _tiny_dump(tmp_path)
    try:
        register_reference("tiny", "double", double)
        assert replay(tmp_path, "double", task_id=0).verdict == CORRECT
        register_reference("tiny", "double", lambda tile: double(tile) or tile.params[1][tile.rows].add_(1))
        assert replay(tmp_path, "double", task_id=0).verdict == WRONG  # the golden disagrees now
    finally:
        clear_references()
    with pytest.raises(TypeError, match="a replay reference must be a tile function"):
        register_reference("tiny", "double", 42)


def test_a_reference_that_fails_is_named(tmp_path):
    _tiny_dump(tmp_path)

    def broken(tile):
        raise KeyError("no such weight")

    with pytest.raises(ValueError, match=re.escape("the reference (reference=) failed on task 0 of stage 'double': "
                                                   "KeyError: 'no such weight'")):
        replay(tmp_path, "double", task_id=0, reference=broken)


@pytest.mark.parametrize("options, message", [
    ({"io": "output"}, "the dump holds no inputs of task 1 of stage 'norm' (dumped with io='output'?)"),
    ({"io": "input"}, "the dump holds no outputs of task 1 of stage 'norm' (dumped with io='input'?)"),
    ({"max_bytes_per_tensor": 64}, "input 'x' of task 1 is truncated"),
])
def test_a_dump_without_whole_inputs_and_outputs_is_refused(tmp_path, options, message):
    block = MoEBlock(DemoConfig(tokens=16))
    with tensor_dump(TensorDumpConfig(tmp_path, level="L1", kernel_names="moe_router", stages="norm", **options)):
        block(block.make_input())
    with pytest.raises(ValueError, match=re.escape(message)):
        replay(tmp_path, "norm", task_id=1)


def test_an_l0_dump_is_refused(tmp_path):
    block = MoEBlock(DemoConfig(tokens=16))
    with tensor_dump(TensorDumpConfig(tmp_path, kernel_names="moe_router")):
        block(block.make_input())
    with pytest.raises(ValueError, match=re.escape("replay needs L1 (task-boundary) records; this dump holds none")):
        replay(tmp_path, "norm", task_id=1)
