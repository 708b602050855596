"""A task group's row coordinate is bound to its place, by the window inventory and by its values: a fresh dump
verifies without a note, and a coordinate chunk copied from another task (valid there) is a problem naming it
twice (its digest, and the rows its record's ``sourceOffsetBytes`` give)."""

from __future__ import annotations

from pathlib import Path
import shutil

import pytest

from tests._mlp import dump_pair
from tests.cli._helpers import cli_runner

STAGE = "rank_0/window_0000/invocation_000000_forward/stages/matmul"


@pytest.fixture(scope="module")
def mlp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    a, _ = dump_pair(tmp_path_factory.mktemp("rows"))
    return a


def test_a_fresh_dump_verifies_without_a_note(mlp: Path, capsys, monkeypatch) -> None:
    result = cli_runner(capsys, monkeypatch)("verify", "--deep", mlp)
    assert result.code == 0, result.out + result.err
    assert "note:" not in result.out, result.out
    assert result.out.splitlines()[-1].startswith("ok: 1 window(s) checked")


def test_a_coordinate_chunk_from_another_task_is_a_problem(mlp: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    root = tmp_path / "moved"
    shutil.copytree(mlp, root)
    stage = root / STAGE
    shutil.copyfile(stage / "task_000000" / "token" / "c.0", stage / "task_000003" / "token" / "c.0")
    result = cli_runner(capsys, monkeypatch)("verify", root)
    assert result.code == 1, result.out + result.err
    assert f"{STAGE}/task_000003/token" in result.out
    assert "chunk has digest" in result.out and "the window inventory records" in result.out  # moved in
    assert "row coordinate holds rows [0, 1, 2, 3]... but its record input_00_x starts at row 24" in result.out
