"""Issue 23 item 8 in the packs layout: a pack shard valid elsewhere but not here (copied from another window, or
swapped with another shard of the same shape), each with a valid crc32c.

A shard's index crc32c covers only offsets and sizes, the same for every shard of one shape, and each inner chunk's
crc32c holds; the window inventory therefore lists each shard's digest (``layout.inventory.chunk_digest``) and
plain ``verify`` names the shard whose digest is not the one recorded for its place. ``--deep`` names them too
(the pack's per-row statistics disagree with the data).
"""

from __future__ import annotations

import json
from pathlib import Path
import shutil

import numpy as np
import pytest
import torch

from megadump_zarr.layout.write_model import ArrayWrite, GroupWrite, InvocationWrite, WindowWrite
from megadump_zarr.store.writer import WindowWriter
from megadump_zarr.verify import verify_dump

from tests._tasks import task_attrs

ELSEWHERE = "but the window inventory records"  # the inventory binds every shard (``layout.inventory``)
PACK = "invocation_000000_forward/stages/s/pack_0000"


def _task(task_id: int, base: float) -> tuple[GroupWrite, list[ArrayWrite]]:
    path = f"stages/s/task_{task_id:06d}"
    attrs = task_attrs(task_id)
    arrays = [
        ArrayWrite(
            f"{path}/input_{index:02d}_{name}",
            np.full((2, 3), sign * (base + task_id), dtype=np.float32),
            ("row", "col"),
            {"name": name, "io": "input", "index": index, "paramPosition": index, "capturePhase": "before"},
        )
        for index, (name, sign) in enumerate((("w", 1.0), ("v", -1.0)))
    ]
    return GroupWrite(path, attrs, task=True), arrays


@pytest.fixture
def hand(tmp_path: Path) -> Path:
    """Two windows, each one pack of two tasks with two same-shaped record arrays (w, v)."""
    return _write_hand(tmp_path / "dump")


def _write_hand(root: Path) -> Path:
    with WindowWriter(root, pack=True) as writer:
        for window in (0, 1):
            tasks = [_task(1, 10.0 * window), _task(2, 10.0 * window)]
            invocation = InvocationWrite(
                "invocation_000000_forward",
                {"invocationId": window, "level": "L1"},
                [GroupWrite("stages/s", {"stage": "s"})] + [g for g, _ in tasks],
                [a for _, arrays in tasks for a in arrays],
            )
            writer.write_window(WindowWrite(0, window, {"level": "L1"}, [invocation]))
    return root


def _shard(root: Path, window: int, array: str) -> Path:
    [shard] = [p for p in (root / f"rank_0/window_{window:04d}" / PACK / array).iterdir() if p.name != "zarr.json"]
    return shard


def _swap(a: Path, b: Path) -> None:
    first, second = a.read_bytes(), b.read_bytes()
    a.write_bytes(second)
    b.write_bytes(first)


def test_deep_names_two_swapped_shards(hand: Path) -> None:
    assert verify_dump(hand).ok
    _swap(_shard(hand, 0, "input_00_w"), _shard(hand, 0, "input_01_v"))
    problems = verify_dump(hand, deep=True).problems
    stats = [p for p in problems if "attributes.stats." in p.what]
    assert {p.key.rpartition("/")[0].rpartition("/")[2] for p in stats} == {"input_00_w", "input_01_v"}, problems
    assert all(ELSEWHERE in p.what for p in problems if p not in stats), problems


def _shard_key(root: Path, shard: Path) -> str:
    return shard.relative_to(root).as_posix()


def test_plain_verify_names_two_swapped_shards(hand: Path) -> None:
    w, v = _shard(hand, 0, "input_00_w"), _shard(hand, 0, "input_01_v")
    _swap(w, v)
    problems = verify_dump(hand).problems
    assert sorted(p.key for p in problems) == sorted([_shard_key(hand, w), _shard_key(hand, v)]), problems
    assert all(ELSEWHERE in p.what and "a chunk from elsewhere" in p.what for p in problems), problems


def test_plain_verify_names_a_shard_copied_from_another_window(hand: Path) -> None:
    shard = _shard(hand, 0, "input_00_w")
    shutil.copyfile(_shard(hand, 1, "input_00_w"), shard)
    problems = verify_dump(hand).problems
    assert [p.key for p in problems] == [_shard_key(hand, shard)], problems
    assert ELSEWHERE in problems[0].what


def test_a_pack_window_is_bound_by_its_inventory_alone(hand: Path) -> None:
    """The writer records no shard digest in a record array's document (format 10: the window inventory lists each
    shard's), and a verified pack window has no "not bound" note."""
    doc = json.loads((_shard(hand, 0, "input_00_w").parent / "zarr.json").read_text())
    assert "shardCrc32c" not in doc["attributes"], doc["attributes"]
    report = verify_dump(hand)
    assert report.ok and all(not w.notes for w in report.windows), report


@pytest.fixture(scope="module")
def dumped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real ``TensorDumpConfig(layout="packs")`` L1 dump of two steps (two windows, the same packs)."""
    from megadump_zarr import TensorDumpConfig, schedule, tensor_dump
    from megadump_zarr.demo.model import DemoConfig, MoEBlock
    from tests.reliability._helpers import train_step

    root = tmp_path_factory.mktemp("pack-substitution") / "l1"
    torch.manual_seed(1)  # the routing decides which tasks share a pack
    block = MoEBlock(DemoConfig(tokens=32, d_model=8))
    config = TensorDumpConfig(
        root, level="L1", kernel_names="moe_experts", stages=("expert_up", "unpermute"), layout="packs"
    )
    with tensor_dump(config, schedule(wait=0, warmup=0, active=1, repeat=2)) as dumper:
        for _ in range(2):
            train_step(block)
            dumper.step()
    return root


def _copied_from_window_1(dumped: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the dump whose first pack shard of window 0 that differs from window 1's is window 1's."""
    root = tmp_path / "l1"
    shutil.copytree(dumped, root)
    for shard in sorted((root / "rank_0/window_0000").glob("*/stages/*/pack_*/*/c*")):
        if shard.parent.name in ("task_id", "owner_id", "core_id") or not shard.is_file():
            continue
        inside = shard.relative_to(root / "rank_0/window_0000").parts[1:]  # the invocation's number differs
        other = next((root / "rank_0/window_0001").glob("/".join(("*", *inside))), shard)
        doc = json.loads((shard.parent / "zarr.json").read_text())
        theirs = other.parent / "zarr.json"
        if other != shard and theirs.is_file() and json.loads(theirs.read_text())["shape"] == doc["shape"]:
            if other.read_bytes() != shard.read_bytes():
                shutil.copyfile(other, shard)
                return root, shard
    pytest.fail("no pack shard of window 0 with a same-shaped, different one in window 1")


def test_deep_names_a_real_shard_copied_from_another_window(dumped: Path, tmp_path: Path) -> None:
    assert verify_dump(dumped).ok
    root, shard = _copied_from_window_1(dumped, tmp_path)
    problems = verify_dump(root, deep=True).problems
    assert any("attributes.stats." in p.what for p in problems), problems
    assert all("attributes.stats." in p.what or ELSEWHERE in p.what for p in problems), problems


def test_plain_verify_names_a_real_shard_copied_from_another_window(dumped: Path, tmp_path: Path) -> None:
    root, shard = _copied_from_window_1(dumped, tmp_path)
    problems = verify_dump(root).problems
    assert [p.key for p in problems] == [_shard_key(root, shard)], problems
    assert ELSEWHERE in problems[0].what
