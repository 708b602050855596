"""msprobe statistics dumps taken with ``summary_mode: "md5"`` carry a digest per tensor (msprobe's ``md5``:
the CRC32 of the tensor's bytes). Differing digests fail the pair; equal ones prove it for ``--bitwise``
("md5 equal"); the note says the digest was used. Real msprobe runs on CPU (``_msprobe_model.py md5``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from megadump_zarr import compare, open_dump
from megadump_zarr.interop.msprobe import convert_msprobe
from tests.interop.conftest import _run_all

pytest.importorskip("msprobe")

CLI = [sys.executable, "-m", "megadump_zarr.cli.main"]


@pytest.fixture(scope="module")
def md5_dumps(tmp_path_factory) -> dict[str, Path]:
    """golden, and target with one weight off by 1e-6 (statistics within tolerance, bytes not): one step each."""
    runs = {"golden": ["md5", "0", "16", "1"], "target": ["md5", "1e-6", "16", "1"]}
    return _run_all(tmp_path_factory.mktemp("msprobe-md5"), runs)


def _leaves(node, out: list[str]) -> list[str]:
    """Every ``md5`` msprobe wrote below ``node``."""
    if isinstance(node, dict):
        if isinstance(node.get("md5"), str):
            out.append(node["md5"])
        for value in node.values():
            _leaves(value, out)
    elif isinstance(node, list):
        for value in node:
            _leaves(value, out)
    return out


def test_differing_md5_fail_even_when_the_statistics_agree(md5_dumps):
    golden, target = open_dump(md5_dumps["golden"]).records(), open_dump(md5_dumps["target"]).records()
    [dump_json] = (md5_dumps["golden"] / "step0").glob("*/dump.json")
    assert sorted(golden["md5"].dropna()) == sorted(_leaves(json.loads(dump_json.read_text())["data"], []))
    both = golden.merge(target, on="path", suffixes=("_g", "_t"))
    differing = set(both[both["md5_g"] != both["md5_t"]]["path"])
    assert len(differing) >= 10  # the case: 10 tensors whose digests differ
    result = compare(md5_dumps["target"], md5_dumps["golden"])
    failed = result[result["verdict"] != "pass"]
    assert set(failed["path"]) == differing and set(failed["verdict"]) == {"fail"}
    assert all("md5 differs (msprobe's digest of the bytes)" in note for note in failed["note"])
    passed = result[result["verdict"] == "pass"]
    assert len(passed) > 0 and all("md5 equal" in note for note in passed["note"])


def test_bitwise_uses_md5(md5_dumps):
    same = compare(md5_dumps["golden"], md5_dumps["golden"], bitwise=True)
    assert set(same["verdict"]) == {"pass"} and all("md5 equal" in n for n in same["note"])
    differ = compare(md5_dumps["target"], md5_dumps["golden"], bitwise=True)
    assert "error" not in set(differ["verdict"])  # never "cannot prove": the digests decide
    assert all("md5 differs" in n for n in differ[differ["verdict"] == "fail"]["note"])
    result = subprocess.run(
        [*CLI, "compare", str(md5_dumps["golden"]), str(md5_dumps["golden"]), "--bitwise"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0 and "bitwise identical" in result.stdout and "md5 equal" in result.stdout


def test_converted_dumps_keep_the_digests(md5_dumps, tmp_path):
    for name in ("golden", "target"):
        convert_msprobe(md5_dumps[name], tmp_path / name)
    result = compare(tmp_path / "target", tmp_path / "golden")
    in_place = compare(md5_dumps["target"], md5_dumps["golden"])
    assert list(result["verdict"]) == list(in_place["verdict"]) and (result["verdict"] == "fail").sum() >= 10


def test_a_hostile_md5_is_refused_naming_the_field(md5_dumps, tmp_path):
    source = tmp_path / "bad"
    shutil.copytree(md5_dumps["golden"], source)
    [dump_json] = (source / "step0").glob("*/dump.json")
    doc = json.loads(dump_json.read_text())
    doc["data"]["Functional.linear.0.forward"]["input_args"][0]["md5"] = ["not", "a", "digest"]
    dump_json.write_text(json.dumps(doc))
    result = subprocess.run([*CLI, "ls", str(source)], capture_output=True, text=True, timeout=120, check=False)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1 and "'md5' must be a hexadecimal digest" in errors[0]
