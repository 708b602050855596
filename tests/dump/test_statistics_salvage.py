"""A failed or hung statistics-first launch: what its buffer captured is kept as statistics, never
misread as payloads (on_error="keep" and `decode-buffer`'s salvage_window)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from megadump_zarr import DiagnosticAction, TensorDumpConfig, open_dump, tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from megadump_zarr.dump.l1_plan import L1RecordPlan, PreparedL1Dump
from megadump_zarr.dump.saved_plans import plan_document, salvage_window
from megadump_zarr.dump.statistics_slots import layout_records
from megadump_zarr.dump.window import DumpInvocation
from megadump_zarr.l1 import L1_DUMP_PAYLOAD_BASE, L1_DUMP_RECORD_SIZE, L1_DUMP_RECORDS_OFFSET, pack_l1_buffer
from megadump_zarr.runtime.executor import DeviceWorker
from megadump_zarr.verify import verify_dump
from tests._faults import fail_once_for_owner


def _fail_expert_down_for_owner(block, owner):
    fail_once_for_owner(block.expert_kernel, "expert_down", owner)


def test_a_failed_statistics_launch_keeps_its_captured_statistics(tmp_path):
    block = MoEBlock(DemoConfig())
    config = TensorDumpConfig(
        tmp_path,
        level="L1",
        kernel_names="moe_experts",
        stages=("expert_up", "expert_down"),
        on_error="keep",
        mode="statistics",
    )
    with tensor_dump(config, schedule=lambda step: DiagnosticAction.RECORD) as dumper:
        _fail_expert_down_for_owner(block, 2)
        with pytest.raises(RuntimeError, match="simulated hang"):
            block(block.make_input())
        block(block.make_input())
        dumper.step()
    records = open_dump(tmp_path).records()
    failed, whole = records[records["invocation"] == 0], records[records["invocation"] == 1]
    assert not records["payload"].any() and len(whole) == 32
    # expert_up of every expert and expert_down of experts 0 and 1 finished before the hang
    assert set(failed.loc[failed["stage"] == "expert_up", "owner_id"]) == {0, 1, 2, 3}
    assert set(failed.loc[failed["stage"] == "expert_down", "owner_id"]) == {0, 1, 2}
    assert len(failed[(failed["stage"] == "expert_down") & (failed["owner_id"] == 2)]) == 3  # its inputs only
    assert failed["max"].notna().all()
    # salvaged from the failed launch: flagged partial like its arrays would be (QA1 R8), the clean launch not
    assert failed["partial"].all() and len(failed) == 27 and not whole["partial"].any()
    report = verify_dump(open_dump(tmp_path))
    (check,) = report.windows
    assert report.ok and check.partial_launches == ("invocation_000000_forward",) and check.partial_records == 27


def test_salvage_window_reads_statistics_slots_as_statistics():
    plans = tuple(
        L1RecordPlan(
            task_id=i // 2,
            task_index=i // 2,
            stage="s",
            owner_id=None,
            owner_label="",
            core_type="AIV",
            core_id=0,
            io="input" if i % 2 == 0 else "output",
            index=0,
            phase="before" if i % 2 == 0 else "after",
            parameter_position=i % 2,
            tensor_name="x" if i % 2 == 0 else "y",
            dtype=torch.float32,
            source_offset_bytes=(i // 2) * 64,
            actual_shape=(4, 4),
            payload_offset=0,
            payload_bytes=64,
            full_bytes=64,
            truncated=False,
            note="",
            record_offset=L1_DUMP_RECORDS_OFFSET + i * L1_DUMP_RECORD_SIZE,
            dims=("r", "c"),
            declared_shape=(8, 4),
        )
        for i in range(4)
    )
    plans = layout_records(plans, SimpleNamespace(mode="statistics", on_budget="error", device_memory_budget_mb=1))
    assert [p.payload_offset for p in plans] == [L1_DUMP_PAYLOAD_BASE + 128 * i for i in range(4)]
    params = [torch.arange(32, dtype=torch.float32), -torch.arange(32, dtype=torch.float32)]
    buffer = torch.frombuffer(pack_l1_buffer([p.entry for p in plans]), dtype=torch.uint8).clone()
    worker = DeviceWorker(buffer, params)
    worker.capture(0, 1, None)
    worker.capture(0, 2, None)  # task 1 never ran: a hung launch
    prepared = PreparedL1Dump(None, buffer, plans, buffer.numel())
    document = plan_document(prepared, DumpInvocation(0, 0, "k", "forward", 0, "cpu", "L1"), 0)
    # staged but not yet reduced when it hung: read as not captured (pending), never as statistics
    _, staged_only = salvage_window(bytes(buffer.numpy()), document)
    assert [p["record"] for p in staged_only] == [0, 1, 2, 3]
    worker.flush()  # what execute() does when a task fails: the staged records are reduced
    window, pending = salvage_window(bytes(buffer.numpy()), document)
    assert [p["record"] for p in pending] == [2, 3]
    (invocation,) = window.invocations
    assert invocation.arrays == [] and invocation.statistics is not None
    table = invocation.statistics
    assert list(table.coords["name"]) == ["x", "y"] and list(table.variables["max"]) == [15.0, -0.0]
    assert list(table.variables["min"]) == [0.0, -15.0]
