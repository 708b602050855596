"""Issue 12.11: with ``on_error="keep"`` a window holding a failed launch's salvaged records says so:
window attribute ``partialLaunches``, record attribute ``partial: true``, records() column ``partial``."""

from __future__ import annotations

import pytest

from megadump_zarr import DiagnosticAction, TensorDumpConfig, open_dump, tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from tests.dump._dump_helpers import node_attrs
from tests._faults import fail_once_for_owner


def _config(root, **kw):
    return TensorDumpConfig(
        root, level="L1", kernel_names="moe_experts", stages=("expert_up", "expert_down"), on_error="keep", **kw
    )


def _fail_expert_down_for_owner(block, owner):
    fail_once_for_owner(block.expert_kernel, "expert_down", owner)


def test_a_kept_failed_launch_is_marked_in_the_window_and_its_records(tmp_path):
    block = MoEBlock(DemoConfig())
    with tensor_dump(_config(tmp_path), schedule=lambda step: DiagnosticAction.RECORD) as dumper:
        _fail_expert_down_for_owner(block, 2)
        with pytest.raises(RuntimeError, match="simulated hang"):
            block(block.make_input())  # invocation 0 fails; the user logs it and goes on
        block(block.make_input())  # invocation 1 is whole
        dumper.step()
    window = tmp_path / "rank_0" / "window_0000"
    attrs = node_attrs(window)
    assert attrs["status"] == "complete"
    assert attrs["partialLaunches"] == ["invocation_000000_forward"]
    assert attrs["invocations"] == ["invocation_000000_forward", "invocation_000001_forward"]
    assert node_attrs(window / "invocation_000000_forward")["launchFailed"] is True
    records = open_dump(tmp_path).records()
    by_invocation = records.groupby("invocation")["partial"].agg(["all", "any", "size"])
    assert bool(by_invocation.loc[0, "all"]) and not bool(by_invocation.loc[1, "any"])
    assert by_invocation.loc[0, "size"] > 0
    first = records[records["invocation"] == 0].iloc[0]
    assert node_attrs(tmp_path / first["path"])["partial"] is True
    clean = records[records["invocation"] == 1].iloc[0]
    assert "partial" not in node_attrs(tmp_path / clean["path"])


def test_a_window_without_failed_launches_lists_none(tmp_path):
    block = MoEBlock(DemoConfig())
    with tensor_dump(_config(tmp_path)):
        block(block.make_input())
    assert node_attrs(tmp_path / "rank_0" / "window_0000")["partialLaunches"] == []
    assert not open_dump(tmp_path).records()["partial"].any()


def test_an_aborted_window_at_exit_marks_its_partial_launch(tmp_path):
    block = MoEBlock(DemoConfig())
    _fail_expert_down_for_owner(block, 1)
    with pytest.raises(RuntimeError, match="simulated hang"):
        with tensor_dump(_config(tmp_path)):
            block(block.make_input())
    attrs = node_attrs(tmp_path / "rank_0" / "window_0000")
    assert attrs["status"] == "aborted" and attrs["partialLaunches"] == ["invocation_000000_forward"]
    records = open_dump(tmp_path).records(include_incomplete=True)
    assert len(records) > 0 and records["partial"].all()
