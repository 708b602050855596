"""Every chunk ends with the Zarr v3 ``crc32c`` codec: zarr-python, tensorstore and our reader detect a flipped byte."""

from __future__ import annotations

import json
from pathlib import Path

import google_crc32c
import numpy as np
import pytest
import zarr

from megadump_zarr.layout.write_model import ArrayWrite, InvocationWrite, WindowWrite
from megadump_zarr.read.dump import open_dump
from megadump_zarr.store.writer import WindowWriter

INV = "invocation_000000_forward"
COMPRESSORS = ["default", "none", "zstd-1"]


def _write(root: Path, compressor: str) -> Path:
    """A committed window holding one 4-chunk float32 array ``a``; returns the array's directory."""
    data = np.arange(64 * 8, dtype=np.float32).reshape(64, 8)
    inv = InvocationWrite(INV, {"invocationId": 0}, [], [ArrayWrite("a", data, ("r", "c"), {"name": "a"})])
    WindowWriter(root, compressor=compressor, chunk_bytes=16 * 8 * 4).write_window(
        WindowWrite(0, 0, {"level": "L0"}, [inv])
    )
    return root / "rank_0" / "window_0000" / INV / "a"


def _flip(chunk: Path, position: int) -> None:
    raw = bytearray(chunk.read_bytes())
    raw[position] ^= 0x10
    chunk.write_bytes(bytes(raw))


@pytest.mark.parametrize("compressor", COMPRESSORS)
def test_chunks_end_with_their_crc32c(tmp_path, compressor):
    array = _write(tmp_path, compressor)
    assert json.loads((array / "zarr.json").read_bytes())["codecs"][-1] == {"name": "crc32c"}
    chunks = sorted(p for p in array.iterdir() if p.name != "zarr.json")
    assert len(chunks) == 4
    for chunk in chunks:
        raw = chunk.read_bytes()
        assert raw[-4:] == int(google_crc32c.value(raw[:-4])).to_bytes(4, "little")
    np.testing.assert_array_equal(zarr.open_array(array, mode="r")[:], np.arange(512, dtype=np.float32).reshape(64, 8))


@pytest.mark.parametrize("compressor", COMPRESSORS)
@pytest.mark.parametrize("where", ["payload", "checksum"])
def test_zarr_python_rejects_a_flipped_byte(tmp_path, compressor, where):
    array = _write(tmp_path, compressor)
    chunk = array / "c.2.0"
    _flip(chunk, -2 if where == "checksum" else chunk.stat().st_size // 2)
    opened = zarr.open_array(array, mode="r")
    np.testing.assert_array_equal(opened[:32], np.arange(256, dtype=np.float32).reshape(32, 8))  # other chunks read
    with pytest.raises(ValueError, match="checksum do not match"):
        opened[:]


@pytest.mark.parametrize("compressor", COMPRESSORS)
def test_tensorstore_rejects_a_flipped_byte(tmp_path, compressor):
    ts = pytest.importorskip("tensorstore")
    array = _write(tmp_path, compressor)
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(array)}}
    assert ts.open(spec).result().read().result().shape == (64, 8)
    chunk = array / "c.1.0"
    _flip(chunk, chunk.stat().st_size - 6)
    with pytest.raises(ValueError, match="Digest mismatch"):
        ts.open(spec).result().read().result()


def test_our_reader_rejects_a_flipped_byte(tmp_path):
    array = _write(tmp_path, "default")
    dump = open_dump(tmp_path)
    path = dump.records()["path"].iloc[0]
    np.testing.assert_array_equal(dump.record_array(path).values[:16], np.arange(128, dtype=np.float32).reshape(16, 8))
    _flip(array / "c.3.0", 10)
    with pytest.raises(ValueError, match="checksum"):
        open_dump(tmp_path).record_array(path).values


def test_fsspec_backends_store_the_same_sealed_chunks(tmp_path, memory_url):
    import fsspec

    local = _write(tmp_path, "default")
    data = np.arange(64 * 8, dtype=np.float32).reshape(64, 8)
    inv = InvocationWrite(INV, {"invocationId": 0}, [], [ArrayWrite("a", data, ("r", "c"), {"name": "a"})])
    WindowWriter(memory_url, chunk_bytes=16 * 8 * 4).write_window(WindowWrite(0, 0, {"level": "L0"}, [inv]))
    fs = fsspec.filesystem("memory")
    base = memory_url[len("memory://") :]
    for i in range(4):
        assert fs.cat_file(f"/{base}/rank_0/window_0000/{INV}/a/c.{i}.0") == (local / f"c.{i}.0").read_bytes()
