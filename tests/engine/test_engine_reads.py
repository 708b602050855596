"""The engine's variables read through the readers' lazy arrays: an indexing reads what it selects and computes no
dask graph (as xarray's own zarr backend indexes a zarr array); stages are told apart by the records table's columns."""

from __future__ import annotations

import dask
import dask.array
import dask.base
import numpy as np
import pytest
import xarray as xr

from megadump_zarr import open_dump


def _refuse_dask(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the engine computed a dask graph to index a variable")

    monkeypatch.setattr(dask.base, "compute", refuse)
    monkeypatch.setattr(dask, "compute", refuse)
    monkeypatch.setattr(dask.array.Array, "compute", refuse)


def _stage_group(dump, stage: str) -> tuple[str, int]:
    rows = dump.records()
    row = rows[(rows["stage"] == stage) & (rows["level"] == "L1")].iloc[0]
    group = str(row["group"]).rpartition("/")[0]  # the task group's parent: its stage group
    return group, int(row["invocation"])


def test_indexing_a_stage_builds_no_dask_graph(demo_dumps, monkeypatch):
    root = demo_dumps["l1"].root
    dump = open_dump(root)
    group, invocation = _stage_group(dump, "expert_up")
    ds = xr.open_dataset(root, engine="megadump", group=group)
    expected = {name: dump.tensor(name, invocation=invocation, stage="expert_up").values for name in ("xs", "ws")}
    stacked = {name: np.asarray(ds[name].load().values) for name in ds.data_vars if name not in expected}
    ds = xr.open_dataset(root, engine="megadump", group=group)
    _refuse_dask(monkeypatch)
    for name, values in expected.items():  # stitched tensors
        np.testing.assert_array_equal(ds[name].values, values)  # exact: stored bytes
        dim = ds[name].dims[0]
        np.testing.assert_array_equal(ds[name].isel({dim: slice(2, 9, 3)}).values, values[2:9:3])  # exact: stored bytes
    assert stacked  # per-expert weight slices, stacked along their own axis
    for name, values in stacked.items():
        np.testing.assert_array_equal(ds[name].values, values)  # exact: stored bytes
        np.testing.assert_array_equal(ds[name][1:].values, values[1:])  # exact: stored bytes


def test_indexing_l0_and_truncated_records_builds_no_dask_graph(demo_dumps, truncated_dump, monkeypatch):
    l0 = open_dump(demo_dumps["l0"].root)
    rows = l0.records()
    invocation = rows["invocation_name"].iloc[0]
    expected = {n: l0.record_array(p).values for n, p in zip(rows["name"], rows["path"]) if p.count("/") == 3}
    l0_ds = xr.open_dataset(l0.root, engine="megadump", group=f"rank_0/window_0000/{invocation}")
    cut = open_dump(truncated_dump.root)
    group, _ = _stage_group(cut, "expert_up")
    first = xr.open_dataset(truncated_dump.root, engine="megadump", group=group)
    truncated = {name: first[name].values for name in first.data_vars if first[name].attrs.get("truncatedRecords")}
    cut_ds = xr.open_dataset(truncated_dump.root, engine="megadump", group=group)
    _refuse_dask(monkeypatch)
    for name in l0_ds.data_vars:
        np.testing.assert_array_equal(l0_ds[name].values, expected[name])  # exact: stored bytes
    assert truncated
    for name, values in truncated.items():  # NaN past each record's stored prefix
        np.testing.assert_array_equal(cut_ds[name].values, values)  # exact: stored bytes
        np.testing.assert_array_equal(cut_ds[name][-3:].values, values[-3:])  # exact: stored bytes


def test_stages_are_the_records_stage_groups(demo_dumps):
    root = demo_dumps["l1"].root
    dump = open_dump(root)
    records = dump.records()
    l1 = records[records["level"] == "L1"]
    invocation = l1["invocation_name"].iloc[0]
    inv_group = l1[l1["invocation_name"] == invocation]
    stage_groups = list(dict.fromkeys(g.rpartition("/")[0] for g in inv_group["group"]))
    window = stage_groups[0].split("/stages/")[0].rpartition("/")[0]
    tree = xr.open_datatree(root, engine="megadump", group=f"{window}/{invocation}")
    assert tree.to_dataset().attrs["stages"] == [g.rpartition("/")[2] for g in stage_groups]
    for group in stage_groups:
        stage = str(inv_group[inv_group["group"].str.startswith(group + "/")]["stage"].iloc[0])
        ds = xr.open_dataset(root, engine="megadump", group=group)
        assert ds.attrs["stage"] == stage
