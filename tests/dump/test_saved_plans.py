"""L1 plans saved before each launch, removed after commit, and the salvage of a saved buffer."""

from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pytest
import xarray as xr

from megadump_zarr import TensorDumpConfig, tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from megadump_zarr.dump.saved_plans import PLAN_SCHEMA, load_plan, records_from_plan, salvage_window
from megadump_zarr.store.writer import WindowWriter
from tests.dump._dump_helpers import open_task


def _config(root, **kw):
    return TensorDumpConfig(root, level="L1", kernel_names="moe_experts", stages=("expert_up", "expert_down"), **kw)


def test_plan_exists_during_the_launch_and_is_removed_after_commit(tmp_path):
    block = MoEBlock(DemoConfig())
    seen = []
    original = block.expert_kernel.graph.operators[0].tile_fn

    documents = []

    def spy(tile):
        seen.extend(sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.glob(".plans_*/**/zarr.json")))
        documents.extend(load_plan(p) for p in tmp_path.glob(".plans_*/rank_*"))
        original(tile)

    block.expert_kernel.graph.operators[0].tile_fn = spy
    with tensor_dump(_config(tmp_path)) as dumper:
        block(block.make_input())
    run = dumper.run_id
    assert re.fullmatch(r"\d{8}T\d{6}Z_\d+_[0-9a-f]{8}", run)
    assert seen[:2] == [
        f".plans_{run}/rank_0_window_0000_invocation_000000_forward/zarr.json",
        f".plans_{run}/zarr.json",
    ]
    assert documents[0]["runId"] == run and documents[0]["windowIndex"] == 0
    # committed: its plan and the run's (now empty) plan group are gone, no directory left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank_0", "zarr.json"]
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
    (run_dir,) = tmp_path.glob(".plans_*")
    plan_path = run_dir / "rank_0_window_0000_invocation_000000_forward"
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
    task = open_task(f"{url}/invocation_000000_forward/stages/expert_up/task_000000")
    plan_up0 = next(r for r in records if r.stage == "expert_up" and r.task_id == 0 and r.io == "output")
    raw = captured["buffer"].numpy()[plan_up0.payload_offset : plan_up0.payload_offset + plan_up0.payload_bytes]
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


def _fail_expert_down_once(block):
    """The next launch of the expert kernel fails in expert_down (a hang, as a user would see it)."""
    down = block.expert_kernel.graph.operators[1]
    original = down.tile_fn

    def hang(tile):
        down.tile_fn = original
        raise RuntimeError("simulated hang")

    down.tile_fn = hang


def test_a_later_run_never_touches_an_earlier_runs_plan(tmp_path):
    from megadump_zarr.dump.saved_plans import find_plans

    block = MoEBlock(DemoConfig())
    _fail_expert_down_once(block)
    with pytest.raises(RuntimeError, match="simulated hang"):
        with tensor_dump(_config(tmp_path)) as hung:
            block(block.make_input())
    (earlier,) = find_plans(tmp_path)
    assert earlier.run_id == hung.run_id and (earlier.rank, earlier.window_index) == (0, 0)
    before = (earlier.path / "zarr.json").read_bytes()
    with tensor_dump(_config(tmp_path)) as later:  # window 0 again: the hung run never committed it
        block(block.make_input())
    assert later.run_id != hung.run_id
    assert (earlier.path / "zarr.json").read_bytes() == before  # neither overwritten nor removed
    assert [p.run_id for p in find_plans(tmp_path)] == [hung.run_id]
    assert not list(tmp_path.glob(f".plans_{later.run_id}"))  # the later run removed only its own
    assert find_plans(tmp_path, run_id=later.run_id) == [] and len(find_plans(tmp_path, window_index=0)) == 1


def test_a_root_with_saved_plans_lists_without_zarr_warnings(tmp_path):
    import zarr

    block = MoEBlock(DemoConfig())
    with tensor_dump(_config(tmp_path)):
        block(block.make_input())
    _fail_expert_down_once(block)
    with pytest.raises(RuntimeError, match="simulated hang"):
        with tensor_dump(_config(tmp_path), schedule=None):
            block(block.make_input())
    assert len(list(tmp_path.glob(".plans_*/*/zarr.json"))) == 1  # the hung launch's plan stays
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        members = dict(zarr.open_group(str(tmp_path), mode="r").members(max_depth=None))
        tree = xr.open_datatree(str(tmp_path), engine="zarr", consolidated=False)
    assert "rank_0/window_0000" in members and any(name.startswith(".plans_") for name in members)
    assert "rank_0" in tree.children


def test_plans_with_wrong_types_are_refused_naming_the_field(tmp_path):
    block = MoEBlock(DemoConfig())
    _fail_expert_down_once(block)
    with pytest.raises(RuntimeError):
        with tensor_dump(_config(tmp_path)):
            block(block.make_input())
    (plan_dir,) = tmp_path.glob(".plans_*/rank_*")
    document = load_plan(plan_dir)
    buffer = np.zeros(document["totalBytes"], dtype=np.uint8)
    for field, value, message in (
        ("windowIndex", 1.5, "L1 plan field 'windowIndex' must be an integer, got 1.5"),
        (
            "windowIndex",
            10**20,
            "L1 plan field 'windowIndex' must be in [0, 1000000) so that readers can represent it, got 100000000000000000000",
        ),
        ("rank", True, "L1 plan field 'rank' must be an integer, got True"),
        ("step", "3", "L1 plan field 'step' must be an integer, got '3'"),
        ("direction", "sideways", "L1 plan field 'direction' must be 'forward' or 'backward', got 'sideways'"),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            salvage_window(buffer, {**document, field: value})
    with pytest.raises(ValueError, match=re.escape("window index must be in [0, 1000000)")):
        salvage_window(buffer, document, window_index=10**6)
    record = dict(document["records"][0], task_index=[1])
    with pytest.raises(ValueError, match=re.escape("L1 plan record 0 field 'task_index' must be an integer, got [1]")):
        records_from_plan({**document, "records": [record]})
    record = dict(document["records"][0], actual_shape=[2**63, 1])
    with pytest.raises(
        ValueError, match=re.escape("L1 plan record 0 field 'actual_shape' must be in [0, 9223372036854775808)")
    ):
        records_from_plan({**document, "records": [record]})
    nested = tmp_path / "nested.json"
    nested.write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(ValueError, match="cannot read L1 plan"):
        load_plan(nested)


def test_async_export_removes_each_committed_launchs_plan_and_then_the_run_group(tmp_path):
    from megadump_zarr import DiagnosticAction

    block = MoEBlock(DemoConfig())
    with tensor_dump(
        _config(tmp_path, async_export=True), schedule=lambda s: DiagnosticAction.RECORD_AND_SAVE
    ) as dumper:
        for _ in range(3):
            block(block.make_input())
            dumper.step()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank_0", "zarr.json"]
    assert sorted(p.name for p in (tmp_path / "rank_0").iterdir()) == [
        "window_0000",
        "window_0001",
        "window_0002",
        "zarr.json",
    ]


def test_a_discarded_failed_launchs_plan_outlives_its_windows_commit(tmp_path):
    from megadump_zarr import DiagnosticAction
    from megadump_zarr.dump.saved_plans import find_plans

    block = MoEBlock(DemoConfig())
    with tensor_dump(_config(tmp_path), schedule=lambda s: DiagnosticAction.RECORD) as dumper:
        _fail_expert_down_once(block)
        with pytest.raises(RuntimeError, match="simulated hang"):
            block(block.make_input())  # invocation 0 fails and is discarded; its buffer may have been saved
        block(block.make_input())  # invocation 1 is captured
        dumper.step()
    (kept,) = find_plans(tmp_path)  # window 0 committed: only invocation 1's plan went
    assert (kept.run_id, kept.window_index, kept.invocation) == (dumper.run_id, 0, "invocation_000000_forward")
    assert find_plans(tmp_path, invocation=0) == [kept] and find_plans(tmp_path, invocation=1) == []
