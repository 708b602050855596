"""Torn (``writing``) and aborted windows: listed, never read as complete, readable on request."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from zarr.storage import LocalStore

from megadump_zarr.read import open_dump
from megadump_zarr.store.writer import WindowWriter, window_status


@pytest.fixture
def mixed_root(hand, tmp_path):
    """Window 0 complete, window 1 torn (begun, one invocation written, never committed), window 2
    aborted, window 3 claimed with nothing written yet."""
    data = np.arange(32, dtype=np.float32).reshape(8, 4)
    tasks = {1: [hand.Record("y", data[:4], 0, declared_rows=8)], 2: [hand.Record("y", data[4:], 4, declared_rows=8)]}
    with WindowWriter(tmp_path, compressor="none") as writer:
        writer.write_window(hand.window(tasks, window=0))
        torn = hand.window(
            {k: [hand.Record("y", r[0].data + 100, r[0].first_row, declared_rows=8)] for k, r in tasks.items()},
            window=1,
        )
        session = writer.begin(0, 1, torn.attrs)
        session.write_invocation(torn.invocations[0])  # the writer is "killed" here: no commit
        writer.write_window(hand.window(tasks, window=2), status="aborted")
    os.makedirs(tmp_path / "rank_0" / "window_0003")
    return tmp_path, data


def test_statuses_listed(mixed_root):
    root, _ = mixed_root
    windows = open_dump(root).windows()
    assert list(windows["status"]) == ["complete", "writing", "aborted", "writing"]
    assert list(windows["invocations"]) == [1, 1, 1, 0]
    assert window_status(root, 0, 1) == "writing"
    assert "4 windows (1 complete, 1 aborted, 2 writing)" in repr(open_dump(root))


def test_records_skip_incomplete_windows(mixed_root):
    root, _ = mixed_root
    dump = open_dump(root)
    assert set(dump.records()["window"]) == {0}
    everything = dump.records(include_incomplete=True)
    assert sorted(set(zip(everything["window"], everything["status"]))) == [
        (0, "complete"),
        (1, "writing"),
        (2, "aborted"),
    ]
    torn = everything[everything["window"] == 1].sort_values("task_id")
    assert list(torn["task_id"]) == [1, 2] and list(torn["stage"]) == ["stage", "stage"]
    assert list(torn["direction"]) == ["forward", "forward"] and torn["kernel"].isna().all()
    assert list(torn["shape"]) == [(4, 4), (4, 4)] and list(torn["io"]) == ["output", "output"]
    assert torn["min"].tolist() == [100.0, 116.0]


def test_torn_window_reads_on_request(mixed_root, counting_store):
    root, data = mixed_root
    store = counting_store(LocalStore(root, read_only=True))
    dump = open_dump(store)
    np.testing.assert_array_equal(dump.tensor("y").values, data)  # default: the complete window
    torn = dump.tensor("y", window=1)
    np.testing.assert_array_equal(torn.values, data + 100)
    path = dump.records(include_incomplete=True).query("window == 1")["path"].iloc[0]
    np.testing.assert_array_equal(dump.record_array(path).values, data[:4] + 100)
    store.reads.clear()
    ds = dump.dataset(window=1, task=2)
    assert set(ds.data_vars) == {"output_00_y"} and "row" in ds.coords
    assert store.chunk_reads() == []
    np.testing.assert_array_equal(ds["output_00_y"].values, data[4:] + 100)
    with pytest.raises(ValueError, match=r"no data group"):
        dump.dataset(window=3)


def test_tree_includes_incomplete_only_on_request(mixed_root, counting_store):
    root, _ = mixed_root
    store = counting_store(LocalStore(root, read_only=True))
    dump = open_dump(store)
    assert set(dump.tree()["rank_0"].children) == {"window_0000"}
    tree = dump.tree(include_incomplete=True)
    assert set(tree["rank_0"].children) == {"window_0000", "window_0001", "window_0002", "window_0003"}
    assert tree["rank_0/window_0001"].attrs["status"] == "writing"
    assert "output_00_y" in tree["rank_0/window_0001/invocation_000000_forward/stages/stage/task_000001"].data_vars
    assert store.chunk_reads() == []


def test_rewritten_status_is_never_read_as_complete(hand, tmp_path):
    data = np.ones((4, 2), dtype=np.float32)
    with WindowWriter(tmp_path) as writer:
        writer.write_window(hand.window({1: [hand.Record("y", data, 0, declared_rows=4)]}))
    document = tmp_path / "rank_0" / "window_0000" / "zarr.json"
    doc = json.loads(document.read_text())
    doc["attributes"]["status"] = "writing"
    doc.pop("consolidated_metadata")
    document.write_text(json.dumps(doc))
    dump = open_dump(tmp_path)
    assert list(dump.windows()["status"]) == ["writing"]
    assert len(dump.records()) == 0 and list(dump.records().columns[:3]) == ["rank", "window", "invocation"]
    with pytest.raises(ValueError, match=r"no complete window.*0 \(writing\).*window="):
        dump.tensor("y")
    assert list(dump.records(include_incomplete=True)["status"]) == ["writing"]


def test_status_says_writing_but_consolidated_present(hand, tmp_path):
    """Only the status decides: a window whose zarr.json says writing is torn even with metadata inline."""
    with WindowWriter(tmp_path) as writer:
        writer.write_window(hand.window({1: [hand.Record("y", np.ones((2, 2), np.float32), 0, declared_rows=2)]}))
    document = tmp_path / "rank_0" / "window_0000" / "zarr.json"
    doc = json.loads(document.read_text())
    doc["attributes"]["status"] = "writing"
    document.write_text(json.dumps(doc))
    dump = open_dump(tmp_path)
    assert list(dump.windows()["status"]) == ["writing"] and len(dump.records()) == 0
    assert len(dump.records(include_incomplete=True)) == 1
