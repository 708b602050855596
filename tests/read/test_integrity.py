"""No silent fill values: a missing or corrupt chunk of a committed window is a DumpIntegrityError naming its key.

Real demo dumps (L0 and L1) are copied per test and damaged on disk: one chunk file deleted, emptied,
overwritten with garbage or with one byte flipped. Every read path (``record_array``, ``tensor``,
``dataset``, the ``megadump`` CLI, ``export-hdf5``) must refuse, never return zeros.
"""

from __future__ import annotations

import json
from pathlib import Path
import re
import shutil

import numpy as np
import pytest

from megadump_zarr import open_dump
from megadump_zarr.cli.main import main
from megadump_zarr.read.errors import DumpIntegrityError
from tests._layout import record_chunk


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from megadump_zarr.demo.run import run_demo

    return run_demo(tmp_path_factory.mktemp("integrity") / "run", steps=2).root


@pytest.fixture
def dump_copy(pristine: Path, tmp_path: Path) -> Path:
    shutil.copytree(pristine, tmp_path / "run")
    return tmp_path / "run"


def _l0_x(root: Path) -> tuple[Path, str, Path]:
    """(dump root, record path, its first chunk file) of L0 tensor ``x`` of invocation 0."""
    dump = root / "l0"
    records = open_dump(dump).records()
    path = records[(records["name"] == "x") & (records["invocation"] == 0)]["path"].iloc[0]
    chunks = sorted(p for p in (dump / path).iterdir() if p.name != "zarr.json")
    return dump, path, chunks[0]


def _codecs(array_dir: Path) -> list[str]:
    return [c["name"] for c in json.loads((array_dir / "zarr.json").read_text())["codecs"]]


def test_missing_chunk_raises_everywhere(dump_copy: Path) -> None:
    dump_root, path, chunk = _l0_x(dump_copy)
    expected = open_dump(dump_root).record_array(path).values
    assert np.abs(expected).sum() > 0
    chunk.unlink()
    key = f"{path}/{chunk.name}"
    dump = open_dump(dump_root)
    for read in (
        lambda: dump.record_array(path).values,
        lambda: dump.tensor("x", invocation=0).values,
        lambda: dump.dataset(invocation=0)["x"].values,
    ):
        with pytest.raises(DumpIntegrityError, match="is missing") as info:
            read()
        assert key in str(info.value)
        assert info.value.key == key
    assert isinstance(info.value, ValueError)
    # metadata-only reads still work: the catalogue is intact
    assert len(dump.records()) > 0


@pytest.mark.parametrize("damage", ["flip", "garbage", "empty", "short"])
def test_corrupt_chunk_names_key_and_checksum(dump_copy: Path, damage: str) -> None:
    dump_root, path, chunk = _l0_x(dump_copy)
    raw = bytearray(chunk.read_bytes())
    if damage == "flip":
        raw[len(raw) // 2] ^= 0x40
    elif damage == "garbage":
        raw = bytearray(np.random.default_rng(0).integers(0, 256, len(raw), dtype=np.uint8).tobytes())
    elif damage == "empty":
        raw = bytearray()
    else:
        raw = raw[:3]
    chunk.write_bytes(bytes(raw))
    with pytest.raises(DumpIntegrityError, match="is corrupt") as info:
        open_dump(dump_root).record_array(path).values
    message = str(info.value)
    assert f"{path}/{chunk.name}" in message
    if "crc32c" in _codecs(chunk.parent):
        assert "crc32c" in message


def test_truncated_l1_chunk(dump_copy: Path) -> None:
    """An L1 record: tensor() stitches it, and the stitched read refuses the deleted chunk."""
    root = dump_copy / "l1"
    records = open_dump(root).records()
    row = records[records["stored_bytes"] > 0].iloc[0]
    span = record_chunk(root, row["path"])  # the chunk file, or the pack shard that holds it (packs layout)
    key = f"{row['path']}/{span.file.name}" if span.whole_file else f"{row['path']}/c" + ".0" * len(row["stored_shape"])
    span.file.unlink()
    with pytest.raises(DumpIntegrityError, match=f"chunk {re.escape(key)} in .* is missing"):
        open_dump(root).record_array(row["path"]).values


def test_torn_window_keeps_fill_values(dump_copy: Path) -> None:
    """A window that never committed may legitimately lack chunks: no integrity error there."""
    dump_root, path, chunk = _l0_x(dump_copy)
    window_doc = dump_root / "rank_0" / "window_0000" / "zarr.json"
    window_doc.unlink()  # a torn window has no committed document
    chunk.unlink()
    dump = open_dump(dump_root)
    values = dump.record_array(path).values
    assert (values == 0).all()


def test_cli_exit_1_one_line(dump_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dump_root, path, chunk = _l0_x(dump_copy)
    chunk.unlink()
    capsys.readouterr()
    code = main(["show", str(dump_root), "x", "--invocation", "0"])
    err = capsys.readouterr().err
    assert code == 1
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines == [lines[-1]] and lines[-1].startswith("error: chunk ") and f"{path}/{chunk.name}" in lines[-1]
    assert "Traceback" not in err


def test_export_hdf5_refuses_and_leaves_nothing(
    dump_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump_root, path, chunk = _l0_x(dump_copy)
    chunk.unlink()
    out = tmp_path / "out.h5"
    capsys.readouterr()
    code = main(["export-hdf5", str(dump_root / "rank_0" / "window_0000"), str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert chunk.name in err and "missing" in err
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".out.h5")) == []


def test_corrupt_coordinate_chunk_of_a_stitched_tensor(dump_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """tensor() reads the small global-row coordinate arrays while stitching: a damaged one is named too (the demo's
    L1 dump is in the tasks layout, where each task group stores its row coordinates)."""
    root = dump_copy / "l1"
    records = open_dump(root).records()
    row = records[(records["name"] == "xs") & (records["stage"] == "expert_up")].iloc[0]
    group = root / row["group"]
    first_dim = json.loads((root / row["path"] / "zarr.json").read_text())["dimension_names"][0]
    coordinate = group / first_dim  # the global-row coordinate array stitching reads
    chunk = next(p for p in coordinate.iterdir() if p.name != "zarr.json")
    chunk.write_bytes(b"\x00" * 7)
    key = f"{row['group']}/{coordinate.name}/{chunk.name}"
    with pytest.raises(DumpIntegrityError, match="is corrupt") as info:
        open_dump(root).tensor("xs", stage="expert_up", invocation=int(row["invocation"])).values
    assert key in str(info.value)
    capsys.readouterr()
    code = main(["show", str(root), "xs", "--stage", "expert_up", "--invocation", str(int(row["invocation"]))])
    err = capsys.readouterr().err
    assert code == 1 and key in err and len(err.strip().splitlines()) == 1


def test_reads_that_never_scanned_the_catalogue(dump_copy: Path) -> None:
    """A reader using Dump.store directly (the xarray engine does) is checked too: the dump's catalogue, read at
    open, says which windows are committed."""
    from megadump_zarr.read.truncated import open_zarr_array

    dump_root, path, chunk = _l0_x(dump_copy)
    chunk.unlink()
    dump = open_dump(dump_root)
    window_doc = json.loads((dump_root / "rank_0" / "window_0000" / "zarr.json").read_text())
    doc = window_doc["consolidated_metadata"]["metadata"][path.split("/", 2)[2]]
    with pytest.raises(DumpIntegrityError, match="is missing"):
        open_zarr_array(dump.store, path, doc)[...]


def test_a_checked_chunk_has_its_crc32c_computed_once(dump_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast row read of a committed window's chunks does not check again the crc32c the integrity store
    checked (with the chunk's inventory digest, in one pass): one crc32c pass per chunk."""
    import google_crc32c

    from megadump_zarr.read.lazy import RecordArray
    from megadump_zarr.read.truncated import open_zarr_array

    dump_root, path, _ = _l0_x(dump_copy)
    dump = open_dump(dump_root)
    expected = dump.record_array(path).values
    window_doc = json.loads((dump_root / "rank_0" / "window_0000" / "zarr.json").read_text())
    doc = window_doc["consolidated_metadata"]["metadata"][path.split("/", 2)[2]]
    assert doc["codecs"][-1]["name"] == "crc32c"
    rows = RecordArray(open_zarr_array(dump.store, path, doc), path)
    assert rows.reader is not None  # the fast path reads it
    passes = {"value": 0, "extend": 0}
    value, extend = google_crc32c.value, google_crc32c.extend

    def counted_value(data):
        passes["value"] += 1
        return value(data)

    def counted_extend(crc, data):
        passes["extend"] += 1
        return extend(crc, data)

    monkeypatch.setattr(google_crc32c, "value", counted_value)
    monkeypatch.setattr(google_crc32c, "extend", counted_extend)
    chunks = -(-expected.shape[0] // rows.chunks[0])
    np.testing.assert_array_equal(rows[0 : expected.shape[0]], expected)  # exact: stored bytes
    assert rows.fast_reads == 1
    assert passes == {"value": 0, "extend": chunks}


def test_a_torn_window_chunk_is_still_checked_by_the_fast_read(dump_copy: Path) -> None:
    """A chunk the integrity store passes through (its window is not committed) has its crc32c checked where it is
    decoded: a flipped byte is never returned as a value."""
    from megadump_zarr.read.lazy import RecordArray
    from megadump_zarr.read.truncated import open_zarr_array

    dump_root, path, chunk = _l0_x(dump_copy)
    window = dump_root / "rank_0" / "window_0000" / "zarr.json"
    window_doc = json.loads(window.read_text())
    doc = window_doc["consolidated_metadata"]["metadata"][path.split("/", 2)[2]]
    window_doc["attributes"]["status"] = "writing"
    window.write_text(json.dumps(window_doc))
    raw = bytearray(chunk.read_bytes())
    raw[len(raw) // 2] ^= 0x40
    chunk.write_bytes(bytes(raw))
    dump = open_dump(dump_root)
    rows = RecordArray(open_zarr_array(dump.store, path, doc), path)
    assert rows.reader is not None  # the fast path reads it
    with pytest.raises(DumpIntegrityError, match=re.escape(f"{path}/{chunk.name}")):
        rows[0 : doc["shape"][0]]
    assert rows.fast_reads == 0


def _packed_stats(tmp_path: Path) -> tuple[Path, list[Path], str]:
    """A copy of the stored packs fixture: (root, the chunk of each of its packs' ``_stats`` arrays, the first's
    array key)."""
    root = shutil.copytree(Path(__file__).parent / "data" / "format10" / "packs", tmp_path / "packed")
    window = root / "rank_0" / "window_0000"
    listed = json.loads((window / "inventory.json").read_text())["arrays"]
    chunks = [
        next(p for p in sorted((window / path).iterdir()) if p.name != "zarr.json")
        for path in sorted(listed)
        if path.endswith("_stats")
    ]
    assert len(chunks) >= 2 and chunks[0].read_bytes() != chunks[1].read_bytes()
    return root, chunks, chunks[0].parent.relative_to(root).as_posix()


def test_a_pack_array_read_builds_no_per_task_view(tmp_path: Path) -> None:
    """Reading a chunk of a packed window's stored array through the dump's store checks it against the window
    inventory only: the store parses no catalogue, so the packs' per-task view is never built (and a chunk moved
    in from another array is still refused)."""
    import zarr

    import megadump_zarr.read.pack_rows as pack_rows

    root, chunks, key = _packed_stats(tmp_path)
    assert not hasattr(pack_rows, "expand_window")  # the packs' per-task view is gone: nothing can build it
    dump = open_dump(root)
    assert len(dump.records()) > 0
    assert zarr.open_array(dump.store, path=key, mode="r")[...].size > 0
    chunks[0].write_bytes(chunks[1].read_bytes())  # another array's chunk, moved in after the catalogue was read
    with pytest.raises(DumpIntegrityError, match=f"chunk {re.escape(key)}/{chunks[0].name} .*window inventory"):
        zarr.open_array(dump.store, path=key, mode="r")[...]


def test_a_dump_store_pickles_with_its_committed_windows(tmp_path: Path) -> None:
    """A dump's store shipped to a worker carries which windows are committed (their stored documents, not the
    catalogue: no per-task view is built) and refuses there what it refuses here."""
    import pickle

    import zarr

    import megadump_zarr.read.pack_rows as pack_rows

    root, chunks, key = _packed_stats(tmp_path)
    assert not hasattr(pack_rows, "expand_window")  # the packs' per-task view is gone: nothing can build it
    dump = open_dump(root)
    assert len(dump.records()) > 0
    copy = pickle.loads(pickle.dumps(dump.store))
    expected = zarr.open_array(copy, path=key, mode="r")[...]
    chunks[0].write_bytes(chunks[1].read_bytes())
    with pytest.raises(DumpIntegrityError, match=f"chunk {re.escape(key)}/{chunks[0].name} .*window inventory"):
        zarr.open_array(pickle.loads(pickle.dumps(dump.store)), path=key, mode="r")[...]
    assert expected.size > 0
