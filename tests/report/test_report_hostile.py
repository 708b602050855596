"""Record names that are HTML: the page's data block still closes, the table is whole, names show literally.

``<!--x`` followed by ``<script>y`` puts an HTML parser inside a script element into its "double escaped"
state, where ``</script>`` no longer closes the element; ``</script><b>z`` closes it early. Every JSON
embedded in a ``<script>`` writes ``<`` ``>`` ``&`` as ``\\u003c`` ``\\u003e`` ``\\u0026``.
"""

from __future__ import annotations

import copy
from html import unescape
import json
from pathlib import Path
import re
from typing import Any

import pytest

from tests.report.test_report_browser import _chromium, _console_errors

HOSTILE = ("<!--x", "<script>y", "</script><b>z")


def _cells(html: str) -> int:
    body = re.search(r'<table id="records">.*?<tbody>(.*?)</tbody>', html, re.S)
    assert body is not None, "the records table is gone"
    return body[1].count("<td")


def _hostile(data: Any) -> Any:
    """A copy of ``data`` whose first three records (and its cards and worst records) have hostile names."""
    bad = copy.deepcopy(data)
    for row, name in zip(bad.rows, HOSTILE):
        row["name"] = name
    for where, name in ((bad.root_cause, HOSTILE[0]), (bad.first_divergence, HOSTILE[1])):
        if where is not None:
            where["name"] = name
    for w, name in zip(bad.worst, HOSTILE[::-1]):
        w["where"]["name"] = name
    return bad


@pytest.fixture(scope="module")
def pages(fault_pair: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Any]:
    from megadump_zarr.report import collect_comparison, render_html

    faulty, clean, _ = fault_pair
    data = collect_comparison(faulty, clean)
    assert len(data.rows) >= 3
    base = tmp_path_factory.mktemp("hostile")
    normal, hostile = base / "normal.html", base / "hostile.html"
    normal.write_text(render_html(data), encoding="utf-8")
    hostile.write_text(render_html(_hostile(data)), encoding="utf-8")
    return normal, hostile, data


def test_embedded_json_cannot_open_or_close_markup(pages: Any) -> None:
    _, hostile, data = pages
    page = hostile.read_text(encoding="utf-8")
    for block in re.findall(r"<script[^>]*>(.*?)</script>", page, re.S):
        assert "<!--" not in block and "<script" not in block.lower()
    blob = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S)[1]
    assert "\\u003c!--x" in blob and "<" not in blob and ">" not in blob and "&" not in blob
    assert [r["name"] for r in json.loads(blob)["rows"][:3]] == list(HOSTILE)
    # Every static text is HTML-escaped: no hostile name reaches the markup raw.
    outside = re.sub(r"<script[^>]*>.*?</script>", "", page, flags=re.S)
    for name in HOSTILE:
        assert name not in outside
    assert "&lt;!--x" in outside and len(data.rows) > 3


def test_hostile_names_render_the_full_table_in_chromium(pages: Any) -> None:
    normal, hostile, data = pages
    seen = {}
    for label, page in (("normal", normal), ("hostile", hostile)):
        dom = _chromium("--window-size=1400,1600", "--dump-dom", page.as_uri())
        assert dom.returncode == 0, dom.stderr[-2000:]
        assert 'data-ready="1"' in dom.stdout, f"the {label} page's script did not finish"
        assert '<pre id="js-errors"></pre>' in dom.stdout and not _console_errors(dom.stderr)
        seen[label] = dom.stdout
    columns = len(data.columns)
    assert _cells(seen["hostile"]) == _cells(seen["normal"]) == min(len(data.rows), 200) * columns
    body = re.search(r'<table id="records">.*?<tbody>(.*?)</tbody>', seen["hostile"], re.S)[1]
    texts = [unescape(t.replace("<wbr>", "")) for t in re.findall(r"<td[^>]*>(.*?)</td>", body, re.S)]
    for name in HOSTILE:
        assert name in texts, f"{name!r} is not shown literally in a cell"
    assert "<b>z" not in body and "<script>y" not in body  # shown as text, never parsed as markup
    assert "<b>" not in re.sub(r"<script[^>]*>.*?</script>", "", seen["hostile"], flags=re.S)
