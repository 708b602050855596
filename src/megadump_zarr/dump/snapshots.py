"""Host snapshots: L0 tensors at the kernel boundary and decoded L1 payloads at task boundaries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from megadump_zarr.tensor_arrays import dtype_name, numpy_dtype_of, tensor_to_numpy
from megadump_zarr.dump.l1_plan import L1RecordPlan, PreparedL1Dump
from megadump_zarr.l1 import L1_DUMP_STATUS_CAPTURED, read_l1_buffer
from megadump_zarr.runtime import GraphTensor

__all__ = ["L0Snapshot", "L1Snapshot", "decode_l1_dump", "device_buffer_to_host", "snapshot_tensor"]


@dataclass(frozen=True)
class L0Snapshot:
    """An independent host copy of one logical tensor at the kernel boundary.

    Args:
        graph_tensor: The logical tensor and its role.
        phase: ``before`` (external inputs) or ``after`` (stage and final outputs).
        data: Host array with the exact dtype.
        original_dtype: The tensor's dtype name.
    """

    graph_tensor: GraphTensor
    phase: str
    data: np.ndarray
    original_dtype: str

    @property
    def shape(self) -> tuple[int, ...]:
        """Actual (parameter) shape."""
        return tuple(self.data.shape)


@dataclass(frozen=True)
class L1Snapshot:
    """One decoded task operand: a zero-copy view of its payload slot in the host copy of the buffer.

    Args:
        record: The record's plan.
        data: The payload as an array of the operand's dtype and stored shape.
        original_dtype: dtype name.
        stored_dtype: dtype name as stored (equal: no conversion happens).
        stored_shape: ``actual_shape``, or ``(elements,)`` for a truncated record.
    """

    record: L1RecordPlan
    data: np.ndarray
    original_dtype: str
    stored_dtype: str
    stored_shape: tuple[int, ...]


def snapshot_tensor(parameter: Any, graph_tensor: GraphTensor, phase: str) -> L0Snapshot:
    """Copy one ABI parameter to the host, independent of later writes.

    Args:
        parameter: The ABI parameter tensor.
        graph_tensor: Its logical tensor.
        phase: ``before`` or ``after``.
    """
    if not torch.is_tensor(parameter):
        raise TypeError(
            f"L0 dump Tensor {graph_tensor.name!r} must map to torch.Tensor, got {type(parameter).__name__}"
        )
    host = parameter.detach().to("cpu", copy=True).contiguous()
    return L0Snapshot(graph_tensor, phase, tensor_to_numpy(host), dtype_name(parameter.dtype))


def device_buffer_to_host(buffer: torch.Tensor) -> torch.Tensor:
    """One Device-to-Host copy of the whole buffer (pinned and non-blocking on CUDA); CPU buffers are used as they are.

    Args:
        buffer: The Device buffer.
    """
    if buffer.device.type == "cpu":
        return buffer.detach()
    host = torch.empty(buffer.shape, dtype=buffer.dtype, pin_memory=buffer.device.type == "cuda")
    host.copy_(buffer.detach(), non_blocking=True)
    if buffer.device.type == "cuda":
        torch.cuda.current_stream(buffer.device).synchronize()
    return host


def _check_table(decoded: Any, records: tuple[L1RecordPlan, ...]) -> None:
    if len(decoded.records) != len(records):
        raise ValueError(f"L1 dump buffer holds {len(decoded.records)} records, the plan {len(records)}")
    for planned, found in zip(records, decoded.records):
        expected = planned.entry
        for name in (
            "task_id",
            "phase",
            "parameter_position",
            "source_offset_bytes",
            "payload_offset",
            "payload_bytes",
            "task_index",
            "worker_id",
        ):
            if getattr(found, name) != getattr(expected, name):
                raise ValueError(
                    f"L1 dump record {found.index} {name} changed during the launch: planned "
                    f"{getattr(expected, name)}, found {getattr(found, name)}"
                )


def decode_l1_dump(prepared: PreparedL1Dump, host_buffer: torch.Tensor | None = None) -> tuple[L1Snapshot, ...]:
    """Decode a completed Device buffer: header, record table against the plan, CAPTURED status, payload views.

    Args:
        prepared: What was planned and launched.
        host_buffer: A host copy of the buffer (made here when not given).
    """
    host = device_buffer_to_host(prepared.buffer) if host_buffer is None else host_buffer
    decoded = read_l1_buffer(host)
    _check_table(decoded, prepared.records)
    snapshots = []
    for plan, record in zip(prepared.records, decoded.records):
        if record.status != L1_DUMP_STATUS_CAPTURED:
            raise RuntimeError(
                f"L1 dump record was not captured: task_id={plan.task_id}, stage={plan.stage!r}, "
                f"io={plan.io}, index={plan.index}, status={record.status}, header_enabled={decoded.header.enabled}"
            )
        snapshots.append(payload_snapshot(plan, record.payload))
    return tuple(snapshots)


def payload_snapshot(plan: L1RecordPlan, payload: np.ndarray) -> L1Snapshot:
    """View one payload slot as the operand's dtype and stored shape (no copy).

    Args:
        plan: The record's plan.
        payload: The slot's bytes.
    """
    target = numpy_dtype_of(plan.dtype)
    stored_shape = (plan.payload_bytes // target.itemsize,) if plan.truncated else plan.actual_shape
    data = payload.view(target).reshape(stored_shape)
    name = dtype_name(plan.dtype)
    return L1Snapshot(plan, data, name, name, tuple(stored_shape))


def salvage_l1_dump(
    prepared: PreparedL1Dump, host_buffer: torch.Tensor | None = None
) -> tuple[tuple[L1Snapshot, ...], list[dict[str, Any]]]:
    """What a failed or hung launch's buffer still holds: CAPTURED records, and a description of the rest.

    Args:
        prepared: What was planned and launched.
        host_buffer: A host copy of the buffer (made here when not given).
    """
    try:
        host = device_buffer_to_host(prepared.buffer) if host_buffer is None else host_buffer
        decoded = read_l1_buffer(host)
        _check_table(decoded, prepared.records)
    except (ValueError, RuntimeError) as error:
        return (), [{"error": str(error)}]
    captured, pending = [], []
    for plan, record in zip(prepared.records, decoded.records):
        if record.status == L1_DUMP_STATUS_CAPTURED:
            captured.append(payload_snapshot(plan, record.payload))
        else:
            pending.append(
                {
                    "record": record.index,
                    "taskId": plan.task_id,
                    "stage": plan.stage,
                    "io": plan.io,
                    "index": plan.index,
                    "name": plan.tensor_name,
                    "status": record.status,
                }
            )
    return tuple(captured), pending
