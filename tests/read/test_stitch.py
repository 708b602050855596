"""Dump.tensor(): L0 arrays and L1 tensors stitched from task slices, owner selection, overlaps, gaps."""

from __future__ import annotations

import uuid

import dask.array as da
from hypothesis import given, settings, strategies as st
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from megadump_zarr.read import open_dump
from megadump_zarr.read.location import open_location
from megadump_zarr.read.stitch import Piece, stitch
from megadump_zarr.store.writer import WindowWriter


def _values(array) -> np.ndarray:
    return np.asarray(array.values).astype(np.float64)


def test_combine_output_stitched_equals_kernel_out(demo_dumps):
    run = demo_dumps["l1"]
    out = open_dump(run.root).tensor("out")
    assert isinstance(out.data, da.Array)
    assert out.dims == ("token", "hidden")
    np.testing.assert_array_equal(out["token"].values, np.arange(run.config.tokens))
    np.testing.assert_array_equal(_values(out), run.param("moe_experts", 9))
    assert out.attrs["records"] == 5 and out.attrs["missingRows"] == 0 and out.attrs["stage"] == "combine"
    assert list(np.unique(out["task_id"].values)) == [13, 14, 15, 16, 17]


def test_unpermute_output_stitched_equals_l0_ws(demo_dumps):
    l0, l1 = demo_dumps["l0"], demo_dumps["l1"]
    stitched = open_dump(l1.root).tensor("ws", stage="unpermute")
    whole = open_dump(l0.root).tensor("ws")
    assert stitched.dims == ("token", "ffn") and whole.dims == ("slot", "ffn")  # L0 names ws after its first spec
    np.testing.assert_array_equal(_values(stitched), _values(whole))
    np.testing.assert_array_equal(_values(whole), l1.param("moe_experts", 4))


def test_expert_hidden_activations_only_l1_sees(demo_dumps):
    run = demo_dumps["l1"]
    dump = open_dump(run.root)
    hidden = dump.tensor("ws", stage="expert_up", io="output")
    xs = dump.tensor("xs", stage="expert_up")
    w_up = run.launches["moe_experts"][2]
    counts = run.param("moe_experts", 1)
    expected = []
    for expert in range(4):
        rows = xs.sel(owner_id=expert).values
        rows = torch.from_numpy(np.asarray(rows).astype(np.float32)).to(w_up.dtype)
        expected.append(F.silu(rows @ w_up[expert]).to(torch.float64).numpy())
    np.testing.assert_allclose(_values(hidden), np.concatenate(expected), rtol=1e-6, atol=1e-6)
    assert not np.allclose(_values(hidden), run.param("moe_experts", 4))  # the workspace was overwritten later
    assert hidden.sizes["slot"] == counts.sum()


def test_sel_owner_returns_that_experts_rows(demo_dumps, counting_store):
    run = demo_dumps["l1"]
    counts = run.param("moe_experts", 1)
    store = counting_store(open_location(run.root).store)  # counts the stored keys read (tasks layout)
    dump = open_dump(store)
    hidden = dump.tensor("ws", stage="expert_up")
    data_reads = [k for k in store.chunk_reads() if "/output_00_ws/" in k]
    assert data_reads == []  # building the stitched tensor reads only the small slot coordinates
    start = int(counts[:1].sum())
    one = hidden.sel(owner_id=1)
    assert one.sizes["slot"] == counts[1]
    np.testing.assert_array_equal(one["slot"].values, np.arange(start, start + counts[1]))
    assert set(one["task_id"].values) == {1} and set(one["core_id"].values) == {1}
    store.reads.clear()
    values = one.values
    reads = store.chunk_reads()
    assert reads and all("/task_000001/output_00_ws/" in k for k in reads)
    record = dump.dataset(invocation=1, stage="expert_up", task=1)["output_00_ws"]
    np.testing.assert_array_equal(values, record.values)
    assert hidden.isel(slot=hidden.task_id.values == 2).sizes["slot"] == counts[2]
    if demo_dumps["dtype"] == "float32":  # xarray's where() cannot promote ml_dtypes' bfloat16
        assert hidden.where(hidden.task_id == 2, drop=True).sizes["slot"] == counts[2]


def test_broadcast_workers_and_duplicated_inputs(demo_dumps):
    run = demo_dumps["l1"]
    dump = open_dump(run.root)
    xs = dump.tensor("xs", stage="gather")
    np.testing.assert_array_equal(_values(xs), run.param("moe_dispatch", 2))
    assert list(xs["worker"].values[:8]) == list(range(8))
    h = dump.tensor("h")  # every gather worker of every tile reads the whole of h: identical copies
    copies = dump.records().query("name == 'h'")
    assert h.attrs["records"] == len(copies) >= 37 and h.attrs["capturedRows"] == run.config.tokens
    np.testing.assert_array_equal(_values(h), run.param("moe_dispatch", 0))
    order = dump.tensor("order")
    np.testing.assert_array_equal(order.values, run.param("moe_dispatch", 1))
    assert order.dtype == np.int64
    counts = dump.tensor("expert_counts", stage="expert_down")
    np.testing.assert_array_equal(counts.values, run.param("moe_experts", 1))


def test_ambiguous_and_unstitchable_names(demo_dumps):
    l0, l1 = demo_dumps["l0"], demo_dumps["l1"]
    dump = open_dump(l1.root)
    with pytest.raises(
        ValueError, match=r"'ws' matches 4 .*choose with stage=.*expert_up.*expert_down.*unpermute.*combine"
    ):
        dump.tensor("ws")
    with pytest.raises(ValueError, match=r"'w_up': 4 of its 4 records have no global row index.*task="):
        dump.tensor("w_up")
    w_up = dump.tensor("w_up", task=1)
    np.testing.assert_array_equal(_values(w_up), l1.param("moe_experts", 2)[1])
    with pytest.raises(ValueError, match=r"no tensor 'nope' matches.*tensors: .*xs") as plain:
        dump.tensor("nope")
    assert "record_array" not in str(plain.value)
    path = dump.records()["path"].iloc[0]  # a record path given as a name: the message says how to read it
    with pytest.raises(ValueError, match=r"no tensor 'rank_0/.*/input_00_\w+' matches.*record_array\(path\)"):
        dump.tensor(path)
    whole = open_dump(l0.root)
    with pytest.raises(ValueError, match=r"'h' is stored by 2 invocations.*moe_router.*moe_dispatch"):
        whole.tensor("h")
    np.testing.assert_array_equal(_values(whole.tensor("h", kernel="moe_dispatch")), l0.param("moe_dispatch", 0))
    np.testing.assert_array_equal(_values(whole.tensor("h", invocation=0)), l0.param("moe_router", 2))


def _write(hand, root, tasks, **kwargs):
    with WindowWriter(root, compressor="none", chunk_bytes=64) as writer:
        writer.write_window(hand.window(tasks, **kwargs))


def test_gaps_are_absent_rows(hand, tmp_path):
    data = np.arange(40, dtype=np.float32).reshape(10, 4)
    _write(
        hand,
        tmp_path,
        {1: [hand.Record("y", data[6:], 6, declared_rows=10)], 2: [hand.Record("y", data[:4], 0, declared_rows=10)]},
        owners={1: 5, 2: 7},
    )
    y = open_dump(tmp_path).tensor("y")
    np.testing.assert_array_equal(y["row"].values, [0, 1, 2, 3, 6, 7, 8, 9])
    np.testing.assert_array_equal(y.values, data[[0, 1, 2, 3, 6, 7, 8, 9]])
    assert y.attrs["missingRows"] == 2 and y.attrs["capturedRows"] == 8
    np.testing.assert_array_equal(y.sel(owner_id=5)["row"].values, [6, 7, 8, 9])
    np.testing.assert_array_equal(y.sel(row=7).values, data[7])


def test_identical_overlaps_are_kept_once(hand, tmp_path):
    data = np.arange(48, dtype=np.float32).reshape(12, 4)
    _write(
        hand,
        tmp_path,
        {1: [hand.Record("y", data[0:8], 0, declared_rows=12)], 2: [hand.Record("y", data[4:12], 4, declared_rows=12)]},
    )
    y = open_dump(tmp_path).tensor("y")
    np.testing.assert_array_equal(y.values, data)
    assert list(y["task_id"].values) == [1] * 8 + [2] * 4


def test_different_overlaps_raise_when_computed(hand, tmp_path):
    data = np.arange(48, dtype=np.float32).reshape(12, 4)
    other = data[4:12].copy()
    other[1, 2] = -1.0  # global row 5
    _write(
        hand,
        tmp_path,
        {1: [hand.Record("y", data[0:8], 0, declared_rows=12)], 2: [hand.Record("y", other, 4, declared_rows=12)]},
    )
    y = open_dump(tmp_path).tensor("y")  # lazy: nothing compared yet
    np.testing.assert_array_equal(y.isel(row=slice(8, 12)).values, data[8:12])  # rows without duplicates are fine
    with pytest.raises(
        ValueError,
        match=r"task_000001/output_00_y and .*task_000002/output_00_y hold different values "
        r"for global rows 4\.\.7",
    ):
        y.values


def test_io_ambiguity(hand, tmp_path):
    data = np.ones((4, 2), dtype=np.float32)
    _write(
        hand,
        tmp_path,
        {
            1: [
                hand.Record("y", data, 0, io="input", declared_rows=4),
                hand.Record("y", data, 0, io="output", declared_rows=4),
            ]
        },
    )
    dump = open_dump(tmp_path)
    with pytest.raises(ValueError, match=r"'y' matches 2 .*choose with io=.*io='input'.*io='output'"):
        dump.tensor("y")
    assert dump.tensor("y", io="output").attrs["io"] == "output"


@st.composite
def _layouts(draw):
    rows = draw(st.integers(1, 30))
    cols = draw(st.integers(1, 3))
    n = draw(st.integers(1, 5))
    pieces = []
    for _ in range(n):
        start = draw(st.integers(0, rows - 1))
        stop = draw(st.integers(start + 1, rows))
        chunk = draw(st.integers(1, 8))
        pieces.append((start, stop, chunk))
    return rows, cols, pieces


@settings(max_examples=60, deadline=None)
@given(_layouts())
def test_stitch_property(layout):
    rows, cols, spans = layout
    base = np.arange(rows * cols, dtype=np.float64).reshape(rows, cols) * 1.5
    pieces = [
        Piece(
            path=f"p{i}",
            data=da.from_array(base[a:b], chunks=(c, cols)),
            rows=np.arange(a, b),
            dims=("r", "c"),
            task_id=i,
            owner_id=i % 2,
        )
        for i, (a, b, c) in enumerate(spans)
    ]
    out = stitch(pieces, name="t")
    expected_rows = np.unique(np.concatenate([np.arange(a, b) for a, b, _ in spans]))
    np.testing.assert_array_equal(out["r"].values, expected_rows)
    np.testing.assert_array_equal(out.values, base[expected_rows])
    np.testing.assert_array_equal(out.isel(r=slice(0, 1)).values, base[expected_rows[:1]])
    for owner in (0, 1):
        if (out["owner_id"].values == owner).any():
            picked = out.sel(owner_id=owner)
            assert (picked["owner_id"].values == owner).all()


def test_memory_root_stitch(hand):
    root = f"memory://stitch-{uuid.uuid4().hex}"
    data = np.arange(16, dtype=np.int32).reshape(8, 2)
    _write(
        hand,
        root,
        {3: [hand.Record("k", data[4:], 4, declared_rows=8)], 4: [hand.Record("k", data[:4], 0, declared_rows=8)]},
    )
    k = open_dump(root).tensor("k")
    np.testing.assert_array_equal(k.values, data)
    assert k.dtype == np.int32
