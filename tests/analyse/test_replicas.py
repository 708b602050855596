"""Replicas across ranks (analyse.replicas, ``megadump watch --replicas``): two ranks of the demo block hold
the same weights until rank 1's expert-0 weight drifts at a known step; the first rank and step that differ are
named, by the device statistics and checksums, and records not named as replicas are never compared."""

from __future__ import annotations

import json

import pytest
import torch

from megadump_zarr import RecorderConfig, TensorDumpConfig, open_dump, tensor_dump
from megadump_zarr.analyse.replicas import replica_divergence
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from tests.cli._helpers import cli_runner

DRIFT_STEP = 3
DEMO = DemoConfig(tokens=16, d_model=8, n_experts=4, tile_rows=8, num_workers=4)


def _run(root, steps=6, **fields):
    torch.set_num_threads(1)
    blocks = [MoEBlock(DEMO, rank=rank) for rank in (0, 1)]
    x0 = blocks[0].make_input()
    config = TensorDumpConfig(root, level="L1", kernel_names="moe_experts", stages=["expert_up"], durable=False,
                              **fields)  # fmt: skip
    with tensor_dump(config) as dumper:
        for step in range(steps):
            if step == DRIFT_STEP:
                blocks[1].w_up[0, 0, 0] += 1e-3  # rank 1's replica of expert 0's weight drifts
            for block in blocks:
                block(x0)
            dumper.step()


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    root = tmp_path_factory.mktemp("replicas") / "stats"
    _run(root, mode="statistics")
    return root


def test_the_first_rank_and_step_that_diverge_are_named(two_ranks):
    found = replica_divergence(open_dump(two_ranks), "w_up")
    assert found is not None
    assert (found.rank, found.reference_rank, found.step) == (1, 0, DRIFT_STEP)
    assert (found.row["name"], found.row["stage"], found.row["io"]) == ("w_up", "expert_up", "input")
    assert found.differs == ("digest", "mean", "l2norm")  # one element moved: not the max, not the min
    # the activations differ too from that step, but only the named replicas are compared
    assert replica_divergence(open_dump(two_ranks), ["x*", "counts"]) is None


def test_watch_replicas_names_the_divergence(two_ranks, capsys, monkeypatch):
    run = cli_runner(capsys, monkeypatch)
    result = run("watch", two_ranks, "--once", "--json", "--replicas", "w_up")
    assert result.code == 1
    anomalies = [json.loads(line) for line in result.out.splitlines() if '"anomaly"' in line]
    assert [(a["kind"], a["rank"], a["step"], a["record"], a["stage"]) for a in anomalies] == [
        ("replica", 1, DRIFT_STEP, "w_up", "expert_up")
    ]
    assert "differs from rank 0 at step 3" in anomalies[0]["detail"]
    assert run("watch", two_ranks, "--once", "--json").code == 0  # no replicas named: no anomaly


def test_replicas_marked_in_the_recorder_config_are_checked_by_watch(tmp_path, capsys, monkeypatch):
    recorder = RecorderConfig(
        ring_steps=5, nonfinite=False, norm_k=None, predicate=lambda row: row["step"] == 5, replicas="w_up"
    )
    _run(tmp_path / "recorded", recorder=recorder)
    run = cli_runner(capsys, monkeypatch)
    result = run("watch", tmp_path / "recorded", "--once", "--json")
    anomalies = [json.loads(line) for line in result.out.splitlines() if '"anomaly"' in line]
    replica = [(a["rank"], a["step"], a["record"]) for a in anomalies if a["kind"] == "replica"]
    assert result.code == 1 and replica == [(1, DRIFT_STEP, "w_up")]
