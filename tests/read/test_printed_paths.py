"""What ``ls``, ``show`` and ``stats`` print opens: every printed ``xr.open_zarr(...)[...]`` line, pasted into a fresh
interpreter that never imports megadump_zarr, gives the values megadump_zarr reads, in both layouts (L1 task groups
and task-record packs) and at L0."""

from __future__ import annotations

import json
from pathlib import Path
import re
import subprocess
import sys

import numpy as np
import pytest

from megadump_zarr import TensorDumpConfig, open_dump, tensor_dump
from megadump_zarr.demo.model import MoEBlock
from megadump_zarr.read.open_snippet import record_snippet
from tests.cli._helpers import cli_runner

SNIPPET = re.compile(r"xr\.open_zarr\('[^']+'\)\['[^']+'\](?:\.isel\(task=[0-9]+\))?")

# zarr loads every installed ``zarr.data_type`` entry point on its first data-type lookup, ours included (what
# lets a plain interpreter read bfloat16); these float32 dumps need none, so the interpreter hides ours and
# proves that nothing of megadump_zarr is imported to open what was printed.
PLAIN = """
import json, sys, warnings
import importlib.metadata
warnings.simplefilter("ignore", DeprecationWarning)
def hide(md):
    listed = md.entry_points
    def entry_points(**kw):
        found = listed(**kw)
        if isinstance(found, dict):  # every group (Python < 3.12)
            found = [e for group in found.values() for e in group]
        return md.EntryPoints(e for e in found if not e.value.startswith("megadump_zarr"))
    md.entry_points = entry_points
hide(importlib.metadata)
try:
    import importlib_metadata  # dask reads its entry points through the backport
    hide(importlib_metadata)
except ImportError:
    pass
import numpy as np
import xarray as xr
out = {}
for line in json.loads(sys.argv[1]):
    out[line] = np.asarray(eval(line).values, dtype=np.float64).ravel().tolist()
assert "megadump_zarr" not in sys.modules, sorted(m for m in sys.modules if m.startswith("megadump"))
print(json.dumps(out))
"""


def _dump(out: Path, level: str, layout: str) -> Path:
    block = MoEBlock()
    fields = {"layout": layout} if level == "L1" else {}
    config = TensorDumpConfig(out, level=level, kernel_names="moe_experts", stages=["expert_up", "combine"], **fields)
    with tensor_dump(config) as dumper:
        block(block.make_input())
        dumper.step()
    return out


@pytest.fixture(scope="module", params=[("L1", "tasks"), ("L1", "packs"), ("L0", "tasks")], ids=lambda p: "-".join(p))
def root(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    level, layout = request.param
    return _dump(tmp_path_factory.mktemp(f"printed_{level}_{layout}") / "dump", level, layout)


def _plain_values(lines: list[str]) -> dict[str, list[float]]:
    """Each line evaluated in a fresh interpreter that imports xarray, not megadump_zarr."""
    done = subprocess.run(
        [sys.executable, "-c", PLAIN, json.dumps(lines)], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_every_printed_location_opens_with_plain_xarray(
    root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cli = cli_runner(capsys, monkeypatch, columns=1000)
    listed = cli("ls", root)
    assert listed.code == 0, listed.err
    printed = SNIPPET.findall(listed.out)
    dump = open_dump(root)
    records = dump.records()
    expected = {record_snippet(str(root), row): path for path, row in zip(records["path"], records.to_dict("records"))}
    assert len(printed) == len(records) and set(printed) == set(expected)  # one line per record, each its own
    shown = cli("show", root, records["path"].iloc[-1], "--head", "0")
    stats = cli("stats", root)
    assert SNIPPET.findall(shown.out) == [record_snippet(str(root), records.iloc[-1])]
    assert set(SNIPPET.findall(stats.out)) == set(expected)
    if (records["pack_row"] >= 0).any():  # the packs layout prints pack rows
        assert any(".isel(task=" in line for line in printed)
    plain = _plain_values(sorted(set(printed)))
    for line, path in expected.items():
        ours = np.asarray(dump.record_array(path).values, dtype=np.float64).ravel()
        np.testing.assert_array_equal(np.asarray(plain[line]), ours, err_msg=line)
