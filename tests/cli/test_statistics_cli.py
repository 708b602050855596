"""``megadump ls``, ``stats``, ``info`` and ``compare`` on statistics-first dumps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from megadump_zarr import TensorDumpConfig, tensor_dump
from megadump_zarr.demo.model import MoEBlock


def run(out: Path, mode: str, *, poison=None) -> Path:
    block = MoEBlock()
    if poison is not None:
        poison(block)
    cfg = TensorDumpConfig(out, level="L1", kernel_names="moe_experts", stages="expert_up", io="output", mode=mode)
    with tensor_dump(cfg) as dumper:
        block(block.make_input())
        dumper.step()
    return out


def nan_in_expert_2(block: MoEBlock) -> None:
    block.w_up[2, 0, 0] = float("nan")


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp("statistics_cli")
    return {
        "stats": run(base / "stats", "statistics"),
        "nonfinite": run(base / "nf", "nonfinite", poison=nan_in_expert_2),
    }


def test_ls_marks_statistics_only_records(cli, roots):
    only = cli("ls", roots["stats"])
    assert only.code == 0 and "stored stats only" in only.out  # every row: hoisted above the table
    mixed = cli("ls", roots["nonfinite"])
    lines = [line for line in mixed.out.splitlines() if "out[0]" in line]
    assert len(lines) == 4 and sum("stats only" in line for line in lines) == 3
    # the one record holding its tensor (task 2) prints the line that opens it, in its row or below the table
    (opens,) = [line for line in mixed.out.splitlines() if "xr.open_zarr" in line]
    assert "task_000002" in opens and "stats only" not in opens
    rows = json.loads(cli("ls", roots["nonfinite"], "--json").out)
    assert [r["payload"] for r in rows] == [False, False, True, False]
    assert all(isinstance(r["digest"], int) for r in rows)


def test_stats_shows_statistics_only_records(cli, roots):
    result = cli("stats", roots["stats"], "--json")
    assert result.code == 0
    rows = json.loads(result.out)
    assert len(rows) == 4 and all(r["max"] is not None for r in rows)
    nonfinite = cli("stats", roots["nonfinite"], "--nonfinite", "--json")
    assert [r["owner_id"] for r in json.loads(nonfinite.out)] == [2]


def test_info_counts_statistics_only_records(cli, roots):
    result = cli("info", roots["nonfinite"])
    assert result.code == 0 and "4 records, 4 tasks, 3 statistics only" in result.out


def test_compare_of_statistics_dumps_exits_by_verdict(cli, roots, tmp_path):
    same = cli("compare", roots["stats"], run(tmp_path / "again", "statistics"))
    assert same.code == 0
    differs = cli("compare", roots["stats"], roots["nonfinite"])
    assert differs.code == 1 and "NaN/Inf counts differ" in differs.out
