"""``megadump replay``: exit 1 for a task wrong on its own inputs, 0 for a clean one, 2 for bad selectors;
``--json``; demo dumps need no reference; ``--reference module:attr``."""

from __future__ import annotations

import pytest
import torch

from megadump_zarr import TensorDumpConfig, tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from megadump_zarr.runtime import Graph, MegaKernel, OperatorNode, SplitSpec, TensorSpec
from tests._faults import inject_fault
from tests.cli._helpers import assert_input_error


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    root = tmp_path_factory.mktemp("faulty")
    block = MoEBlock(DemoConfig(tokens=24))
    with inject_fault(block.expert_kernel, "expert_up", owner=2, delta=0.25):
        with tensor_dump(
            TensorDumpConfig(root, level="L1", kernel_names="moe_experts", stages=("expert_up", "combine"))
        ):
            block(block.make_input())
    return root


def test_replay_json_and_exit_codes(cli, faulty):
    result = cli("replay", faulty, "--stage", "expert_up", "--owner", "2", "--json")
    assert result.code == 1, result.err
    document = result.json()
    assert document["verdict"] == "wrong on its own inputs" and document["owner_id"] == 2
    (output,) = document["outputs"]
    assert output["name"] == "ws" and output["verdict"] == "fail"
    assert output["max_abs"] == pytest.approx(0.25, abs=1e-6) and output["cosine"] < 1
    assert set(output) >= {"name", "verdict", "max_abs", "max_rel", "cosine"}
    clean = cli("replay", faulty, "--stage", "expert_up", "--owner", "1", "--json")
    assert clean.code == 0 and clean.json()["verdict"] == "correct on its inputs"


def test_replay_human_output(cli, faulty):
    result = cli("replay", faulty, "--stage", "expert_up", "--owner", "2")
    assert result.code == 1
    assert "replayed moe_experts stage expert_up task 2 (owner 2), rank 0 window 0 invocation 0" in result.out
    assert "fail ws core 2 [float32]  vs float32: max_abs 0.25" in result.out
    assert (
        "reference megadump_zarr.demo.MoEBlock(tokens=24, d_model=16, n_experts=4, tile_rows=8, dtype=float32)"
        in result.out
    )
    assert result.out.rstrip().endswith("task 2 is wrong on its own inputs: the task is the culprit")
    result = cli("replay", faulty, "--stage", "combine", "--task", "12")
    assert result.code == 0 and "is correct on its inputs: look upstream" in result.out


def test_replay_bad_selectors_exit_2_listing_what_exists(cli, faulty):
    assert_input_error(
        cli("replay", faulty, "--stage", "bogus", "--task", "1"),
        "no stage 'bogus' in the dump; stages: combine, expert_up",
    )
    assert_input_error(cli("replay", faulty, "--stage", "expert_up", "--owner", "7"), "owners: 0, 1, 2, 3")
    assert_input_error(
        cli("replay", faulty, "--stage", "combine", "--task", "1", "--invocation", "3"), "invocations: 0"
    )
    assert_input_error(
        cli("replay", faulty, "--stage", "combine", "--task", "12", "--reference", "nowhere:fn"),
        "cannot import 'nowhere'",
    )
    assert_input_error(
        cli("replay", faulty, "--stage", "combine", "--task", "12", "--rtol", "nan"),
        "rtol must be a finite number >= 0",
    )
    result = cli("replay", faulty, "--stage", "combine")  # neither --task nor --owner: argparse usage error
    assert result.code == 2 and "one of the arguments --task --owner is required" in result.err


def test_a_megadump_demo_dump_replays_without_arguments(cli, tmp_path):
    out = tmp_path / "demo"
    assert cli("demo", "--out", out, "--steps", "1").code == 0
    result = cli("replay", out / "l1", "--stage", "expert_up", "--owner", "0", "--json")
    assert result.code == 0, result.err
    assert result.json()["verdict"] == "correct on its inputs"


def test_replay_with_a_user_reference(cli, tmp_path):
    a = torch.arange(32, dtype=torch.float32).reshape(8, 4)
    from megadump_zarr.runtime import Graph, MegaKernel, OperatorNode, SplitSpec, TensorSpec

    specs = (TensorSpec("a", (8, 4), torch.float32, 0), TensorSpec("b", (8, 4), torch.float32, 1))

    def triple(tile):  # the kernel under test triples; the golden doubles
        tile.params[1][tile.rows] = tile.params[0][tile.rows] * 3

    kernel = MegaKernel(
        Graph([OperatorNode("double", "vector", specs[:1], specs[1:], triple, SplitSpec(((0, 0),), (0,)), 4)]),
        name="tiny",
    )
    with tensor_dump(TensorDumpConfig(tmp_path, level="L1", stages="double")):
        kernel.launch([a, torch.zeros(8, 4)])
    assert_input_error(cli("replay", tmp_path, "--stage", "double", "--task", "0"), "no reference for kernel 'tiny'")
    result = cli(
        "replay", tmp_path, "--stage", "double", "--task", "0", "--reference", "tests.replay.test_replay:double"
    )
    assert result.code == 1 and "wrong on its own inputs" in result.out


def test_reference_module_in_the_current_directory_and_lines_never_wrap(capsys, monkeypatch, tmp_path):
    """`megadump replay --reference mygolden:fn` finds ./mygolden.py (a console script has no cwd on sys.path);
    the summary line holding the reference is one line even on an 80-column console."""
    import os
    import sys

    from tests.cli._helpers import cli_runner

    dump, here = tmp_path / "dump", tmp_path / "here"
    here.mkdir()
    (here / "qa1_golden_double.py").write_text(
        "def double(tile):\n    tile.params[1][tile.rows] = tile.params[0][tile.rows] * 2\n"
    )
    specs = (TensorSpec("a", (8, 4), torch.float32, 0), TensorSpec("b", (8, 4), torch.float32, 1))

    def double(tile):
        tile.params[1][tile.rows] = tile.params[0][tile.rows] * 2

    kernel = MegaKernel(
        Graph([OperatorNode("double", "vector", specs[:1], specs[1:], double, SplitSpec(((0, 0),), (0,)), 4)]),
        name="a_kernel_with_a_rather_long_name_for_an_eighty_column_console",
    )
    with tensor_dump(TensorDumpConfig(dump, level="L1", stages="double")):
        kernel.launch([torch.arange(32, dtype=torch.float32).reshape(8, 4), torch.zeros(8, 4)])
    monkeypatch.chdir(here)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", os.getcwd())])
    monkeypatch.delitem(sys.modules, "qa1_golden_double", raising=False)
    cli = cli_runner(capsys, monkeypatch, columns=80)
    result = cli("replay", dump, "--stage", "double", "--task", "1", "--reference", "qa1_golden_double:double")
    sys.modules.pop("qa1_golden_double", None)
    assert result.code == 0, result.err
    assert (
        "replayed a_kernel_with_a_rather_long_name_for_an_eighty_column_console stage double task 1, rank 0 "
        "window 0 invocation 0, reference qa1_golden_double:double\n"
    ) in result.out
