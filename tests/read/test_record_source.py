"""Packed records read natively (issue 21): a record row's ``pack_array``/``pack_row`` is read as zarr
``pack_array[pack_row]`` (``read.record_source``), and a row its committed shard does not hold is a
``DumpIntegrityError`` naming the record and the shard, never fill values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

from megadump_zarr import open_dump
from megadump_zarr.read.errors import DumpIntegrityError
from megadump_zarr.read.record_source import PackRow, TaskArray
from megadump_zarr.store.packs import NO_CHUNK, decode_index, encode_index, index_nbytes
from tests.store.test_packs_writer import INV, _write

WINDOW = "rank_0/window_0000"
RECORD = f"{WINDOW}/{INV}/stages/up/task_000003/input_00_x"
PACK = f"{WINDOW}/{INV}/stages/up/pack_0000/input_00_x"
SHARD = f"{PACK}/c.0.0.0"


@pytest.fixture(scope="module")
def layouts(tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("record-source")
    _write(base / "packed", True)
    _write(base / "plain", False)
    return base / "packed", base / "plain"


def _damaged(tmp_path: Path, layouts: tuple[Path, Path]) -> Path:
    import shutil

    root = tmp_path / "packed"
    shutil.copytree(layouts[0], root)
    return root


def test_packed_records_have_pack_row_sources_and_read_as_the_tasks_layout(layouts):
    packed, plain = open_dump(layouts[0]), open_dump(layouts[1])
    source = packed.record_source(RECORD)
    assert isinstance(source, PackRow) and (source.array, source.row, source.committed) == (PACK, 3, True)
    assert isinstance(plain.record_source(RECORD), TaskArray)
    stored = zarr.open_array(str(layouts[0] / PACK), mode="r")[3]
    a, b = packed.record_array(RECORD), plain.record_array(RECORD)
    assert np.asarray(a.values).tobytes() == stored.tobytes() == np.asarray(b.values).tobytes()
    assert a.dims == b.dims
    # a task array's chunk checksum attribute: a pack row's bytes are checked by its shard's crc32c codec
    assert a.attrs == {k: v for k, v in b.attrs.items() if k != "chunkCrc32c"}
    assert list(a.coords) == list(b.coords) == ["token"]
    assert a["token"].values.tolist() == b["token"].values.tolist() == list(range(120, 160))
    for path in packed.records()["path"]:
        assert (
            np.asarray(packed.record_array(path).values).tobytes()
            == np.asarray(plain.record_array(path).values).tobytes()
        ), path


def test_stitched_tensor_is_identical_in_both_layouts(layouts):
    a = open_dump(layouts[0]).tensor("x", stage="up", io="input")
    b = open_dump(layouts[1]).tensor("x", stage="up", io="input")
    assert a.dims == b.dims and a.shape == b.shape and a.attrs == b.attrs
    assert np.asarray(a.values).tobytes() == np.asarray(b.values).tobytes()
    for name in ("token", "task_id", "owner_id", "core_id", "worker"):
        assert a[name].values.tolist() == b[name].values.tolist(), name


def _rewrite_index(path: Path, edit) -> None:
    raw = path.read_bytes()
    count = zarr.open_array(str(path.parent), mode="r").shards[0]
    cut = len(raw) - index_nbytes(count)
    entries = decode_index(raw[cut:], count, str(path))
    path.write_bytes(raw[:cut] + encode_index(edit(entries)))


def _fails(root: Path, what: str) -> None:
    dump = open_dump(root)
    with pytest.raises(DumpIntegrityError, match=what) as caught:
        dump.record_array(RECORD).values
    assert RECORD in str(caught.value) and SHARD in str(caught.value) and caught.value.key == SHARD
    with pytest.raises(DumpIntegrityError, match=what):
        dump.tensor("x", stage="up", io="input").values


def test_deleted_shard_is_an_integrity_error(tmp_path, layouts):
    root = _damaged(tmp_path, layouts)
    (root / SHARD).unlink()
    assert not zarr.open_array(str(root / PACK), mode="r")[3].any()  # plain zarr: silent zeros
    _fails(root, "is not stored")


def test_absent_index_entry_is_an_integrity_error(tmp_path, layouts):
    root = _damaged(tmp_path, layouts)
    _rewrite_index(root / SHARD, lambda entries: [None if i == 3 else e for i, e in enumerate(entries)])
    assert not zarr.open_array(str(root / PACK), mode="r")[3].any()  # plain zarr: silent zeros
    _fails(root, "holds no inner chunk 3")
    other = f"{WINDOW}/{INV}/stages/up/task_000002/input_00_x"  # the shard's other rows still read
    assert np.isnan(open_dump(root).record_array(other).values).any()


def test_index_entry_outside_the_shard_is_an_integrity_error(tmp_path, layouts):
    root = _damaged(tmp_path, layouts)
    _rewrite_index(root / SHARD, lambda entries: [(1 << 40, 64) if i == 3 else e for i, e in enumerate(entries)])
    _fails(root, "lies outside the shard")


@pytest.mark.parametrize("keep", [0.5, 0.999])
def test_truncated_shard_is_an_integrity_error(tmp_path, layouts, keep):
    root = _damaged(tmp_path, layouts)
    raw = (root / SHARD).read_bytes()
    (root / SHARD).write_bytes(raw[: int(len(raw) * keep)])
    _fails(root, "shard index")


def test_entry_index_is_not_no_chunk_sentinel_by_accident():
    assert decode_index(encode_index([None, (0, 8)]), 2, "k") == [None, (0, 8)]
    assert NO_CHUNK == 2**64 - 1
