"""``megadump report``: one self-contained file, claimed like any output, the right answer inside."""

from __future__ import annotations

import json
import os
from pathlib import Path
import re
from typing import Any

import pytest

from tests.cli._helpers import assert_input_error

STRICT = ("--rtol", "1e-7", "--atol", "0")
"""Tolerances that bfloat16 against float32 never meets: the pair fails whatever the default rules."""


def _embedded(page: str) -> dict[str, Any]:
    blob = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S)
    assert blob is not None
    return json.loads(blob.group(1))


def test_comparison_report_is_self_contained_and_carries_every_record(pair: Any, cli: Any, tmp_path: Path) -> None:
    from megadump_zarr import analyse, open_dump

    bf16, fp32 = pair
    out = tmp_path / "report.html"
    result = cli("report", bf16.roots["L1"], fp32.roots["L1"], "-o", out, "--json", *STRICT)
    assert result.code == 1, result.err
    page = out.read_text(encoding="utf-8")
    # Nothing is fetched at view time: no external scripts, styles, fonts or images.
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", page)
    assert "@import" not in page and "url(" not in page
    assert "default-src 'none'" in page
    data = _embedded(page)
    expected = analyse.compare(open_dump(bf16.roots["L1"]), open_dump(fp32.roots["L1"]), rtol=1e-7, atol=0.0)
    assert len(data["rows"]) == len(expected)
    assert sorted(r["path"] for r in data["rows"]) == sorted(expected["path"])
    # Failures first, in the table's order.
    verdicts = [r["verdict"] for r in data["rows"]]
    first_pass = verdicts.index("pass")
    assert all(v == "pass" for v in verdicts[first_pass:]) and first_pass == int((expected["verdict"] != "pass").sum())
    summary = result.json()
    assert summary["summary"]["failing"] == first_pass
    divergence = analyse.first_divergence(expected)
    assert summary["first_divergence"]["path"] == divergence["path"]
    assert divergence["path"] in page
    # The worst records' heatmaps are embedded as quantised cells around 127 (= 0).
    assert data["worst"], "a failing pair must get at least one difference heatmap"
    for heat in data["worst"]:
        rows, cols = heat["shape"]
        assert len(heat["cells"]) == rows * cols and all(0 <= c <= 255 for c in heat["cells"])


def test_single_dump_report_lists_statistics(pair: Any, cli: Any, tmp_path: Path) -> None:
    from megadump_zarr import open_dump

    bf16, _ = pair
    out = tmp_path / "one.html"
    result = cli("report", bf16.roots["L0"], "-o", out)
    assert result.code == 0, result.err
    data = _embedded(out.read_text(encoding="utf-8"))
    records = open_dump(bf16.roots["L0"]).records()
    assert len(data["rows"]) == len(records)
    assert {"min", "max", "mean", "nan_count"} <= set(data["columns"])
    assert 'data-kind="single"' in out.read_text(encoding="utf-8")


def test_existing_output_is_kept_without_overwrite(pair: Any, cli: Any, tmp_path: Path) -> None:
    bf16, fp32 = pair
    out = tmp_path / "report.html"
    out.write_text("keep me")
    result = cli("report", bf16.roots["L1"], fp32.roots["L1"], "-o", out)
    assert_input_error(result, str(out), "--overwrite")
    assert out.read_text() == "keep me"
    assert cli("report", bf16.roots["L1"], fp32.roots["L1"], "-o", out, "--overwrite", *STRICT).code == 1
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert oct(out.stat().st_mode & 0o777) == oct(0o666 & ~_umask())
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"], "no temporary file left behind"


def test_not_a_regular_file_is_refused(pair: Any, cli: Any, tmp_path: Path) -> None:
    bf16, fp32 = pair
    assert_input_error(cli("report", bf16.roots["L1"], fp32.roots["L1"], "-o", os.devnull, "--overwrite"), os.devnull)
    (tmp_path / "dir.html").mkdir()
    assert_input_error(cli("report", bf16.roots["L1"], "-o", tmp_path / "dir.html"), "dir.html")


@pytest.mark.parametrize("bad", ["nan", "-1", "inf"])
def test_bad_tolerance_is_refused(pair: Any, cli: Any, tmp_path: Path, bad: str) -> None:
    bf16, fp32 = pair
    result = cli("report", bf16.roots["L1"], fp32.roots["L1"], "-o", tmp_path / "r.html", "--rtol", bad)
    assert_input_error(result, "--rtol")
    assert not (tmp_path / "r.html").exists()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_report_names_the_injected_fault_as_root_cause(fault_pair: Any, cli: Any, tmp_path: Path) -> None:
    from megadump_zarr import analyse

    faulty, clean, fault = fault_pair
    out = tmp_path / "fault.html"
    result = cli("report", faulty, clean, "-o", out, "--json")
    assert result.code == 1, result.err
    root = result.json()["root_cause"]
    expected = analyse.root_cause(analyse.compare(faulty, clean))
    assert root["path"] == expected["path"]
    assert (root["stage"], root["owner_id"], root["io"], root["task_id"]) == (
        "expert_down",
        1,
        "output",
        fault.task_ids[0],
    )
    page = out.read_text(encoding="utf-8")
    card = re.search(r'<div class="card" id="root-cause">(.*?)</div>', page, re.S)[1].replace("<wbr>", "")
    assert "expert_down" in card and root["path"] in card
    # The error map marks exactly the faulty stage x owner cell as failing.
    grid = re.search(r'<table class="errormap">(.*?)</table>', page, re.S)[1]
    failing = re.findall(r"<tr><th>([^<]+)</th>(.*?)</tr>", grid)
    marked = {
        (stage, i)
        for stage, cells in failing
        for i, cls in enumerate(re.findall(r'<td class="(\w+)"', cells))
        if cls == "fail"
    }
    assert marked == {("expert_down", 1)}


def test_an_infinite_error_is_shown_as_the_worst_cell_not_a_blank_one() -> None:
    from megadump_zarr.report import ReportData, render_html

    grid = {
        "where": {"rank": 0, "window": 0, "invocation": 0, "step": 0},
        "by": "owner",
        "rows": ["s"],
        "columns": ["0", "1"],
        "cells": [[{"worst_rel": 0.5, "failing": 1, "records": 1}, {"worst_rel": "inf", "failing": 1, "records": 1}]],
    }
    page = render_html(
        ReportData(
            kind="compare",
            title="t",
            sources={"a": "A", "b": "B"},
            summary={"failing": 2, "records": 2, "counts": {"fail": 2}},
            error_maps=[grid],
        )
    )
    cells = re.findall(r'<td class="fail" data-value="([^"]*)"[^>]*style="([^"]*)"', page)
    assert cells[1] == ("inf", "background:rgb(103,0,31);color:#fff")
    assert cells[0][0] == "0.5" and "#eeeeee" not in cells[1][1]  # never the blank of "no value"


def test_a_filter_matching_nothing_names_what_exists_and_writes_nothing(
    fault_pair: Any, cli: Any, tmp_path: Path
) -> None:
    faulty, clean, _ = fault_pair
    for args in ((faulty, clean), (faulty,)):
        out = tmp_path / "none.html"
        result = cli("report", *args, "-o", out, "--owner", "99")
        assert result.code == 2, result.err  # a filter matching nothing is bad input (one exit-code rule)
        lines = [line for line in result.err.splitlines() if line.strip()]
        assert len(lines) == 1 and "owner 99" in lines[0] and "owners" in lines[0], result.err
        assert not out.exists() and list(tmp_path.iterdir()) == []
