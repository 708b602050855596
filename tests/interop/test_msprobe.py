"""msprobe in: real PrecisionDebugger dumps (tensor and statistics tasks) converted, and compared like msprobe does.

The dumps are msprobe's own: a child process runs ``PrecisionDebugger`` on a tiny torch model on CPU
(``_msprobe_model.py``; msprobe patches torch, so never in this process). ``msprobe compare`` runs as
msprobe's own CLI and its CSV is read back.
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
import torch
import xarray as xr

from megadump_zarr import compare, open_dump
from megadump_zarr.interop.msprobe import convert_msprobe, is_msprobe_dump

pytest.importorskip("msprobe")

MSPROBE = Path(sys.executable).with_name("msprobe")


def _dump_json(root: Path, step: int) -> tuple[Path, dict]:
    [path] = (root / f"step{step}").glob("*/dump.json")
    return path, json.loads(path.read_text())


def _tensor_leaves(value, found):
    if isinstance(value, dict) and value.get("type") == "torch.Tensor":
        found.append(value)
    elif isinstance(value, dict):
        for item in value.values():
            _tensor_leaves(item, found)
    elif isinstance(value, list):
        for item in value:
            _tensor_leaves(item, found)
    return found


def test_detects_msprobe_dumps(msprobe_dumps, tmp_path):
    assert is_msprobe_dump(msprobe_dumps["golden"]) and is_msprobe_dump(msprobe_dumps["stats"])
    assert not is_msprobe_dump(tmp_path) and not is_msprobe_dump(tmp_path / "missing")


def test_tensor_task_names_order_attributes_and_values(msprobe_dumps, tmp_path):
    windows = convert_msprobe(msprobe_dumps["golden"], tmp_path / "z")
    assert [Path(w).name for w in windows] == ["window_0000", "window_0001"]
    dump = open_dump(tmp_path / "z")
    frame = dump.windows()
    assert list(frame["status"]) == ["complete", "complete"]
    root_doc = json.loads((tmp_path / "z" / "zarr.json").read_text())  # indexed for plain xarray (store.root_index)
    assert {"rank_0/window_0000", "rank_0/window_0001"} <= set(root_doc["consolidated_metadata"]["metadata"])
    records = dump.records()
    for step in (0, 1):
        source, doc = _dump_json(msprobe_dumps["golden"], step)
        mine = records[records["window"] == step]
        expected = [
            leaf["data_name"].removesuffix(".pt")
            for entry in doc["data"].values()
            for leaf in _tensor_leaves(entry, [])
        ]
        assert list(mine["name"]) == expected  # msprobe's names, in msprobe's execution order
        assert set(mine["step"]) == {step}
        calls = [k for k, entry in doc["data"].items() if _tensor_leaves(entry, [])]
        assert mine.groupby("invocation", sort=True)["kernel"].first().tolist() == [k.rsplit(".", 2)[0] for k in calls]
        for name, path in zip(mine["name"], mine["path"]):
            tensor = torch.load(source.parent / "dump_tensor_data" / f"{name}.pt", weights_only=True)
            got = dump.record_array(path)
            assert np.asarray(got.values).tobytes() == tensor.numpy().tobytes(), name
            assert got.attrs["name"] == name
    row = records[records["name"] == "Functional.linear.0.forward.input.1"].iloc[0]
    attrs = dump.record_array(row["path"]).attrs
    assert (attrs["api"], attrs["callIndex"], attrs["direction"], attrs["io"], attrs["argIndex"]) == (
        "Functional.linear",
        0,
        "forward",
        "input",
        "1",
    )
    assert row["kernel"] == "Functional.linear" and row["direction"] == "forward"
    _, doc = _dump_json(msprobe_dumps["golden"], 0)
    leaf = doc["data"]["Functional.linear.0.forward"]["input_args"][1]
    assert attrs["msprobeStats"] == {k: leaf[k] for k in ("Max", "Min", "Mean", "Norm")}
    assert attrs["requiresGrad"] is True
    backward = records[records["name"] == "Functional.linear.1.backward.output.2"].iloc[0]
    assert backward["direction"] == "backward" and backward["invocation_name"].endswith("_backward")
    inv = dump.tree()[f"/{row['path'].rsplit('/', 1)[0]}"].attrs
    assert inv["msprobeCall"] == "Functional.linear.0.forward" and inv["kernelName"] == "Functional.linear"
    gelu = [
        k
        for k in dump.tree()["/rank_0/window_0000"].children
        if dump.tree()[f"/rank_0/window_0000/{k}"].attrs.get("msprobeCall") == "Functional.gelu.0.forward"
    ]
    assert dump.tree()[f"/rank_0/window_0000/{gelu[0]}"].attrs["nonTensorArgs"] == {"input_kwargs.approximate": "tanh"}


def test_statistics_task_keeps_msprobe_statistics(msprobe_dumps, tmp_path):
    convert_msprobe(msprobe_dumps["stats"], tmp_path / "z")
    _, doc = _dump_json(msprobe_dumps["stats"], 0)
    window = tmp_path / "z" / "rank_0" / "window_0000"
    names = json.loads((window / "zarr.json").read_text())["attributes"]["invocations"]
    assert len(names) == len(doc["data"])
    for name, (call, entry) in zip(names, doc["data"].items()):
        leaves = _tensor_leaves(entry, [])
        if not leaves:
            continue
        table = xr.open_zarr(window / name / "statistics", consolidated=False)
        assert table["payload"].values.tolist() == [False] * len(leaves)
        assert [str(n) for n in table["name"].values][0].startswith(call)
        np.testing.assert_array_equal(table["max"].values, [leaf["Max"] for leaf in leaves])
        np.testing.assert_array_equal(table["min"].values, [leaf["Min"] for leaf in leaves])
        np.testing.assert_array_equal(table["mean"].values, [leaf["Mean"] for leaf in leaves])
        np.testing.assert_array_equal(table["l2norm"].values, [leaf["Norm"] for leaf in leaves])
        attrs = json.loads((window / name / "zarr.json").read_text())["attributes"]
        assert [r["msprobeStats"]["Max"] for r in attrs["records"]] == [leaf["Max"] for leaf in leaves]
        assert not [p for p in (window / name).iterdir() if p.is_dir() and p.name != "statistics"]
    # records() lists them as statistics-only records, and compare checks them against a tensor dump of the
    # same (seeded) run through their statistics.
    records = open_dump(tmp_path / "z").records()
    assert len(records) == sum(
        len(_tensor_leaves(e, []))
        for step in (0, 1)
        for e in _dump_json(msprobe_dumps["stats"], step)[1]["data"].values()
    )
    assert not records["payload"].any() and set(records["nan_count"]) == {0}
    convert_msprobe(msprobe_dumps["golden"], tmp_path / "golden")
    result = compare(tmp_path / "z", tmp_path / "golden")
    assert len(result) == len(records) and result["note"].str.startswith("summary: statistics only in a").all()
    # 0-d records too: msprobe's Norm of a 0-d tensor is its signed value; a norm is stored as |Norm|
    assert (result["verdict"] == "pass").all(), result[result["verdict"] != "pass"][["name", "note"]]
    assert (records["l2norm"] >= 0).all()


def test_statistics_dumps_that_differ_do_not_pass_on_placeholder_checksums(msprobe_dumps, tmp_path):
    # msprobe has no content checksums: the table's zeros used to make every pair of msprobe statistics
    # dumps "pass: checksums equal", perturbed or not (a silent wrong answer)
    changed = tmp_path / "changed"
    shutil.copytree(msprobe_dumps["stats"], changed)
    dump_json, doc = _dump_json(changed, 0)
    leaf = doc["data"]["Functional.linear.1.forward"]["input_args"][1]
    leaf["Mean"] += 0.01
    dump_json.write_text(json.dumps(doc))
    convert_msprobe(msprobe_dumps["stats"], tmp_path / "a")
    convert_msprobe(changed, tmp_path / "b")
    assert open_dump(tmp_path / "a").records()["digest"].isna().all()  # unknown, not 0
    same = compare(tmp_path / "a", tmp_path / "a")
    assert (same["verdict"] == "pass").all() and same["note"].str.endswith("statistics within tolerance").all()
    result = compare(tmp_path / "b", tmp_path / "a")
    failed = result[result["verdict"] != "pass"]
    assert list(failed["name"]) == ["Functional.linear.1.forward.input.1"] and list(failed["window"]) == [0]
    assert failed["note"].iloc[0] == "summary: statistics only in a and b; mean beyond rtol=1.3e-06, atol=1e-05"


def test_npy_files_load_without_pickle(msprobe_dumps, tmp_path):
    source = tmp_path / "npy"
    shutil.copytree(msprobe_dumps["golden"], source)
    for dump_json in source.glob("step*/*/dump.json"):
        doc = json.loads(dump_json.read_text())
        for entry in doc["data"].values():
            for leaf in _tensor_leaves(entry, []):
                pt = dump_json.parent / "dump_tensor_data" / leaf["data_name"]
                np.save(pt.with_suffix(".npy"), torch.load(pt, weights_only=True).numpy())
                pt.unlink()
                leaf["data_name"] = leaf["data_name"].removesuffix(".pt") + ".npy"
        dump_json.write_text(json.dumps(doc))
    convert_msprobe(source, tmp_path / "z")
    convert_msprobe(msprobe_dumps["golden"], tmp_path / "ref")
    a, b = open_dump(tmp_path / "z"), open_dump(tmp_path / "ref")
    assert list(a.records()["name"]) == list(b.records()["name"])
    for pa, pb in zip(a.records()["path"], b.records()["path"]):
        assert np.asarray(a.record_array(pa).values).tobytes() == np.asarray(b.record_array(pb).values).tobytes()


def _edited_copy(msprobe_dumps, tmp_path, edit) -> Path:
    source = tmp_path / "bad"
    shutil.copytree(msprobe_dumps["golden"], source, symlinks=True)
    dump_json, doc = _dump_json(source, 0)
    leaf = doc["data"]["Functional.linear.0.forward"]["input_args"][0]
    edit(dump_json.parent, leaf)
    dump_json.write_text(json.dumps(doc))
    return source


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/megadump-msprobe-pwned",))


def _pickle_payload(directory, leaf):
    path = directory / "dump_tensor_data" / leaf["data_name"]
    path.write_bytes(pickle.dumps(_Evil()))


def _object_npy(directory, leaf):
    np.save(directory / "dump_tensor_data" / "evil.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    leaf["data_name"] = "evil.npy"


def _escaping_link(directory, leaf):
    outside = directory.parent.parent / "outside.pt"
    torch.save(torch.zeros(3, 8), outside)
    (directory / "dump_tensor_data" / "link.pt").symlink_to(outside)
    leaf["data_name"] = "link.pt"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d, leaf: leaf.update(data_name="../../step1/x.pt"), r"data_name must be a plain file name"),
        (lambda d, leaf: leaf.update(data_name="/etc/passwd.pt"), r"data_name must be a plain file name"),
        (lambda d, leaf: leaf.update(data_name="a\x00.pt"), r"data_name must be a plain file name"),
        (lambda d, leaf: leaf.update(data_name="missing.pt"), r"does not exist"),
        (lambda d, leaf: leaf.update(shape=[4, 8]), r"holds shape \[3, 8\], dump.json says \[4, 8\]"),
        (lambda d, leaf: leaf.update(shape="big"), r"'shape' must be a list of non-negative integers"),
        (_pickle_payload, r"it is not a plain tensor file \(File is not a zip file\)"),  # refused before any write
        (_object_npy, r"not a plain .npy array"),
        (_escaping_link, r"a symbolic link escapes it"),
    ],
)
def test_refusals_name_the_file_and_write_nothing(msprobe_dumps, tmp_path, edit, message):
    source = _edited_copy(msprobe_dumps, tmp_path, edit)
    marker = Path("/tmp/megadump-msprobe-pwned")
    marker.unlink(missing_ok=True)
    with pytest.raises(ValueError, match=message):
        convert_msprobe(source, tmp_path / "z")
    assert not marker.exists()
    if edit in (_pickle_payload, _escaping_link):  # the CLI: exit 2, one error line, nothing run
        result = subprocess.run(
            [sys.executable, "-m", "megadump_zarr.cli.main", "convert", str(source), str(tmp_path / "c")],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 2, result.stderr
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and errors[0].startswith("error: conversion refused: ")
        assert "Traceback" not in result.stderr and not marker.exists()
    # Paths and metadata are checked before anything is written; a bad payload found while writing
    # removes what was written: a refused input leaves no output.
    assert not (tmp_path / "z").exists() and not (tmp_path / "c").exists()


def test_cli_auto_detects_and_from_msprobe(msprobe_dumps, tmp_path):
    for extra, out in (([], "auto"), (["--from", "msprobe"], "explicit")):
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "megadump_zarr.cli.main",
                "convert",
                *extra,
                "--json",
                str(msprobe_dumps["golden"]),
                str(tmp_path / out),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert [Path(w).name for w in json.loads(result.stdout)["windows"]] == ["window_0000", "window_0001"]
    assert list(open_dump(tmp_path / "auto").records()["name"]) == list(
        open_dump(tmp_path / "explicit").records()["name"]
    )


def _msprobe_compare(target: Path, golden: Path, out: Path) -> pd.DataFrame:
    tp, _ = _dump_json(target, 0)
    gp, _ = _dump_json(golden, 0)
    result = subprocess.run(
        [str(MSPROBE), "compare", "-tp", str(tp), "-gp", str(gp), "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    [csv] = out.glob("compare_result_*.csv")
    return pd.read_csv(csv)


# msprobe column -> our column, and how close they must be: msprobe rounds a cosine above 0.9999 to 6
# decimals and computes relative errors of float32 data in float32; every value is printed with 12 decimals.
PEER_COLUMNS = {
    "Cosine": ("cosine", 5e-7),
    "EucDist": ("euc_dist", 1e-9),
    "MaxAbsErr": ("max_abs", 1e-11),
    "MaxRelativeErr": ("max_rel_eps", 1e-6),
    "One Thousandth Err Ratio": ("one_thousandth_ratio", 1e-11),
    "Five Thousandths Err Ratio": ("five_thousandths_ratio", 1e-11),
}


def test_same_numbers_as_msprobe_compare(msprobe_dumps, tmp_path):
    theirs = _msprobe_compare(msprobe_dumps["target"], msprobe_dumps["golden"], tmp_path / "msprobe")
    convert_msprobe(msprobe_dumps["target"], tmp_path / "a")
    convert_msprobe(msprobe_dumps["golden"], tmp_path / "b")
    ours = compare(tmp_path / "a", tmp_path / "b")
    ours = ours[ours["window"] == 0]
    merged = theirs.merge(ours, left_on="NPU Name", right_on="name", how="inner")
    tensors = theirs[theirs["NPU Dtype"].astype(str).str.startswith("torch.")]
    assert len(merged) == len(tensors) == len(ours)  # every tensor msprobe compared, and only those
    compared = 0
    for column, (mine, tol) in PEER_COLUMNS.items():
        values = pd.to_numeric(merged[column], errors="coerce")
        numeric = values.notna()
        compared += int(numeric.sum())
        np.testing.assert_allclose(
            merged.loc[numeric, mine].to_numpy(float), values[numeric].to_numpy(float), rtol=0, atol=tol, err_msg=column
        )
    assert compared >= 6 * 10
    # The perturbed weight and everything downstream of it differ; msprobe's Result calls them all pass,
    # our verdict fails them (float32 tolerance rtol 1e-5): the documented difference.
    differing = merged[merged["max_abs"] > 0]
    assert len(differing) >= 5
    assert set(differing["Result"]) == {"pass"}
    assert set(differing["verdict"]) == {"fail"}
    assert set(merged[merged["max_abs"] == 0]["verdict"]) == {"pass"}


def test_a_step_or_rank_directory_converts_like_msprobe_compare_is_given_it(msprobe_dumps, tmp_path):
    # msprobe compare is pointed at step*/rank*|proc* directories; convert used to say "no legacy windows
    # (rank_*/window_*/manifest.json) found" for them (auto-detection saw no step dirs below)
    golden = msprobe_dumps["golden"]
    rank_dir, _ = _dump_json(golden, 1)
    assert is_msprobe_dump(golden / "step1") and is_msprobe_dump(rank_dir.parent)
    whole = open_dump(convert_and_open(golden, tmp_path / "whole")).records()
    for source, out in ((golden / "step1", "step"), (rank_dir.parent, "rank")):
        records = open_dump(convert_and_open(source, tmp_path / out)).records()
        assert list(records["name"]) == list(whole.loc[whole["step"] == 1, "name"]) and set(records["step"]) == {1}
    assert not is_msprobe_dump(rank_dir.parent / "dump_tensor_data")


def convert_and_open(source: Path, out: Path) -> Path:
    result = subprocess.run(
        [sys.executable, "-m", "megadump_zarr.cli.main", "convert", str(source), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return out
