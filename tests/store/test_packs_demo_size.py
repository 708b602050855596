"""The demo's L1 dump written with ``layout="packs"`` stores no more files and no more bytes than with the
default tasks layout (issue 21): its expert tiles are ragged (each expert its own row count), and a task whose
shape is unique in its stage stays a task group (``pack_groups.MIN_PACK_TASKS``) instead of a one-row pack."""

from __future__ import annotations

from pathlib import Path

import torch

from megadump_zarr import tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from megadump_zarr.demo.run import _train_step
from megadump_zarr.dump.config import TensorDumpConfig
from megadump_zarr.read import open_dump


def _write_demo_l1(root: Path, layout: str) -> None:
    """The L1 phase of ``run_demo`` (two steps, the expert stages of experts 0 and 1) in ``layout``."""
    torch.manual_seed(0)
    block = MoEBlock(DemoConfig(tokens=37, d_model=16, n_experts=4, dtype=torch.float32, device="cpu"))
    config = TensorDumpConfig(
        root,
        level="L1",
        kernel_names=("moe_experts", "moe_experts_backward"),
        stages=("expert_up", "expert_down", "expert_up_bwd"),
        owner_ids=(0, 1),
        layout=layout,
    )
    with tensor_dump(config) as dumper:
        for _ in range(2):
            _train_step(block)
            dumper.step()


def _footprint(root: Path) -> tuple[int, int, int]:
    """``(files, bytes, directories)`` stored below ``root``."""
    files = [p for p in root.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files), sum(1 for p in root.rglob("*") if p.is_dir())


def test_demo_in_packs_layout_stores_no_more_files_or_bytes_than_tasks(tmp_path):
    _write_demo_l1(tmp_path / "tasks", "tasks")
    _write_demo_l1(tmp_path / "packs", "packs")
    tasks, packs = _footprint(tmp_path / "tasks"), _footprint(tmp_path / "packs")
    assert tasks[0] > 100  # the demo wrote its windows (189 files when this test was written)
    assert packs[0] <= tasks[0], f"packs layout stores {packs[0]} files, tasks layout {tasks[0]}"
    assert packs[1] <= tasks[1], f"packs layout stores {packs[1]} bytes, tasks layout {tasks[1]}"
    assert packs[2] <= tasks[2], f"packs layout makes {packs[2]} directories, tasks layout {tasks[2]}"
    assert not list((tmp_path / "packs").rglob("pack_*"))  # every demo tile's shape is unique in its stage
    # both read back as the same records, with the same bytes
    a, b = open_dump(tmp_path / "tasks"), open_dump(tmp_path / "packs")
    ra, rb = a.records(), b.records()
    assert ra["path"].tolist() == rb["path"].tolist() and len(ra) > 0
    for path in ra["path"].tolist()[:: max(1, len(ra) // 12)]:
        assert a.record_array(path).values.tobytes() == b.record_array(path).values.tobytes()
