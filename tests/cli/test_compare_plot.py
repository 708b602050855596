"""``megadump compare`` (exit status, fail-fast, JSON) and ``megadump plot`` (PNG files)."""

from __future__ import annotations

import json
from pathlib import Path
import shutil

import numpy as np
import pytest

from megadump_zarr.read import open_dump
from tests._layout import stored_record
from tests.cli._helpers import assert_input_error

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def perturbed(demo, tmp_path_factory) -> tuple[Path, str]:
    """A copy of the demo's L1 dump with one stored record (an expert_up output) shifted by +2.0."""
    copy = tmp_path_factory.mktemp("perturbed") / "l1"
    shutil.copytree(demo.roots["L1"], copy)
    records = open_dump(copy).records()
    row = records[
        (records["stage"] == "expert_up")
        & (records["io"] == "output")
        & (records["task_id"] == 1)
        & (records["invocation"] == 2)
    ].iloc[0]
    array, index = stored_record(copy, row["path"])
    array[index] = array[index] + 2.0
    return copy, row["path"]


# --------------------------------------------------------------------------- compare
def test_compare_with_itself_passes(cli, demo):
    result = cli("compare", demo.roots["L1"], demo.roots["L1"])
    assert result.code == 0, result.err
    records = open_dump(demo.roots["L1"]).records()
    assert f"PASS: all {len(records)} records pass" in result.out
    assert "fail" not in result.out.replace("--fail", "")
    report = cli("compare", demo.roots["L1"], demo.roots["L1"], "--json").json()
    assert report["verdict"] == "pass" and report["compared"] == report["total"] == len(records)
    assert {r["verdict"] for r in report["results"]} == {"pass"}
    assert all(r["max_abs"] == 0.0 and r["cosine"] == pytest.approx(1.0) for r in report["results"])


def test_compare_l0_with_itself_and_tolerances(cli, demo):
    result = cli("compare", demo.roots["L0"], demo.roots["L0"], "--rtol", "1e-6", "--atol", "0", "--quiet")
    assert result.code == 0 and result.out.startswith("PASS")
    assert "┃" not in result.out  # --quiet: the verdict line only


def test_compare_perturbed_copy_fails_and_names_the_tensor(cli, demo, perturbed):
    copy, path = perturbed
    result = cli("compare", copy, demo.roots["L1"])
    assert result.code == 1, result.err
    assert "FAIL: 1 fail" in result.out
    lines = result.out.splitlines()
    place = "r0 w0 i2 moe_experts expert_up t1 out[0] owner 1 core MIX1"
    assert f"first divergence: ws (fail) at {place}" in lines
    assert f"root cause: ws (fail) at {place}" in lines
    assert lines[-1] == f"root cause path: {path}"
    report = cli("compare", copy, demo.roots["L1"], "--json").json()
    failing = [r for r in report["results"] if r["verdict"] != "pass"]
    assert len(failing) == 1 and failing[0]["name"] == "ws" and failing[0]["path"] == path
    row = failing[0]
    assert row["max_abs"] == pytest.approx(2.0) and row["mismatches"] == row["elements"] == 7 * 16
    assert (row["rtol"], row["atol"]) == (1.3e-6, 1e-5)
    assert (row["worst_task_id"], row["worst_owner_id"], row["worst_core_type"], row["worst_core_id"]) == (
        1,
        1,
        "MIX",
        1,
    )
    assert report["first_divergence"]["path"] == path and report["counts"]["fail"] == 1
    assert report["root_cause"]["path"] == path and "every input of task 1" in report["root_cause"]["root_reason"]
    assert set(report["counts"]) == {
        "pass",
        "pass_partial",
        "fail",
        "differs_within_stats",
        "shape_mismatch",
        "dtype_mismatch",
        "missing_data",
        "error",
        "missing",
    }
    only = cli("compare", copy, demo.roots["L1"], "--failures-only")
    rows = [line for line in only.out.splitlines() if line.split(" ", 1)[0] in ("pass", "fail")]
    assert only.code == 1 and [line.split()[0] for line in rows] == ["fail"]


def test_compare_summary_lines_fold_under_themselves_on_a_narrow_console(cli, demo, perturbed, monkeypatch):
    copy, path = perturbed
    monkeypatch.setenv("COLUMNS", "80")
    lines = cli("compare", copy, demo.roots["L1"]).out.splitlines()
    place = "r0 w0 i2 moe_experts expert_up t1 out[0] owner 1 core MIX1"
    for folded in (f"first divergence: ws (fail) at {place}", f"root cause: ws (fail) at {place}"):  # 87, 83 chars
        at = lines.index(folded[: folded.rindex(" ", 0, 81)])
        assert lines[at + 1].startswith("    ") and f"{lines[at]} {lines[at + 1].strip()}" == folded
    assert lines[-1] == f"root cause path: {path}"  # the SELECTOR stays whole


def test_compare_json_nulls_when_everything_passes(cli, demo):
    report = cli("compare", demo.roots["L0"], demo.roots["L0"], "--json").json()
    assert report["verdict"] == "pass" and report["first_divergence"] is None and report["root_cause"] is None
    text = cli("compare", demo.roots["L0"], demo.roots["L0"])
    assert "first divergence" not in text.out and "root cause" not in text.out


@pytest.mark.parametrize(
    "flag, value, shown",
    [
        ("--rtol", "nan", "nan"),
        ("--atol", "nan", "nan"),
        ("--rtol", "inf", "inf"),
        ("--atol", "-1e-3", "-0.001"),
        ("--rtol", "abc", "'abc'"),
    ],
)
def test_compare_refuses_bad_tolerances(cli, demo, flag, value, shown):
    result = cli("compare", demo.roots["L1"], demo.roots["L1"], f"{flag}={value}")
    name = flag.removeprefix("--")
    assert_input_error(result, f"error: argument {flag}: {name} must be a finite number >= 0, got {shown}")
    assert len([line for line in result.err.splitlines() if line.strip()]) == 1


@pytest.mark.parametrize(
    "flag, value, shown", [("--rtol", "-1e-3", "-0.001"), ("--atol", "-inf", "-inf"), ("--rtol", "-1", "-1.0")]
)
def test_compare_names_a_negative_tolerance_given_as_its_own_argument(cli, demo, flag, value, shown):
    """``--rtol -1e-3`` (two arguments) is a bad tolerance, named as such, not "expected one argument"."""
    result = cli("compare", demo.roots["L1"], demo.roots["L1"], flag, value)
    name = flag.removeprefix("--")
    assert_input_error(result, f"error: argument {flag}: {name} must be a finite number >= 0, got {shown}")
    assert len([line for line in result.err.splitlines() if line.strip()]) == 1


def test_compare_help_prints_the_rule_table(cli):
    result = cli("compare", "--help")
    assert result.code == 0
    lines = result.out.splitlines()
    assert "verdict rules (A under test, B reference):" in lines
    assert "  integer, bool, index   exact: one differing element fails (mismatches, first_mismatch)" in lines
    for row in (
        "  float64          1e-07     1e-07",
        "  float32          1.3e-06   1e-05",
        "  float16          0.001     0.001",
        "  bfloat16         0.016     0.016",
        "  float8_e4m3fn    0.125     0.125",
        "  float8_e5m2      0.25      0.25",
    ):
        assert row in lines


def test_compare_by_owner_core_task(cli, demo, perturbed, monkeypatch):
    copy, _ = perturbed
    monkeypatch.setenv("COLUMNS", "120")
    for by in ("owner", "core", "task"):
        result = cli("compare", copy, demo.roots["L1"], "--by", by)
        assert result.code == 1, result.err
        assert max(len(line) for line in result.out.splitlines()) <= 120
        assert "root cause: ws (fail)" in result.out
    report = cli("compare", copy, demo.roots["L1"], "--by", "owner", "--json").json()
    assert report["by"] == "owner"
    bad = [g for g in report["error_map"] if g["failing"]]
    assert [(g["invocation"], g["stage"], g["owner_id"], g["fail"], g["worst_name"]) for g in bad] == [
        (2, "expert_up", 1, 1, "ws")
    ]
    assert bad[0]["max_abs"] == pytest.approx(2.0)
    assert sum(g["records"] for g in report["error_map"]) == report["compared"]


def test_compare_fail_fast_stops_at_the_first_failure(cli, demo, perturbed):
    copy, path = perturbed
    report = cli("compare", copy, demo.roots["L1"], "--fail-fast", "--json").json()
    assert report["stopped_early"] is True
    assert report["results"][-1]["path"] == path and report["results"][-1]["verdict"] == "fail"
    assert all(r["verdict"] == "pass" for r in report["results"][:-1])
    assert report["compared"] < report["total"]
    text = cli("compare", copy, demo.roots["L1"], "-x")
    assert text.code == 1 and "stopped at the first failure" in text.out


def test_compare_filters_exclude_the_perturbed_record(cli, demo, perturbed):
    copy, _ = perturbed
    assert cli("compare", copy, demo.roots["L1"], "--invocation", "0").code == 0
    assert cli("compare", copy, demo.roots["L1"], "--stage", "expert_up", "--invocation", "2").code == 1


def test_compare_missing_records_fail(cli, demo, tmp_path):
    copy = tmp_path / "l1"
    shutil.copytree(demo.roots["L1"], copy)
    records = open_dump(copy).records()
    victim = records[records["stage"] == "expert_down"].iloc[0]["path"]
    drop_record(copy, victim)  # from the copy's consolidated metadata and files: it is "only in dump b"
    assert victim not in set(open_dump(copy).records()["path"])
    report = cli("compare", copy, demo.roots["L1"], "--json")
    assert report.code == 1
    missing = [r for r in report.json()["results"] if r["verdict"] == "missing"]
    assert [r["path"] for r in missing] == [victim] and missing[0]["note"] == "only in dump b"


def drop_record(root: Path, path: str) -> None:
    """Delete the stored array of the record at logical ``path`` and its entry in every consolidated document.

    A packed record is its pack's record array, which must hold one row (a task of its own signature, as
    every task of the demo), so that exactly this record goes.
    """
    array, index = stored_record(root, path)
    stored = Path(root) / array.path
    assert index is ... or array.shape[0] == 1, f"{stored} holds {array.shape[0]} rows, not only {path}'s"
    for parent in stored.relative_to(root).parents:
        document_path = root / parent / "zarr.json"
        document = json.loads(document_path.read_text())
        nodes = (document.get("consolidated_metadata") or {}).get("metadata") or {}
        relative = stored.relative_to(root / parent).as_posix()
        if relative in nodes:
            del nodes[relative]
            document_path.write_text(json.dumps(document))
    shutil.rmtree(stored)


def test_compare_input_errors(cli, demo, tmp_path):
    assert_input_error(cli("compare", demo.roots["L1"], tmp_path / "none"), "does not exist")
    nothing = cli("compare", demo.roots["L1"], demo.roots["L1"], "--name", "nothing")  # a filter matching nothing
    assert nothing.code == 2 and nothing.err.startswith("error: no records with name 'nothing'; names: bws, ")


# --------------------------------------------------------------------------- plot
def _png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 5000


def test_plot_heatmap_of_a_stitched_tensor(cli, demo, tmp_path):
    out = tmp_path / "ws.png"
    result = cli("plot", demo.roots["L1"], "ws", "--stage", "expert_up", "--invocation", "0", "--out", out)
    assert result.code == 0, result.err
    assert str(out) in result.out and "heatmap" in result.out
    _png(out)


def test_plot_histogram_of_a_record_json(cli, demo, tmp_path):
    path = open_dump(demo.roots["L0"]).records().query("name == 'w_up'").iloc[0]["path"]
    out = tmp_path / "w_up.png"
    result = cli("plot", demo.roots["L0"], path, "--kind", "hist", "--bins", "20", "--out", out, "--json")
    assert result.code == 0, result.err
    report = result.json()
    assert report["kind"] == "hist" and report["shape"] == [4, 16, 16] and report["bytes"] == out.stat().st_size
    _png(out)


def test_plot_input_errors(cli, demo, tmp_path):
    assert_input_error(
        cli(
            "plot",
            demo.roots["L1"],
            "ws",
            "--stage",
            "expert_up",
            "--invocation",
            "0",
            "--out",
            tmp_path / "missing" / "x.png",
        ),
        "does not exist",
    )
    assert_input_error(cli("plot", demo.roots["L1"], "nothing", "--out", tmp_path / "x.png"), "no tensor named")
    assert_input_error(cli("plot", demo.roots["L1"], "ws", "--out", tmp_path / "x.png", "--kind", "pie"), "--kind")
    assert not (tmp_path / "x.png").exists()


def test_plot_functions_downsample_huge_tensors():
    import xarray as xr
    from matplotlib.figure import Figure

    from megadump_zarr.analyse.plot import heatmap_values, histogram_values, plot_heatmap, plot_histogram

    big = xr.DataArray(np.arange(3000 * 700, dtype=np.float32).reshape(3000, 700), dims=("row", "col"), name="big")
    values, steps, dims = heatmap_values(big)
    assert values.shape[0] <= 512 and values.shape[1] <= 512 and steps == (6, 2) and dims == ("row", "col")
    assert values[1, 1] == big.values[6, 2]
    finite, nans, infs, step = histogram_values(big, max_elements=70_000)
    assert finite.size <= 70_000 and step == 30 and nans == infs == 0
    figure = Figure()
    ax = figure.add_subplot()
    assert plot_heatmap(big, ax) is ax and "every 6" in ax.get_ylabel()
    ax2 = figure.add_subplot(2, 1, 2)
    with_nan = np.array([1.0, np.nan, np.inf, 2.0])
    assert plot_histogram(with_nan, ax2, bins=4) is ax2 and "1 NaN" in ax2.get_title() and "1 Inf" in ax2.get_title()
    one_d, _, _ = heatmap_values(np.arange(5))
    assert one_d.shape == (1, 5)
    with pytest.raises(ValueError, match="scalar"):
        heatmap_values(np.float32(1.0))


def test_every_rank_is_labelled_in_compare_tables_rank_0_too(cli, tmp_path):
    from megadump_zarr.layout.write_model import ArrayWrite, InvocationWrite, WindowWrite
    from megadump_zarr.store.writer import WindowWriter

    for side, delta in (("a", 0.0), ("b", 1.0)):
        with WindowWriter(tmp_path / side) as writer:
            for rank in (0, 1):
                attrs = {"invocationId": 0, "step": 0, "direction": "forward", "kernelName": "k", "level": "L0"}
                data = np.full((4, 3), rank + delta, np.float32)
                inv = InvocationWrite(
                    "invocation_000000_forward",
                    {**attrs, "rank": rank},
                    [],
                    [ArrayWrite("x", data, ("r", "c"), {"name": "x"})],
                )
                meta = {"schemaVersion": 5, "level": "L0", "windowIndex": 0, "rank": rank}
                writer.write_window(WindowWrite(rank, 0, meta, [inv]))
    result = cli("compare", tmp_path / "a", tmp_path / "b")
    rows = [line for line in result.out.splitlines() if line.startswith("fail ")]
    assert len(rows) == 2, result.out
    assert any(" r0 " in f" {row} " for row in rows) and any(" r1 " in f" {row} " for row in rows), rows
