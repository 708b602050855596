"""The statistics tables a bitwise compare of a statistics dump reads: decoded from their chunk files in one
pass (``read.statistics``), the same values as zarr reads, and a corrupt or missing chunk still refused."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from zarr.storage import LocalStore

from megadump_zarr import TensorDumpConfig, tensor_dump
from megadump_zarr.demo.model import MoEBlock
from megadump_zarr.read import open_dump
from megadump_zarr.read import statistics_table as st
from megadump_zarr.read.catalog import window_nodes
from megadump_zarr.read.errors import DumpIntegrityError
from megadump_zarr.read.location import get_many


def write(out: Path, steps: int = 3) -> Path:
    block = MoEBlock()
    cfg = TensorDumpConfig(
        out, level="L1", kernel_names="moe_experts", stages="expert_down", io="output", mode="statistics"
    )
    with tensor_dump(cfg) as dumper, torch.no_grad():
        for _ in range(steps):
            block(block.make_input())
            dumper.step()
    return out


def columns_of(root: Path) -> tuple[list[tuple[str, dict]], LocalStore]:
    dump = open_dump(root)
    info = dump._scan()[0]
    nodes = window_nodes(dump.store, info)
    wanted = [
        (f"{info.key}/{group}/{name}", nodes[f"{group}/{name}"])
        for group in st._table_groups(nodes)
        for name in st._COLUMNS
    ]
    return wanted, LocalStore(str(root))


def same(x: list, y: list) -> bool:
    return len(x) == len(y) and all(
        a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b)) for a, b in zip(x, y)
    )


def test_the_one_pass_read_gives_what_zarr_reads(tmp_path):
    wanted, store = columns_of(write(tmp_path / "d"))
    assert len(wanted) == 3 * len(st._COLUMNS)
    fast = st._read_columns(store, wanted)
    slow = st._read_with_zarr(store, wanted)
    assert all(same(a, b) for a, b in zip(fast, slow))
    names = fast[st._COLUMNS.index("name")]
    assert names == ["ys"] * 4
    keys = [f"{key}/c.0" for key, _ in wanted]
    assert st._local_chunks(store, keys) == get_many(store, keys)  # any store: the event-loop path


def _chunk(root: Path) -> Path:
    [chunk] = sorted(root.glob("rank_0/window_0000/invocation_000001_*/statistics/digest/c.0"))
    return chunk


def test_a_corrupt_statistics_chunk_is_refused_naming_it(tmp_path):
    root = write(tmp_path / "d")
    chunk = _chunk(root)
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0x01
    chunk.write_bytes(bytes(data))
    with pytest.raises(DumpIntegrityError, match="statistics/digest/c.0"):
        open_dump(root).records()


def test_a_missing_statistics_chunk_is_refused_naming_it(tmp_path):
    root = write(tmp_path / "d")
    _chunk(root).unlink()
    with pytest.raises(DumpIntegrityError, match="statistics/digest/c.0 .*is missing"):
        open_dump(root).records()
