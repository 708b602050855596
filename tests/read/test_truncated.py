"""Truncated records in logical shape: captured prefix, NaN elsewhere, only the needed chunks read."""

from __future__ import annotations

import dask.array as da
import numpy as np
import zarr
from zarr.storage import LocalStore

from megadump_zarr.read import open_dump
from megadump_zarr.store.chunking import CHUNK_KEY_SEPARATOR
from megadump_zarr.store.writer import WindowWriter


def _record(records, stage, name, task_id):
    row = records[(records["stage"] == stage) & (records["name"] == name) & (records["task_id"] == task_id)]
    assert len(row) == 1
    return row.iloc[0]


def test_records_describe_truncation(truncated_dump):
    records = open_dump(truncated_dump.root).records()
    assert records["truncated"].all()
    counts = truncated_dump.param("moe_experts", 1)
    up = records[(records["stage"] == "expert_up") & (records["name"] == "xs")].sort_values("owner_id")
    assert list(up["shape"]) == [(int(c), 16) for c in counts]
    assert set(up["stored_shape"]) == {(512,)} and set(up["stored_bytes"]) == {2048}
    assert list(up["bytes"]) == [int(c) * 16 * 4 for c in counts]


def test_record_array_logical_view(truncated_dump, counting_store):
    run = truncated_dump
    store = counting_store(LocalStore(run.root, read_only=True))
    dump = open_dump(store)
    records = dump.records()
    counts = run.param("moe_experts", 1)
    xs = run.param("moe_experts", 0)
    for expert in range(4):
        row = _record(records, "expert_up", "xs", expert)
        view = dump.record_array(row["path"])
        assert isinstance(view.data, da.Array)
        # the writer keeps the logical dimension names of a truncated record in its logicalDims attribute
        assert view.dims == ("slot", "hidden") and view.shape == row["shape"] and view.dtype == np.float32
        start = int(counts[:expert].sum())
        np.testing.assert_array_equal(view["slot"].values, np.arange(start, start + counts[expert]))
        values = view.values
        flat = values.reshape(-1)
        np.testing.assert_array_equal(flat[:512], xs[start : start + counts[expert]].reshape(-1)[:512])
        assert np.isnan(flat[512:]).all() and flat[512:].size == counts[expert] * 16 - 512
        assert view.attrs["capturedElements"] == 512 and view.attrs["truncated"] is True


def test_partial_rows_read_only_needed_chunks(truncated_dump, counting_store):
    store = counting_store(LocalStore(truncated_dump.root, read_only=True))
    dump = open_dump(store)
    row = _record(dump.records(), "expert_up", "xs", 0)
    chunk_prefix = "c" + CHUNK_KEY_SEPARATOR  # chunk keys of the 1-D stored array: "c", separator, index
    array_dir = truncated_dump.root / row["path"]
    stored_chunks = sorted(
        p.relative_to(array_dir).as_posix() for p in array_dir.rglob("*") if p.is_file() and p.name != "zarr.json"
    )
    assert stored_chunks == sorted(chunk_prefix + str(i) for i in range(8))  # 512 float32 elements, 256-byte chunks
    view = dump.record_array(row["path"])
    assert store.chunk_reads() == []
    store.reads.clear()
    head = view.isel(slot=slice(0, 8)).values
    reads = store.chunk_reads()
    assert 1 <= len(reads) <= 2 and all(k.startswith(row["path"] + "/" + chunk_prefix) for k in reads)
    # rows 0-7 are stored elements 0-127: the first two 64-element chunks, each read once
    assert sorted(reads) == [row["path"] + "/" + chunk_prefix + "0", row["path"] + "/" + chunk_prefix + "1"]
    np.testing.assert_array_equal(head, truncated_dump.param("moe_experts", 0)[:8])
    store.reads.clear()
    tail = view.isel(slot=slice(40, 50)).values  # wholly past the captured prefix: nothing to read
    assert store.chunk_reads() == [] and np.isnan(tail).all()
    store.reads.clear()
    tensor = dump.tensor("xs", stage="expert_up")
    assert store.chunk_reads() == []  # truncated records' global rows come from their attributes
    store.reads.clear()
    tensor.isel(slot=slice(0, 8)).values
    assert 1 <= len(store.chunk_reads()) <= 2


def test_stitched_truncated_outputs(truncated_dump):
    run = truncated_dump
    dump = open_dump(run.root)
    out = dump.tensor("out")
    expected = run.param("moe_experts", 9)
    assert out.shape == expected.shape and out.attrs["truncatedRecords"] == 4
    # 32 of each tile's 64 rows were stored: 128 rows captured, 128 NaN padding, and the mask says which
    assert (out.attrs["capturedRows"], out.attrs["missingRows"]) == (128, 128)
    values = out.values.astype(np.float64)
    mask = out.coords["captured"].values
    assert mask.dtype == bool and int(mask.sum()) == 128
    for tile in range(4):
        captured = slice(tile * 64, tile * 64 + 32)
        np.testing.assert_array_equal(values[captured], expected[captured])
        assert np.isnan(values[tile * 64 + 32 : (tile + 1) * 64]).all()
        assert mask[captured].all() and not mask[tile * 64 + 32 : (tile + 1) * 64].any()
    one = dump.tensor("xs", stage="expert_up").sel(owner_id=1)
    counts = run.param("moe_experts", 1)
    assert one.sizes["slot"] == counts[1]
    np.testing.assert_array_equal(one.values[:32], run.param("moe_experts", 0)[counts[0] : counts[0] + 32])
    single = dump.tensor("ws", stage="expert_up", task=2)
    assert single.shape == (counts[2], 16) and np.isnan(single.values[32:]).all()


def test_dataset_shows_stored_prefix(truncated_dump):
    ds = open_dump(truncated_dump.root).dataset(stage="expert_up", task=0)
    assert ds["input_00_xs"].dims == ("input_00_element",) and ds["input_00_xs"].shape == (512,)


def test_integer_truncation_promotes_to_float64(hand, tmp_path):
    logical = np.arange(40, dtype=np.int32).reshape(10, 4) - 7
    record = hand.Record("k", logical.reshape(-1)[:13].copy(), 0, logical_shape=(10, 4), declared_rows=10)
    with WindowWriter(tmp_path, compressor="none", chunk_bytes=16) as writer:
        writer.write_window(hand.window({1: [record]}))
    dump = open_dump(tmp_path)
    view = dump.record_array(dump.records()["path"].iloc[0])
    assert view.dtype == np.float64 and view.attrs["promotedFrom"] == "int32"
    flat = view.values.reshape(-1)
    np.testing.assert_array_equal(flat[:13], logical.reshape(-1)[:13])
    assert np.isnan(flat[13:]).all()
    np.testing.assert_array_equal(view.isel(row=slice(1, 3)).values.reshape(-1)[:5], logical.reshape(-1)[4:9])
    np.testing.assert_array_equal(dump.tensor("k").values.reshape(-1)[:13], logical.reshape(-1)[:13])


def test_bfloat16_truncation_keeps_dtype(hand, tmp_path):
    import ml_dtypes

    logical = (np.arange(24, dtype=np.float32).reshape(6, 4) / 8).astype(ml_dtypes.bfloat16)
    record = hand.Record("b", logical.reshape(-1)[:10].copy(), 0, logical_shape=(6, 4), declared_rows=6)
    with WindowWriter(tmp_path, chunk_bytes=8) as writer:
        writer.write_window(hand.window({1: [record]}))
    dump = open_dump(tmp_path)
    view = dump.record_array(dump.records()["path"].iloc[0])
    assert view.dtype == logical.dtype
    flat = view.values.astype(np.float32).reshape(-1)
    np.testing.assert_array_equal(flat[:10], logical.astype(np.float32).reshape(-1)[:10])
    assert np.isnan(flat[10:]).all()


def test_a_record_marked_truncated_that_is_not_a_flat_prefix_is_named(tmp_path):
    """``truncated: true`` on a 2-D stored record (a document edit in every copy; issue 23.6's "could not
    broadcast (32,8) into (32,)", found by the pack document fuzz) names the document and the field."""
    import pytest
    import zarr

    from megadump_zarr.read.errors import DumpIntegrityError
    from megadump_zarr.read.lazy import truncated_dask

    array = zarr.create_array(str(tmp_path / "a"), shape=(4, 8), chunks=(4, 8), dtype="float32")
    key = "rank_0/window_0000/invocation_000000_forward/stages/s/task_000000/input_00_x"
    with pytest.raises(
        DumpIntegrityError, match=r"attributes\.truncated is true, but the record stores a \[4, 8\]"
    ) as info:
        truncated_dask(array, [8, 8], key, str(tmp_path))
    assert info.value.key == f"{key}/zarr.json"


def test_record_array_marks_the_captured_rows(truncated_dump):
    dump = open_dump(truncated_dump.root)
    records = dump.records()
    counts = truncated_dump.param("moe_experts", 1)
    for expert in range(4):
        view = dump.record_array(_record(records, "expert_up", "xs", expert)["path"])
        mask = view.coords["captured"]
        # 512 stored elements of 16 per row: 32 whole rows; plain xarray shows the mask beside the data
        assert mask.dims == ("slot",) and mask.dtype == bool and int(mask.values.sum()) == 32
        assert mask.values[:32].all() and not mask.values[32:].any()
        assert (view.attrs["capturedRows"], view.attrs["missingRows"]) == (32, int(counts[expert]) - 32)
        assert "captured" in repr(view)
        assert np.isnan(view.where(~view.captured).values[32:]).all()


def test_records_say_what_the_statistics_cover(truncated_dump, tmp_path):
    from tests._truncated import write

    truncated = open_dump(truncated_dump.root).records()
    assert set(truncated["stats_scope"]) == {"prefix"}
    row = _record(truncated, "expert_up", "xs", 0)
    stored = truncated_dump.param("moe_experts", 0)[: int(truncated_dump.param("moe_experts", 1)[0])]
    assert row["max"] == float(stored.reshape(-1)[:512].max())  # the prefix's, as the scope says
    whole = open_dump(write(tmp_path / "whole", cap=None)).records()
    assert set(whole["stats_scope"]) == {"whole"}


def test_arrays_of_one_layout_keep_their_own_attributes_and_errors(tmp_path):
    """open_zarr_array reuses zarr's parse of a document layout it has seen: each array still has its own
    attributes, key and values, and a document that differs in any other field is parsed (and refused) anew."""
    import json

    import pytest

    from megadump_zarr.read.truncated import open_zarr_array

    store = LocalStore(tmp_path, read_only=False)
    rng = np.random.default_rng(0)
    values, docs = {}, {}
    for name in ("a", "b"):
        array = zarr.create_array(store, name=name, shape=(4, 3), chunks=(2, 3), dtype="float32")
        values[name] = rng.standard_normal((4, 3), dtype=np.float32)
        array[...] = values[name]
        array.attrs.update({"name": name, "note": f"record {name}"})
        docs[name] = json.loads((tmp_path / name / "zarr.json").read_text())
    first, second = open_zarr_array(store, "a", docs["a"]), open_zarr_array(store, "b", docs["b"])
    assert dict(first.attrs) == {"name": "a", "note": "record a"}
    assert dict(second.attrs) == {"name": "b", "note": "record b"}
    assert second.metadata.attributes is not first.metadata.attributes
    assert np.array_equal(first[...], values["a"]) and np.array_equal(second[...], values["b"])
    assert second.metadata.to_dict() == zarr.open_array(store, path="b", mode="r").metadata.to_dict()
    bad = dict(docs["b"], data_type="float33")
    with pytest.raises(ValueError, match=r"b/zarr.json is not a valid Zarr v3 array document"):
        open_zarr_array(store, "b", bad)
    with pytest.raises(ValueError, match=r"b/zarr.json: shape"):
        open_zarr_array(store, "b", dict(docs["b"], shape=[4, -3]))
