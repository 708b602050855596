"""The L1 reader fuzzer: only ok or ValueError outcomes, over a short and a long seeded run."""

import sys
from pathlib import Path

import pytest

# `python -m pytest` puts the repository root on sys.path; a bare `pytest` does not.
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from benchmarks.fuzz_l1 import main, run_fuzz  # noqa: E402


def _assert_clean(result, cases):
    assert result.cases == cases
    assert result.failures == [], result.failures[:5]
    assert result.records_outside == []
    assert result.ok > 0 and sum(result.rejected.values()) > 0
    assert result.ok + sum(result.rejected.values()) == cases


def test_fuzz_500_cases():
    _assert_clean(run_fuzz(cases=500, seed=1), 500)


def test_fuzz_cli_exit_status(capsys):
    assert main(["--cases", "50", "--seed", "3"]) == 0
    assert "cases: 50" in capsys.readouterr().out


@pytest.mark.slow
def test_fuzz_10000_cases():
    _assert_clean(run_fuzz(cases=10_000, seed=0), 10_000)
