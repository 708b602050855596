"""The report points at the place: the error map falls back to cores (then tasks) where there are no
owners, heatmap ticks and ``worst_index`` are in the whole tensor's coordinates, the records table fits a
1400-pixel window, and a cosine that differs from 1 does not read as 1."""

from __future__ import annotations

from pathlib import Path
import re
from typing import Any

import pandas as pd

from megadump_zarr import compare
from megadump_zarr.report.collect import collect_comparison
from megadump_zarr.report.html import render_html
from tests.report.test_report_browser import _chromium, _console_errors

_PROBE = (
    '<script>window.addEventListener("load", function () {'
    "var t = document.getElementById('records');"
    "document.body.dataset.scrollWidth = String(document.documentElement.scrollWidth);"
    "document.body.dataset.tableWidth = String(Math.ceil(t.getBoundingClientRect().width));"
    "document.body.dataset.wrapWidth = String(t.parentElement.clientWidth);"
    "});</script>"
)


def test_the_error_map_falls_back_to_cores_without_owners(ownerless_pair: Any) -> None:
    a, b = ownerless_pair
    data = collect_comparison(a, b)
    assert data.error_maps, "no grid for records without owners"
    assert {m["by"] for m in data.error_maps} == {"core"} and {m["asked"] for m in data.error_maps} == {"owner"}
    (grid,) = data.error_maps
    assert grid["rows"] == ["matmul", "gelu"]
    assert grid["columns"] and all(re.fullmatch(r"(AIC|AIV|MIX) \d+", c) for c in grid["columns"]), grid["columns"]
    failing = sum(c["failing"] for line in grid["cells"] for c in line if c)
    assert failing == 4  # x and h of task 3, h and y of task 7
    page = render_html(data)
    assert "These records have no owners: the grid is by core." in page
    assert "No stage grid" not in page


def test_the_error_map_falls_back_to_tasks_without_cores(ownerless_pair: Any) -> None:
    a, b = ownerless_pair
    result = compare(a, b).assign(core_type=None, core_id=pd.NA)
    data = collect_comparison(a, b, result=result)
    assert {m["by"] for m in data.error_maps} == {"task"}
    assert data.error_maps[0]["columns"] == ["0", "1", "2", "3", "4", "5", "6", "7"]
    assert "These records have no owners or cores: the grid is by task." in render_html(data)


def test_worst_index_and_heatmap_ticks_are_global_rows(ownerless_pair: Any) -> None:
    a, b = ownerless_pair
    result = compare(a, b)
    failing = result[result["verdict"] == "fail"]
    assert sorted(zip(failing["stage"], failing["task_id"], failing["name"])) == [
        ("gelu", 7, "h"),
        ("gelu", 7, "y"),
        ("matmul", 3, "h"),
        ("matmul", 3, "x"),
    ]
    for index in failing["worst_index"]:
        assert 24 <= index[0] <= 31, index  # the tensor's rows, not the record's 0..7
    x = failing[failing["name"] == "x"].iloc[0]
    assert tuple(x["worst_index"]) == (31, 15)  # the nudge grows with the flat index: the last element
    data = collect_comparison(a, b)
    shown = {w["where"]["name"] + "/" + w["where"]["stage"]: w for w in data.worst}
    heat = shown["x/matmul"]
    assert heat["dims"] == ["token", "k"] and heat["index"][0] == list(range(24, 32))
    assert heat["index"][1] == list(range(16)) and heat["where"]["worst_index"] == [31, 15]
    page = render_html(data)
    ticks = re.findall(r'<span class="tick y-tick"[^>]*>(\d+)</span>', page)
    assert ticks and {int(t) for t in ticks} <= set(range(24, 32)), ticks
    assert '<div class="y-label">token</div>' in page


def test_the_table_shows_one_minus_cosine(ownerless_pair: Any) -> None:
    a, b = ownerless_pair
    data = collect_comparison(a, b)
    assert "cosine" not in data.columns and "1-cos" in data.columns
    failing = [r for r in data.rows if r["verdict"] == "fail"]
    assert failing and all(0 < r["1-cos"] < 1e-3 for r in failing)  # cosines of 0.99998: not 1
    assert all(r["1-cos"] == 0 for r in data.rows if r["name"] == "w")  # identical: exactly 1


def _fits(page: Path, tmp_path: Path) -> tuple[int, int, int, str]:
    probe = tmp_path / f"probe_{page.name}"
    probe.write_text(page.read_text().replace("</body>", _PROBE + "</body>"))
    dom = _chromium("--window-size=1400,900", "--dump-dom", probe.as_uri())
    assert dom.returncode == 0 and 'data-ready="1"' in dom.stdout, dom.stderr[-2000:]
    assert not _console_errors(dom.stderr), _console_errors(dom.stderr)
    found = {
        k: int(re.search(rf'data-{k}="(\d+)"', dom.stdout)[1]) for k in ("scroll-width", "table-width", "wrap-width")
    }
    return found["scroll-width"], found["table-width"], found["wrap-width"], dom.stdout


def test_tables_fit_a_1400_pixel_window(ownerless_pair: Any, pair: Any, cli: Any, tmp_path: Path) -> None:
    a, b = ownerless_pair
    bf16, fp32 = pair
    pages = {
        "ownerless.html": (a, b),
        "demo_l1.html": (bf16.roots["L1"], fp32.roots["L1"]),
        "demo_l0.html": (bf16.roots["L0"], fp32.roots["L0"]),
        "single.html": (bf16.roots["L1"],),
    }
    for name, roots in pages.items():
        page = tmp_path / name
        assert cli("report", *roots, "-o", page).code in (0, 1)
        scroll, table, wrap, dom = _fits(page, tmp_path)
        assert scroll <= 1400, (name, scroll)
        assert table <= wrap, (name, table, wrap)  # the records table needs no sideways scrolling
        if name == "ownerless.html":  # the failing rows' 1-cos cells are not rounded to 0
            cells = re.findall(r'<tr class="fail"[^>]*>(.*?)</tr>', dom, re.S)
            assert cells and all(re.search(r'<td class="num">\d\.\d{3}e-\d</td>', c) for c in cells), cells[:1]
