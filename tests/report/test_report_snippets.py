"""Every snippet the report offers to open a record runs as printed (issue 21): the plain-zarr line opens the
record's group on disk, and the ``engine="megadump"`` line opens a group the engine serves (an L0
invocation, an L1 stage)."""

from __future__ import annotations

import html
from pathlib import Path
import re
import subprocess
import sys

import pytest

from megadump_zarr.read import open_dump
from megadump_zarr.report.html import _engine_group, _open_snippet

_PRE = re.compile(r'<pre class="mono">(import xarray as xr.*?)</pre>', re.S)


def _run(code: str, cwd: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"snippet failed:\n{code}\n{done.stderr[-2000:]}"


def _both_lines(snippet: str) -> list[str]:
    head, _, other = snippet.partition("\n# or: ")
    return [head + "\n", "import xarray as xr\n" + other + "\n"]


def test_the_report_snippets_run_as_printed(fault_pair, cli, tmp_path):
    faulty, clean, _ = fault_pair
    out = tmp_path / "r.html"
    cli("report", faulty, clean, "-o", out)
    snippets = [html.unescape(s) for s in _PRE.findall(out.read_text())]
    assert snippets, "the report offers no snippet"
    for snippet in snippets:
        for code in _both_lines(snippet):
            _run(code, tmp_path)


@pytest.mark.parametrize("level", ["L0", "L1"])
def test_every_record_snippet_opens_its_group(pair, tmp_path, level):
    bf16, _ = pair
    root = str(bf16.roots[level])
    records = open_dump(root).records()
    groups = sorted({_engine_group(p) for p in records["path"]})
    depth = 4 if level == "L1" else 2
    assert all(g.count("/") == depth and ("/stages/" in g) == (level == "L1") for g in groups), groups
    code = "import xarray as xr\n" + "".join(
        f"xr.open_dataset({root!r}, engine='megadump', group={g!r})\n" for g in groups
    )
    for path in sorted(set(records["path"]))[:: max(1, len(records) // 12)]:
        code += _open_snippet(root, path).partition("\n# or:")[0].removeprefix("import xarray as xr\n") + "\n"
    _run(code, tmp_path)


def test_packed_record_snippets_open_the_pack_row(tmp_path, cli):
    """``layout="packs"``: a packed record's snippet opens its pack with plain xarray and takes its row, and
    gives the record's values; the report page carries the same address for its click-to-copy snippet."""
    import numpy as np

    from tests._faults import dump_demo_step

    faulty, clean = tmp_path / "faulty", tmp_path / "clean"
    dump_demo_step(faulty, "L1", fault={"stage": "combine", "start": 8, "delta": 0.5}, layout="packs")
    dump_demo_step(clean, "L1", layout="packs")
    dump = open_dump(faulty)
    records = dump.records()
    packed = records[records["pack_array"].notna()]
    assert len(packed), "the demo's combine tiles are packed"
    code = "import numpy as np\n"
    for row in packed.itertuples():
        stored = [row.pack_array, int(row.pack_row)]
        line = (
            _open_snippet(str(faulty), row.path, stored).partition("\n# or:")[0].removeprefix("import xarray as xr\n")
        )
        assert ".isel(task=" in line and "/pack_" in line, line
        np.save(tmp_path / f"{row.Index}.npy", dump.record_array(row.path).values)
        code += f"np.testing.assert_array_equal(({line}).values, np.load({str(tmp_path / f'{row.Index}.npy')!r}))\n"
    _run("import xarray as xr\n" + code, tmp_path)
    out = tmp_path / "r.html"
    cli("report", faulty, clean, "-o", out)
    page = out.read_text()
    snippets = [html.unescape(s) for s in _PRE.findall(page)]
    assert any(".isel(task=" in s for s in snippets), snippets
    for snippet in snippets:
        for code in _both_lines(snippet):
            _run(code, tmp_path)
    assert '"stored":' in page and str(packed["pack_array"].iloc[0]) in page
