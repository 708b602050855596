"""``verify`` checks a packed window as it is stored: its pack arrays, never the per-task tree of task groups, record
arrays and row coordinates the packs once stood for (``expand_window``, ``expand_pack``: every step of that tree
raises here).

A packed record is found at its (pack array, row) as the readers find it (``read.pack_record``); its chunk is its
row's inner chunk, split from its shard read once; ``--deep`` reads it from its pack array.
"""

from __future__ import annotations

import importlib
from pathlib import Path
import shutil
from typing import Any

import numpy as np
import pytest

from megadump_zarr.layout.write_model import ArrayWrite, GroupWrite, InvocationWrite, WindowWrite
from megadump_zarr.store.packs import decode_index, index_nbytes
from megadump_zarr.store.writer import WindowWriter
from megadump_zarr.verify import verify_dump

from tests._tasks import task_attrs

DATA = Path(__file__).parents[1] / "read" / "data" / "format10" / "packs"
WINDOW = "rank_0/window_0000"
PACK = "invocation_000000_forward/stages/combine/pack_0000"  # combine's tasks 13-16, one shard per record
TREE = (  # the per-task tree of a packed window and each step that builds or reads it
    ("megadump_zarr.read.pack_rows", "expand_window"),
    ("megadump_zarr.read.pack_rows", "expand_torn"),
    ("megadump_zarr.read.catalog", "expand_window"),
    ("megadump_zarr.read.catalog", "expand_torn"),
    ("megadump_zarr.read.pack_nodes", "expand_packs"),
    ("megadump_zarr.read.pack_nodes", "replace_packs"),
    ("megadump_zarr.read.pack_nodes", "expand_pack"),
    ("megadump_zarr.store.packs", "expand_pack"),
    ("megadump_zarr.store.packs", "range_chunk"),
)
TREE_METHODS = ("array", "shard_chunks", "pack_rows")  # of read.pack_rows.PackedWindow


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("verify expanded a packed window into its per-task tree")


@pytest.fixture(autouse=True)
def no_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every step of the per-task tree that is still in the code raises (what is gone cannot be called)."""
    for module_name, name in TREE:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        monkeypatch.setattr(module, name, _refuse, raising=False)
    rows = importlib.import_module("megadump_zarr.read.pack_rows")
    for name in TREE_METHODS:
        if hasattr(rows.PackedWindow, name):
            monkeypatch.setattr(rows.PackedWindow, name, _refuse)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return Path(shutil.copytree(DATA, tmp_path / "packs"))


def _shard_entry(shard: Path, slot: int, count: int) -> tuple[int, int]:
    raw = shard.read_bytes()
    entry = decode_index(raw[-index_nbytes(count) :], count, str(shard))[slot]
    assert entry is not None
    return entry


def test_a_packed_dump_verifies_without_its_tree(root: Path) -> None:
    for deep in (False, True):
        report = verify_dump(root, deep=deep)
        assert report.ok, report.problems
        (window,) = report.windows
        assert window.chunks >= 4 and window.arrays >= 4  # the packed records' chunks among them


def test_a_flipped_inner_chunk_is_named_by_its_task(root: Path) -> None:
    shard = root / WINDOW / PACK / "output_00_out" / "c.0.0.0"
    offset, nbytes = _shard_entry(shard, 1, 4)  # task 14's row
    raw = bytearray(shard.read_bytes())
    raw[offset + nbytes // 2] ^= 0xFF
    shard.write_bytes(bytes(raw))
    problems = verify_dump(root).problems
    key = f"{WINDOW}/invocation_000000_forward/stages/combine/task_000014/output_00_out/c.0.0"
    assert [p.key for p in problems] == [key], problems
    assert "crc32c checksum mismatch" in problems[0].what


def test_a_missing_pack_array_chunk_is_named(root: Path) -> None:
    (root / WINDOW / PACK / "task_id" / "c.0").unlink()
    problems = verify_dump(root).problems
    assert [p.key for p in problems] == [f"{WINDOW}/{PACK}/task_id/c"], problems
    assert "chunk is missing" in problems[0].what


def _task(task_id: int) -> tuple[GroupWrite, list[ArrayWrite]]:
    path = f"stages/s/task_{task_id:06d}"
    data = np.zeros((64, 16), dtype=np.float32) + task_id  # compressible
    attrs = {"name": "w", "io": "input", "index": 0, "paramPosition": 0, "capturePhase": "before"}
    return GroupWrite(path, task_attrs(task_id), task=True), [ArrayWrite(f"{path}/input_00_w", data, ("r", "c"), attrs)]


def _unchecked(root: Path) -> Path:
    """A packed window of two tasks whose records carry no checksum (compressed by the default compressor)."""
    with WindowWriter(root, pack=True, checksum=False) as writer:
        tasks = [_task(1), _task(2)]
        invocation = InvocationWrite(
            "invocation_000000_forward",
            {"invocationId": 0, "level": "L1"},
            [GroupWrite("stages/s", {"stage": "s"})] + [g for g, _ in tasks],
            [a for _, arrays in tasks for a in arrays],
        )
        writer.write_window(WindowWrite(0, 0, {"level": "L1"}, [invocation]))
    return root


def test_deep_recomputes_each_row_and_a_row_that_does_not_decode_is_named(tmp_path: Path) -> None:
    root = _unchecked(tmp_path / "dump")
    report = verify_dump(root, deep=True)
    assert report.ok, report.problems
    assert report.windows[0].notes and "carry no checksum" in report.windows[0].notes[0]
    array = root / WINDOW / "invocation_000000_forward/stages/s/pack_0000/input_00_w"
    [shard] = [p for p in array.iterdir() if p.name != "zarr.json"]
    offset, nbytes = _shard_entry(shard, 1, 2)  # task 2's row
    raw = bytearray(shard.read_bytes())
    raw[offset : offset + nbytes] = bytes(nbytes)  # no blosc header: it cannot decode
    shard.write_bytes(bytes(raw))
    problems = [p for p in verify_dump(root).problems if "does not decode" in p.what]
    key = f"{WINDOW}/invocation_000000_forward/stages/s/task_000002/input_00_w/c.0.0"
    assert [p.key for p in problems] == [key], verify_dump(root).problems
