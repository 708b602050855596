"""L1 plans saved before each launch, removed after commit, and the salvage of a saved buffer."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import xarray as xr

from megadump_zarr import TensorDumpConfig, tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from megadump_zarr.dump.plan_io import PLAN_SCHEMA, load_plan, records_from_plan, salvage_window
from megadump_zarr.store.writer import WindowWriter


def _config(root, **kw):
    return TensorDumpConfig(root, level="L1", kernel_names="moe_experts", stages=("expert_up", "expert_down"), **kw)


def test_plan_exists_during_the_launch_and_is_removed_after_commit(tmp_path):
    block = MoEBlock(DemoConfig())
    seen = []
    original = block.expert_kernel.graph.operators[0].tile_fn

    def spy(tile):
        seen.extend(sorted(p.relative_to(tmp_path).as_posix() for p in (tmp_path / ".plans").rglob("*.json")))
        original(tile)

    block.expert_kernel.graph.operators[0].tile_fn = spy
    with tensor_dump(_config(tmp_path)):
        block(block.make_input())
    assert seen[0] == ".plans/rank_0/window_0000/invocation_000000_forward.json"
    assert not list((tmp_path / ".plans").rglob("*.json"))
    assert (tmp_path / "rank_0" / "window_0000" / "zarr.json").exists()


def test_save_plans_false_writes_none(tmp_path):
    block = MoEBlock(DemoConfig())
    with tensor_dump(_config(tmp_path, save_plans=False)):
        block(block.make_input())
    assert not (tmp_path / ".plans").exists()


def test_failed_launch_leaves_its_plan_and_the_buffer_salvages(tmp_path):
    block = MoEBlock(DemoConfig())
    captured = {}
    down = block.expert_kernel.graph.operators[1]

    def hang(tile):  # expert_down fails on expert 1: expert_up's records and expert 0's are captured
        if tile.owner_id == 1:
            raise RuntimeError("simulated hang")
        original(tile)

    original = down.tile_fn
    down.tile_fn = hang
    from megadump_zarr.dump import dumper as dumper_module

    real_cancel = dumper_module._TensorDumpCall.cancel

    def keep_buffer(self):
        captured["buffer"] = self._prepared_l1.buffer.clone()
        real_cancel(self)

    dumper_module._TensorDumpCall.cancel = keep_buffer
    try:
        with pytest.raises(RuntimeError, match="simulated hang"):
            with tensor_dump(_config(tmp_path)):
                block(block.make_input())
    finally:
        dumper_module._TensorDumpCall.cancel = real_cancel
    plan_path = tmp_path / ".plans" / "rank_0" / "window_0000" / "invocation_000000_forward.json"
    document = load_plan(plan_path)
    assert document["schema"] == PLAN_SCHEMA and document["kernelName"] == "moe_experts"
    records = records_from_plan(document)
    assert {r.stage for r in records} == {"expert_up", "expert_down"}
    assert not (tmp_path / "rank_0" / "window_0000").exists()  # discarded, as the seed does

    buffer_file = tmp_path / "buffer.bin"
    buffer_file.write_bytes(captured["buffer"].numpy().tobytes())
    window, pending = salvage_window(buffer_file, plan_path)
    pending_tasks = {(p["stage"], p["taskId"]) for p in pending}
    assert ("expert_down", 5) in pending_tasks and all(stage == "expert_down" for stage, _ in pending_tasks)
    out = tmp_path / "salvaged"
    url = WindowWriter(out).write_window(window, status="aborted")
    attrs = json.loads((out / "rank_0" / "window_0000" / "zarr.json").read_text())["attributes"]
    assert attrs["status"] == "aborted" and attrs["salvaged"] is True
    task = xr.open_zarr(f"{url}/invocation_000000_forward/stages/expert_up/task_000000")
    plan_up0 = next(r for r in records if r.stage == "expert_up" and r.task_id == 0 and r.io == "output")
    raw = captured["buffer"].numpy()[plan_up0.payload_offset: plan_up0.payload_offset + plan_up0.payload_bytes]
    np.testing.assert_array_equal(task["output_00_ws"].values.reshape(-1), raw.view(np.float32))


def test_bad_plans_are_refused(tmp_path):
    bad = tmp_path / "p.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="cannot read L1 plan"):
        load_plan(bad)
    bad.write_text(json.dumps({"schema": "other"}))
    with pytest.raises(ValueError, match="not an L1 plan"):
        load_plan(bad)
    with pytest.raises(ValueError, match="has no records"):
        load_plan({"schema": PLAN_SCHEMA, "records": []})
    with pytest.raises(ValueError, match=r"record 0 lacks"):
        records_from_plan({"schema": PLAN_SCHEMA, "records": [{"task_id": 1}]})
