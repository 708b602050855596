"""The installed ``megadump`` console script, run as a real subprocess."""

from __future__ import annotations

import json
import os
from pathlib import Path
import shutil
import subprocess
import sys

import pytest

from megadump_zarr.read import open_dump
from tests._layout import stored_record

SCRIPT = Path(sys.executable).with_name("megadump")
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason=f"console script not installed next to {sys.executable}")


def megadump(*args: object, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "MEGADUMP_DEBUG")}
    env["COLUMNS"] = "200"
    return subprocess.run([str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env)


def test_help(demo):
    done = megadump("--help")
    assert done.returncode == 0 and "decode-buffer" in done.stdout and "export-hdf5" in done.stdout


def test_ls_json_is_parseable(demo):
    done = megadump("ls", demo.roots["L1"], "--stage", "expert_down", "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert rows and {r["stage"] for r in rows} == {"expert_down"}
    assert "\x1b[" not in done.stdout  # no terminal escapes in JSON


def test_compare_exit_codes(demo, tmp_path):
    same = megadump("compare", demo.roots["L1"], demo.roots["L1"], "--quiet")
    assert same.returncode == 0, same.stderr
    assert same.stdout.startswith("PASS")
    copy = tmp_path / "l1"
    shutil.copytree(demo.roots["L1"], copy)
    path = open_dump(copy).records().query("name == 'ys'").iloc[0]["path"]
    array, index = stored_record(copy, path)
    array[index] = array[index] + 2.0
    different = megadump("compare", copy, demo.roots["L1"])
    assert different.returncode == 1, different.stderr
    assert "FAIL" in different.stdout and path in different.stdout


def test_bad_path_exit_2_without_traceback(tmp_path):
    done = megadump("info", tmp_path / "missing")
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    usage = megadump("stats")
    assert usage.returncode == 2 and usage.stderr.startswith("error: ") and "Traceback" not in usage.stderr
