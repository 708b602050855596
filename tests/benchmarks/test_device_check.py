"""``make device-check``: skips cleanly without CUDA; its comparison runs end to end (CPU against CPU)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from benchmarks import device_check


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the check runs instead of skipping")
def test_skips_with_a_message_and_exit_0_without_cuda():
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.device_check"], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("device-check: skipped: no CUDA device: torch.cuda.is_available() is False")
    assert result.stdout.count("\n") == 1 and result.stderr == ""


def test_check_compares_every_tensor_of_both_levels(tmp_path, capsys):
    out = tmp_path / "figures.json"
    assert device_check.main(["--device", "cpu", "--quick", "--json", str(out), "--out", str(tmp_path / "d")]) == 0
    rows = json.loads(out.read_text())["entries"]
    assert [(r["dtype"], r["level"]) for r in rows] == [("float32", "L0"), ("float32", "L1")]
    for row in rows:
        assert row["tensors"] > 10 and row["exact"] > 0
        assert row["passed"] == row["tensors"] and row["failed"] == 0
        assert row["max_abs"] == 0.0  # the same device twice: bit-identical
    assert "float32  L1" in capsys.readouterr().out


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the check runs instead of skipping")
def test_make_device_check_prints_one_line_without_cuda():
    # make echoed the recipe ("…/python -m benchmarks.device_check") before the check's own line
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    recipe = (root / "Makefile").read_text().split("\ndevice-check:", 1)[1].splitlines()[1]
    assert recipe.startswith("\t@") and recipe.endswith("-m benchmarks.device_check")
    import shutil

    stamp = (
        subprocess.run(["make", "-q", ".venv/.installed"], cwd=root, capture_output=True, check=False)
        if shutil.which("make")
        else None
    )
    if stamp is None or stamp.returncode != 0:
        pytest.skip("make missing or the venv stamp is stale (make would reinstall first)")
    result = subprocess.run(
        ["make", "--no-print-directory", "device-check"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.count("\n") == 1 and result.stdout.startswith("device-check: skipped: no CUDA device")
