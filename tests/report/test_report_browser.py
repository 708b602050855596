"""The report in a real browser: Debian's chromium, headless, loads the file, renders it, raises nothing.

``make test`` installs chromium (apt) before the suite runs; the suite itself installs nothing. Where
chromium cannot be had the test skips with that reason, except under CI, where it must be there.
"""

from __future__ import annotations

import os
from pathlib import Path
import re
import shutil
import subprocess
from typing import Any
import zlib

import pytest

from tests.report.test_report_file import STRICT

_CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "chrome")


def _browser() -> str:
    for name in _CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    message = "no headless chromium on PATH (make test installs Debian's chromium with apt-get)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def _chromium(*args: str) -> subprocess.CompletedProcess[str]:
    command = [
        _browser(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--hide-scrollbars",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=4000",
        *args,
    ]
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "HOME": os.environ.get("HOME", "/tmp")},
    )


def _console_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "CONSOLE" in line and ("Uncaught" in line or "Error" in line)]


def _png_colours(path: Path) -> int:
    """How many distinct RGB(A) pixel values a PNG screenshot holds (decoded with zlib, no imaging library)."""
    raw = path.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, pos, header = [], 8, None
    while pos < len(raw):
        length = int.from_bytes(raw[pos : pos + 4], "big")
        kind, body = raw[pos + 4 : pos + 8], raw[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            chunks.append(body)
        pos += 12 + length
    assert header is not None
    width = int.from_bytes(header[:4], "big")
    channels = {2: 3, 6: 4}[header[9]]
    data = zlib.decompress(b"".join(chunks))
    stride = width * channels + 1
    sample = {
        data[i : i + channels]
        for row in range(0, len(data), stride * 7)
        for i in range(row + 1, row + stride, channels * 5)
    }
    return len(sample)


def test_report_renders_in_chromium(pair: Any, cli: Any, tmp_path: Path) -> None:
    bf16, fp32 = pair
    page = tmp_path / "report.html"
    assert cli("report", bf16.roots["L1"], fp32.roots["L1"], "-o", page, *STRICT).code == 1
    dom = _chromium("--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert 'data-ready="1"' in html, "the report's script did not finish"
    assert re.search(r'<pre id="js-errors"></pre>', html), "script errors were listed in the page"
    assert not _console_errors(dom.stderr), _console_errors(dom.stderr)
    rows = re.findall(
        r'<tr class="(fail|ok)" data-order="\d+">',
        re.search(r'<table id="records">.*?<tbody>(.*?)</tbody>', html, re.S)[1],
    )
    table = re.search(r'id="report-data">(.*?)</script>', html, re.S)[1]
    assert len(rows) == table.count('"path":'), "every record is a table row"
    assert rows[0] == "fail" and "ok" in rows, "failures come first"
    assert re.search(r'<canvas class="heatmap" data-index="0"[^>]*data-rendered="1"', html), "heatmap not drawn"
    assert "Root cause" in html and re.search("(First|first) divergence", html)
    shot = tmp_path / "shot.png"
    taken = _chromium("--window-size=1280,1600", f"--screenshot={shot}", page.as_uri())
    assert taken.returncode == 0 and shot.exists(), taken.stderr[-2000:]
    assert _png_colours(shot) > 20, "the screenshot is (nearly) blank"


def test_root_cause_is_on_the_rendered_page(fault_pair: Any, cli: Any, tmp_path: Path) -> None:
    faulty, clean, fault = fault_pair
    page = tmp_path / "fault.html"
    assert cli("report", faulty, clean, "-o", page).code == 1
    dom = _chromium("--dump-dom", page.as_uri())
    card = re.search(r'<div class="card" id="root-cause">(.*?)</div>', dom.stdout, re.S)
    assert card is not None and "expert_down" in card[1]
    assert f"task_{fault.task_ids[0]:06d}/output_00_ys" in card[1].replace("<wbr>", "")
    assert 'data-ready="1"' in dom.stdout and not _console_errors(dom.stderr)


def test_single_dump_report_renders_in_chromium(pair: Any, cli: Any, tmp_path: Path) -> None:
    bf16, _ = pair
    page = tmp_path / "single.html"
    assert cli("report", bf16.roots["L0"], "-o", page).code == 0
    dom = _chromium("--dump-dom", page.as_uri())
    assert 'data-ready="1"' in dom.stdout and '<pre id="js-errors"></pre>' in dom.stdout
    assert "First NaN/Inf" in dom.stdout
    assert not _console_errors(dom.stderr)
