"""msprobe dumps read in place (no conversion): the same answers as convert-then-compare, hostile input refused.

Real PrecisionDebugger dumps (the session fixtures of ``conftest.py``): every level (L0, mix, L1), forward
and backward with parameter gradients, tensor and statistics tasks. In place, ``compare`` must give the
very rows (metrics, verdicts, notes) and root cause that comparing the converted dumps gives, because the
store serves the same key space with the tensor files' own bytes.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from megadump_zarr import compare, open_dump, root_cause
from megadump_zarr.interop.msprobe import convert_msprobe
from megadump_zarr.layout.inventory import INVENTORY_FILE
from megadump_zarr.read.msprobe.store import MsprobeStore

pytest.importorskip("msprobe")

CLI = [sys.executable, "-m", "megadump_zarr.cli.main"]
STATS_DIFFER = ("mean", "l2norm", "min", "max")  # msprobe's float32 statistics in place, recomputed ones converted
CASES = [
    ("target-tensor-L0", "golden-tensor-L0"),
    ("target-tensor-mix", "golden-tensor-mix"),
    ("target-tensor-L1", "golden-tensor-L1"),
    ("target-statistics-L0", "golden-statistics-L0"),
    ("target-statistics-mix", "golden-statistics-mix"),
]


@pytest.fixture(scope="module")
def converted(dumps, msprobe_dumps, tmp_path_factory) -> dict[str, Path]:
    """Every dump converted once (what in-place reading must match)."""
    base = tmp_path_factory.mktemp("msprobe-converted")
    every = {**dumps, **msprobe_dumps}
    out = {}
    for name, source in every.items():
        convert_msprobe(source, base / name)
        out[name] = base / name
    return out


def _same_frames(a: pd.DataFrame, b: pd.DataFrame, skip: tuple[str, ...] = ()) -> None:
    assert list(a.columns) == list(b.columns)
    for column in a.columns:
        if column not in skip:
            pd.testing.assert_series_equal(a[column], b[column], check_exact=True, obj=column)


@pytest.mark.parametrize(("target", "golden"), CASES)
def test_in_place_compare_equals_convert_then_compare(dumps, converted, target, golden):
    raw = compare(dumps[target], dumps[golden])
    conv = compare(converted[target], converted[golden])
    assert len(raw) == len(conv) > 10
    _same_frames(raw, conv)
    assert set(raw["verdict"]) & {"fail"}  # the perturbed weight shows
    assert root_cause(raw)["path"] == root_cause(conv)["path"]
    assert root_cause(raw)["name"] in (
        "Module.linear1.Linear.forward.0.parameters.weight",
        "Functional.linear.0.forward.input.1",
    )


def test_two_steps_forward_backward_in_place(msprobe_dumps, converted):
    raw = compare(msprobe_dumps["target"], msprobe_dumps["golden"])
    conv = compare(converted["target"], converted["golden"])
    _same_frames(raw, conv)
    assert set(raw["window"]) == {0, 1} and set(raw["direction"]) == {"forward", "backward"}
    assert (raw.loc[raw["max_abs"] == 0, "verdict"] == "pass").all()
    assert root_cause(raw)["name"] == root_cause(conv)["name"] == "Functional.linear.1.forward.input.1"


@pytest.mark.parametrize("name", ["golden-tensor-L0", "golden-statistics-mix", "stats"])
def test_records_and_documents_are_the_converted_ones(dumps, msprobe_dumps, converted, name):
    source = {**dumps, **msprobe_dumps}[name]
    raw, conv = open_dump(source).records(), open_dump(converted[name]).records()
    _same_frames(raw, conv, skip=STATS_DIFFER)
    integral = raw["dtype"].str.startswith(("int", "uint", "bool")).to_numpy()
    for column in STATS_DIFFER:  # msprobe's own statistics (float32 reductions) against recomputed float64 ones
        mine, theirs = raw[column].to_numpy(float), conv[column].to_numpy(float)
        known = ~np.isnan(mine)
        assert known[~integral].all() and (known[integral].all() or column in ("mean", "l2norm"))
        np.testing.assert_allclose(mine[known], theirs[known], rtol=1e-5, atol=1e-6, err_msg=column)
    store = MsprobeStore(source)
    on_disk = {p.relative_to(converted[name]).as_posix() for p in converted[name].rglob("*") if p.is_file()}
    # the same key space as the conversion, but for the window inventories our writer adds (msprobe stores none)
    on_disk = {k for k in on_disk if k.rpartition("/")[2] != INVENTORY_FILE}
    assert set(store._docs) | set(store._chunks) == on_disk


def test_tensors_are_the_file_bytes_without_a_checksum(msprobe_dumps):
    import torch

    dump = open_dump(msprobe_dumps["golden"])
    row = dump.records().iloc[0]
    array = dump.record_array(row["path"])
    [file] = (msprobe_dumps["golden"] / "step0").glob(f"*/dump_tensor_data/{row['name']}.pt")
    expected = torch.load(file, weights_only=True).numpy()
    assert np.array_equal(np.asarray(array), expected)
    store = MsprobeStore(msprobe_dumps["golden"])
    doc = json.loads(store._docs[f"{row['path']}/zarr.json"])
    assert doc["codecs"] == [{"name": "bytes", "configuration": {"endian": "little"}}]  # no crc32c: none stored
    with pytest.raises(PermissionError, match="read-only"):
        import asyncio

        from zarr.core.buffer import default_buffer_prototype

        asyncio.run(store.set("x", default_buffer_prototype().buffer.from_bytes(b"1")))


def test_cli_reads_the_raw_directory(msprobe_dumps, tmp_path):
    golden, target = msprobe_dumps["golden"], msprobe_dumps["target"]
    result = subprocess.run(
        [*CLI, "--json", "verify", str(golden)], capture_output=True, text=True, timeout=120, check=False
    )  # documents agree, every chunk there and decoding (no checksum stored)
    assert result.returncode == 0 and json.loads(result.stdout)["chunks"] == 54, result.stderr
    for args in (
        ["ls", str(golden)],
        ["stats", str(msprobe_dumps["stats"])],
        ["show", str(golden), "rank_0/window_0000/invocation_000000_forward/Functional.linear.0.forward.input.0"],
    ):
        result = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, check=False)
        assert result.returncode == 0, result.stderr
        assert "Functional.linear" in result.stdout or "Module." in result.stdout
    result = subprocess.run(
        [*CLI, "--json", "compare", str(target), str(golden)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 1, result.stderr  # a check failed: the perturbed weight
    assert json.loads(result.stdout)["root_cause"]["name"] == "Functional.linear.1.forward.input.1"
    report = tmp_path / "r.html"
    result = subprocess.run(
        [*CLI, "report", str(target), str(golden), "-o", str(report)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode in (0, 1), result.stderr
    assert "Functional.linear.1.forward.input.1" in report.read_text()


def test_engine_opens_the_raw_directory(msprobe_dumps):
    root = msprobe_dumps["golden"]
    ds = xr.open_dataset(root, engine="megadump", group="rank_0/window_0000/invocation_000000_forward")
    [file] = (root / "step0").glob("*/dump_tensor_data/Functional.linear.0.forward.input.0.pt")
    import torch

    assert np.array_equal(ds["Functional.linear.0.forward.input.0"].values, torch.load(file, weights_only=True).numpy())


# --------------------------------------------------------------------------- hostile directories
class _Evil:
    def __reduce__(self):
        return (os.system, (f"touch {_MARKER}",))


_MARKER = Path("/tmp/megadump-msprobe-inplace-pwned")


def _hostile(msprobe_dumps, tmp_path, edit) -> Path:
    source = tmp_path / "bad"
    shutil.copytree(msprobe_dumps["golden"], source, symlinks=True)
    [dump_json] = (source / "step0").glob("*/dump.json")
    doc = json.loads(dump_json.read_text())
    leaf = doc["data"]["Functional.linear.0.forward"]["input_args"][0]
    edit(dump_json.parent, leaf)
    dump_json.write_text(json.dumps(doc))
    return source


def _code_pickle(directory, leaf):
    (directory / "dump_tensor_data" / leaf["data_name"]).write_bytes(pickle.dumps(_Evil()))


def _code_in_archive(directory, leaf):
    """A real torch.save zip archive whose data.pkl is a pickle that would run code."""
    import zipfile

    path = directory / "dump_tensor_data" / leaf["data_name"]
    with zipfile.ZipFile(path) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for name, data in members.items():
            archive.writestr(name, pickle.dumps(_Evil(), protocol=2) if name.endswith("/data.pkl") else data)


def _big_npy_header(directory, leaf):
    path = directory / "dump_tensor_data" / "big.npy"
    np.save(path, np.zeros((3, 8), np.float32))
    raw = path.read_bytes().replace(b"(3, 8)", b"(3000, 8)")  # the header declares far more than the file holds
    path.write_bytes(raw)
    leaf["data_name"] = "big.npy"


def _expanded(directory, leaf):
    """A 1.8 KB torch.save file whose one-element storage stands, by stride 0, for 2**36 floats (256 GiB)."""
    import torch

    torch.save(torch.full((1,), 0.5).expand(2**36), directory / "dump_tensor_data" / leaf["data_name"])
    leaf.update(shape=[2**36])


def _overlapping(directory, leaf):
    import torch

    torch.save(torch.as_strided(torch.arange(16.0), (3, 8), (1, 1)), directory / "dump_tensor_data" / leaf["data_name"])


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d, leaf: leaf.update(data_name="../../step1/x.pt"), "data_name must be a plain file name"),
        (_expanded, "cannot hold its tensor (size [68719476736], stride [0], offset 0) densely"),
        (_overlapping, "densely: its strides overlap"),
        (_code_pickle, "it is not a plain tensor file (File is not a zip file)"),
        (_code_in_archive, "it names the global posix.system, which a plain tensor file does not"),
        (lambda d, leaf: leaf.update(shape=[4, 8]), "holds shape [3, 8], dump.json says [4, 8]"),
        (lambda d, leaf: leaf.update(dtype="torch.float64"), "holds dtype float32, dump.json says 'float64'"),
        (_big_npy_header, "its .npy header declares shape [3000, 8]"),
    ],
)
def test_hostile_directories_are_refused_with_one_error_line(msprobe_dumps, tmp_path, edit, message):
    source = _hostile(msprobe_dumps, tmp_path, edit)
    _MARKER.unlink(missing_ok=True)
    with pytest.raises(ValueError) as caught:
        open_dump(source)
    assert message in str(caught.value)
    for args in (["compare", str(source), str(msprobe_dumps["golden"])], ["ls", str(source)]):
        result = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, check=False)
        assert result.returncode == 2, result.stdout[-2000:] + result.stderr
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and message in errors[0] and "Traceback" not in result.stderr
    assert not _MARKER.exists()  # no code ran


def test_in_place_steps_pair_by_step_not_by_position(msprobe_dumps, tmp_path):
    """A run whose step 1 holds the golden step 0's tensors (the lag bug) fails at step 1; positions would pass it."""
    golden = msprobe_dumps["golden"]
    lagged, reference = tmp_path / "lagged", tmp_path / "reference"
    shutil.copytree(golden / "step0", lagged / "step1")  # the lag: step 1 sees step 0's data
    shutil.copytree(golden / "step1", lagged / "step2")
    for step in ("step0", "step1"):
        shutil.copytree(golden / step, reference / step)
    result = compare(lagged, reference)
    compared = result[result["verdict"] != "missing"]
    assert (compared["verdict"] == "fail").sum() > 0  # by position: every record passes
    assert set(compared["step"]) == set(compared["step_b"]) == {1}
    pairing = result.attrs["pairing"]
    assert (pairing["only_a"], pairing["only_b"]) == ([2], [0])
    explicit = compare(lagged, reference, pair={1: 0, 2: 1})
    assert set(explicit["verdict"]) == {"pass"}


def test_an_expanded_tensor_file_is_refused_by_every_command_in_one_line(msprobe_dumps, tmp_path):
    source = _hostile(msprobe_dumps, tmp_path, _expanded)
    # verify reports what it refuses as a problem of the dump (exit 1), naming the file
    result = subprocess.run([*CLI, "verify", str(source)], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stdout + result.stderr
    assert "has stride 0" in result.stdout and "Functional.linear.0.forward.input.0.pt" in result.stdout
    commands = (["convert", str(source), str(tmp_path / "z")], ["stats", str(source)], ["info", str(source)])
    for args in commands:
        result = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, check=False)
        assert result.returncode == 2, args + [result.stdout[-2000:] + result.stderr]
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "has stride 0" in errors[0] and "Traceback" not in result.stderr, args
        assert "Functional.linear.0.forward.input.0.pt" in errors[0]
