"""An independent reader: tensorstore's ``zarr3`` driver opens every array of the demo dumps, bit for bit.

tensorstore shares no code with zarr-python or with us (C++: its own metadata parser, codec chain,
chunk-key encoding and bfloat16/float8 types), so agreement here means the stored bytes are what the
Zarr v3 spec says, not what our reader happens to expect. Every array node is checked: records,
coordinate arrays, L0 and L1, float32, bfloat16, float8 (both formats), float16, integers, truncated
flat prefixes and arrays of many chunks.
"""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from megadump_zarr import open_dump
from megadump_zarr.store.writer import WindowWriter

ts = pytest.importorskip("tensorstore")


def _array_nodes(root: Path) -> dict[str, dict]:
    """Every array under ``root``: path relative to the root -> its ``zarr.json`` document."""
    nodes = {}
    for doc_path in sorted(root.rglob("zarr.json")):
        doc = json.loads(doc_path.read_text())
        if doc.get("node_type") == "array":
            nodes[doc_path.parent.relative_to(root).as_posix()] = doc
    return nodes


def _tensorstore_read(root: Path, rel: str) -> np.ndarray:
    spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(root / rel)}, "open": True}
    return ts.open(spec, read=True).result().read().result()


def _bytes(values: np.ndarray) -> bytes:
    return np.ascontiguousarray(values).tobytes()


def _pack_rows(root: Path, nodes: dict[str, dict]) -> dict[str, list[str]]:
    """Schema-7 pack record arrays (path relative to the root) -> the record path of each row."""
    rows = {}
    for rel, doc in nodes.items():
        pack, _, name = rel.rpartition("/")
        if not pack.rpartition("/")[2].startswith("pack_") or name in ("task_id", "task", "owner_id", "core_id"):
            continue
        tasks = nodes.get(f"{pack}/task_id", nodes.get(f"{pack}/task"))["attributes"]["tasks"]  # format 2, or 1
        stage = pack.rpartition("/")[0]
        rows[rel] = [f"{stage}/{task['group']}/{name}" for task in tasks]
    return rows


def _check_dump(root: Path) -> dict[str, int]:
    """Read every array with tensorstore and with our reader; return counts of what was covered.

    A schema-7 task-record pack is read whole by tensorstore, and each of its rows is compared with the
    record our reader serves for it."""
    dump = open_dump(root)
    records = dump.records()
    record_paths = set(records["path"])
    nodes = _array_nodes(root)
    packs = _pack_rows(root, nodes)
    in_packs = {path for paths in packs.values() for path in paths}
    assert record_paths <= set(nodes) | in_packs, "records() lists arrays that are not on disk"
    seen = {"arrays": 0, "records": 0, "truncated": 0, "multi_chunk": 0, "packed": 0}
    dtypes: set[str] = set()
    for rel, doc in nodes.items():
        theirs = _tensorstore_read(root, rel)
        assert list(theirs.shape) == doc["shape"], rel
        # The dtype tensorstore chose from the document is the one the document names.
        assert theirs.dtype.name == np.dtype(_numpy_name(doc["data_type"])).name, (rel, theirs.dtype)
        dtypes.add(doc["data_type"])
        seen["arrays"] += 1
        chunk = doc["chunk_grid"]["configuration"]["chunk_shape"]
        if any(-(-s // c) > 1 for s, c in zip(doc["shape"], chunk) if c) and rel not in packs:
            seen["multi_chunk"] += 1
        for row, path in enumerate(packs.get(rel, [])):
            seen["records"] += 1
            seen["packed"] += 1
            seen["truncated"] += _compare(dump, path, theirs[row])
        if rel not in record_paths:
            continue
        seen["records"] += 1
        seen["truncated"] += _compare(dump, rel, theirs)
    assert seen["records"] == len(record_paths), "a record was not read by tensorstore"
    seen["dtypes"] = len(dtypes)
    return seen


def _compare(dump, rel: str, theirs: np.ndarray) -> bool:
    """Our reader's record ``rel`` holds the bytes tensorstore read; returns whether it is truncated."""
    ours = dump.record_array(rel)
    if ours.attrs.get("truncated"):
        # Our reader gives the logical shape; its first capturedElements values are the stored prefix.
        captured = np.asarray(ours.values).reshape(-1)[: theirs.size]
        assert _bytes(captured.astype(theirs.dtype)) == _bytes(theirs), rel
        return True
    values = np.asarray(ours.values)
    assert values.dtype == theirs.dtype, rel
    assert _bytes(values) == _bytes(theirs), rel
    return False


def _numpy_name(data_type: str) -> str:
    return {"bfloat16": "bfloat16", "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2"}.get(
        data_type, data_type
    )


@pytest.mark.parametrize("level", ["l0", "l1"])
def test_demo_dumps_bit_exact(demo_dumps, level):
    seen = _check_dump(demo_dumps[level].root)
    assert seen["records"] > 0
    if level == "l1":  # schema 8's default layout: every task record is an array of its task group
        assert seen["packed"] == 0, seen


def test_truncated_multi_chunk_dump_bit_exact(truncated_dump):
    seen = _check_dump(truncated_dump.root)
    assert seen["truncated"] > 0, seen
    assert seen["multi_chunk"] > 0, seen


def test_float8_float16_and_nan_bits_bit_exact(tmp_path, hand):
    """float8 (both formats), float16 and bfloat16 with NaN/Inf/subnormal bit patterns, several chunks each."""
    patterns = np.arange(256, dtype=np.uint8)
    e4m3 = np.tile(patterns, 8).view(ml_dtypes.float8_e4m3fn).reshape(64, 32)
    e5m2 = np.tile(patterns, 8).view(ml_dtypes.float8_e5m2).reshape(64, 32)
    bf16 = np.arange(64 * 32, dtype=np.uint16).__mul__(31).view(ml_dtypes.bfloat16).reshape(64, 32)
    f16 = np.arange(64 * 32, dtype=np.uint16).__mul__(29).view(np.float16).reshape(64, 32)
    records = [
        hand.Record(name, data, 0, index=i)
        for i, (name, data) in enumerate([("e4m3", e4m3), ("e5m2", e5m2), ("bf16", bf16), ("f16", f16)])
    ]
    with WindowWriter(tmp_path / "root", chunk_bytes=256) as writer:
        writer.write_window(hand.window({0: records}))
    seen = _check_dump(tmp_path / "root")
    assert seen["records"] == 4 and seen["multi_chunk"] >= 4, seen
