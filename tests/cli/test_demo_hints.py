"""``megadump demo``'s next-step commands: a task group for xarray, and launchers the user's shell can run
even when the virtual environment is not activated."""

from __future__ import annotations

import os
import re
from pathlib import Path
import shlex
import subprocess
import sys

from megadump_zarr.cli.commands import demo


def _fake_venv(tmp_path: Path) -> Path:
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", "megadump"):
        (bin_dir / name).write_text("#!/bin/sh\n", encoding="utf-8")
        (bin_dir / name).chmod(0o755)
    return bin_dir


def test_not_activated_prints_paths_relative_to_cwd(tmp_path, monkeypatch):
    bin_dir = _fake_venv(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # the venv's bin is not on PATH
    assert demo.launchers() == (".venv/bin/python", ".venv/bin/megadump")


def test_activated_prints_bare_names(tmp_path, monkeypatch):
    bin_dir = _fake_venv(tmp_path)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    assert demo.launchers() == ("python", "megadump")


def test_outside_cwd_prints_absolute_paths_and_module_fallback(tmp_path, monkeypatch):
    bin_dir = tmp_path / "env" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").write_text("", encoding="utf-8")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    python = str(bin_dir / "python")
    assert demo.launchers() == (python, f"{python} -m megadump_zarr.cli.main")  # no megadump script there


def test_demo_prints_a_task_group_and_commands_that_run(tmp_path):
    env = {k: v for k, v in os.environ.items()}
    env["PATH"] = "/usr/bin:/bin"  # as if the venv were not activated
    result = subprocess.run(
        [sys.executable, "-m", "megadump_zarr.cli.main", "demo", "--out", "d", "--steps", "2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    (sizes,) = [line for line in lines if " tensors; " in line]
    assert re.search(r"KiB logical, [\d.]+ KiB on disk \(compression \d+\.\d\d×\)$", sizes), sizes
    assert "ratio" not in result.stdout  # one word for the one ratio (layout.sizes)
    (hint,) = [line.strip() for line in lines if "xr.open_zarr" in line]
    assert "d/l1/rank_0/window_0000/invocation_000000_forward/stages/expert_up/task_000000" in hint
    assert "pack_" not in hint
    assert shlex.split(hint)[0] == os.path.relpath(sys.executable, tmp_path) or shlex.split(hint)[0] == sys.executable
    opened = subprocess.run(
        shlex.split(hint), cwd=tmp_path, capture_output=True, text=True, env=env, check=False, timeout=120
    )
    assert opened.returncode == 0, opened.stderr
    assert "input_00_xs" in opened.stdout and "slot" in opened.stdout
    (explore,) = [line.split(": ", 1)[1] for line in lines if line.startswith("Explore it:")]
    assert explore.endswith(" info d")
    info = subprocess.run(
        shlex.split(explore), cwd=tmp_path, capture_output=True, text=True, env=env, check=False, timeout=120
    )
    assert info.returncode == 0, info.stderr
