"""open_dump: roots, errors, URLs (memory://), windows(), repr, several ranks."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

import megadump_zarr
from megadump_zarr.read import Dump, open_dump
from megadump_zarr.store.writer import WindowWriter
from tests._moto import KEY, SECRET, moto_s3


def test_open_dump_is_exported_at_top_level(demo_dumps):
    dump = megadump_zarr.open_dump(demo_dumps["l0"].root)
    assert isinstance(dump, Dump)


def test_missing_path_names_path(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(ValueError, match=r"nope.*does not exist"):
        open_dump(missing)


def test_empty_directory_is_not_a_root(tmp_path):
    with pytest.raises(ValueError, match=rf"{tmp_path}.*zarr.json is missing"):
        open_dump(tmp_path)


def test_window_path_is_not_a_root(demo_dumps):
    window = demo_dumps["l0"].root / "rank_0" / "window_0000"
    with pytest.raises(ValueError, match=r"window_0000.*no 'megadump_zarr' attribute.*window group"):
        open_dump(window)


def test_rank_path_is_not_a_root(demo_dumps):
    with pytest.raises(ValueError, match=r"rank_0.*rank group"):
        open_dump(demo_dumps["l0"].root / "rank_0")


def test_file_url_and_path_agree(demo_dumps):
    root = demo_dumps["l1"].root
    a = open_dump(root).records()
    b = open_dump(f"file://{root}").records()
    assert list(a["path"]) == list(b["path"])


def test_windows_table(demo_dumps):
    dump = open_dump(demo_dumps["l1"].root)
    windows = dump.windows()
    assert list(windows.columns[:6]) == ["rank", "window", "status", "level", "invocations", "path"]
    assert windows.to_dict("records")[0] | {"created_at": None, "committed_at": None} == {
        "rank": 0,
        "window": 0,
        "status": "complete",
        "level": "L1",
        "invocations": 2,
        "path": "rank_0/window_0000",
        "created_at": None,
        "committed_at": None,
    }


def test_repr_is_concise(demo_dumps):
    text = repr(open_dump(demo_dumps["l0"].root))
    assert text.startswith("<megadump_zarr.Dump ")
    assert "ranks [0]" in text and "1 window (1 complete)" in text and "L0" in text
    assert "\n" not in text


def test_memory_url_root(hand):
    root = f"memory://read-test-{uuid.uuid4().hex}"
    data = np.arange(24, dtype=np.float32).reshape(6, 4)
    window = hand.window(
        {1: [hand.Record("y", data[:3], 0, declared_rows=6)], 2: [hand.Record("y", data[3:], 3, declared_rows=6)]}
    )
    with WindowWriter(root, compressor="none") as writer:
        writer.write_window(window)
    dump = open_dump(root)
    records = dump.records()
    assert list(records["name"]) == ["y", "y"]
    assert list(records["task_id"]) == [1, 2]
    np.testing.assert_array_equal(dump.tensor("y").values, data)
    assert "memory://" in repr(dump)


def test_memory_url_without_root_fails():
    with pytest.raises(ValueError, match=r"memory://absent-.*zarr.json is missing"):
        open_dump(f"memory://absent-{uuid.uuid4().hex}")


def test_records_span_ranks(multirank_dump):
    run0, run1 = multirank_dump
    dump = open_dump(run0.root)
    windows = dump.windows()
    assert sorted(zip(windows["rank"], windows["window"])) == [(0, 0), (1, 0)]
    records = dump.records()
    assert sorted(set(records["rank"])) == [0, 1]
    assert len(records[records["rank"] == 0]) == len(records[records["rank"] == 1]) == 5
    x0 = dump.tensor("x", rank=0).values
    x1 = dump.tensor("x", rank=1).values
    np.testing.assert_array_equal(x0, run0.param("moe_router", 0))
    np.testing.assert_array_equal(x1, run1.param("moe_router", 0))
    assert not np.array_equal(x0, x1)
    with pytest.raises(ValueError, match=r"rank 7 has no windows.*\[0, 1\]"):
        dump.tensor("x", rank=7)


def test_s3_root_through_moto(hand):
    pytest.importorskip("s3fs")
    with moto_s3("dumps") as endpoint:
        options = {"endpoint_url": endpoint, "key": KEY, "secret": SECRET}
        data = np.arange(24, dtype=np.float32).reshape(6, 4)
        window = hand.window(
            {1: [hand.Record("y", data[:3], 0, declared_rows=6)], 2: [hand.Record("y", data[3:], 3, declared_rows=6)]}
        )
        with WindowWriter("s3://dumps/run", storage_options=options) as writer:
            writer.write_window(window)
        dump = open_dump("s3://dumps/run", storage_options=options)
        assert list(dump.windows()["status"]) == ["complete"]
        assert len(dump.records()) == 2
        np.testing.assert_array_equal(dump.tensor("y").values, data)
        np.testing.assert_array_equal(dump.dataset(task=2)["output_00_y"].values, data[3:])
        assert "window_0000" in dump.tree()["rank_0"].children
        with pytest.raises(ValueError, match=r"s3://dumps/elsewhere.*zarr.json is missing"):
            open_dump("s3://dumps/elsewhere", storage_options=options)


def test_memory_root_views(hand):
    root = f"memory://views-{uuid.uuid4().hex}"
    data = np.arange(8, dtype=np.float32).reshape(4, 2)
    with WindowWriter(root) as writer:
        writer.write_window(hand.window({5: [hand.Record("y", data, 0, declared_rows=4)]}))
    dump = open_dump(root)
    ds = dump.dataset(task=5)
    np.testing.assert_array_equal(ds["output_00_y"].values, data)
    tree = dump.tree()
    assert set(tree["rank_0/window_0000/invocation_000000_forward/stages/stage/task_000005"].data_vars) == {
        "output_00_y"
    }


def test_sanitised_names(hand, tmp_path):
    from megadump_zarr.layout.names import safe_name

    stage, name = "expert up/1", "a.b/c d"
    data = np.ones((2, 3), dtype=np.float32)
    window = hand.window({1: [hand.Record(name, data, 0, declared_rows=2)]}, stage=stage)
    with WindowWriter(tmp_path) as writer:
        writer.write_window(window)
    dump = open_dump(tmp_path)
    records = dump.records()
    assert list(records["name"]) == [name] and list(records["stage"]) == [stage]
    assert records["path"].iloc[0].split("/")[4] == safe_name(stage)
    np.testing.assert_array_equal(dump.tensor(name, stage=stage).values, data)
    np.testing.assert_array_equal(dump.tensor(name, stage=safe_name(stage)).values, data)
    assert dump.dataset(stage=stage).attrs["stage"] == stage
