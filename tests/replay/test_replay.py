"""``replay``: a task with an injected fault is wrong on its own inputs, clean tasks are right, the
float64 replay runs too, and user references (callable, registered, module:attr) replace the demo's."""

from __future__ import annotations

import re

import pytest
import torch

from megadump_zarr import TensorDumpConfig, open_dump, tensor_dump
from megadump_zarr.analyse.verdict import tolerance_for
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
    assert (row.rtol, row.atol) == tolerance_for("float32") == (1.3e-6, 1e-5)  # float32's defaults
    assert any(note.startswith("vs float32 replay: ") for note in row.notes)
    assert sorted(p.rsplit("/", 1)[1] for p in result.inputs) == [
        "input_00_ws",
        "input_01_expert_counts",
        "input_02_w_down",
    ]


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
    assert (row.rtol, row.atol) == tolerance_for("bfloat16")  # the table's bfloat16 defaults


def test_bad_selectors_list_what_exists(faulty):
    with pytest.raises(
        ValueError, match=re.escape("no stage 'nope' in the dump; stages: combine, expert_down, expert_up, unpermute")
    ):
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

    kernel = MegaKernel(
        Graph([OperatorNode("double", "vector", (a,), (b,), scaled, SplitSpec(((0, 0),), (0,)), 4)]), name="tiny"
    )
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

    with pytest.raises(
        ValueError,
        match=re.escape("the reference (reference=) failed on task 0 of stage 'double': KeyError: 'no such weight'"),
    ):
        replay(tmp_path, "double", task_id=0, reference=broken)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"io": "output"}, "the dump holds no inputs of task 1 of stage 'norm' (io or tensor_names filters?)"),
        ({"io": "input"}, "the dump holds no outputs of task 1 of stage 'norm' (io or tensor_names filters?)"),
        ({"max_bytes_per_tensor": 64}, "input 'x' of task 1 is truncated"),
    ],
)
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


# --------------------------------------------------------------------------- QA regressions
def test_an_expert_with_no_tokens_replays_as_correct(tmp_path):
    """One token, three experts: two experts get empty (0 x d_model) views, which must replay, not crash."""
    block = MoEBlock(DemoConfig(tokens=1, n_experts=3))
    with tensor_dump(
        TensorDumpConfig(tmp_path, level="L1", kernel_names="moe_experts", stages=("expert_up", "expert_down"))
    ):
        block(block.make_input())
    records = open_dump(tmp_path).records()
    empty = records[(records["stage"] == "expert_up") & (records["name"] == "xs") & (records["bytes"] == 0)]
    assert len(empty) == 2
    for owner in empty["owner_id"]:
        for stage in ("expert_up", "expert_down"):
            result = replay(tmp_path, stage, owner=int(owner))
            (row,) = result.outputs.itertuples()
            assert result.verdict == CORRECT and row.verdict == "pass" and row.mismatches == 0


@pytest.fixture(scope="module")
def filtered(tmp_path_factory):
    """combine's input ``ws`` filtered out by tensor_names: replaying with zeros would blame a clean task."""
    root = tmp_path_factory.mktemp("filtered")
    block = MoEBlock(DemoConfig())
    with tensor_dump(
        TensorDumpConfig(
            root, level="L1", kernel_names="moe_experts", stages="combine", tensor_names=("x", "gate", "out")
        )
    ):
        block(block.make_input())
    return root, block


def test_a_task_whose_inputs_were_filtered_out_is_refused_not_blamed(filtered):
    root, block = filtered
    with pytest.raises(
        ValueError,
        match=re.escape(
            "the dump lacks 'ws' (input 1, parameter 4) of task 13 of stage 'combine' (tensor_names or io filters?): "
            "replay needs every input of the task (a missing one would be replayed as zeros)"
        ),
    ):
        replay(root, "combine", task_id=13)
    (combine,) = [o for o in block.expert_kernel.graph.operators if o.name == "combine"]
    with pytest.raises(ValueError, match=re.escape("the dump lacks input 1 of task 13 of stage 'combine'")):
        replay(root, "combine", task_id=13, reference=combine.tile_fn)  # a bare tile function: a gap in the indices


def test_owner_on_a_stage_not_split_by_owner_says_so(faulty):
    with pytest.raises(
        ValueError,
        match=re.escape(
            "stage 'combine' is not split by owner (its tasks have no owner id): choose a task by its id "
            "(task_id=, --task); tasks: 13, 14, 15, 16, 17"
        ),
    ):
        replay(faulty, "combine", owner=0)


def test_a_truncated_output_is_judged_on_its_prefix_and_says_so(tmp_path):
    """Inputs 2x4 (32 bytes, whole), outputs 2x16 (128 bytes) capped at 64: the prefix is judged and noted."""
    specs = (TensorSpec("a", (8, 4), torch.float32, 0), TensorSpec("b", (8, 16), torch.float32, 1))

    def repeat(tile):
        tile.params[1][tile.rows] = tile.params[0][tile.rows].repeat(1, 4)

    def wrong_in_task_1(tile):
        repeat(tile)
        if tile.start == 2:
            tile.params[1][tile.rows][0, 1] += 1

    kernel = MegaKernel(
        Graph([OperatorNode("rep", "vector", specs[:1], specs[1:], wrong_in_task_1, SplitSpec(((0, 0),), (0,)), 2)]),
        name="tiny",
    )
    with tensor_dump(TensorDumpConfig(tmp_path, level="L1", stages="rep", max_bytes_per_tensor=64)):
        kernel.launch([torch.arange(32, dtype=torch.float32).reshape(8, 4), torch.zeros(8, 16)])
    clean, culprit = (
        replay(tmp_path, "rep", task_id=0, reference=repeat),
        replay(tmp_path, "rep", task_id=1, reference=repeat),
    )
    assert clean.verdict == CORRECT and culprit.verdict == WRONG
    assert culprit.outputs.iloc[0]["max_abs"] == 1.0
    assert "truncated: judged on its first 16 of 32 elements (max_bytes_per_tensor)" in clean.outputs.iloc[0]["notes"]


def test_a_golden_kernel_of_another_size_and_dtype_replays_in_the_dumps_own_shapes(tmp_path):
    """The user's golden is the float32 model at its default size; the dump is bfloat16 with 24 tokens: the
    dumped parameters' declared shapes and dtypes define the replay, the golden supplies the operator."""
    block = MoEBlock(DemoConfig(tokens=24, dtype=torch.bfloat16))
    with inject_fault(block.expert_kernel, "expert_up", owner=1, delta=0.5):
        with tensor_dump(TensorDumpConfig(tmp_path, level="L1", kernel_names="moe_experts", stages="expert_up")):
            block(block.make_input())
    golden = MoEBlock(DemoConfig()).expert_kernel  # float32, 37 tokens
    clean, culprit = (replay(tmp_path, "expert_up", owner=o, reference=golden) for o in (0, 1))
    assert clean.verdict == CORRECT and clean.outputs.iloc[0]["max_abs"] == 0.0
    assert culprit.verdict == WRONG and culprit.outputs.iloc[0]["dtype"] == "bfloat16"


def test_ids_straight_from_records_select_the_task(faulty):
    records = open_dump(faulty).records()
    row = records[(records["stage"] == "expert_down") & (records["owner_id"] == 1)].iloc[0]
    result = replay(
        faulty,
        row["stage"],
        task_id=row["task_id"],
        invocation=row["invocation"],
        rank=row["rank"],
        window=row["window"],
    )  # numpy integers
    assert result.verdict == WRONG and result.task_id == 5
    assert replay(faulty, "expert_down", owner=row["owner_id"]).task_id == 5
