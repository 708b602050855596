"""Real msprobe dumps shared by the msprobe tests (made once a session: msprobe runs are the slow part).

A child process runs msprobe's ``PrecisionDebugger`` on a tiny torch model on CPU (``_msprobe_model.py``;
msprobe patches torch, so never in this process).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

MODEL = Path(__file__).with_name("_msprobe_model.py")
LEVEL_RUNS = {
    f"{side}-{task}-{level}": (task, perturb, level)
    for level in ("L0", "mix", "L1")
    for side, perturb in (("golden", "0"), ("target", "0.01"))
    for task in ("tensor", "statistics")
    if level != "L1" or task == "tensor"
}
"""The level runs: name -> (task, perturbation, msprobe level); the ``Embedded`` model, one step."""


def _run_all(base: Path, runs: dict[str, list[str]]) -> dict[str, Path]:
    """Run msprobe once per entry of ``runs`` (name -> model arguments after the dump path), four at a time."""
    names = list(runs)
    for start in range(0, len(names), 4):
        procs = {}
        for name in names[start : start + 4]:
            procs[name] = subprocess.Popen(
                [sys.executable, str(MODEL), runs[name][0], str(base / name), *runs[name][1:]],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        for name, proc in procs.items():
            _, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err[-3000:]
    return {name: base / name for name in names}


@pytest.fixture(scope="session")
def msprobe_dumps(tmp_path_factory) -> dict[str, Path]:
    """Golden and perturbed L1 tensor dumps and a statistics dump of the ``Tiny`` model, two steps each."""
    pytest.importorskip("msprobe")
    runs = {"golden": ["tensor", "0"], "target": ["tensor", "0.01"], "stats": ["statistics", "0"]}
    return _run_all(tmp_path_factory.mktemp("msprobe"), runs)


@pytest.fixture(scope="session")
def dumps(tmp_path_factory) -> dict[str, Path]:
    """Every run of :data:`LEVEL_RUNS` (golden and target; tensor and statistics tasks; L0, mix, L1)."""
    pytest.importorskip("msprobe")
    runs = {name: [task, perturb, "16", "1", level] for name, (task, perturb, level) in LEVEL_RUNS.items()}
    return _run_all(tmp_path_factory.mktemp("msprobe-levels"), runs)
