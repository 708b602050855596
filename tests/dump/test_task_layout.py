"""Schema 8's default layout: every L1 task a Zarr group that plain ``xr.open_zarr`` opens, in an interpreter
that never imports megadump_zarr itself (zarr/dask/xarray entry points may load its dtype plugin)."""

from __future__ import annotations

import json
import os
from pathlib import Path
import subprocess
import sys

from megadump_zarr.demo.run import run_demo
from megadump_zarr.read import open_dump

READER = r"""
import json, sys, warnings
import numpy as np
import xarray as xr

out = {}
for path in sys.argv[1:]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = xr.open_zarr(path)
        ds.load()
    rows = {name: ds[name].values.tolist() for name in ds.coords if name in ds.indexes}
    out[path] = {"warnings": [str(w.message) for w in caught], "rows": rows,
                 "expert": ds.attrs["owner"]["id"], "vars": sorted(ds.data_vars)}
print(json.dumps(out))
"""


def _task_groups(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("rank_*/window_*/invocation_*/stages/*/task_*") if (p / "zarr.json").is_file())


def test_plain_xarray_opens_every_task_group_of_the_demo(tmp_path):
    summary = run_demo(tmp_path / "demo", steps=2)
    l1 = summary.roots["L1"]
    groups = _task_groups(l1)
    assert len(groups) == summary.tasks == 12
    assert not list(l1.glob("rank_*/window_*/invocation_*/stages/*/pack_*"))  # packs are opt-in
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    result = subprocess.run(
        [sys.executable, "-c", READER, *map(str, groups)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    opened = json.loads(result.stdout)
    by_stage: dict[tuple[str, str], list[tuple[int, list[int]]]] = {}
    for path in groups:
        got = opened[str(path)]
        assert got["warnings"] == [], (path, got["warnings"])
        assert got["vars"], path
        (rows,) = [values for name, values in got["rows"].items() if name != "expert"]  # the global-row coordinate
        assert rows == list(range(rows[0], rows[0] + len(rows))) and rows, (path, rows)
        by_stage.setdefault((path.parents[2].name, path.parent.name), []).append((got["expert"], rows))
    for key, tasks in by_stage.items():
        seen: set[int] = set()
        for _, rows in tasks:
            assert seen.isdisjoint(rows), key  # the experts' row ranges are disjoint
            seen.update(rows)
        assert sorted(e for e, _ in tasks) == [0, 1], key


def test_every_record_path_is_a_directory(tmp_path):
    summary = run_demo(tmp_path / "demo", steps=2)
    l1 = summary.roots["L1"]
    records = open_dump(l1).records()
    assert len(records) > 0
    missing = [p for p in records["path"] if not (l1 / p).is_dir()]
    assert missing == []
    assert all("pack_" not in p for p in records["path"])
