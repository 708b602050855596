"""Statistics as TensorBoard scalars (interop.tensorboard): ``megadump export-tensorboard`` and
``megadump watch --tensorboard`` write event files that TensorBoard's own reader (EventAccumulator) reads back
with the stored values, one tag per stage/owner-or-core/record/statistic and the records' steps."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from megadump_zarr import TensorDumpConfig, open_dump, tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from megadump_zarr.dump.recorder_config import RecorderConfig
from tests.cli._helpers import cli_runner

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("tb") / "run"
    block = MoEBlock(DemoConfig(tokens=16, d_model=8, n_experts=4, tile_rows=8, num_workers=4))
    x0 = block.make_input()
    recorder = RecorderConfig(ring_steps=3, nonfinite=False, norm_k=None, predicate=lambda row: row["step"] == 9)
    config = TensorDumpConfig(
        root, level="L1", kernel_names="moe_experts", stages=["expert_up", "expert_down", "combine"],
        recorder=recorder, durable=False,
    )  # fmt: skip
    with tensor_dump(config) as dumper:
        for step in range(10):
            block(x0 * (1.0 + 0.1 * step))
            dumper.step()
    return root


def _scalars(folder):
    accumulator = event_accumulator.EventAccumulator(str(folder), size_guidance={event_accumulator.SCALARS: 0})
    accumulator.Reload()
    return {tag: {e.step: e.value for e in accumulator.Scalars(tag)} for tag in accumulator.Tags()["scalars"]}


def _check(scalars, records):
    experts = records[records["stage"].isin(["expert_up", "expert_down"])]
    assert len(experts) > 0
    for _, row in experts.iterrows():  # one task per owner: the tag's value is the record's own statistic
        tag = f"{row['stage']}/owner_{int(row['owner_id'])}/{row['io']}_{int(row['index']):02d}_{row['name']}"
        assert scalars[f"{tag}/l2norm"][int(row["step"])] == np.float32(row["l2norm"])
        assert scalars[f"{tag}/max"][int(row["step"])] == np.float32(row["max"])
        assert scalars[f"{tag}/nan_count"][int(row["step"])] == 0
    assert {step for values in scalars.values() for step in values} == {6, 7, 8, 9}
    combine = [tag for tag in scalars if tag.startswith("combine/")]
    assert combine and all(tag.split("/")[1][:3] in ("AIV", "AIC", "MIX") for tag in combine)  # by core


def test_export_tensorboard_writes_scalars_tensorboard_reads(recorded, tmp_path, capsys, monkeypatch):
    run = cli_runner(capsys, monkeypatch)
    out = tmp_path / "tb"
    result = run("export-tensorboard", recorded, out, "--json")
    assert result.code == 0, result.err
    scalars = _scalars(out / "rank_0")
    assert result.json() == {"out": str(out), "scalars": sum(len(v) for v in scalars.values())}
    _check(scalars, open_dump(recorded).records())


def test_watch_tensorboard_writes_the_same_scalars(recorded, tmp_path, capsys, monkeypatch):
    run = cli_runner(capsys, monkeypatch)
    result = run("watch", recorded, "--once", "--quiet", "--tensorboard", tmp_path / "live")
    assert result.code == 1, result.err  # the predicate that fired is named as the anomaly
    assert result.out.startswith("anomaly predicate: rank 0, step 9, stage expert_up")
    _check(_scalars(tmp_path / "live" / "rank_0"), open_dump(recorded).records())
