"""Dump.dataset() and Dump.tree(): lazy xarray views, selection defaults and ambiguity errors."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import xarray as xr
from zarr.storage import LocalStore

from megadump_zarr.read import open_dump


def _counting(root, counting_store):
    store = counting_store(LocalStore(root, read_only=True))
    return store, open_dump(store)


def test_dataset_l1_task_group_is_lazy(demo_dumps, counting_store):
    store, dump = _counting(demo_dumps["l1"].root, counting_store)
    ds = dump.dataset(invocation=1, stage="expert_up", task=1)
    assert isinstance(ds, xr.Dataset)
    assert set(ds.data_vars) == {"input_00_xs", "input_01_expert_counts", "input_02_w_up", "output_00_ws"}
    for variable in ds.variables.values():
        assert isinstance(variable.data, da.Array)
    assert ds.attrs["taskId"] == 1 and ds.attrs["owner"] == {"label": "expert", "id": 1}
    assert ds["output_00_ws"].dims == ("slot", "ffn")
    assert str(ds["output_00_ws"].dtype) == demo_dumps["dtype"]
    assert store.chunk_reads() == []
    # values are there when asked for
    counts = demo_dumps["l1"].param("moe_experts", 1)
    assert ds["output_00_ws"].shape[0] == counts[1]
    np.testing.assert_array_equal(ds["slot"].values, np.arange(counts[0], counts[0] + counts[1]))
    indexed = ds.set_xindex("slot")
    assert indexed.sel(slot=int(counts[0]))["output_00_ws"].shape == (ds.sizes["ffn"],)


def test_dataset_l0_invocation_group(demo_dumps, counting_store):
    run = demo_dumps["l0"]
    store, dump = _counting(run.root, counting_store)
    ds = dump.dataset(invocation="invocation_000002_forward")
    assert ds.attrs["kernelName"] == "moe_experts"
    assert "out" in ds and ds["out"].dims == ("token", "hidden")
    assert store.chunk_reads() == []
    np.testing.assert_array_equal(ds["out"].values.astype(np.float64), run.param("moe_experts", 9))
    assert dump.dataset(invocation=0).attrs["kernelName"] == "moe_router"


def test_dataset_ambiguity_lists_choices(demo_dumps):
    dump = open_dump(demo_dumps["l1"].root)
    with pytest.raises(
        ValueError,
        match=r"\d+ data groups match in rank 0 window 0; choose one with invocation=.*moe_dispatch.*moe_experts",
    ):
        dump.dataset()
    with pytest.raises(ValueError, match=r"4 data groups match.*; choose one with task=.*task_000000.*task_000003"):
        dump.dataset(stage="expert_up")
    with pytest.raises(ValueError, match=r"8 data groups match.*task_000002_worker_000"):
        dump.dataset(stage="gather", task=2)
    ds = dump.dataset(stage="gather", task="task_000002_worker_003")
    assert ds.attrs["workerId"] == 3
    with pytest.raises(ValueError, match=r"no data group matches stage='nope'.*data groups:"):
        dump.dataset(stage="nope")
    with pytest.raises(ValueError, match=r"rank 0 has no window 9"):
        dump.dataset(window=9)


def test_tree_is_lazy_and_complete(demo_dumps, counting_store):
    store, dump = _counting(demo_dumps["l1"].root, counting_store)
    tree = dump.tree()
    assert isinstance(tree, xr.DataTree)
    assert store.chunk_reads() == []
    window = tree["rank_0/window_0000"]
    assert window.attrs["status"] == "complete"
    assert set(window.children) == {"invocation_000000_forward", "invocation_000001_forward"}
    task = tree["rank_0/window_0000/invocation_000001_forward/stages/combine/task_000013"]
    assert task.attrs["stage"] == "combine"
    assert set(task.data_vars) == {"input_00_x", "input_01_ws", "input_02_gate", "output_00_out"}
    groups = 0
    for node in tree.subtree:
        for variable in node.to_dataset(inherit=False).variables.values():
            assert isinstance(variable.data, da.Array)
        groups += node.name.startswith("task_")
    assert groups == len(dump.records().drop_duplicates("group"))
    assert store.chunk_reads() == []


def test_tree_l0(demo_dumps):
    tree = open_dump(demo_dumps["l0"].root).tree()
    node = tree["rank_0/window_0000/invocation_000000_forward"]
    assert set(node.data_vars) == {"x", "norm_weight", "h", "w_router", "logits"}
    assert tree.attrs == {"megadump_zarr": {"layoutVersion": 1}}
