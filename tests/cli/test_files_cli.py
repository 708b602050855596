"""``megadump`` commands that write: demo, decode-buffer, convert, export-hdf5."""

from __future__ import annotations

import json
import os
from pathlib import Path
import pickle
import re
from typing import Any

import h5py
import numpy as np
import pytest
import torch
import xarray as xr
import zarr
from zarr.storage import LocalStore, StorePath

from megadump_zarr.read import open_dump
from megadump_zarr.store.writer import window_status
from tests.cli._helpers import assert_input_error, make_salvage_inputs


# --------------------------------------------------------------------------- demo
def test_demo_writes_and_refuses_a_non_empty_directory(cli, tmp_path):
    out = tmp_path / "demo"
    result = cli("demo", "--out", out, "--steps", "1")
    assert result.code == 0, result.err
    assert f"megadump demo wrote {out}" in result.out and "xr.open_zarr" in result.out
    assert (out / "l1" / "rank_0" / "window_0000" / "zarr.json").is_file()
    assert_input_error(cli("demo", "--out", out), "already exists and is not empty")


def test_demo_json(cli, tmp_path):
    report = cli("demo", "--out", tmp_path / "d", "--steps", "1", "--json").json()
    assert report["windows"] >= 1 and report["tensors"] > 0 and Path(report["roots"]["L1"]).is_dir()


# --------------------------------------------------------------------------- decode-buffer
def test_decode_buffer_salvages_captured_records(cli, tmp_path, monkeypatch):
    inputs = make_salvage_inputs(tmp_path / "in", monkeypatch, pending=3)
    out = tmp_path / "salvaged"
    result = cli("decode-buffer", inputs.buffer, inputs.plan, "--out", out)
    assert result.code == 0, result.err
    window = out / "rank_0" / "window_0000"
    assert f"wrote aborted window {window}: {len(inputs.captured)} captured records, 3 pending" in result.out
    assert "3 PENDING records" in result.out
    for task_id, io, index, name in inputs.pending:  # the pending records are listed
        assert any(
            f" {task_id} " in line and f" {name} " in line and f" {io} " in line for line in result.out.splitlines()
        ), (task_id, name)
    assert window_status(out, 0, 0) == "aborted"
    assert zarr.open_group(str(window), mode="r").attrs["status"] == "aborted"
    dump = open_dump(out)
    assert dump.records().empty  # an aborted window is not read by default
    records = dump.records(include_incomplete=True)
    assert len(records) == len(inputs.captured)
    for row in records.itertuples():
        expected = inputs.captured[(int(row.task_id), row.io, int(row.index))]
        stored = np.asarray(dump.record_array(row.path).values)
        assert stored.dtype == expected.dtype and stored.shape == expected.shape
        assert stored.tobytes() == expected.tobytes(), row.path
    info = cli("info", out)
    assert info.code == 0 and "ABORTED" in info.out and "salvaged" in info.out


def test_decode_buffer_json_window_choice_and_existing_window(cli, tmp_path, monkeypatch):
    inputs = make_salvage_inputs(tmp_path / "in", monkeypatch, pending=1)
    out = tmp_path / "salvaged"
    report = cli("decode-buffer", inputs.buffer, inputs.plan, "--out", out, "--window", "7", "--json").json()
    assert report["window_index"] == 7 and report["status"] == "aborted"
    assert report["captured"] == len(inputs.captured) and len(report["pending"]) == 1
    assert report["pending"][0]["name"] == inputs.pending[0][3]
    assert window_status(out, 0, 7) == "aborted"
    assert_input_error(
        cli("decode-buffer", inputs.buffer, inputs.plan, "--out", out, "--window", "7"), "already exists"
    )
    # the same buffer as .npy and as a torch tensor file
    raw = np.frombuffer(inputs.buffer.read_bytes(), dtype=np.uint8)
    np.save(tmp_path / "buffer.npy", raw)
    torch.save(torch.from_numpy(raw.copy()), tmp_path / "buffer.pt")
    for index, name in ((8, "buffer.npy"), (9, "buffer.pt")):
        again = cli("decode-buffer", tmp_path / name, inputs.plan, "--out", out, "--window", index, "--json")
        assert again.code == 0, again.err
        assert again.json()["captured"] == len(inputs.captured)


def test_decode_buffer_bad_inputs(cli, tmp_path, monkeypatch):
    inputs = make_salvage_inputs(tmp_path / "in", monkeypatch, pending=1)
    out = tmp_path / "salvaged"
    assert_input_error(cli("decode-buffer", tmp_path / "none.bin", inputs.plan, "--out", out), "buffer file not found")
    assert_input_error(cli("decode-buffer", inputs.buffer, tmp_path / "none.json", "--out", out), "cannot read L1 plan")
    (tmp_path / "other.json").write_text(json.dumps({"schema": "something else"}))
    assert_input_error(cli("decode-buffer", inputs.buffer, tmp_path / "other.json", "--out", out), "not an L1 plan")
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"\x00" * 256)
    assert_input_error(cli("decode-buffer", garbage, inputs.plan, "--out", out), "cannot decode")
    assert not out.exists()


# --------------------------------------------------------------------------- convert
@pytest.fixture
def legacy(tmp_path: Path) -> dict[str, Any]:
    from tests.interop._legacy_format import demo_tensors, l0_invocations, l1_invocations, write_rank_window

    tensors = demo_tensors(torch.float32)
    root = tmp_path / "legacy"
    l1_manifest = write_rank_window(root, "L1", 0, 0, l1_invocations(tensors))
    write_rank_window(root, "L0", 1, 2, l0_invocations(tensors))
    return {"root": root, "tensors": tensors, "l1_manifest": l1_manifest}


def test_convert_round_trips_a_legacy_dump(cli, tmp_path, legacy):
    out = tmp_path / "zarr"
    result = cli("convert", legacy["root"], out)
    assert result.code == 0, result.err
    assert "converted 2 windows" in result.out
    assert re.search(r"\b(\d+)/\1\b", result.err), result.err  # the progress bar (N/N done), on stderr
    dump = open_dump(out)
    records = dump.records()
    assert set(zip(records["rank"], records["window"])) == {(0, 0), (1, 2)}
    # every converted L1 tensor equals the legacy file it came from (its path is in the legacyFile attribute)
    window = Path(legacy["l1_manifest"]).parent
    l1 = records[records["rank"] == 0]
    by_file = {dump.record_array(p).attrs["legacyFile"]: p for p in l1["path"]}
    files = sorted(str(f.relative_to(window)) for f in window.rglob("*.pt"))
    assert sorted(by_file) == files and len(files) > 5
    for file, path in by_file.items():
        original = torch.load(window / file, weights_only=True)
        stored = zarr.open_array(str(out / path), mode="r")[...]
        np.testing.assert_array_equal(stored, original.numpy())
    report = cli("--json", "convert", legacy["root"], tmp_path / "again").json()
    assert len(report["windows"]) == 2
    assert_input_error(cli("convert", legacy["root"], out), "already exists")


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def test_convert_refuses_a_malicious_pickle(cli, tmp_path, legacy):
    manifest = json.loads(legacy["l1_manifest"].read_text())
    target = legacy["l1_manifest"].parent / manifest["invocations"][0]["tasks"][0]["tensors"][0]["file"]
    marker = tmp_path / "PWNED"
    with open(target, "wb") as handle:
        pickle.dump(_Evil(marker), handle)
    out = tmp_path / "zarr"
    result = cli("convert", legacy["root"], out, "--quiet")
    assert_input_error(result, "conversion refused", "not a plain tensor", str(target.resolve()))
    assert not marker.exists()
    assert window_status(out, 0, 0) is None  # a refused input leaves no output (issue 23), never an "aborted" window
    assert not out.exists() or not any(out.rglob("window_*"))


def test_convert_input_errors(cli, tmp_path):
    assert_input_error(cli("convert", tmp_path / "none", tmp_path / "out"), "not found")
    (tmp_path / "empty").mkdir()
    assert_input_error(cli("convert", tmp_path / "empty", tmp_path / "out"), "no legacy windows")


# --------------------------------------------------------------------------- export-hdf5
def _view(window: Path) -> LocalStore:
    """The window as plain zarr reads it (the demo's default layout: a group per task)."""
    return LocalStore(window, read_only=True)


def _groups_with_arrays(window: Path) -> list[str]:
    group = zarr.open_group(_view(window), mode="r")
    return sorted({p.rpartition("/")[0] for p, node in group.members(max_depth=None) if isinstance(node, zarr.Array)})


@pytest.mark.parametrize("level", ["L0", "L1"])
def test_export_hdf5_equals_the_zarr_data(cli, demo, tmp_path, level):
    window = Path(demo.roots[level]) / "rank_0" / "window_0000"
    target = tmp_path / "window.h5"
    result = cli("export-hdf5", window, target)
    assert result.code == 0, result.err
    assert f"wrote {target}" in result.out and target.is_file()
    groups = _groups_with_arrays(window)
    assert groups
    with h5py.File(target, "r") as f:  # the logical (schema-6) hierarchy: task groups, never a pack
        exported = set()
        f.visititems(
            lambda name, node: exported.add(name.rpartition("/")[0]) if isinstance(node, h5py.Dataset) else None
        )
    assert exported == set(groups)
    for group in groups[:6]:
        h5 = xr.open_dataset(target, engine="h5netcdf", group=group)
        zr = xr.open_zarr(StorePath(_view(window), group), consolidated=False)
        assert set(h5.data_vars) == set(zr.data_vars), group
        for name in zr.data_vars:
            np.testing.assert_array_equal(h5[name].values, zr[name].values)
        h5.close()


def test_export_hdf5_options_and_errors(cli, demo, tmp_path):
    root = demo.roots["L1"]
    target = tmp_path / "x.h5"
    report = cli("export-hdf5", root, target, "--compression", "lzf", "--json").json()  # a root with one window
    assert report["window"].endswith("rank_0/window_0000") and report["compression"] == "lzf"
    assert_input_error(cli("export-hdf5", root, target), "already exists", "--overwrite")
    assert cli("export-hdf5", root, target, "--compression", "none", "--overwrite", "--quiet").code == 0
    assert_input_error(cli("export-hdf5", root, target, "--overwrite", "--window", "5"), "no window matches")
    assert_input_error(cli("export-hdf5", tmp_path / "none", tmp_path / "y.h5"), str(tmp_path / "none"))
    assert_input_error(cli("export-hdf5", root, tmp_path / "no" / "y.h5"), "does not exist")
    assert_input_error(cli("export-hdf5", root, target, "--compression", "zip"), "--compression")


def test_export_hdf5_aborted_window_needs_allow_incomplete(cli, tmp_path, monkeypatch):
    inputs = make_salvage_inputs(tmp_path / "in", monkeypatch, pending=2)
    out = tmp_path / "salvaged"
    assert cli("decode-buffer", inputs.buffer, inputs.plan, "--out", out, "--quiet").code == 0
    window = out / "rank_0" / "window_0000"
    assert_input_error(cli("export-hdf5", window, tmp_path / "a.h5"), "aborted", "--allow-incomplete")
    result = cli("export-hdf5", window, tmp_path / "a.h5", "--allow-incomplete")
    assert result.code == 0, result.err
