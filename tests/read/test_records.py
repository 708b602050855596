"""Dump.records(): columns, exact values, statistics against the stored data."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from megadump_zarr.read import EXTRA_COLUMNS, RECORD_COLUMNS, open_dump
from tests._layout import stored_record

REQUIRED = [
    "rank",
    "window",
    "invocation",
    "step",
    "direction",
    "kernel",
    "level",
    "stage",
    "task_id",
    "stage_task_index",
    "owner_label",
    "owner_id",
    "core_type",
    "core_id",
    "worker",
    "io",
    "index",
    "name",
    "dtype",
    "shape",
    "stored_shape",
    "truncated",
    "bytes",
    "stored_bytes",
    "min",
    "max",
    "mean",
    "l2norm",
    "nan_count",
    "inf_count",
    "path",
]


def test_columns_exact(demo_dumps):
    for level in ("l0", "l1"):
        records = open_dump(demo_dumps[level].root).records()
        assert list(records.columns[: len(REQUIRED)]) == REQUIRED
        assert list(records.columns) == [*RECORD_COLUMNS, *EXTRA_COLUMNS]
        assert {"role", "capture_phase", "status"} <= set(records.columns[len(REQUIRED) :])


def test_l0_rows(demo_dumps):
    run = demo_dumps["l0"]
    records = open_dump(run.root).records()
    assert len(records) == 5 + 3 + 10  # router, dispatch, experts (forward only)
    assert set(records["level"]) == {"L0"}
    assert records["stage"].isna().all() and records["io"].isna().all() and records["task_id"].isna().all()
    by_kernel = records.groupby("kernel")["name"].apply(sorted).to_dict()
    assert by_kernel == {
        "moe_router": ["h", "logits", "norm_weight", "w_router", "x"],
        "moe_dispatch": ["h", "order", "xs"],
        "moe_experts": sorted(
            ["xs", "expert_counts", "w_up", "w_down", "ws", "ys", "inverse_order", "x", "gate", "out"]
        ),
    }
    experts = records[records["kernel"] == "moe_experts"].set_index("name")
    assert experts.loc["x", "role"] == "external_input" and experts.loc["x", "capture_phase"] == "before"
    assert experts.loc["out", "role"] == "final_output" and experts.loc["out", "capture_phase"] == "after"
    assert experts.loc["ws", "role"] == "stage_output"
    tensors = run.launches["moe_experts"]
    names = ["xs", "expert_counts", "w_up", "w_down", "ws", "ys", "inverse_order", "x", "gate", "out"]
    for position, name in enumerate(names):
        row = experts.loc[name]
        assert row["shape"] == tuple(tensors[position].shape) == row["stored_shape"]
        assert row["dtype"] == ("int64" if name in ("expert_counts", "inverse_order") else demo_dumps["dtype"])
        assert row["bytes"] == row["stored_bytes"] == tensors[position].numel() * tensors[position].element_size()
        assert not row["truncated"]
        assert row["param_position"] == position
        assert row["path"] == f"rank_0/window_0000/{row['invocation_name']}/{name}"
    assert set(records["status"]) == {"complete"}
    assert list(records["step"].unique()) == [0] and list(records["direction"].unique()) == ["forward"]
    assert sorted(records["invocation"].unique()) == [0, 1, 2]


def test_l1_counts_and_task_columns(demo_dumps):
    run = demo_dumps["l1"]
    dump = open_dump(run.root)
    records = dump.records()
    counts = records.groupby("stage").size().to_dict()
    gather_groups = records[records["stage"] == "gather"].groupby("group").size()
    # 37 tokens in 8-row tiles, 8 broadcast workers (pipeline): each worker's shard of a tile is one row, and each
    # of the 37 shards captures h (whole), its order row and its xs row. A worker without rows in the last 5-row
    # tile captures at most the whole input h.
    assert (gather_groups == 3).sum() == 37 and set(gather_groups) <= {1, 3}
    assert counts == {"expert_up": 16, "expert_down": 12, "unpermute": 10, "combine": 20, "gather": gather_groups.sum()}
    invocations = dump.tree()["rank_0/window_0000"]
    for name, node in invocations.children.items():
        assert len(records[records["invocation_name"] == name]) == node.attrs["recordCount"]
    up = records[records["stage"] == "expert_up"]
    assert sorted(up["owner_id"].unique()) == [0, 1, 2, 3]
    assert set(up["owner_label"]) == {"expert"}
    assert set(up["core_type"]) == {"MIX"}
    assert up["worker"].isna().all()
    gather = records[records["stage"] == "gather"]
    assert set(gather["kernel"]) == {"moe_dispatch"} and gather["owner_id"].isna().all()
    assert sorted(gather["worker"].unique()) == list(range(8))
    assert (gather["worker"] == gather["core_id"]).all()
    ws = up[up["name"] == "ws"].sort_values("owner_id")
    counts = run.param("moe_experts", 1)
    assert [s[0] for s in ws["shape"]] == list(counts)
    assert set(ws["io"]) == {"output"} and set(ws["index"]) == {0} and set(ws["capture_phase"]) == {"after"}
    assert list(ws["note"]) == [
        f"expert {e} rows [{int(counts[:e].sum())}, {int(counts[: e + 1].sum())})" for e in range(4)
    ]
    for row in records.itertuples():
        assert row.path.startswith(f"{row.group}/")
        parts = row.path.split("/")
        assert parts[4] == row.stage and parts[5].startswith(f"task_{row.task_id:06d}")
        assert parts[6] == f"{row.io}_{row.index:02d}_{row.name}"
    assert not records["truncated"].any()
    assert records["role"].isna().all()


def _stored(root, path) -> np.ndarray:
    # where its bytes are: its own array, or its row of a task-record pack
    array, index = stored_record(root, path)
    return np.asarray(array[index]).astype(np.float64)


def test_stats_equal_numpy(demo_dumps):
    for level in ("l0", "l1"):
        run = demo_dumps[level]
        records = open_dump(run.root).records()
        for row in records.itertuples():
            data = _stored(run.root, row.path)
            assert data.shape == row.stored_shape
            finite = data[np.isfinite(data)]
            assert row.nan_count == int(np.isnan(data).sum()) and row.inf_count == int(np.isinf(data).sum())
            if finite.size == 0:
                assert math.isnan(row.min)
                continue
            assert row.min == finite.min() and row.max == finite.max()
            np.testing.assert_allclose(row.mean, finite.mean(), rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(row.l2norm, np.sqrt((finite**2).sum()), rtol=1e-9)


def test_records_dtypes(demo_dumps):
    records = open_dump(demo_dumps["l1"].root).records()
    assert records["rank"].dtype == np.int64 and records["window"].dtype == np.int64
    assert records["task_id"].dtype == pd.Int64Dtype() and records["owner_id"].dtype == pd.Int64Dtype()
    assert records["min"].dtype == np.float64 and records["truncated"].dtype == bool
    assert all(isinstance(s, tuple) for s in records["shape"])


def test_records_from_metadata_only(demo_dumps, counting_store):
    from zarr.storage import LocalStore

    store = counting_store(LocalStore(demo_dumps["l1"].root, read_only=True))
    dump = open_dump(store)
    records = dump.records()
    assert len(records) > 100
    assert store.chunk_reads() == []
    assert [k for k in store.reads if k.endswith("zarr.json")] == ["zarr.json", "rank_0/window_0000/zarr.json"]
    store.reads.clear()
    dump.records()  # committed windows are cached
    assert store.chunk_reads() == []
