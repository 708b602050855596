"""Every compressor the project offers (``megadump_zarr.codecs``: none, zstd at any level, blosc with each of
its five inner codecs and three shuffles) writes chunks that zarr-python and tensorstore both read back bit
for bit, and the array's ``zarr.json`` names that codec (so a compressor silently dropped would fail here).

tensorstore shares no code with zarr-python or with us (C++: its own codec chain), so agreement of the two
with the written values means the chunks are what the Zarr v3 codec specs say.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import zarr

from megadump_zarr.codecs import _BLOSC_CNAMES, _SHUFFLES, parse_compressor  # the grammar's own lists
from megadump_zarr.layout.write_model import ArrayWrite, InvocationWrite, WindowWrite
from megadump_zarr.store.writer import WindowWriter

INV = "invocation_000000_forward"

COMPRESSORS = [
    "none",
    "default",
    "zstd",
    "zstd-1",
    "zstd-22",
    "blosc-zstd-1",
    "blosc-lz4-9-noshuffle",
    *(f"blosc-{cname}-5-{shuffle}" for cname in _BLOSC_CNAMES for shuffle in _SHUFFLES),
]
"""The grammar's every kind, inner codec and shuffle, and the ends of each level range."""

DATA = {
    "f32": (np.arange(64 * 8, dtype=np.float32).reshape(64, 8) * np.float32(0.37) - 40).astype(np.float32),
    "i64": (np.arange(96, dtype=np.int64) * 7919 % 1000 - 500).reshape(96, 1),
    "u8": (np.arange(2048) % 251).astype(np.uint8).reshape(256, 8),
}


def _write(root: Path, compressor: str) -> dict[str, Path]:
    """One committed window holding each of :data:`DATA` (several chunks each); their directories."""
    arrays = [ArrayWrite(name, data, (f"{name}_r", f"{name}_c"), {"name": name}) for name, data in DATA.items()]
    inv = InvocationWrite(INV, {"invocationId": 0}, [], arrays)
    WindowWriter(root, compressor=compressor, chunk_bytes=512).write_window(WindowWrite(0, 0, {"level": "L0"}, [inv]))
    return {name: root / "rank_0" / "window_0000" / INV / name for name in DATA}


def _codec(doc: dict) -> dict | None:
    """The compression codec of an array document (None when the chain has no compressor)."""
    names = {"zstd", "blosc"}
    found = [codec for codec in doc["codecs"] if codec["name"] in names]
    for codec in doc["codecs"]:
        if codec["name"] == "sharding_indexed":
            found += [inner for inner in codec["configuration"]["codecs"] if inner["name"] in names]
    assert len(found) <= 1, doc["codecs"]
    return found[0] if found else None


@pytest.mark.parametrize("compressor", COMPRESSORS)
def test_zarr_python_and_tensorstore_read_every_compressor_back(tmp_path: Path, compressor: str) -> None:
    ts = pytest.importorskip("tensorstore")
    spec = parse_compressor(compressor)
    for name, where in _write(tmp_path, compressor).items():
        doc = json.loads((where / "zarr.json").read_text())
        codec = _codec(doc)
        assert (codec or {"name": "none"})["name"] == spec.kind, (name, doc["codecs"])
        if spec.kind == "zstd":
            assert codec["configuration"]["level"] == spec.level
        if spec.kind == "blosc":
            config = codec["configuration"]
            assert (config["cname"], config["clevel"], config["shuffle"]) == (spec.cname, spec.level, spec.shuffle)
        chunks = [p for p in where.rglob("*") if p.is_file() and p.name != "zarr.json"]
        assert len(chunks) > 1, (name, chunks)  # several chunks: the chain runs more than once
        expected = DATA[name]
        by_zarr = zarr.open_array(where, mode="r")[...]
        by_ts = (
            ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(where)}, "open": True}, read=True)
            .result()
            .read()
            .result()
        )
        for reader, values in (("zarr-python", by_zarr), ("tensorstore", by_ts)):
            assert values.dtype == expected.dtype and values.shape == expected.shape, (reader, name)
            assert values.tobytes() == expected.tobytes(), (reader, name, compressor)
