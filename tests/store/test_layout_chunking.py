"""Chunk policy: whole rows along axis 0 up to chunk_bytes, other axes whole; chunk keys; backend basics."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from megadump_zarr.layout.write_model import ArrayWrite, InvocationWrite, WindowWrite
from megadump_zarr.store.backend import FsspecBackend, LocalBackend
from megadump_zarr.store.roots import open_backend
from megadump_zarr.store.chunking import CHUNK_KEY_SEPARATOR, chunk_shape, plan_chunks
from megadump_zarr.store.writer import WindowWriter

SEP = CHUNK_KEY_SEPARATOR


def _chunk_key(*index: int) -> str:
    """The "default" encoding's key of the chunk at ``index`` ("c", then each index after the separator)."""
    return SEP.join(["c", *map(str, index)])


def _chunk_files(array_dir: str | os.PathLike[str]) -> list[str]:
    """The stored chunk keys of an array: every file below its directory but zarr.json, as "/"-joined paths."""
    root = Path(array_dir)
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and p.name != "zarr.json")


@pytest.mark.parametrize(
    ("shape", "itemsize", "chunk_bytes", "expected"),
    [
        ((10, 4), 4, 64, (4, 4)),  # 16-byte rows, 4 per chunk
        ((10, 4), 4, 15, (1, 4)),  # a row larger than chunk_bytes still makes a chunk
        ((10, 4), 4, 1 << 20, (10, 4)),  # capped at the axis length
        ((100,), 4, 40, (10,)),  # 1-D chunks by elements
        ((100,), 2, 41, (20,)),
        ((3, 5, 7), 8, 5 * 7 * 8 * 2, (2, 5, 7)),
        ((), 8, 4, ()),  # 0-d
        ((0, 3), 4, 64, (1, 3)),  # zero-size: every dim at least 1
        ((0,), 4, 64, (1,)),
        ((5, 0), 4, 64, (5, 1)),
        ((2, 0, 3), 4, 64, (2, 1, 3)),
    ],
)
def test_chunk_shape(shape, itemsize, chunk_bytes, expected):
    assert chunk_shape(shape, itemsize, chunk_bytes) == expected


def test_chunk_plan_keys_and_rows():
    plan = plan_chunks((10, 3, 2), 4, 4 * 3 * 2 * 4)
    assert plan.chunks == (4, 3, 2)
    assert plan.count == 3
    assert [plan.key(i) for i in plan] == [f"c{SEP}0{SEP}0{SEP}0", f"c{SEP}1{SEP}0{SEP}0", f"c{SEP}2{SEP}0{SEP}0"]
    assert [plan.rows(i) for i in plan] == [(0, 4), (4, 8), (8, 10)]
    assert plan_chunks((), 4, 16).count == 1 and plan_chunks((), 4, 16).key(0) == "c"
    assert plan_chunks((0, 4), 4, 16).count == 0
    with pytest.raises(ValueError, match="chunk_bytes must be positive"):
        chunk_shape((3,), 4, 0)


def test_written_chunk_grid_follows_policy(tmp_path):
    arrays = [
        ArrayWrite("m", np.zeros((9, 6), np.float64), ("r", "c")),  # 48-byte rows
        ArrayWrite("v", np.zeros(50, np.int16), ("n",)),
    ]
    url = WindowWriter(tmp_path, chunk_bytes=100).write_window(
        WindowWrite(0, 0, {}, [InvocationWrite("inv", {}, [], arrays)])
    )
    m = json.loads(Path(url, "inv", "m", "zarr.json").read_bytes())
    v = json.loads(Path(url, "inv", "v", "zarr.json").read_bytes())
    assert m["chunk_grid"]["configuration"]["chunk_shape"] == [2, 6]
    assert v["chunk_grid"]["configuration"]["chunk_shape"] == [50]
    assert m["chunk_key_encoding"] == {"name": "default", "configuration": {"separator": SEP}}
    assert v["chunk_key_encoding"] == {"name": "default", "configuration": {"separator": SEP}}
    # 9 rows in 2-row chunks: 5 chunks along axis 0, one along axis 1; 50 int16 elements: one chunk
    assert _chunk_files(Path(url, "inv", "m")) == sorted(_chunk_key(i, 0) for i in range(5))
    assert _chunk_files(Path(url, "inv", "v")) == [_chunk_key(0)]
    if SEP == ".":  # chunk files sit beside zarr.json: no directories below the array
        assert sorted(os.listdir(Path(url, "inv", "m"))) == sorted([*(_chunk_key(i, 0) for i in range(5)), "zarr.json"])


def test_open_backend_kinds(tmp_path, memory_url):
    assert isinstance(open_backend(tmp_path), LocalBackend)
    assert isinstance(open_backend(f"file://{tmp_path}"), LocalBackend)
    assert isinstance(open_backend(memory_url), FsspecBackend)


@pytest.mark.parametrize("kind", ["local", "memory"])
def test_backend_contract(tmp_path, memory_url, kind):
    backend = open_backend(tmp_path / "b" if kind == "local" else memory_url)
    assert backend.get("a/b/zarr.json") is None and not backend.exists("a/b/zarr.json")
    payload = np.arange(10, dtype=np.uint8)
    backend.put("a/b/c/0", payload)
    backend.put_many([("a/x", b"1"), ("a/y", memoryview(b"22"))])
    backend.put("a/b/zarr.json", b"{}", atomic=True)
    backend.put("a/b/zarr.json", b'{"v":2}', atomic=True)
    assert backend.get("a/b/c/0") == payload.tobytes()
    assert backend.get("a/x") == b"1" and backend.get("a/y") == b"22"
    assert backend.get("a/b/zarr.json") == b'{"v":2}'
    assert backend.exists("a/b/zarr.json")
    backend.claim("w/window_0000")
    backend.put("w/window_0000/zarr.json", b"{}")
    with pytest.raises(FileExistsError):
        backend.claim("w/window_0000")
    assert backend.location("w/window_0000").endswith("w/window_0000")
    if kind == "local":
        leftovers = [n for n in os.listdir(tmp_path / "b" / "a" / "b") if n.startswith(".")]
        assert leftovers == []  # atomic writes leave no temp files
