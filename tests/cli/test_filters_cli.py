"""Filters everywhere: every record filter on ls, show, stats, compare and plot; a filter matching
nothing exits 1 and lists the values that exist; tensor names holding '/' select themselves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from megadump_zarr import TensorDumpConfig, tensor_dump
from megadump_zarr.read import open_dump
from megadump_zarr.runtime import Graph, MegaKernel, OperatorNode, SplitSpec, TensorSpec
from tests.cli._helpers import assert_input_error

# The one expert_up output of expert 1 in invocation 0: every filter at once picks exactly it.
EVERY_FILTER = (
    "--rank",
    "0",
    "--window",
    "0",
    "--invocation",
    "0",
    "--kernel",
    "moe_experts",
    "--direction",
    "forward",
    "--stage",
    "expert_up",
    "--task",
    "1",
    "--owner",
    "1",
    "--core",
    "MIX1",
    "--core-type",
    "mix",
    "--io",
    "output",
)


def _expected(demo) -> Any:
    records = open_dump(demo.roots["L1"]).records()
    row = records[
        (records["invocation"] == 0)
        & (records["stage"] == "expert_up")
        & (records["owner_id"] == 1)
        & (records["io"] == "output")
    ]
    assert len(row) == 1
    return row.iloc[0]


@pytest.mark.parametrize("command", ["ls", "stats", "compare", "show", "plot"])
def test_every_filter_on_every_command(cli, demo, tmp_path, command):
    row = _expected(demo)
    root = demo.roots["L1"]
    args: dict[str, list[Any]] = {
        "ls": ["ls", root, "--name", "ws", "--json"],
        "stats": ["stats", root, "--name", "ws", "--json"],
        "compare": ["compare", root, root, "--name", "ws", "--json"],
        "show": ["show", root, "ws", "--json"],
        "plot": ["plot", root, "ws", "-o", tmp_path / "ws.png", "--json"],
    }
    result = cli(*args[command], *EVERY_FILTER)
    assert result.code == 0, result.err
    report = result.json()
    if command in ("ls", "stats"):
        assert [r["path"] for r in report] == [row["path"]]
    elif command == "compare":
        assert [r["path"] for r in report["results"]] == [row["path"]] and report["verdict"] == "pass"
    else:
        assert report["path"] == row["path"]


@pytest.mark.parametrize("command", ["ls", "stats", "compare", "show", "plot"])
def test_a_filter_matching_nothing_lists_what_exists(cli, demo, tmp_path, command):
    root = demo.roots["L1"]
    args = {
        "ls": ["ls", root],
        "stats": ["stats", root],
        "compare": ["compare", root, root],
        "show": ["show", root, "ws"],
        "plot": ["plot", root, "ws", "-o", tmp_path / "x.png"],
    }[command]
    result = cli(*args, "--stage", "expert_up", "--owner", "9")
    assert result.code == 2, (result.out, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.err
    assert lines[0].startswith("error: no records with owner 9 among those with stage 'expert_up'; owners there: 0, 1")
    assert not (tmp_path / "x.png").exists()
    core = cli(*args, "--core", "AIV3")
    assert core.code == 2 and "no records with core AIV3; cores: AIC0, AIC1, MIX0, MIX1" in core.err


def test_filters_on_l0_say_l0_has_no_owner(cli, demo):
    result = cli("ls", demo.roots["L0"], "--owner", "0")
    assert result.code == 2 and "they have no owner (L0 records have no stage, task, owner, core or io)" in result.err


def test_bad_core_is_a_usage_error(cli, demo):
    assert_input_error(cli("ls", demo.roots["L1"], "--core", "5MIX"), "--core", "expected a core id")


def test_show_owner_and_core_stitch_that_owners_rows(cli, demo):
    dump = open_dump(demo.roots["L1"])
    whole = dump.tensor("xs", stage="expert_up", invocation=2)
    for flags in (["--owner", "1"], ["--core", "MIX1"]):
        info = cli(
            "show",
            demo.roots["L1"],
            "xs",
            "--stage",
            "expert_up",
            "--invocation",
            "2",
            *flags,
            "--json",
            "--head",
            "1000",
        ).json()
        expected = whole.sel(owner_id=1)
        assert info["shape"] == list(expected.shape)
        np.testing.assert_allclose(info["head"], np.asarray(expected.values, dtype=np.float64).reshape(-1))


# ------------------------------------------------------------------------------------------ names with '/'
SLASHED = ("layer.0/x", "layer.0/h", "layer.0/y")


def _dump_slashed(root: Path, level: str) -> None:
    specs = [TensorSpec(name, (6, 4), torch.float32, i, ("row", "col")) for i, name in enumerate(SLASHED)]
    operators = []
    for i, stage in enumerate(("block/up", "block/down")):

        def fn(t: Any, i: int = i) -> None:
            t.params[i + 1][t.rows] = t.params[i][t.rows] * 2 + i

        operators.append(OperatorNode(stage, "vector", (specs[i],), (specs[i + 1],), fn, SplitSpec(((0, 0),), (0,)), 3))
    kernel = MegaKernel(Graph(operators), name="slashed", num_workers=2)
    params = [torch.arange(24, dtype=torch.float32).reshape(6, 4), torch.zeros(6, 4), torch.zeros(6, 4)]
    extra = {} if level == "L0" else {"stages": ("block/up", "block/down")}
    with tensor_dump(TensorDumpConfig(root, level=level, **extra)) as dumper:
        kernel.launch(params)
        dumper.step()


@pytest.fixture(scope="module")
def slashed(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("slashed")
    roots = {level: base / level for level in ("L0", "L1")}
    for level, root in roots.items():
        _dump_slashed(root, level)
    return roots


def test_a_name_with_a_slash_selects_itself_in_show_and_plot(cli, slashed, tmp_path):
    x = np.arange(24, dtype=np.float64).reshape(6, 4)
    h = x * 2
    info = cli("show", slashed["L0"], "layer.0/h", "--json", "--head", "24")
    assert info.code == 0, info.err
    assert info.json()["name"] == "layer.0/h"
    np.testing.assert_array_equal(info.json()["head"], h.reshape(-1))
    stitched = cli("show", slashed["L1"], "layer.0/h", "--stage", "block/up", "--json", "--head", "24").json()
    assert stitched["name"] == "layer.0/h" and stitched["shape"] == [6, 4] and len(stitched["paths"]) == 2
    np.testing.assert_array_equal(stitched["head"], h.reshape(-1))
    by_name = cli("show", slashed["L1"], "--name", "layer.0/y", "--json", "--head", "24").json()
    np.testing.assert_array_equal(by_name["head"], (h * 2 + 1).reshape(-1))
    out = tmp_path / "h.png"
    plotted = cli("plot", slashed["L0"], "layer.0/h", "-o", out, "--json")
    assert plotted.code == 0, plotted.err
    assert plotted.json()["name"] == "layer.0/h" and out.stat().st_size > 1000
    listed = cli("ls", slashed["L1"], "--name", "layer.0/h", "--stage", "block/up", "--json").json()
    assert {r["name"] for r in listed} == {"layer.0/h"} and {r["io"] for r in listed} == {"output"}
    assert_input_error(
        cli("show", slashed["L0"], "layer.0/nope"),
        "no tensor named 'layer.0/nope'",
        "neither a tensor name nor a record path",
        "layer.0/h",
    )
