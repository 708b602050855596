"""Decoding the L1 Device buffer after a launch: uncaptured records, corrupted header/table, salvage."""

from __future__ import annotations

import re
import struct
from typing import Any

import numpy as np
import pytest
import torch

from megadump_zarr import TensorDumpConfig, tensor_dump
from megadump_zarr.diagnostics import LaunchArguments
from megadump_zarr.dump.l1_plan import prepare_l1_dump
from megadump_zarr.dump.snapshots import decode_l1_dump, salvage_l1_dump
from megadump_zarr.l1 import L1_DUMP_PAYLOAD_BASE, L1_DUMP_STATUS_BYTE
from megadump_zarr.runtime import MegaKernel, execute
from tests.dump._dump_helpers import assert_same, compile_graph, copy_rows_graph, node_attrs, read_array, read_json


def setup(fail_on_task: int | None = None, **config: Any):
    def fn(t: Any) -> None:
        if fail_on_task is not None and t.task.task_id == fail_on_task:
            raise ArithmeticError("tile failed")
        t.params[1][t.rows] = t.params[0][t.rows] * 2

    graph = copy_rows_graph()
    graph.operators[0].tile_fn = fn
    params = [torch.arange(32, dtype=torch.float32).reshape(8, 4), torch.zeros(8, 4)]
    runtime = compile_graph(graph, params)
    config.setdefault("stages", "copy")
    prepared = prepare_l1_dump(
        runtime, graph, params, TensorDumpConfig("/unused", level="L1", **config), rank=0, device="cpu"
    )
    return runtime, params, prepared


def launch(runtime, params, prepared) -> None:
    execute(runtime, params, LaunchArguments(prepared.runtime_config, None, prepared.buffer))


def put_u32(buffer: torch.Tensor, offset: int, value: int) -> None:
    buffer[offset : offset + 4] = torch.frombuffer(bytearray(struct.pack("<I", value)), dtype=torch.uint8)


def record_field(index: int, field: int) -> int:
    return 64 + 64 * index + 4 * field


# --------------------------------------------------------------------------- happy path
def test_decode_after_launch():
    runtime, params, prepared = setup()
    a = params[0].clone()
    launch(runtime, params, prepared)
    snapshots = decode_l1_dump(prepared)
    assert [(s.record.task_id, s.record.io) for s in snapshots] == [
        (0, "input"),
        (0, "output"),
        (1, "input"),
        (1, "output"),
    ]
    assert_same(snapshots[0].data, a[:4])
    assert_same(snapshots[1].data, a[:4] * 2)
    assert_same(snapshots[3].data, a[4:] * 2)
    assert all(s.original_dtype == s.stored_dtype == "float32" for s in snapshots)
    assert snapshots[2].stored_shape == (4, 4)
    # payloads are zero-copy views of the (host) buffer
    host = prepared.buffer.numpy()
    assert all(np.shares_memory(s.data, host) for s in snapshots)


# --------------------------------------------------------------------------- not captured
def test_record_not_captured_when_worker_never_ran():
    _, _, prepared = setup()
    with pytest.raises(
        RuntimeError,
        match=re.escape(
            "L1 dump record was not captured: task_id=0, stage='copy', io=input, index=0, status=0, header_enabled=1"
        ),
    ):
        decode_l1_dump(prepared)


def test_record_not_captured_names_the_first_pending_record():
    runtime, params, prepared = setup()
    launch(runtime, params, prepared)
    prepared.buffer[record_field(3, 7)] = 0  # task 1's output status back to PENDING
    with pytest.raises(
        RuntimeError,
        match=re.escape(
            "L1 dump record was not captured: task_id=1, stage='copy', io=output, index=0, status=0, header_enabled=1"
        ),
    ):
        decode_l1_dump(prepared)


def test_launch_without_l1_mode_captures_nothing():
    runtime, params, prepared = setup()
    execute(runtime, params, LaunchArguments(runtime.normal_tensor, None, prepared.buffer))  # ordinary config
    assert torch.equal(params[1], params[0] * 2)
    with pytest.raises(RuntimeError, match=re.escape("status=0, header_enabled=1")):
        decode_l1_dump(prepared)


# --------------------------------------------------------------------------- corrupted buffers
@pytest.mark.parametrize(
    "offset, value, magic, version",
    [(0, 0, 0x4C314400, 2), (3, 0xFF, 0xFF314450, 2), (4, 3, 0x4C314450, 3), (4, 0, 0x4C314450, 0)],
)
def test_corrupted_header(offset, value, magic, version):
    runtime, params, prepared = setup()
    launch(runtime, params, prepared)
    prepared.buffer[offset] = value
    with pytest.raises(
        ValueError, match=re.escape(f"invalid L1 dump buffer header: magic={magic:#x}, version={version}")
    ):
        decode_l1_dump(prepared)


def test_corrupted_magic_message_exact():
    runtime, params, prepared = setup()
    launch(runtime, params, prepared)
    put_u32(prepared.buffer, 0, 0xDEADBEEF)
    with pytest.raises(ValueError, match=re.escape("invalid L1 dump buffer header: magic=0xdeadbeef, version=2")):
        decode_l1_dump(prepared)


@pytest.mark.parametrize(
    "field, name, planned, found",
    [
        (0, "task_id", 0, 7),
        (2, "parameter_position", 0, 1),
        (3, "source_offset_bytes", 0, 4),
        (6, "payload_bytes", 64, 32),
        (9, "worker_id", 0xFFFFFFFF, 3),
    ],
)
def test_record_table_field_changed(field, name, planned, found):
    runtime, params, prepared = setup()
    launch(runtime, params, prepared)
    put_u32(prepared.buffer, record_field(0, field), found)
    with pytest.raises(
        ValueError,
        match=re.escape(f"L1 dump record 0 {name} changed during the launch: planned {planned}, found {found}"),
    ):
        decode_l1_dump(prepared)


def test_record_phase_changed():
    runtime, params, prepared = setup()
    launch(runtime, params, prepared)
    put_u32(prepared.buffer, record_field(1, 1), 1)  # output record now claims BEFORE
    with pytest.raises(
        ValueError, match=re.escape("L1 dump record 1 phase changed during the launch: planned 2, found 1")
    ):
        decode_l1_dump(prepared)


def test_record_payload_offset_changed():
    runtime, params, prepared = setup()
    launch(runtime, params, prepared)
    slots = [r.payload_offset for r in prepared.records]
    assert slots == [L1_DUMP_PAYLOAD_BASE + 64 * i for i in range(4)]
    # moved within its own slot (and shrunk): the table check names payload_offset
    put_u32(prepared.buffer, record_field(3, 5), slots[3] + 32)
    put_u32(prepared.buffer, record_field(3, 6), 32)
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"L1 dump record 3 payload_offset changed during the launch: planned {slots[3]}, found {slots[3] + 32}"
        ),
    ):
        decode_l1_dump(prepared)
    # moved past the end: the reader's geometry check names it first
    put_u32(prepared.buffer, record_field(3, 5), slots[3] + 64)
    put_u32(prepared.buffer, record_field(3, 6), 64)
    total = prepared.total_bytes
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"L1 dump record 3 (task_id=1) payload slot outside the payload area: payload_offset={slots[3] + 64}, "
            f"payload_bytes=64 not within [{L1_DUMP_PAYLOAD_BASE}, total_bytes={total})"
        ),
    ):
        decode_l1_dump(prepared)


def test_record_count_changed():
    runtime, params, prepared = setup()
    launch(runtime, params, prepared)
    put_u32(prepared.buffer, 12, 3)
    with pytest.raises(ValueError, match=re.escape("L1 dump buffer holds 3 records, the plan 4")):
        decode_l1_dump(prepared)


def test_invalid_status_value():
    runtime, params, prepared = setup()
    launch(runtime, params, prepared)
    prepared.buffer[record_field(2, 7)] = 2
    with pytest.raises(
        ValueError,
        match=re.escape("L1 dump record 2 (task_id=1) has invalid status 2; expected 0 (PENDING) or 1 (CAPTURED)"),
    ):
        decode_l1_dump(prepared)


def test_decode_with_explicit_host_copy():
    runtime, params, prepared = setup()
    launch(runtime, params, prepared)
    host = prepared.buffer.clone()
    prepared.buffer.zero_()  # the decoder must read the copy it is given
    snapshots = decode_l1_dump(prepared, host)
    assert len(snapshots) == 4
    assert_same(snapshots[1].data, torch.arange(16, dtype=torch.float32).reshape(4, 4) * 2)


# --------------------------------------------------------------------------- salvage
def test_salvage_partial_launch():
    runtime, params, prepared = setup(fail_on_task=1)
    a = params[0].clone()
    with pytest.raises(ArithmeticError):
        launch(runtime, params, prepared)
    captured, pending = salvage_l1_dump(prepared)
    assert [(s.record.task_id, s.record.io) for s in captured] == [(0, "input"), (0, "output"), (1, "input")]
    assert_same(captured[0].data, a[:4])
    assert_same(captured[1].data, a[:4] * 2)
    assert_same(captured[2].data, a[4:])
    assert pending == [
        {"record": 3, "taskId": 1, "stage": "copy", "io": "output", "index": 0, "name": "b", "status": 0}
    ]
    with pytest.raises(RuntimeError, match=re.escape("task_id=1, stage='copy', io=output, index=0, status=0")):
        decode_l1_dump(prepared)


def test_salvage_nothing_ran():
    _, _, prepared = setup()
    captured, pending = salvage_l1_dump(prepared)
    assert captured == ()
    assert [(p["record"], p["taskId"], p["io"], p["name"]) for p in pending] == [
        (0, 0, "input", "a"),
        (1, 0, "output", "b"),
        (2, 1, "input", "a"),
        (3, 1, "output", "b"),
    ]


def test_salvage_complete_launch():
    runtime, params, prepared = setup()
    launch(runtime, params, prepared)
    captured, pending = salvage_l1_dump(prepared)
    assert len(captured) == 4 and pending == []


def test_salvage_corrupted_buffer():
    runtime, params, prepared = setup()
    launch(runtime, params, prepared)
    put_u32(prepared.buffer, 0, 0)
    captured, pending = salvage_l1_dump(prepared)
    assert captured == ()
    assert pending == [{"error": "invalid L1 dump buffer header: magic=0x0, version=2"}]


# --------------------------------------------------------------------------- failed launches through the dumper
def failing_kernel() -> tuple[MegaKernel, list[torch.Tensor]]:
    def fn(t: Any) -> None:
        if t.task.task_id == 1:
            raise ArithmeticError("tile failed")
        t.params[1][t.rows] = t.params[0][t.rows] * 2

    graph = copy_rows_graph()
    graph.operators[0].tile_fn = fn
    return MegaKernel(graph, name="failing"), [torch.arange(32, dtype=torch.float32).reshape(8, 4), torch.zeros(8, 4)]


def test_failed_l1_launch_discarded(tmp_path):
    kernel, params = failing_kernel()
    with pytest.raises(ArithmeticError):
        with tensor_dump(TensorDumpConfig(tmp_path, level="L1", stages="copy")):
            kernel.launch(params)
    assert not (tmp_path / "rank_0").exists()


def test_failed_l1_launch_discarded_but_window_continues(tmp_path):
    kernel, params = failing_kernel()
    ok_graph = copy_rows_graph()
    ok = MegaKernel(ok_graph, name="ok")
    ok_params = [torch.ones(8, 4), torch.zeros(8, 4)]
    with tensor_dump(TensorDumpConfig(tmp_path, level="L1", stages="copy")):
        with pytest.raises(ArithmeticError):
            kernel.launch(params)
        ok.launch(ok_params)
    window = tmp_path / "rank_0" / "window_0000"
    manifest = read_json(window / "zarr.json")["attributes"]
    assert manifest["status"] == "complete"
    assert manifest["invocations"] == ["invocation_000001_forward"]  # the failed launch consumed id 0
    assert node_attrs(window / "invocation_000001_forward")["kernelName"] == "ok"


def test_failed_l1_launch_kept_with_on_error_keep(tmp_path):
    kernel, params = failing_kernel()
    a = params[0].clone()
    with pytest.raises(ArithmeticError):
        with tensor_dump(TensorDumpConfig(tmp_path, level="L1", stages="copy", on_error="keep")):
            kernel.launch(params)
    window = tmp_path / "rank_0" / "window_0000"
    assert read_json(window / "zarr.json")["attributes"]["status"] == "aborted"
    inv = window / "invocation_000000_forward"
    attrs = node_attrs(inv)
    assert attrs["launchFailed"] is True
    assert attrs["pendingRecords"] == [
        {"record": 3, "taskId": 1, "stage": "copy", "io": "output", "index": 0, "name": "b", "status": 0}
    ]
    assert attrs["recordCount"] == 3
    assert_same(read_array(inv / "stages" / "copy" / "task_000000" / "input_00_a"), a[:4])
    assert_same(read_array(inv / "stages" / "copy" / "task_000000" / "output_00_b"), a[:4] * 2)
    assert_same(read_array(inv / "stages" / "copy" / "task_000001" / "input_00_a"), a[4:])
    assert not (inv / "stages" / "copy" / "task_000001" / "output_00_b").exists()


def test_status_byte_constant():
    assert L1_DUMP_STATUS_BYTE == 28
