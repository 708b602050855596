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
    result = subprocess.run([sys.executable, "-m", "benchmarks.device_check"], capture_output=True, text=True,
                            timeout=120, check=False)
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
