"""Run a compiled kernel tile by tile, with the L1 device worker around every task."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from megadump_zarr.l1 import (
    L1_ANY_WORKER,
    L1_DIAGNOSTIC_MODE,
    L1_DUMP_PHASE_AFTER,
    L1_DUMP_PHASE_BEFORE,
    L1_DUMP_RECORD_SIZE,
    L1_DUMP_STATUS_BYTE,
    L1_DUMP_STATUS_CAPTURED,
    L1Record,
    read_l1_buffer,
)
from megadump_zarr.l1.format import (
    L1_POOL_HEADER_OFFSET,
    L1_POOL_KINDS,
    L1_RECORD_KIND_STATISTICS_AND_TENSOR,
    L1_RECORD_KIND_STATISTICS_TENSOR_IF_NONFINITE,
    L1_RECORD_KIND_TENSOR,
    L1_STAT_DEVICE_BYTES,
    L1_STAT_EXPECTED_BYTE,
    L1_STAT_EXPECTED_PRESENT_BYTE,
    L1_STAT_POOL_FULL,
    L1_STAT_TENSOR_COPIED,
    POOL_STRUCT,
    align_up,
)
from megadump_zarr.runtime.abi import RuntimeConfigC
from megadump_zarr.runtime.compiler import CompiledTask, PreparedRuntime, worker_shard
from megadump_zarr.runtime.placed_staging import PlacedStager
from megadump_zarr.runtime.reductions import StatisticsStager, itemsize, statistics_slot, torch_dtype
from megadump_zarr.runtime.reduction_rows import one_thread

__all__ = ["DeviceWorker", "Tile", "execute"]

_Staged = tuple[torch.Tensor, torch.Tensor, int, int, torch.dtype, int]
"""A kind 1/2 record's parameter, source view, the parameter's data pointer and element count when the
worker was built, the record's dtype and its position among the placed records."""


@dataclass(frozen=True)
class Tile:
    """What a tile function sees.

    Args:
        params: The native parameter list.
        start: First row of this tile (or worker shard) along the split axis; None if not split.
        stop: One past its last row.
        owner_id: Owner of an owner-split task.
        task: The compiled task.
        core_id: The worker running it (event-driven: the task's scheduled core; aiv_pipeline: the worker
            of this shard), or None.
        accumulation_order: The kernel's :class:`~megadump_zarr.runtime.accumulation.AccumulationOrder`
            (None: reductions in natural order); read by :func:`~megadump_zarr.runtime.accumulation.accumulate`.
    """

    params: Sequence[torch.Tensor]
    start: int | None
    stop: int | None
    owner_id: int | None
    task: CompiledTask
    core_id: int | None = None
    accumulation_order: Any = None

    @property
    def rows(self) -> slice:
        """The tile's rows as a slice (all rows when not split)."""
        return slice(self.start, self.stop)


class DeviceWorker:
    """The L1 capture engine: copies selected task operands into the Device buffer's payload slots.

    It reads the header and record table from the buffer itself (validated; a malformed buffer is
    refused before anything is copied), then, around each task, copies BEFORE records (inputs) before
    the tile and AFTER records (outputs) after it and sets their status to CAPTURED.

    A statistics record (ABI version 3, kind 1) is not copied: the worker reduces the source range on
    the device into the record's 128-byte statistics slot; a kind-2 record also gets its source (prefix)
    copied into its tensor slot, and the slot's "tensor copied" flag set. No value leaves the device.
    Kind 1 and 2 records are staged (their bytes copied on the device at the boundary) and reduced
    together, one segmented pass per dtype, at :meth:`flush` (which :func:`execute` calls after the
    last task, also when a task fails); their slots and CAPTURED status are written then. Their rows
    are laid out when the worker is built (:class:`~megadump_zarr.runtime.placed_staging.PlacedStager`:
    staging is one copy into a view made then); a dtype whose records exceed the staging capacity goes
    through a :class:`~megadump_zarr.runtime.reductions.StatisticsStager`, reduced also when it is full.
    Kinds 3 and 4 decide at the boundary whether to copy: reduced at once.

    Args:
        buffer: The Device buffer (uint8 tensor on the kernel's device).
        parameters: The native parameter list the records' positions index.
    """

    def __init__(self, buffer: torch.Tensor, parameters: Sequence[Any]) -> None:
        if not torch.is_tensor(buffer) or buffer.dtype != torch.uint8 or buffer.dim() != 1:
            raise ValueError("L1 device worker needs a 1-D uint8 Device buffer tensor")
        if not buffer.is_contiguous():
            raise ValueError("L1 device worker needs a contiguous Device buffer")
        # The reader validates header, table and slot geometry; on CPU it views the buffer in place.
        decoded = read_l1_buffer(buffer)
        self._buffer = buffer
        self._parameters = parameters
        # the tensor pool of conditional statistics records (version 3; zeros otherwise)
        self._pool_offset, self._pool_bytes, self._pool_used, _ = POOL_STRUCT.unpack(
            decoded.data[L1_POOL_HEADER_OFFSET : L1_POOL_HEADER_OFFSET + POOL_STRUCT.size].tobytes()
        )
        # per task boundary: (record, None) or, for kinds 1 and 2, (record, its staging: see _stage)
        self._by_task: dict[tuple[int, int], list[tuple[L1Record, _Staged | None]]] = {}
        placed: list[tuple[torch.dtype, int, L1Record]] = []
        expected: dict[torch.dtype, list[int]] = {}
        for record in decoded.records:
            source = self._source(record)  # refuse a bad record before any task runs, not at its task's boundary
            staged = None
            if record.kind != L1_RECORD_KIND_TENSOR and record.kind not in L1_POOL_KINDS:
                dtype = self._dtype(record, source)
                parameter = self._parameters[record.parameter_position]
                staged = (parameter, source, parameter.data_ptr(), parameter.numel(), dtype, len(placed))
                count = record.copy_bytes // itemsize(dtype)
                placed.append((dtype, count, record))
                expected.setdefault(dtype, []).append(count)
            self._by_task.setdefault((record.task_id, record.phase), []).append((record, staged))
        # every staged record has its rows laid out now; a dtype too large for that goes through the stager
        self._placed = PlacedStager(buffer.device, placed)
        for dtype in self._placed.dtypes:
            del expected[dtype]
        self._stager = StatisticsStager(buffer.device, expected=expected)

    def capture(self, task_id: int, phase: int, worker: int | None, *, first: bool = True, last: bool = True) -> None:
        """Copy the records of one task boundary.

        Args:
            task_id: The task.
            phase: ``L1_DUMP_PHASE_BEFORE`` or ``L1_DUMP_PHASE_AFTER``.
            worker: The broadcast worker running, or None in event-driven mode (records of any worker).
            first: Whether this is the first worker to reach the BEFORE boundary (any-worker records
                are copied there).
            last: Whether this is the last worker to reach the AFTER boundary.
        """
        for record, staged in self._by_task.get((task_id, phase), ()):
            if worker is not None:
                if record.worker_id == L1_ANY_WORKER:
                    if (phase == L1_DUMP_PHASE_BEFORE and not first) or (phase == L1_DUMP_PHASE_AFTER and not last):
                        continue
                elif record.worker_id != worker:
                    continue
            if staged is None:
                self._copy(record)
            else:
                self._stage(record, staged)  # its status is written with its slot

    def _source(self, record: L1Record) -> torch.Tensor:
        """The record's source bytes as a view of its parameter; refuses what would leave it."""
        position = record.parameter_position
        if position >= len(self._parameters):
            raise RuntimeError(
                f"L1 device worker refused record {record.index} (task {record.task_id}): parameter {position} "
                f"does not exist ({len(self._parameters)} parameters)"
            )
        parameter = self._parameters[position]
        if not torch.is_tensor(parameter) or not parameter.is_contiguous():
            raise RuntimeError(
                f"L1 device worker refused record {record.index}: parameter {position} is not a contiguous tensor"
            )
        source = parameter.reshape(-1).view(torch.uint8)
        begin, size = record.source_offset_bytes, record.copy_bytes
        if begin + size > source.numel():
            raise RuntimeError(
                f"L1 device worker refused record {record.index} (task {record.task_id}): source range "
                f"[{begin}, {begin + size}) leaves parameter {position} of {source.numel()} bytes"
            )
        end = record.payload_offset + (size if record.kind == L1_RECORD_KIND_TENSOR else record.payload_bytes)
        if record.kind == L1_RECORD_KIND_STATISTICS_AND_TENSOR:
            end = max(end, record.tensor_offset + record.tensor_bytes)
        if end > self._buffer.numel():
            raise RuntimeError(
                f"L1 device worker refused record {record.index}: payload slot [{record.payload_offset}, {end}) "
                f"leaves the {self._buffer.numel()}-byte Device buffer"
            )
        return source[begin : begin + size]

    def flush(self) -> None:
        """Reduce the staged statistics records and write their slots and CAPTURED status."""
        with one_thread(self._buffer.device):
            self._write(self._placed.flush() + self._stager.flush())
        self._placed.release()  # their buffers serve the next launch's worker (later records: the stager)
        self._stager.release()

    def _copy(self, record: L1Record) -> None:
        """A tensor record (copied) or a kind 3/4 record (reduced at once); its status CAPTURED."""
        source = self._source(record)
        if record.kind == L1_RECORD_KIND_TENSOR:
            if source.numel():
                self._buffer[record.payload_offset : record.payload_offset + source.numel()].copy_(source)
        else:
            self._reduce(record, source)
        self._buffer[record.record_offset + L1_DUMP_STATUS_BYTE] = L1_DUMP_STATUS_CAPTURED

    def _dtype(self, record: L1Record, source: torch.Tensor) -> torch.dtype:
        """A statistics record's dtype; refuses a source that is not whole elements of it."""
        dtype = torch_dtype(record.dtype_code)
        size = itemsize(dtype)
        if source.numel() % size or source.storage_offset() % size:
            raise RuntimeError(
                f"L1 device worker refused record {record.index} (task {record.task_id}): {source.numel()} source "
                f"bytes at offset {record.source_offset_bytes} are not whole {dtype} elements"
            )
        return dtype

    def _stage(self, record: L1Record, staged: _Staged) -> None:
        """Kinds 1, 2: stage the source for the segmented reduction (kind 2 also copies its tensor now).

        The source view and dtype were checked when the worker was built; they are used while the
        record's parameter is the same tensor over the same memory (else it is read and checked again,
        as a tensor record is).
        """
        parameter, source, pointer, numel, dtype, position = staged
        current = self._parameters[record.parameter_position]
        if not (
            current is parameter
            and current.data_ptr() == pointer
            and current.numel() == numel
            and current.is_contiguous()
        ):
            source = self._source(record)
            dtype = self._dtype(record, source)
        if record.kind == L1_RECORD_KIND_STATISTICS_AND_TENSOR and record.tensor_bytes:
            self._buffer[record.tensor_offset : record.tensor_offset + record.tensor_bytes].copy_(
                source[: record.tensor_bytes]
            )
        place = self._placed.place(position)
        if place is not None:
            self._placed.stage(place, source)  # its rows were laid out when the worker was built
            return
        done = self._stager.stage(dtype, source, record)
        if done:
            with one_thread(self._buffer.device):
                self._write(done)

    def _write(self, done: list[tuple[list[L1Record], torch.Tensor]]) -> None:
        """Write reduced slots (the device's 88 bytes each) and their records' CAPTURED status."""
        device = self._buffer.device
        for records, slots in done:
            copied = [i for i, r in enumerate(records) if r.kind == L1_RECORD_KIND_STATISTICS_AND_TENSOR]
            if copied:
                slots[copied, 4] |= L1_STAT_TENSOR_COPIED
            count = len(records)
            offsets = [r.payload_offset for r in records]
            first = offsets[0]
            if offsets == list(range(first, first + 128 * count, 128)):  # packed slots: one copy
                area = self._buffer[first : first + 128 * count].view(count, 128)
                area[:, :L1_STAT_DEVICE_BYTES] = slots[:, :L1_STAT_DEVICE_BYTES]
            else:
                at = torch.tensor(offsets, dtype=torch.int64, device=device)
                index = (at[:, None] + torch.arange(L1_STAT_DEVICE_BYTES, device=device)).reshape(-1)
                self._buffer[index] = slots[:, :L1_STAT_DEVICE_BYTES].reshape(-1)
            status = [r.record_offset + L1_DUMP_STATUS_BYTE for r in records]
            step = L1_DUMP_RECORD_SIZE
            if status == list(range(status[0], status[0] + step * count, step)):  # consecutive records: a strided view
                self._buffer[status[0] : status[0] + step * count : step] = L1_DUMP_STATUS_CAPTURED
            else:
                self._buffer[torch.tensor(status, device=device)] = L1_DUMP_STATUS_CAPTURED

    def _reduce(self, record: L1Record, source: torch.Tensor) -> None:
        """Kinds 3, 4: write the slot now (and copy the tensor into the pool when its condition holds)."""
        dtype = self._dtype(record, source)
        values = source.view(dtype) if source.numel() else torch.empty(0, dtype=dtype, device=source.device)
        slot = self._maybe_pool(record, source, statistics_slot(values, source))
        # the device's part of the slot only: bytes 88.. hold what the host wrote (kind 4's expected digest)
        self._buffer[record.payload_offset : record.payload_offset + L1_STAT_DEVICE_BYTES].copy_(
            slot[:L1_STAT_DEVICE_BYTES]
        )

    def _maybe_pool(self, record: L1Record, source: torch.Tensor, slot: torch.Tensor) -> torch.Tensor:
        """Kinds 3/4: copy the tensor into the pool when its condition holds and it fits; mark the slot.

        The reference worker evaluates the condition on the host (one small read); a device kernel
        evaluates it where it runs and bumps ``pool_used`` atomically.
        """
        words = slot.view(torch.int64)
        if record.kind == L1_RECORD_KIND_STATISTICS_TENSOR_IF_NONFINITE:
            wanted = bool((words[2] + words[3]).item() > 0)
        else:
            base = record.payload_offset
            host = self._buffer[base + L1_STAT_EXPECTED_BYTE : base + L1_STAT_EXPECTED_PRESENT_BYTE + 4].cpu()
            expected, present = host[:8].view(torch.int64).item(), host[8:12].view(torch.int32).item()
            wanted = not present or words[8].item() != expected
        if not wanted:
            return slot
        slot = slot.clone()
        words = slot.view(torch.int64)
        need = align_up(record.tensor_bytes)
        if self._pool_used + need > self._pool_bytes:
            slot[4] |= L1_STAT_POOL_FULL
            return slot
        offset = self._pool_offset + self._pool_used
        if record.tensor_bytes:
            self._buffer[offset : offset + record.tensor_bytes].copy_(source[: record.tensor_bytes])
        self._pool_used += need
        self._buffer[L1_POOL_HEADER_OFFSET + 8 : L1_POOL_HEADER_OFFSET + 12].copy_(
            torch.tensor([self._pool_used], dtype=torch.int32).view(torch.uint8)
        )
        slot[4] |= L1_STAT_TENSOR_COPIED
        words[10] = offset
        return slot


def _diagnostic_mode(runtime_config: torch.Tensor) -> int:
    offset = RuntimeConfigC.diagnostic_mode.offset
    return int(runtime_config[offset : offset + 4].cpu().view(torch.int32).item())


def execute(runtime: PreparedRuntime, parameters: Sequence[Any], arguments: Any) -> None:
    """Run every task of ``runtime`` in dependency order.

    Args:
        runtime: The compiled kernel.
        parameters: The native parameter list.
        arguments: ``LaunchArguments``: the runtime config tensor (its diagnostic mode byte decides
            whether the device worker runs), event counters (incremented per finished task) and the
            diagnostic buffer.
    """
    mode = _diagnostic_mode(arguments.runtime_config)
    worker = DeviceWorker(arguments.diagnostic_buffer, parameters) if mode == L1_DIAGNOSTIC_MODE else None
    counters = arguments.event_counters
    with torch.no_grad():
        try:
            _run_tasks(runtime, parameters, worker, counters)
        finally:
            if worker is not None:
                worker.flush()  # the staged statistics, also of a launch that failed part-way


def _run_tasks(runtime: PreparedRuntime, parameters: Sequence[Any], worker: DeviceWorker | None, counters: Any) -> None:
    """Every task in order, with the device worker's boundaries around each."""
    broadcast = runtime.spec.execution_mode == "aiv_pipeline"
    workers = int(runtime.host_config.num_workers)
    for task in runtime.tasks:
        if broadcast:
            _run_broadcast(task, parameters, worker, workers, runtime.spec.accumulation_order)
        else:
            if worker is not None:
                worker.capture(task.task_id, L1_DUMP_PHASE_BEFORE, None)
            task.operator.tile_fn(
                Tile(
                    parameters,
                    task.start,
                    task.stop,
                    task.owner_id,
                    task,
                    task.core_id,
                    runtime.spec.accumulation_order,
                )
            )
            if worker is not None:
                worker.capture(task.task_id, L1_DUMP_PHASE_AFTER, None)
        if counters is not None and torch.is_tensor(counters) and counters.numel() > task.task_id:
            counters[task.task_id] += 1


def _run_broadcast(
    task: CompiledTask,
    parameters: Sequence[Any],
    worker: DeviceWorker | None,
    workers: int,
    accumulation_order: Any = None,
) -> None:
    """aiv_pipeline: every worker runs the task on its own row shard. A worker whose shard is empty (or,
    for a task without split rows, every worker but 0) runs nothing and reaches no task boundary."""
    shards = []
    for worker_id in range(workers):
        if task.start is None:
            if worker_id == 0:
                shards.append((worker_id, None, None))
            continue
        begin, end = worker_shard(task.start, task.stop, worker_id, workers)
        if end > begin:
            shards.append((worker_id, begin, end))
    for position, (worker_id, begin, end) in enumerate(shards):
        first, last = position == 0, position == len(shards) - 1
        if worker is not None:
            worker.capture(task.task_id, L1_DUMP_PHASE_BEFORE, worker_id, first=first, last=last)
        task.operator.tile_fn(Tile(parameters, begin, end, task.owner_id, task, worker_id, accumulation_order))
        if worker is not None:
            worker.capture(task.task_id, L1_DUMP_PHASE_AFTER, worker_id, first=first, last=last)
