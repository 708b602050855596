"""A chunk valid elsewhere but not here is named by plain ``verify``: the window inventory
(``layout.inventory``) binds every chunk to its place.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from megadump_zarr.cli.compare_table import COLUMNS
from megadump_zarr.layout.inventory import INVENTORY_FILE
from megadump_zarr.store.writer import WindowWriter
from megadump_zarr.verify import verify_dump
from tests.read.conftest import HandRecord, hand_window

WINDOW = "rank_0/window_0000"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    records = [
        HandRecord("a", np.arange(8, dtype=np.float32).reshape(4, 2), 0),
        HandRecord("b", np.arange(8, 16, dtype=np.float32).reshape(4, 2), 0, index=1),
    ]
    with WindowWriter(tmp_path / "dump") as writer:
        writer.write_window(hand_window({1: records}))
    return tmp_path / "dump"


def test_a_fresh_dump_is_bound_everywhere(root: Path) -> None:
    """The window inventory binds every array (coordinates too): no *not bound* note on a healthy dump."""
    report = verify_dump(root)
    assert report.ok and report.windows[0].notes == () and report.to_dict()["windows"][0]["notes"] == []


def test_swapped_chunks_each_with_a_valid_crc_are_named(root: Path) -> None:
    chunks = {}
    for doc_path in (root / WINDOW).rglob("zarr.json"):
        doc = json.loads(doc_path.read_text())
        if doc.get("node_type") == "array" and (doc.get("attributes") or {}).get("name"):
            chunks[doc["attributes"]["name"]] = next(p for p in doc_path.parent.iterdir() if p.name != "zarr.json")
    assert verify_dump(root).ok
    a, b = chunks["a"].read_bytes(), chunks["b"].read_bytes()
    chunks["a"].write_bytes(b)
    chunks["b"].write_bytes(a)
    problems = verify_dump(root).problems
    assert sorted(p.key for p in problems) == sorted(f"{c.relative_to(root).as_posix()}" for c in chunks.values())
    assert all("the window inventory records" in p.what and "a chunk from elsewhere" in p.what for p in problems)


def test_compare_table_styles_differs_within_stats_not_as_pass() -> None:
    verdict = next(c for c in COLUMNS if c.heading == "verdict")
    styles = {v: verdict.style({"verdict": v}) for v in ("pass", "differs_within_stats", "fail")}
    assert styles["differs_within_stats"] == "bold yellow" and styles["pass"] == "green"


def test_the_inventory_alone_binds_the_chunks(root: Path) -> None:
    """The writer records each chunk's digest once, in the window inventory: no array document carries a copy
    (format 10), and two record chunks swapped, each with a valid crc32c, are still named by plain ``verify``."""
    window = root / WINDOW
    inventory = json.loads((window / INVENTORY_FILE).read_text())["arrays"]
    chunks = {}
    for doc_path in window.rglob("zarr.json"):
        doc = json.loads(doc_path.read_text())
        if doc.get("node_type") == "array":
            assert not {"chunkCrc32c", "shardCrc32c"} & set(doc.get("attributes") or {}), doc_path
        if doc.get("node_type") == "array" and (doc.get("attributes") or {}).get("name"):
            assert len(inventory[doc_path.parent.relative_to(window).as_posix()][1]) == 8  # its one chunk's digest
            chunks[doc["attributes"]["name"]] = next(p for p in doc_path.parent.iterdir() if p.name != "zarr.json")
    assert set(chunks) == {"a", "b"} and verify_dump(root).ok
    a, b = chunks["a"].read_bytes(), chunks["b"].read_bytes()
    chunks["a"].write_bytes(b)
    chunks["b"].write_bytes(a)
    problems = verify_dump(root).problems
    assert sorted(p.key for p in problems) == sorted(c.relative_to(root).as_posix() for c in chunks.values())
