"""msprobe levels L0 (modules), L1 (APIs) and mix, forward and backward, tensor and statistics tasks.

Real PrecisionDebugger dumps (``_msprobe_model.py`` given a LEVEL: an embedding and two linear layers,
forward and backward, the target run with ``linear1.weight[3, 5] += 0.01``) converted and compared: L0
and mix dumps hold module ``parameters`` and ``parameters_grad`` entries (the CLI used to refuse them,
exit 2, "names no direction"), and the root cause is the perturbed weight at every level.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from megadump_zarr import compare, open_dump, root_cause
from megadump_zarr.cli.msprobe_csv import MEGADUMP_COLUMNS, MSPROBE_COLUMNS
from megadump_zarr.interop.msprobe import convert_msprobe

pytest.importorskip("msprobe")


def _doc(root: Path) -> tuple[Path, dict]:
    [path] = (root / "step0").glob("*/dump.json")
    return path, json.loads(path.read_text())


def _leaves(value, found):
    if isinstance(value, dict) and value.get("type") == "torch.Tensor":
        found.append(value)
    elif isinstance(value, dict):
        for item in value.values():
            _leaves(item, found)
    elif isinstance(value, list):
        for item in value:
            _leaves(item, found)
    return found


@pytest.mark.parametrize("level", ["L0", "mix", "L1"])
def test_every_level_converts_forward_backward_and_parameter_grads(dumps, tmp_path, level):
    source = dumps[f"golden-tensor-{level}"]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "megadump_zarr.cli.main",
            "convert",
            "--from",
            "msprobe",
            str(source),
            str(tmp_path / "z"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    dump_json, doc = _doc(source)
    assert doc["level"] == level
    records = open_dump(tmp_path / "z").records()
    expected = [leaf["data_name"].removesuffix(".pt") for entry in doc["data"].values() for leaf in _leaves(entry, [])]
    assert sorted(records["name"]) == sorted(expected) and len(records) == len(expected)
    dump = open_dump(tmp_path / "z")
    for name, path in zip(records["name"], records["path"]):
        tensor = torch.load(dump_json.parent / "dump_tensor_data" / f"{name}.pt", weights_only=True)
        assert np.asarray(dump.record_array(path).values).tobytes() == tensor.numpy().tobytes(), name
    by_name = records.set_index("name")
    grads = [n for n in expected if ".parameters_grad." in n]
    params = [n for n in expected if ".parameters." in n]
    if level == "L1":
        assert not grads and not params
        return
    assert "Module.label_emb.Embedding.parameters_grad.0.weight" in grads and len(grads) == 5
    assert len(params) == 5
    for name in grads:
        row = by_name.loc[name]
        assert row["direction"] == "backward" and row["invocation_name"].endswith("_backward")
        attrs = dump.record_array(row["path"]).attrs
        assert (attrs["msprobeKey"], attrs["io"], attrs["argIndex"], attrs["role"]) == (
            "parameters_grad",
            "output",
            name.rsplit(".", 1)[1],
            "final_output",
        )
        assert attrs["api"] == name.split(".parameters_grad.")[0] and attrs["callIndex"] == 0
    for name in params:  # inputs of the module's forward, after its arguments and before its outputs
        row = by_name.loc[name]
        assert row["direction"] == "forward"
        attrs = dump.record_array(row["path"]).attrs
        assert (attrs["msprobeKey"], attrs["io"], attrs["argIndex"], attrs["capturePhase"], attrs["role"]) == (
            "parameters",
            "input",
            name.rsplit(".", 1)[1],
            "before",
            "external_input",
        )
        mine = list(records.loc[records["invocation"] == row["invocation"], "name"])
        call = name.split(".parameters.")[0]
        assert mine.index(name) > mine.index(f"{call}.input.0") and mine.index(name) < mine.index(f"{call}.output.0")


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        ("L0", "Module.linear1.Linear.forward.0.parameters.weight"),
        ("mix", "Functional.linear.0.forward.input.1"),  # the weight as linear's argument: recorded before the module
        ("L1", "Functional.linear.0.forward.input.1"),
    ],
)
def test_root_cause_is_the_perturbed_weight_at_every_level(dumps, tmp_path, level, expected):
    convert_msprobe(dumps[f"target-tensor-{level}"], tmp_path / "a")
    convert_msprobe(dumps[f"golden-tensor-{level}"], tmp_path / "b")
    result = compare(tmp_path / "a", tmp_path / "b")
    cause = root_cause(result)
    assert cause["name"] == expected, cause["root_reason"]
    assert cause["root_reason"].startswith(f"{expected} is an input and nothing compared before it")
    a, b = open_dump(tmp_path / "a"), open_dump(tmp_path / "b")
    diff = np.asarray(a.record_array(cause["path"]).values) - np.asarray(b.record_array(cause["path"]).values)
    assert [list(i) for i in np.argwhere(diff)] == [[3, 5]]  # it is the perturbed element of linear1.weight
    if level != "L1":  # the module's parameter and its output fail too, later
        failing = set(result.loc[result["verdict"] == "fail", "name"])
        assert {
            "Module.linear1.Linear.forward.0.parameters.weight",
            "Module.linear1.Linear.forward.0.output.0",
            "Module.linear2.Linear.parameters_grad.0.weight",
        } <= failing  # grad of linear2 sees relu(linear1)
        assert "Module.label_emb.Embedding.forward.0.output.0" not in failing


@pytest.mark.parametrize("level", ["L0", "mix"])
def test_statistics_task_at_every_level_compares_by_statistics(dumps, tmp_path, level):
    convert_msprobe(dumps[f"target-statistics-{level}"], tmp_path / "a")
    convert_msprobe(dumps[f"golden-statistics-{level}"], tmp_path / "b")
    _, doc = _doc(dumps[f"golden-statistics-{level}"])
    leaves = [leaf for entry in doc["data"].values() for leaf in _leaves(entry, [])]
    records = open_dump(tmp_path / "b").records()
    assert len(records) == len(leaves) and not records["payload"].any()
    assert set(records["nan_count"]) == {0}  # integer indices too: no Mean/Norm from msprobe, but no NaN either
    grad = records[records["name"] == "Module.linear1.Linear.parameters_grad.0.weight"].iloc[0]
    leaf = doc["data"]["Module.linear1.Linear.parameters_grad.0"]["weight"][0]
    assert (grad["max"], grad["min"], grad["mean"], grad["l2norm"]) == (
        leaf["Max"],
        leaf["Min"],
        leaf["Mean"],
        leaf["Norm"],
    )
    same = compare(tmp_path / "b", tmp_path / "b")
    assert (same["verdict"] == "pass").all(), same.loc[same["verdict"] != "pass", ["name", "note"]]
    result = compare(tmp_path / "a", tmp_path / "b")
    assert result["note"].str.startswith("summary: statistics only in a and b").all()
    cause = root_cause(result)
    expected = (
        "Module.linear1.Linear.forward.0.parameters.weight" if level == "L0" else "Functional.linear.0.forward.input.1"
    )
    assert cause["name"] == expected
    assert "Module.linear1.Linear.forward.0.parameters.weight" in set(result.loc[result["verdict"] == "fail", "name"])


MSPROBE = Path(sys.executable).with_name("msprobe")
# how close our numbers must be to msprobe's: it rounds a cosine above 0.9999 to 6 decimals, computes
# float32 relative errors in float32 and prints 12 decimals; its max/min/mean/norm are float32 reductions
TOLERANCE = {
    "Cosine": 5e-7,
    "EucDist": 1e-9,
    "MaxAbsErr": 1e-11,
    "MaxRelativeErr": 1e-6,
    "One Thousandth Err Ratio": 1e-11,
    "Five Thousandths Err Ratio": 1e-11,
}
STATS = [f"{side} {k}" for side in ("NPU", "Bench") for k in ("max", "min", "mean", "l2norm")]


def _msprobe_compare(target: Path, golden: Path, out: Path) -> pd.DataFrame:
    result = subprocess.run(
        [str(MSPROBE), "compare", "-tp", str(_doc(target)[0]), "-gp", str(_doc(golden)[0]), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    [csv] = out.glob("compare_result_*.csv")
    return pd.read_csv(csv)


@pytest.mark.parametrize(("level", "task"), [("L0", "tensor"), ("mix", "tensor"), ("L0", "statistics")])
def test_csv_msprobe_reads_like_msprobe_compare_and_agrees_with_it(dumps, tmp_path, level, task):
    target, golden = dumps[f"target-{task}-{level}"], dumps[f"golden-{task}-{level}"]
    theirs = _msprobe_compare(target, golden, tmp_path / "msprobe")
    convert_msprobe(target, tmp_path / "a")
    convert_msprobe(golden, tmp_path / "b")
    out = tmp_path / "ours.csv"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "megadump_zarr.cli.main",
            "-q",
            "compare",
            str(tmp_path / "a"),
            str(tmp_path / "b"),
            "--csv-msprobe",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 1, result.stderr  # the perturbed weight fails
    ours = pd.read_csv(out)
    assert list(ours.columns) == [*MSPROBE_COLUMNS, *MEGADUMP_COLUMNS]
    assert list(theirs.columns[: len(MSPROBE_COLUMNS) - 3]) == list(MSPROBE_COLUMNS[:-3]) if task == "tensor" else True
    tensors = theirs[theirs["NPU Dtype"].astype(str).str.startswith("torch.")]
    assert sorted(ours["NPU Name"]) == sorted(tensors["NPU Name"])  # every tensor msprobe compared, only those
    merged = tensors.merge(ours, on="NPU Name", suffixes=("_msprobe", ""))
    assert (merged["Bench Name"] == merged["Bench Name_msprobe"]).all()
    assert (merged["NPU Dtype"] == merged["NPU Dtype_msprobe"]).all()
    assert (merged["NPU Tensor Shape"] == merged["NPU Tensor Shape_msprobe"]).all()
    checked = 0
    for column in [*TOLERANCE, *STATS]:
        if f"{column}_msprobe" not in merged:  # msprobe's statistics compare has no cosine
            assert ours[column].isna().all() and task == "statistics", column  # N/A, read as NaN
            continue
        mine, peer = pd.to_numeric(merged[column]), pd.to_numeric(merged[f"{column}_msprobe"], errors="coerce")
        if column.endswith("l2norm"):  # msprobe's Norm of a 0-d tensor is its signed value; ours a norm
            peer = peer.abs()
        known = peer.notna() & mine.notna()
        checked += int(known.sum())
        tol = TOLERANCE.get(column, 0)
        np.testing.assert_allclose(
            mine[known], peer[known], rtol=1e-6 if column in STATS else 0, atol=tol or 1e-9, err_msg=column
        )
    assert checked >= len(merged) * (8 if task == "statistics" else 14) * 0.8
    flagged = ours[ours["megadump root cause"]]
    expected = (
        "Module.linear1.Linear.forward.0.parameters.weight" if level == "L0" else "Functional.linear.0.forward.input.1"
    )
    assert list(flagged["NPU Name"]) == [expected] and list(flagged["megadump verdict"]) == ["fail"]
    assert set(ours.loc[ours["megadump verdict"] == "pass", "Result"]) == {"pass"}
    assert set(ours.loc[ours["megadump verdict"] != "pass", "Result"]) == {"error"}
    if task == "tensor":
        row = ours[ours["NPU Name"] == "Module.linear1.Linear.forward.0.parameters.weight"].iloc[0]
        assert row["megadump worst index"] == "[3, 5]" and row["megadump worst a"] - row[
            "megadump worst b"
        ] == pytest.approx(0.01, abs=1e-6)
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "megadump_zarr.cli.main",
            "compare",
            str(tmp_path / "a"),
            str(tmp_path / "b"),
            "--csv-msprobe",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert again.returncode == 2 and "already exists (refusing to overwrite it)" in again.stderr
    assert pd.read_csv(out).equals(ours)
    # issue 24's spelling: --format msprobe-csv writes the same CSV to stdout (--csv-msprobe is its alias)
    stdout = subprocess.run(
        [
            sys.executable,
            "-m",
            "megadump_zarr.cli.main",
            "compare",
            str(tmp_path / "a"),
            str(tmp_path / "b"),
            "--format",
            "msprobe-csv",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert stdout.returncode == 1 and "FAIL: " in stdout.stderr, stdout.stderr
    assert pd.read_csv(io.StringIO(stdout.stdout)).equals(ours)
