"""The dump layer's side of the packs layout: L1 task groups are flagged for the store's task-record packs
(``layout="packs"``, opt-in since schema 8); the default layout writes a group per task."""

from __future__ import annotations

import torch

from megadump_zarr import TensorDumpConfig, tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from megadump_zarr.dump import window as window_module
from megadump_zarr.layout import schema
from megadump_zarr.layout.write_model import FORMAT_VERSION
from megadump_zarr.store import packs
from tests.dump._dump_helpers import read_json


def test_pack_storage_names_the_stores_layout():
    # one spelling of the window attribute, in the layout leaf; the dumper and the store both take it from there
    assert window_module.PACK_STORAGE is packs.PACK_STORAGE is schema.PACK_STORAGE == "task_record_packs"
    assert FORMAT_VERSION == 10


def test_l1_windows_flag_task_groups_and_stamp_the_packs_layout(tmp_path, monkeypatch):
    built = []
    real = window_module.build_window

    def spy(*args, **kwargs):
        built.append(real(*args, **kwargs))
        return built[-1]

    import megadump_zarr.dump.dumper as dumper_module

    monkeypatch.setattr(dumper_module, "build_window", spy)
    block = MoEBlock(DemoConfig(dtype=torch.float32))
    with tensor_dump(
        TensorDumpConfig(tmp_path, level="L1", kernel_names="moe_experts", stages="expert_up", layout="packs")
    ):
        block(block.make_input())
    (window,) = built
    assert window.attrs["schemaVersion"] == 10 and window.attrs["stageViewStorage"] == "task_record_packs"
    groups = window.invocations[0].groups
    assert [g.path for g in groups if g.task] == [f"stages/expert_up/task_{e:06d}" for e in range(4)]
    assert [g.path for g in groups if not g.task] == ["stages/expert_up"]
    attrs = read_json(tmp_path / "rank_0" / "window_0000" / "zarr.json")["attributes"]
    assert (attrs["schemaVersion"], attrs["stageViewStorage"]) == (10, "task_record_packs")
    # each expert's tile has its own row count (ragged): a shape unique in its stage is not packed (a one-row
    # pack stores more files and bytes than the task group), so every task stays a task group
    assert [
        p.name
        for p in sorted((tmp_path / "rank_0/window_0000/invocation_000000_forward/stages/expert_up").iterdir())
        if p.is_dir()
    ] == [f"task_{n:06d}" for n in range(4)]


def test_default_layout_is_a_group_per_task(tmp_path):
    block = MoEBlock(DemoConfig(dtype=torch.float32))
    with tensor_dump(TensorDumpConfig(tmp_path, level="L1", kernel_names="moe_experts", stages="expert_up")):
        block(block.make_input())
    attrs = read_json(tmp_path / "rank_0" / "window_0000" / "zarr.json")["attributes"]
    assert (attrs["schemaVersion"], attrs["stageViewStorage"]) == (10, "array_per_task_record")
    stage = tmp_path / "rank_0/window_0000/invocation_000000_forward/stages/expert_up"
    assert sorted(p.name for p in stage.iterdir() if p.is_dir()) == [f"task_{e:06d}" for e in range(4)]


def test_layout_is_validated(tmp_path):
    import pytest

    with pytest.raises(ValueError, match=r"unsupported layout 'pack'; expected one of \['tasks', 'packs'\]"):
        TensorDumpConfig(tmp_path, layout="pack")
    assert TensorDumpConfig(tmp_path).layout == "tasks"
