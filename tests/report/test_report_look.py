"""What the report shows, checked in headless chromium at 1400 px: the root-cause box (one box when it is
the first divergence; writing stage, reason, replay verdict), heatmap axes, histogram count axes, white
exact cells, no mid-word breaks, L0 titles, and a symmetric colour scale (-0.28 lighter than +2.95).

Screenshots are left in pytest's temporary folder (``look-*/``) for a person to look at.
"""

from __future__ import annotations

from html import unescape
from pathlib import Path
import re
from typing import Any

import numpy as np
import pytest

from tests._faults import dump_demo_step
from tests.report.test_report_browser import _chromium, _console_errors, _png_colours

WIDTH = "--window-size=1400,1800"


def _dom(page: Path) -> str:
    dom = _chromium(WIDTH, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'data-ready="1"' in dom.stdout and '<pre id="js-errors"></pre>' in dom.stdout
    assert not _console_errors(dom.stderr), _console_errors(dom.stderr)
    return dom.stdout


def _text(fragment: str) -> str:
    return unescape(re.sub(r"<[^>]+>", " ", fragment.replace("<wbr>", "")))


def _cards(html: str) -> dict[str, str]:
    return {m[1]: m[2] for m in re.finditer(r'<div class="card" id="([\w-]+)">(.*?)</div>', html, re.S)}


@pytest.fixture(scope="module")
def l1_page(fault_pair: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Any, Path]:
    from megadump_zarr.report import collect_comparison, render_html

    faulty, clean, fault = fault_pair
    base = tmp_path_factory.mktemp("look-l1")
    page = base / "l1.html"
    page.write_text(render_html(collect_comparison(faulty, clean)), encoding="utf-8")
    return _dom(page), fault, page


@pytest.fixture(scope="module")
def l0_page(tmp_path_factory: pytest.TempPathFactory) -> str:
    from megadump_zarr.report import collect_comparison, render_html

    base = tmp_path_factory.mktemp("look-l0")
    dump_demo_step(base / "faulty", "L0", fault={"stage": "expert_down", "owner": 1, "delta": 0.5})
    dump_demo_step(base / "clean", "L0")
    page = base / "l0.html"
    page.write_text(render_html(collect_comparison(base / "faulty", base / "clean")), encoding="utf-8")
    return _dom(page)


def test_one_box_says_both_roles_with_stage_reason_and_replay(l1_page: Any) -> None:
    html, fault, _ = l1_page
    fault_dirs = re.search(r"<h1>megadump report: (\S+) vs (\S+)</h1>", unescape(html)).groups()
    assert fault_dirs[0].endswith("faulty") and fault_dirs[1].endswith("clean"), fault_dirs
    cards = _cards(html)
    assert f"megadump report: {fault_dirs[0]} vs {fault_dirs[1]}" in unescape(html), "a Path names its dump"
    assert list(cards) == ["root-cause"], "root cause and first divergence are one record: one box"
    text = _text(cards["root-cause"])
    assert "Root cause and first divergence (one record)" in text
    assert "written by stage expert_down" in text
    assert f"why: every input of task {fault.task_ids[0]} of stage expert_down passes" in text
    assert f"replay of task {fault.task_ids[0]}: wrong on its own inputs" in text


def test_screenshot_at_1400_px(l1_page: Any) -> None:
    _, _, page = l1_page
    shot = page.with_suffix(".png")  # look at it: boxes, error map, heatmap axes, histogram axes
    taken = _chromium(WIDTH, f"--screenshot={shot}", page.as_uri())
    assert taken.returncode == 0 and shot.exists(), taken.stderr[-2000:]
    assert _png_colours(shot) > 20, "the screenshot is (nearly) blank"


def test_l0_boxes_and_titles(l0_page: str) -> None:
    cards = _cards(l0_page)
    assert list(cards) == ["root-cause", "first-divergence"], "different records: two boxes"
    root = _text(cards["root-cause"])
    assert "written by stage expert_down" in root and "why: the other inputs of stage expert_down pass" in root
    assert "replay applies to L1 task records; this record has no task" in root
    assert "written by" not in _text(cards["first-divergence"])
    titles = [_text(t).strip() for t in re.findall(r'<div class="worst"[^>]*><div><h3>(.*?)</h3>', l0_page, re.S)]
    assert titles, "failing L0 records get heatmaps"
    for title in titles:
        assert "stage" not in title and "None" not in title and title.endswith("kernel moe_experts"), title


def test_heatmaps_have_axes_and_histograms_a_count_axis(l1_page: Any) -> None:
    html, _, _ = l1_page
    figures = re.findall(r'<div class="worst" id="worst-\d+">(.*?)<pre class="mono">', html, re.S)
    assert len(figures) >= 2
    for figure in figures:
        axes = re.search(r'<div class="heat-axes">(.*)', figure, re.S)[1]
        x_ticks = [int(t) for t in re.findall(r'<span class="tick x-tick"[^>]*>(\d+)</span>', axes)]
        y_ticks = [int(t) for t in re.findall(r'<span class="tick y-tick"[^>]*>(\d+)</span>', axes)]
        assert x_ticks[0] == 0 and len(x_ticks) >= 3 and x_ticks == sorted(x_ticks), x_ticks
        assert y_ticks[0] >= 0 and len(y_ticks) >= 3 and y_ticks == sorted(y_ticks), y_ticks  # the tensor's rows
        labels = re.findall(r'<div class="([xy]-label)">([^<]+)</div>', axes)
        assert [k for k, _ in labels] == ["y-label", "x-label"] and all(v.strip() for _, v in labels), labels
        assert 'data-rendered="1"' in axes
        svg = re.search(r'<svg class="histogram".*?</svg>', figure, re.S)[0]
        assert re.search(r'<text class="y-label"[^>]*>count</text>', svg)
        ticks = [int(t) for t in re.findall(r'<text class="y-tick"[^>]*>(\d+)</text>', svg)]
        bars = [int(c) for c in re.findall(r":\s*(\d+)</title>", svg)]
        assert ticks[0] == 0 and ticks[-1] == max(bars) > 0, (ticks, bars)


def test_zero_cells_are_white_and_nothing_breaks_mid_word(l1_page: Any) -> None:
    html, _, _ = l1_page
    zeros = re.findall(r'<td class="ok" data-value="0"[^>]*style="([^"]*)"', html)
    assert zeros and all(s.startswith("background:#ffffff") for s in zeros), zeros
    failing = re.findall(r'<td class="fail" data-value="[^"]*"[^>]*style="background:rgb\((\d+),(\d+),(\d+)\)', html)
    assert failing and all(sum(map(int, c)) < 300 for c in failing)
    style = re.search(r"<style>(.*?)</style>", html, re.S)[1]
    assert "break-all" not in style and "anywhere" not in style
    assert re.search(r"\.card dd \{[^}]*overflow-wrap: break-word; word-break: normal;", style)
    path = re.search(r'<dt class="wide">path</dt><dd class="wide">(.*?)</dd>', html, re.S)[1]
    assert path.count("<wbr>") >= 5 and all(before in "/._" for before in re.findall(r"(.)<wbr>", path))


def test_signed_heatmap_colours_are_symmetric_in_the_browser(tmp_path_factory: pytest.TempPathFactory) -> None:
    from PIL import Image

    from megadump_zarr.report import ReportData, render_html
    from megadump_zarr.report.assets import diverging_rgb
    from megadump_zarr.report.collect import _quantise

    values = np.array([[-0.28, 2.95]])
    cells = _quantise(values, float(np.abs(values).max()))
    low, high = diverging_rgb(cells[0]), diverging_rgb(cells[1])

    def lightness(rgb: tuple[int, ...]) -> float:
        return 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]

    assert cells == [115, 254] and lightness(low) > lightness(high) + 100, (low, high)
    worst = {
        "where": {"name": "signed", "window": 0, "invocation": 0, "step": 0},
        "shape": [1, 2],
        "cells": cells,
        "limit": 2.95,
        "steps": [1, 1],
        "dims": ["row", "col"],
        "sampled": False,
        "histogram": {"counts": [1, 1], "edges": [-0.28, 1.335, 2.95]},
    }
    data = ReportData(
        kind="compare",
        title="signed",
        sources={"a": "A", "b": "B"},
        summary={"failing": 1, "records": 1, "counts": {"fail": 1}},
        worst=[worst],
    )
    base = tmp_path_factory.mktemp("look-signed")
    page, shot = base / "signed.html", base / "signed.png"
    page.write_text(render_html(data), encoding="utf-8")
    assert 'data-rendered="1"' in _dom(page)
    taken = _chromium(WIDTH, f"--screenshot={shot}", page.as_uri())
    assert taken.returncode == 0 and shot.exists(), taken.stderr[-2000:]
    pixels = np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3).astype(int)
    for colour in (low, high):  # each cell is a 144 x 144 block of exactly its colour
        assert int((np.abs(pixels - np.array(colour)).max(axis=1) <= 2).sum()) >= 144 * 144, colour
