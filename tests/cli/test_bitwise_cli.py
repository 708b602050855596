"""``megadump compare --bitwise [--by task|core]`` and ``--format msprobe-csv`` on real demo dumps."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from megadump_zarr import TensorDumpConfig, tensor_dump
from megadump_zarr.cli.msprobe_csv import MEGADUMP_COLUMNS, MSPROBE_COLUMNS
from megadump_zarr.demo.model import MoEBlock
from megadump_zarr.demo.run import run_demo
from megadump_zarr.runtime import AccumulationOrder
from tests.cli._helpers import assert_input_error

STEPS = 4


def run(out: Path, seed: int | None, mode: str = "statistics") -> Path:
    """``STEPS`` training steps of the demo block; expert_up and expert_down (forward) outputs at L1."""
    block = MoEBlock(accumulation_order=None if seed is None else AccumulationOrder(("expert_down",), seed=seed))
    cfg = TensorDumpConfig(
        out, level="L1", kernel_names="moe_experts", stages=("expert_up", "expert_down"), io="output", mode=mode
    )
    with tensor_dump(cfg) as dumper:
        for _ in range(STEPS):
            x = block.make_input().requires_grad_()
            block(x).float().pow(2).mean().backward()
            dumper.step()
    return out


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    base = tmp_path_factory.mktemp("bitwise_cli")
    return {
        "plain": run(base / "plain", None),
        "plain2": run(base / "plain2", None),
        "seed0": run(base / "seed0", 0),
        "seed1": run(base / "seed1", 1),
    }


def test_runs_without_the_option_pass_bitwise(cli, roots):
    result = cli("compare", roots["plain"], roots["plain2"], "--bitwise")
    assert result.code == 0, result.out
    assert f"PASS: all {2 * 4 * STEPS} records bitwise identical" in result.out


def test_by_core_names_the_cores_of_the_stage_and_the_steps(cli, roots):
    result = cli("compare", roots["seed0"], roots["seed1"], "--bitwise", "--by", "core", "--json")
    assert result.code == 1
    document = json.loads(result.out)
    assert document["bitwise"] is True and document["by"] == "core"
    assert document["counts"]["fail"] == 4 * STEPS and document["counts"]["pass"] == 4 * STEPS
    rows = document["error_map"]
    bad = [r for r in rows if r["differing"]]
    assert [(r["stage"], r["core_type"], r["core_id"]) for r in bad] == [("expert_down", "AIC", c) for c in range(4)]
    assert {r["steps"] for r in bad} == {f"0-{STEPS - 1}"} and {r["differing"] for r in bad} == {STEPS}
    assert {r["stage"] for r in rows if not r["differing"]} == {"expert_up"}
    assert document["root_cause"]["stage"] == "expert_down"
    assert document["first_divergence"]["note"].startswith("bitwise: statistics only in a and b; digest differs (0x")


def test_by_task_table_lists_the_tasks(cli, roots):
    result = cli("compare", roots["seed0"], roots["seed1"], "--bitwise", "--by", "task")
    assert result.code == 1
    lines = [line for line in result.out.splitlines() if "expert_down" in line and "0-3" in line]
    assert len(lines) == 4, result.out
    assert f"FAIL: {4 * STEPS} fail, {4 * STEPS} pass of {8 * STEPS} compared (bitwise)" in result.out
    assert "root cause: ys (fail)" in result.out


def test_without_bitwise_the_two_runs_pass(cli, roots):
    """The last-bit differences are within tolerance: only --bitwise tells the two runs apart."""
    result = cli("compare", roots["seed0"], roots["seed1"], "--accept-within-stats")
    assert result.code == 0, result.out


def test_bitwise_refuses_tolerances(cli, roots):
    assert_input_error(
        cli("compare", roots["plain"], roots["plain2"], "--bitwise", "--rtol", "1e-3"),
        "--bitwise compares bits: --rtol do not apply, leave them out",
    )
    assert_input_error(
        cli("compare", roots["plain"], roots["plain2"], "--bitwise", "--accept-within-stats"),
        "--accept-within-stats does not apply",
    )


def test_help_documents_bitwise(cli):
    result = cli("compare", "--help")
    assert result.code == 0
    assert "--bitwise" in result.out and "--bitwise rules (a determinism check" in result.out
    assert "--format {table,msprobe-csv}" in result.out


@pytest.fixture(scope="module")
def demo_pair(tmp_path_factory):
    base = tmp_path_factory.mktemp("msprobe_csv")
    return run_demo(base / "a", steps=2).roots["L1"], run_demo(base / "b", steps=2).roots["L1"]


def test_format_msprobe_csv_on_stdout_reads_with_pandas(cli, demo_pair, tmp_path):
    a, b = demo_pair
    result = cli("compare", a, b, "--format", "msprobe-csv")
    assert result.code == 0, result.err
    frame = pd.read_csv(io.StringIO(result.out))
    assert list(frame.columns) == [*MSPROBE_COLUMNS, *MEGADUMP_COLUMNS]
    assert len(frame) > 0 and set(frame["Result"]) == {"pass"} and set(frame["megadump verdict"]) == {"pass"}
    assert "PASS: all" in result.err  # the summary is on stderr, stdout is the CSV only
    alias = tmp_path / "alias.csv"
    assert cli("compare", a, b, "-q", "--csv-msprobe", alias).code == 0
    assert pd.read_csv(alias).equals(frame)
    out = tmp_path / "out.csv"
    to_file = cli("compare", a, b, "--format", "msprobe-csv", "-o", out)
    assert to_file.code == 0 and to_file.out.startswith("PASS: all ") and len(to_file.out.splitlines()) == 1
    assert pd.read_csv(out).equals(frame)
    assert_input_error(
        cli("compare", a, b, "--format", "msprobe-csv", "-o", out),
        f"--output: {out} already exists (refusing to overwrite it)",
    )


def test_format_msprobe_csv_with_bitwise_fails_the_differing_records(cli, roots):
    result = cli("compare", roots["seed0"], roots["seed1"], "--bitwise", "--format", "msprobe-csv")
    assert result.code == 1
    frame = pd.read_csv(io.StringIO(result.out))
    down = frame[frame["megadump note"].str.contains("digest differs")]
    assert len(down) == 4 * STEPS and set(down["Result"]) == {"error"} and set(down["megadump verdict"]) == {"fail"}


def test_output_flags_are_checked(cli, demo_pair, tmp_path):
    a, b = demo_pair
    assert_input_error(cli("compare", a, b, "-o", tmp_path / "x.csv"), "--output FILE goes with --format msprobe-csv")
    assert_input_error(
        cli("compare", a, b, "--format", "msprobe-csv", "--json"),
        "--format msprobe-csv and --json both write to stdout",
    )
    assert not (tmp_path / "x.csv").exists()


def test_bitwise_on_tensor_dumps_of_the_demo(cli, demo_pair):
    a, b = demo_pair
    result = cli("compare", a, b, "--bitwise", "--json")
    assert result.code == 0
    document = json.loads(result.out)
    assert {r["note"] for r in document["results"]} == {
        f"bitwise: bytes equal ({r['elements']} elements)" for r in document["results"]
    }
    assert torch.__version__  # the demo ran on this torch: same bits run to run
