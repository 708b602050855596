"""The xarray engine: ``xr.open_dataset(root, engine="megadump", group=...)`` and ``xr.open_datatree``."""

from __future__ import annotations

import dask.array as da
import numpy as np
import pytest
import xarray as xr
from zarr.storage import LocalStore

from megadump_zarr import open_dump
from megadump_zarr.engine import MegadumpBackendEntrypoint


def _l1_stage_group(dump, stage="expert_up"):
    rows = dump.records()
    row = rows[rows["stage"] == stage].iloc[0]
    return "/".join(row["path"].split("/")[:5]), row


def test_entry_point_is_registered():
    assert "megadump" in xr.backends.list_engines()
    assert isinstance(xr.backends.list_engines()["megadump"], MegadumpBackendEntrypoint)


def test_l1_stage_gives_stitched_tensors_with_labelled_coordinates(demo_dumps):
    root = demo_dumps["l1"].root
    dump = open_dump(root)
    group, row = _l1_stage_group(dump)
    ds = xr.open_dataset(root, engine="megadump", group=group)
    records = dump.records()
    stage_rows = records[records["path"].str.startswith(group + "/")]
    for name in ("xs", "ws"):
        expected = dump.tensor(name, invocation=int(row["invocation"]), stage="expert_up")
        got = ds[name]
        assert got.dtype == expected.dtype
        assert got.dims == expected.dims
        assert np.asarray(got.values).tobytes() == np.asarray(expected.values).tobytes()
        dim = got.dims[0]
        np.testing.assert_array_equal(got[dim].values, expected[dim].values)
        for coord in ("task_id", "owner_id", "core_id", "worker"):
            np.testing.assert_array_equal(got[coord].values, expected[coord].values)
        core_of = dict(zip(stage_rows["task_id"], stage_rows["core_type"]))
        assert list(got["core_type"].values) == [core_of[t] for t in got["task_id"].values]
    # The row index is a real index: label selection by global row works.
    dim = ds["ws"].dims[0]
    first = int(ds[dim].values[3])
    np.testing.assert_array_equal(ds["ws"].sel({dim: first}).values, ds["ws"].values[3])
    assert ds.attrs["stage"] == "expert_up"
    # Per-expert weight slices cannot be stitched: stacked along their own axis with task coordinates.
    w = ds["w_up"]
    assert w.dims[0] == "w_up.task"
    tasks = sorted(stage_rows[stage_rows["name"] == "w_up"]["task_id"])
    assert sorted(ds["w_up.task_id"].values.tolist()) == tasks


def test_l0_invocation_gives_its_tensors(demo_dumps):
    root = demo_dumps["l0"].root
    dump = open_dump(root)
    rows = dump.records()
    name = rows["invocation_name"].iloc[0]
    ds = xr.open_dataset(root, engine="megadump", group=f"rank_0/window_0000/{name}")
    inv = rows[rows["invocation_name"] == name]
    assert list(ds.data_vars) == list(inv["name"])
    for tensor, path in zip(inv["name"], inv["path"]):
        assert np.asarray(ds[tensor].values).tobytes() == np.asarray(dump.record_array(path).values).tobytes()
    assert ds.attrs["invocationId"] == 0 and ds.attrs["level"] == "L0"


def test_lazy_until_values_are_asked(demo_dumps, counting_store):
    root = demo_dumps["l1"].root
    group, _ = _l1_stage_group(open_dump(root))
    store = counting_store(LocalStore(root, read_only=True))
    ds = xr.open_dataset(store, engine="megadump", group=group)
    assert not ds["ws"].variable._in_memory
    before = [k for k in store.chunk_reads() if "/output_" in k or "/input_" in k]
    assert before == []
    ds["ws"].isel({ds["ws"].dims[0]: 0}).values
    after = [k for k in store.chunk_reads() if "/output_" in k]
    assert after and all("output_00_ws" in k for k in after)


def test_chunks_behave_as_in_xarray(demo_dumps):
    root = demo_dumps["l1"].root
    group, row = _l1_stage_group(open_dump(root))
    plain = xr.open_dataset(root, engine="megadump", group=group)
    assert not isinstance(plain["ws"].data, da.Array)
    chunked = xr.open_dataset(root, engine="megadump", group=group, chunks={})
    assert isinstance(chunked["ws"].data, da.Array)
    # chunks={} keeps the reader's blocks: one per task record along the split axis.
    expected = open_dump(root).tensor("ws", invocation=int(row["invocation"]), stage="expert_up").data.chunks
    assert chunked["ws"].data.chunks == expected
    one = xr.open_dataset(root, engine="megadump", group=group, chunks=-1)
    assert one["ws"].data.numblocks == (1, 1)
    np.testing.assert_array_equal(one["ws"].values, plain["ws"].values)


def test_drop_variables(demo_dumps):
    root = demo_dumps["l1"].root
    group, _ = _l1_stage_group(open_dump(root))
    ds = xr.open_dataset(root, engine="megadump", group=group, drop_variables=["ws", "w_up"])
    assert "ws" not in ds and "w_up" not in ds and "xs" in ds
    ds = xr.open_dataset(root, engine="megadump", group=group, drop_variables="xs")
    assert "xs" not in ds and "ws" in ds


def test_upcast_decodes_bf16_so_reductions_and_plots_work(demo_dumps):
    if demo_dumps["dtype"] != "bfloat16":
        pytest.skip("bfloat16 only")
    root = demo_dumps["l1"].root
    group, _ = _l1_stage_group(open_dump(root))
    raw = xr.open_dataset(root, engine="megadump", group=group)
    assert raw["ws"].dtype.name == "bfloat16"
    up = xr.open_dataset(root, engine="megadump", group=group, upcast="float32")
    assert up["ws"].dtype == np.float32
    assert up["ws"].attrs["upcastFrom"] == "bfloat16"
    np.testing.assert_array_equal(up["ws"].values, raw["ws"].values.astype(np.float32))
    assert float(up["ws"].mean()) == pytest.approx(float(raw["ws"].values.astype(np.float64).mean()), rel=1e-6)
    assert up["expert_counts"].dtype == np.int64  # integers are never touched
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    up["ws"].plot()


def test_upcast_refuses_non_float(demo_dumps):
    with pytest.raises(ValueError, match=r"upcast='int32' must be a numpy float dtype"):
        xr.open_dataset(demo_dumps["l1"].root, engine="megadump", group="rank_0", upcast="int32")


def test_datatree_is_the_whole_dump(demo_dumps):
    root = demo_dumps["l1"].root
    dump = open_dump(root)
    tree = xr.open_datatree(root, engine="megadump")
    paths = {node.path for node in tree.subtree}
    groups = {"/" + "/".join(p.split("/")[:5]) for p in dump.records()["path"]}
    assert groups <= paths
    assert {"/", "/rank_0", "/rank_0/window_0000"} <= paths
    group, _ = _l1_stage_group(dump)
    node = tree["/" + group].to_dataset()
    direct = xr.open_dataset(root, engine="megadump", group=group)
    assert list(node.data_vars) == list(direct.data_vars)
    assert np.asarray(node["ws"].values).tobytes() == np.asarray(direct["ws"].values).tobytes()
    assert tree["/rank_0/window_0000"].attrs["status"] == "complete"
    sub = xr.open_datatree(root, engine="megadump", group=group)
    assert list(sub.to_dataset().data_vars) == list(direct.data_vars)


def test_l1_invocation_names_its_stage_groups(demo_dumps):
    root = demo_dumps["l1"].root
    with pytest.raises(
        ValueError,
        match=r"is an L1 invocation: its tensors are per stage; open one of "
        r"group=rank_0/window_0000/invocation_000000_forward/stages/gather",
    ):
        xr.open_dataset(root, engine="megadump", group="rank_0/window_0000/invocation_000000_forward")


@pytest.mark.parametrize(
    ("group", "message"),
    [
        ("window_0000", r"group='window_0000' is not a dump group"),
        ("rank_0/window_0007", r"no complete window rank_0/window_0007"),
        ("rank_0/window_0000/invocation_000042_forward", r"has no invocation_000042_forward"),
    ],
)
def test_bad_groups_are_named(demo_dumps, group, message):
    with pytest.raises(ValueError, match=message):
        xr.open_dataset(demo_dumps["l0"].root, engine="megadump", group=group)


def test_guess_can_open(demo_dumps, tmp_path):
    entry = MegadumpBackendEntrypoint()
    root = demo_dumps["l0"].root
    assert entry.guess_can_open(root) and entry.guess_can_open(str(root))
    assert not entry.guess_can_open(root / "rank_0")
    assert not entry.guess_can_open(tmp_path)
    assert not entry.guess_can_open("s3://bucket/prefix")
    assert not entry.guess_can_open(b"bytes")
    assert (
        xr.backends.plugins.guess_engine(str(root)) == "megadump"
    )  # xr.open_dataset(root, group=...) needs no engine=


def test_disagreeing_axes_and_coordinates_get_their_own_names():
    from megadump_zarr.engine.backend import _Builder

    builder = _Builder(None, set())
    rows = lambda n, tasks, dim="row": xr.DataArray(  # noqa: E731
        da.from_array(np.arange(2.0 * n).reshape(n, 2), chunks=(1, 2)),
        dims=(dim, "col"),
        coords={dim: np.arange(n), "task_id": (dim, tasks)},
    )
    builder.add("a", rows(3, [5, 5, 6]))
    builder.add("same", rows(3, [5, 5, 6]))  # agrees with a: shares its axis
    builder.add("b", rows(4, [7, 7, 8, 8]))
    builder.add("c", rows(2, [1, 1], dim="slot"))
    ds = builder.dataset({})
    assert ds["a"].dims == ds["same"].dims == ("row", "col")
    assert ds["b"].dims == ("b.row", "col") and ds["b.task_id"].values.tolist() == [7, 7, 8, 8]
    assert ds["c"].dims == ("slot", "col") and ds["slot.task_id"].values.tolist() == [1, 1]
    assert ds["task_id"].values.tolist() == [5, 5, 6]
    assert ds["b"].values.tolist() == [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0], [6.0, 7.0]]


def test_upcast_decodes_float8_exactly(tmp_path):
    import ml_dtypes

    from megadump_zarr.layout.write_model import ArrayWrite, InvocationWrite, WindowWrite
    from megadump_zarr.store.writer import WindowWriter

    e4m3 = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).reshape(16, 16)
    e5m2 = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e5m2).reshape(16, 16)
    inv = InvocationWrite(
        "invocation_000000_forward",
        {"invocationId": 0, "step": 0, "direction": "forward", "kernelName": "k", "level": "L0", "rank": 0},
        [],
        [ArrayWrite("w8", e4m3, ("r", "c"), {"name": "w8"}), ArrayWrite("g8", e5m2, ("r", "c"), {"name": "g8"})],
    )
    with WindowWriter(tmp_path / "d") as writer:
        writer.write_window(WindowWrite(0, 0, {"schemaVersion": 5, "level": "L0", "windowIndex": 0, "rank": 0}, [inv]))
    group = "rank_0/window_0000/invocation_000000_forward"
    raw = xr.open_dataset(tmp_path / "d", engine="megadump", group=group)
    assert (raw["w8"].dtype.name, raw["g8"].dtype.name) == ("float8_e4m3fn", "float8_e5m2")
    up = xr.open_dataset(tmp_path / "d", engine="megadump", group=group, upcast="float64")
    for name, data in (("w8", e4m3), ("g8", e5m2)):
        assert up[name].dtype == np.float64 and up[name].attrs["upcastFrom"] == data.dtype.name
        np.testing.assert_array_equal(up[name].values, data.astype(np.float64))  # NaN/Inf included
        finite = ~np.isnan(data.astype(np.float64))  # every non-NaN bit pattern comes back (NaN payloads do not)
        assert up[name].values[finite].astype(data.dtype).tobytes() == data[finite].tobytes()
    assert np.isfinite(float(up["w8"].where(np.isfinite(up["w8"])).max()))


def _statistics_first_dump(root, mode, level):
    from megadump_zarr import TensorDumpConfig, tensor_dump
    from megadump_zarr.demo.model import DemoConfig, MoEBlock

    block = MoEBlock(DemoConfig())
    block.w_up[2, 0, 0] = float("nan")  # nonfinite keeps expert 2's tensors (and what the NaN reaches)
    selection = dict(stages=("expert_up", "expert_down")) if level == "L1" else {}
    with tensor_dump(TensorDumpConfig(root, level=level, kernel_names="moe_experts", mode=mode, **selection)) as dumper:
        block(block.make_input())
        dumper.step()
    return open_dump(root)


@pytest.mark.parametrize("level", ["L1", "L0"])
def test_statistics_first_dumps_open_with_their_kept_payloads(tmp_path, level):
    # statistics-only records have no tensor: the engine used to raise on the first one ("holds statistics
    # only"), so no group of a statistics/nonfinite/diff dump and no datatree of it could be opened
    stats = _statistics_first_dump(tmp_path / "s", "statistics", level)
    nonfinite = _statistics_first_dump(tmp_path / "n", "nonfinite", level)
    group = "rank_0/window_0000/invocation_000000_forward" + ("/stages/expert_up" if level == "L1" else "")
    records = stats.records()
    in_group = records[records["path"].str.startswith(group + "/")]
    ds = xr.open_dataset(stats.root, engine="megadump", group=group)
    assert list(ds.data_vars) == [] and ds.attrs["statisticsOnlyRecords"] == len(in_group) > 0
    tree = xr.open_datatree(stats.root, engine="megadump")
    assert tree[group].to_dataset().attrs["statisticsOnlyRecords"] == len(in_group)
    kept = nonfinite.records()
    kept = kept[kept["path"].str.startswith(group + "/")]
    ds = xr.open_dataset(nonfinite.root, engine="megadump", group=group)
    assert 0 < kept["payload"].sum() < len(kept) and ds.attrs["statisticsOnlyRecords"] == (~kept["payload"]).sum()
    assert set(ds.data_vars) == set(kept.loc[kept["payload"], "name"])
    for path, name in zip(kept.loc[kept["payload"], "path"], kept.loc[kept["payload"], "name"]):
        values = np.asarray(nonfinite.record_array(path).values)
        if level == "L0":
            assert np.asarray(ds[name].values).tobytes() == values.tobytes()
        else:  # one kept task per stacked tensor here (expert 2's)
            assert ds[name].shape[0] == 1 and np.asarray(ds[name].values[0]).tobytes() == values.tobytes()
    xr.open_datatree(nonfinite.root, engine="megadump")
