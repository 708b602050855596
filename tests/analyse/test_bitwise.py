"""``compare(a, b, bitwise=True)``: any differing bit fails; the worker-dependent accumulation order of the
runtime (``AccumulationOrder``) is found per task and core over many steps by ``bitwise_map``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from megadump_zarr import TensorDumpConfig, tensor_dump
from megadump_zarr.analyse import compare
from megadump_zarr.analyse.bitwise import bitwise_map, bitwise_row
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from megadump_zarr.runtime import AccumulationOrder

STEPS = 3
EXPERTS = (0, 1, 2, 3)


def run(
    out: Path,
    *,
    mode: str = "statistics",
    seed: int | None = None,
    steps: int = STEPS,
    poison=None,
    dtype: torch.dtype = torch.float32,
) -> Path:
    """``steps`` forward steps of the demo block, its expert_up and expert_down outputs dumped at L1."""
    order = None if seed is None else AccumulationOrder(("expert_down",), seed=seed)
    block = MoEBlock(DemoConfig(dtype=dtype), accumulation_order=order)
    if poison is not None:
        poison(block)
    cfg = TensorDumpConfig(
        out, level="L1", kernel_names="moe_experts", stages=("expert_up", "expert_down"), io="output", mode=mode
    )
    with tensor_dump(cfg) as dumper, torch.no_grad():
        for _ in range(steps):
            block(block.make_input())
            dumper.step()
    return out


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    base = tmp_path_factory.mktemp("bitwise")
    return {
        "plain": run(base / "plain"),
        "plain2": run(base / "plain2"),
        "seed0": run(base / "seed0", seed=0),
        "seed1": run(base / "seed1", seed=1),
        "tensor": run(base / "tensor", mode="tensor"),
        "tensor_seed0": run(base / "tensor_seed0", mode="tensor", seed=0),
        "tensor_seed1": run(base / "tensor_seed1", mode="tensor", seed=1),
    }


def expert_down_task_ids(result):
    return sorted({int(t) for t in result.loc[result["stage"] == "expert_down", "task_id"]})


def test_runs_without_the_option_are_bitwise_identical(dumps):
    result = compare(dumps["plain"], dumps["plain2"], bitwise=True)
    assert len(result) == 2 * len(EXPERTS) * STEPS
    assert set(result["verdict"]) == {"pass"}
    assert set(result["note"]) == {"bitwise: statistics only in a and b; digests equal"}


def test_the_seeds_give_different_orders_to_every_expert_down_task():
    """The precondition of the next test: seeds 0 and 1 permute each expert_down task's partial sums differently."""
    for task_id, core_id in zip((4, 5, 6, 7), (0, 1, 2, 3)):
        orders = [AccumulationOrder(("expert_down",), seed=s).order(4, "expert_down", task_id, core_id) for s in (0, 1)]
        assert orders[0] != orders[1]
    assert AccumulationOrder(("expert_down",), seed=0).order(4, "expert_up", 0, 0) == [0, 1, 2, 3]


def test_a_worker_dependent_order_fails_bitwise_in_that_stage_only(dumps):
    result = compare(dumps["seed0"], dumps["seed1"], bitwise=True)
    up = result[result["stage"] == "expert_up"]
    down = result[result["stage"] == "expert_down"]
    assert len(up) == len(down) == len(EXPERTS) * STEPS
    assert set(up["verdict"]) == {"pass"}
    assert set(down["verdict"]) == {"fail"}
    assert all(n.startswith("bitwise: statistics only in a and b; digest differs (0x") for n in down["note"])
    # the default comparison is within tolerance: only the bits tell the two runs apart
    assert not compare(dumps["seed0"], dumps["seed1"])["verdict"].isin(["fail"]).any()


def test_bitwise_map_names_the_cores_and_steps(dumps):
    result = compare(dumps["seed0"], dumps["seed1"], bitwise=True)
    table = bitwise_map(result, by="core")
    assert list(table.columns) == [
        "kernel",
        "stage",
        "core_type",
        "core_id",
        "records",
        "differing",
        "steps_differing",
        "steps",
        "first_step",
        "worst_name",
    ]
    bad = table[table["differing"] > 0]
    assert set(bad["stage"]) == {"expert_down"}
    assert sorted(int(c) for c in bad["core_id"]) == [0, 1, 2, 3]
    assert set(bad["core_type"]) == {"AIC"}
    assert list(bad["differing"]) == [STEPS] * 4 and list(bad["steps"]) == [f"0-{STEPS - 1}"] * 4
    assert list(bad["first_step"]) == [0] * 4 and set(bad["worst_name"]) == {"ys"}
    good = table[table["differing"] == 0]
    assert set(good["stage"]) == {"expert_up"} and list(good["steps"]) == [""] * 4
    tasks = bitwise_map(result, by="task")
    assert sorted(int(t) for t in tasks.loc[tasks["differing"] > 0, "task_id"]) == expert_down_task_ids(result)


def test_bitwise_map_refuses_an_unknown_by(dumps):
    with pytest.raises(ValueError, match="by must be one of \\['core', 'owner', 'task'\\], got 'stage'"):
        bitwise_map(compare(dumps["plain"], dumps["plain2"], bitwise=True), by="stage")


def test_payloads_compare_by_their_bits(dumps):
    same = compare(dumps["tensor"], dumps["tensor"], bitwise=True)
    assert set(same["verdict"]) == {"pass"}
    assert set(same["note"]) == {f"bitwise: bytes equal ({n} elements)" for n in same["elements"]}
    differs = compare(dumps["tensor_seed0"], dumps["tensor_seed1"], bitwise=True)
    down = differs[differs["stage"] == "expert_down"]
    assert set(down["verdict"]) == {"fail"}
    first = down.iloc[0]
    assert first["note"].startswith(
        f"bitwise: bytes differ in {int(first['mismatches'])} of {int(first['elements'])} elements, first at ("
    )
    assert 0 < int(first["mismatches"]) <= int(first["elements"])
    assert first["worst_a"] != first["worst_b"] and abs(first["worst_a"] - first["worst_b"]) < 1e-5
    assert int(first["worst_task_id"]) == int(first["task_id"])
    assert set(differs.loc[differs["stage"] == "expert_up", "verdict"]) == {"pass"}


def test_a_payload_is_digested_against_a_statistics_side(dumps):
    """Tensor-mode A against statistics-mode B of the same run: the host digest of A's payload is B's device digest."""
    result = compare(dumps["tensor"], dumps["plain"], bitwise=True)
    assert set(result["verdict"]) == {"pass"}
    assert set(result["note"]) == {"bitwise: statistics only in b; digests equal"}
    other = compare(dumps["tensor_seed0"], dumps["seed1"], bitwise=True)
    assert set(other.loc[other["stage"] == "expert_down", "verdict"]) == {"fail"}


def nan_in_expert_2(block: MoEBlock) -> None:
    block.w_up[2, 0, 0] = float("nan")


def test_nan_payloads_with_the_same_bits_are_equal(tmp_path):
    a = run(tmp_path / "a", mode="tensor", poison=nan_in_expert_2, steps=1)
    b = run(tmp_path / "b", mode="tensor", poison=nan_in_expert_2, steps=1)
    result = compare(a, b, bitwise=True)
    assert int(result["nan_a"].max()) > 0
    assert set(result["verdict"]) == {"pass"}
    plain = compare(a, b)  # the float rules agree (same NaN positions), so this is no bitwise-only leniency
    assert set(plain["verdict"]) == {"pass"}


def test_dtypes_that_differ_fail(dumps, tmp_path):
    b16 = run(tmp_path / "b16", mode="tensor", dtype=torch.bfloat16, steps=1)
    result = compare(dumps["tensor"], b16, bitwise=True, step=0)
    assert set(result["verdict"]) == {"dtype_mismatch"}
    assert set(result["note"]) == {"bitwise: dtype float32 vs bfloat16"}


def test_bfloat16_payloads_compare_bitwise(tmp_path):
    a = run(tmp_path / "a", mode="tensor", dtype=torch.bfloat16, steps=1)
    b = run(tmp_path / "b", mode="tensor", dtype=torch.bfloat16, steps=1, seed=1)
    result = compare(a, a, bitwise=True)
    assert set(result["verdict"]) == {"pass"}
    assert "fail" in set(compare(a, b, bitwise=True)["verdict"])


def test_a_record_without_payload_or_digest_is_not_a_pass():
    row = {
        "dtype": "float32",
        "shape": (2, 3),
        "payload": False,
        "digest": None,
        "element_count": 6,
        "path": "rank_0/window_0000/x",
    }
    keys = {"name": "x", "path": "rank_0/window_0000/x"}
    result = bitwise_row(keys, None, None, row, {**row, "digest": 7})
    assert result["verdict"] == "error"
    assert result["note"] == ("bitwise: statistics only in a and b; no digest in a: the bits cannot be proven equal")
    both = bitwise_row(keys, None, None, {**row, "digest": 7}, {**row, "digest": 7})
    assert (both["verdict"], both["note"]) == ("pass", "bitwise: statistics only in a and b; digests equal")
    counts = bitwise_row(keys, None, None, {**row, "digest": 7}, {**row, "digest": 7, "element_count": 5})
    assert (counts["verdict"], counts["note"]) == (
        "fail",
        "bitwise: statistics only in a and b; element counts differ (6 vs 5)",
    )
    shape = bitwise_row(keys, None, None, row, {**row, "shape": (3, 2)})
    assert (shape["verdict"], shape["note"]) == ("shape_mismatch", "bitwise: shape (2, 3) vs (3, 2)")


def test_bitwise_refuses_tolerances_and_non_dumps(dumps):
    with pytest.raises(ValueError, match="bitwise=True compares bits, rtol do not apply"):
        compare(dumps["plain"], dumps["plain2"], bitwise=True, rtol=1e-3)
    with pytest.raises(TypeError, match="bitwise=True compares two dumps, not ndarray and ndarray"):
        compare(np.zeros(3), np.zeros(3), bitwise=True)


def test_fail_fast_stops_at_the_first_differing_record(dumps):
    result = compare(dumps["seed0"], dumps["seed1"], bitwise=True, fail_fast=True)
    assert list(result["verdict"])[-1] == "fail" and (result["verdict"] == "fail").sum() == 1
    assert result.iloc[-1]["stage"] == "expert_down" and int(result.iloc[-1]["step"]) == 0


def test_accumulation_order_is_validated():
    with pytest.raises(ValueError, match="AccumulationOrder.stages must be a non-empty tuple of stage names, got 'x'"):
        AccumulationOrder("x")
    with pytest.raises(ValueError, match="AccumulationOrder.seed must be an int >= 0, got -1"):
        AccumulationOrder(("x",), seed=-1)
    with pytest.raises(TypeError, match="accumulation_order must be an AccumulationOrder or None, got tuple"):
        MoEBlock(accumulation_order=("expert_down",))


def test_the_tile_core_id_is_the_core_the_dump_names(dumps):
    """The order depends on the core the executor runs the task on: the same core id the L1 records carry."""
    from megadump_zarr.read import open_dump

    block = MoEBlock()
    seen = {}

    def spy(stage):
        def wrap(fn):
            def tile_fn(t):
                seen[t.task.task_id] = (stage, t.core_id)
                return fn(t)

            return tile_fn

        return wrap

    for operator in block.expert_kernel.graph.topological_sort():
        if operator.name in ("expert_up", "expert_down"):
            object.__setattr__(operator, "tile_fn", spy(operator.name)(operator.tile_fn))
    with torch.no_grad():
        block(block.make_input())
    records = open_dump(dumps["plain"]).records()
    named = {int(r["task_id"]): (r["stage"], int(r["core_id"])) for _, r in records.iterrows()}
    assert named and all(seen[task] == where for task, where in named.items())
