"""L1 planning: which task operands to capture, where each lands in the Device buffer, and the launch override."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from megadump_zarr.dump.l1_views import resolve_view, validate_view_bounds
from megadump_zarr.dump.statistics_slots import buffer_end, layout_records, pool_for, statistics_entry
from megadump_zarr.l1 import (
    L1_ANY_WORKER,
    L1_DIAGNOSTIC_MODE,
    L1_DUMP_MAX_RECORDS,
    L1_DUMP_PAYLOAD_BASE,
    L1_DUMP_PHASE_AFTER,
    L1_DUMP_PHASE_BEFORE,
    L1_DUMP_RECORD_SIZE,
    L1_DUMP_RECORDS_OFFSET,
    L1RecordEntry,
    align_up,
    pack_l1_buffer,
)
from megadump_zarr.runtime import RuntimeConfigC, TaskAiCoreType, TensorDescC, operator_diagnostic_name, worker_shard

__all__ = ["L1RecordPlan", "PreparedL1Dump", "TaskLocation", "build_record_plans", "prepare_l1_dump", "task_locations"]

_CORE_NAMES = {
    TaskAiCoreType.TASK_AICORE_CUBE: "AIC",
    TaskAiCoreType.TASK_AICORE_VECTOR: "AIV",
    TaskAiCoreType.TASK_AICORE_MIX: "MIX",
}


@dataclass(frozen=True)
class TaskLocation:
    """The worker a task id runs on.

    Args:
        task_id: Stable RuntimeConfig task id.
        core_type: ``AIC``, ``AIV`` or ``MIX``.
        core_id: Core-local worker id.
    """

    task_id: int
    core_type: str
    core_id: int


@dataclass(frozen=True)
class L1RecordPlan:
    """Host metadata and the fixed Device payload slot of one task operand."""

    task_id: int
    task_index: int
    stage: str
    owner_id: int | None
    owner_label: str
    core_type: str
    core_id: int
    io: str
    index: int
    phase: str
    parameter_position: int
    tensor_name: str
    dtype: torch.dtype
    source_offset_bytes: int
    actual_shape: tuple[int, ...]
    payload_offset: int
    payload_bytes: int
    full_bytes: int
    truncated: bool
    note: str
    record_offset: int
    worker_id: int = L1_ANY_WORKER
    dims: tuple[str, ...] = ()
    declared_shape: tuple[int, ...] = ()
    kind: int = 0
    tensor_offset: int = 0
    tensor_bytes: int = 0

    @property
    def entry(self) -> L1RecordEntry:
        """The ABI record this plan packs to (statistics records: see ``dump.statistics_slots``)."""
        if self.kind:
            return statistics_entry(self)
        return L1RecordEntry(
            task_id=self.task_id,
            phase=L1_DUMP_PHASE_BEFORE if self.phase == "before" else L1_DUMP_PHASE_AFTER,
            parameter_position=self.parameter_position,
            source_offset_bytes=self.source_offset_bytes,
            payload_offset=self.payload_offset,
            payload_bytes=self.payload_bytes,
            status=0,
            task_index=self.task_index,
            worker_id=self.worker_id,
        )


@dataclass
class PreparedL1Dump:
    """One launch's runtime-config override, Device buffer and record plan."""

    runtime_config: Any
    buffer: Any
    records: tuple[L1RecordPlan, ...]
    total_bytes: int


def task_locations(
    runtime_config: Any, *, vector_worker_stride: int = 2, broadcast_tasks: bool = False
) -> dict[Any, TaskLocation]:
    """Map scheduled tasks to workers.

    Event-driven: a cube or mix task runs on worker ``schedule index % (num_workers // 2)``, a vector
    task on ``schedule index % (num_workers // vector_worker_stride)``; keys are task ids. aiv_pipeline
    (broadcast): every task runs on every worker as AIV; keys are ``(task_id, worker)``.

    Args:
        runtime_config: The host RuntimeConfigC.
        vector_worker_stride: Workers per vector group.
        broadcast_tasks: Whether the kernel runs in aiv_pipeline mode.
    """
    workers = int(runtime_config.num_workers)
    active = workers if broadcast_tasks else workers // 2
    if active <= 0:
        raise ValueError("L1 dump requires RuntimeConfig.num_workers to identify active AIC/AIV workers")
    schedules = (
        (TaskAiCoreType.TASK_AICORE_CUBE, runtime_config.cube_task_indices, int(runtime_config.task_index_num[0])),
        (TaskAiCoreType.TASK_AICORE_VECTOR, runtime_config.vector_task_indices, int(runtime_config.task_index_num[1])),
        (TaskAiCoreType.TASK_AICORE_MIX, runtime_config.mix_task_indices, int(runtime_config.task_index_num[2])),
    )
    locations: dict[Any, TaskLocation] = {}
    for core_type, indices, count in schedules:
        if count < 0 or count > len(indices):
            raise ValueError(f"L1 dump task schedule count is outside RuntimeConfig capacity: {count}")
        for position in range(count):
            task_id = int(indices[position])
            if broadcast_tasks:
                for worker in range(workers):
                    locations[(task_id, worker)] = TaskLocation(task_id, "AIV", worker)
                continue
            group = workers // vector_worker_stride if core_type == TaskAiCoreType.TASK_AICORE_VECTOR else active
            location = TaskLocation(task_id, _CORE_NAMES[core_type], position % group)
            if locations.setdefault(task_id, location) != location:
                raise ValueError(f"L1 dump task {task_id} appears in multiple Device schedules")
    return locations


def _selected(config: Any, location: TaskLocation, task_desc: Any, stage: str, owner_id: int | None) -> bool:
    if config.stages is not None and stage not in config.stages:
        return False
    if config.task_ids is not None and location.task_id not in config.task_ids:
        return False
    if config.stage_task_indices is not None and int(task_desc.task_index) not in config.stage_task_indices:
        return False
    if config.owner_ids is not None and owner_id not in config.owner_ids:
        return False
    if config.core_types is not None and location.core_type not in config.core_types:
        return False
    return config.core_ids is None or location.core_id in config.core_ids


def _operator_ports(operator: Any, task: Any) -> tuple[tuple[str, Sequence[Any], Sequence[Any], int], ...]:
    """(io, native descriptors, graph specs, count) per port list; host ports describe dynamic operands."""
    if operator.diagnostic_host_ports:

        def host_descriptors(specs: Sequence[Any]) -> list[TensorDescC]:
            return [
                TensorDescC(input_position=s.param_position, data_type=s.dtype_size, dynamic_shape=1) for s in specs
            ]

        return (
            ("input", host_descriptors(operator.inputs), operator.inputs, len(operator.inputs)),
            ("output", host_descriptors(operator.outputs), operator.outputs, len(operator.outputs)),
        )
    return (
        ("input", task.inputs, operator.inputs, int(task.num_inputs)),
        ("output", task.outputs, operator.outputs, int(task.num_outputs)),
    )


def _record_dims(spec: Any, shape: tuple[int, ...]) -> tuple[str, ...]:
    names = tuple(spec.dim_names) if hasattr(spec, "dim_names") else tuple(f"dim_{i}" for i in range(len(spec.shape)))
    if len(shape) <= len(names):
        return names[len(names) - len(shape) :]
    return tuple(f"dim_{i}" for i in range(len(shape)))


@dataclass
class _PlanBuilder:
    """One launch's records, parameter cache and monotonically assigned payload slots."""

    runtime: Any
    parameters: Sequence[Any]
    config: Any
    rank: int
    broadcast: bool
    records: list[L1RecordPlan] = field(default_factory=list)
    parameter_cache: dict[int, Any] = field(default_factory=dict)
    next_payload_offset: int = L1_DUMP_PAYLOAD_BASE

    def add(
        self,
        operator: Any,
        location: TaskLocation,
        stage: str,
        owner_id: int | None,
        io: str,
        index: int,
        tensor_desc: Any,
        tensor_spec: Any,
    ) -> bool:
        """Validate one selected operand and give it a payload slot.

        Args:
            operator: The task's operator.
            location: Task id and worker.
            stage: Stage name.
            owner_id: Business owner, if any.
            io: ``input`` or ``output``.
            index: Port index.
            tensor_desc: Native operand descriptor.
            tensor_spec: Graph operand spec.

        Returns:
            False when the operand is an empty broadcast row shard (nothing planned).
        """
        task_id = location.task_id
        task = self.runtime.host_config.all_tasks[task_id]
        position = int(tensor_desc.input_position)
        if position != int(tensor_spec.param_position):
            raise ValueError(f"L1 task {task_id} {io}{index} parameter position disagrees with graph Tensor")
        if not 0 <= position < len(self.parameters):
            raise ValueError(f"L1 task {task_id} requires parameter {position}, got {len(self.parameters)} parameters")
        parameter = self.parameters[position]
        if torch.is_tensor(parameter) and parameter.element_size() != int(tensor_desc.data_type):
            raise ValueError(f"L1 task {task_id} Tensor {tensor_spec.name!r} ABI element byte size mismatch")
        view = resolve_view(
            dict(
                operator=operator,
                task_id=task_id,
                owner_id=owner_id,
                task_desc=task,
                tensor_desc=tensor_desc,
                tensor_spec=tensor_spec,
                io=io,
                index=index,
                parameters=self.parameters,
                runtime_config=self.runtime.host_config,
                rank=self.rank,
                stage=stage,
                parameter_cache=self.parameter_cache,
                core_id=location.core_id,
                owner_context=getattr(getattr(self.runtime, "spec", None), "owner_context", None),
            )
        )
        dtype, full_bytes = validate_view_bounds(parameter, view, tensor_spec.name)
        if self.broadcast and full_bytes == 0:
            return False  # this worker's row shard is empty: no worker runs it, nothing to copy
        payload_bytes = full_bytes
        cap = self.config.max_bytes_per_tensor
        if cap is not None and payload_bytes > cap:
            element_size = int(parameter.element_size())
            payload_bytes = cap // element_size * element_size
            if payload_bytes <= 0:
                raise ValueError(f"max_bytes_per_tensor={cap} cannot store one element")
        self.records.append(
            L1RecordPlan(
                task_id=task_id,
                task_index=int(task.task_index),
                stage=stage,
                owner_id=owner_id,
                owner_label=self.runtime.owner_label,
                core_type=location.core_type,
                core_id=location.core_id,
                io=io,
                index=index,
                phase="before" if io == "input" else "after",
                parameter_position=position,
                tensor_name=tensor_spec.name,
                dtype=dtype,
                source_offset_bytes=view.source_offset_bytes,
                actual_shape=view.shape,
                payload_offset=self.next_payload_offset,
                payload_bytes=payload_bytes,
                full_bytes=full_bytes,
                truncated=payload_bytes < full_bytes,
                note=view.note,
                record_offset=L1_DUMP_RECORDS_OFFSET + len(self.records) * L1_DUMP_RECORD_SIZE,
                worker_id=location.core_id if self.broadcast else L1_ANY_WORKER,
                dims=_record_dims(tensor_spec, view.shape),
                declared_shape=tuple(int(d) for d in tensor_spec.shape),
            )
        )
        self.next_payload_offset = align_up(self.next_payload_offset + payload_bytes)
        if len(self.records) > L1_DUMP_MAX_RECORDS:
            raise ValueError(f"L1 dump record count exceeds {L1_DUMP_MAX_RECORDS}")
        return True


def _broadcast_worker_idle(operator: Any, location: TaskLocation, runtime: Any, task: Any) -> bool:
    """aiv_pipeline: whether this worker runs nothing for the task — its row shard of a split task is
    empty, or the task has no split operand and another worker (worker 0) runs it whole."""
    split_ports = [
        (io, i)
        for io, specs in (("input", operator.inputs), ("output", operator.outputs))
        for i in range(len(specs))
        if operator.split_axis(io, i) is not None
    ]
    if not split_ports:
        return location.core_id != 0
    width = int(task.task_split_value)
    io, index = split_ports[0]
    spec = (operator.inputs if io == "input" else operator.outputs)[index]
    axis = operator.split_axis(io, index)
    desc = (task.inputs if io == "input" else task.outputs)[index]
    rows_per = spec.row_elements(axis)
    start = int(desc.base_ptr_offset) // rows_per if rows_per else 0
    stop = min(start + width, spec.shape[axis])
    begin, end = worker_shard(start, stop, location.core_id, int(runtime.host_config.num_workers))
    return end <= begin


def build_record_plans(
    runtime: Any, graph: Any, parameters: Sequence[Any], config: Any, rank: int
) -> tuple[L1RecordPlan, ...]:
    """Select task operands by the config's filters and plan their payload slots.

    Args:
        runtime: The prepared runtime.
        graph: Its graph.
        parameters: The launch's ABI parameters.
        config: The dump config.
        rank: Job-global rank.
    """
    runtime_config = runtime.host_config
    operators: dict[str, Any] = {}
    for operator in graph.topological_sort():
        stage = operator_diagnostic_name(operator)
        if stage in operators:
            raise ValueError(f"duplicate L1 diagnostic stage name {stage!r}")
        operators[stage] = operator
    spec = getattr(runtime, "spec", None)
    broadcast = getattr(spec, "execution_mode", "event_driven") == "aiv_pipeline"
    locations = task_locations(
        runtime_config, vector_worker_stride=getattr(spec, "vector_worker_stride", 2), broadcast_tasks=broadcast
    )
    builder = _PlanBuilder(runtime, parameters, config, rank, broadcast)
    for location in sorted(locations.values(), key=lambda item: (item.task_id, item.core_id)):
        task = runtime_config.all_tasks[location.task_id]
        stage = runtime.task_stage_names.get(location.task_id)
        operator = operators.get(stage)
        if operator is None:
            continue
        owner_id = runtime.metadata.task_owner_ids.get(location.task_id)
        if not _selected(config, location, task, stage, owner_id):
            continue
        if broadcast and _broadcast_worker_idle(operator, location, runtime, task):
            continue  # an idle broadcast worker reaches no task boundary: a record for it would stay PENDING
        for io, descriptors, specs, count in _operator_ports(operator, task):
            if io not in config.io:
                continue
            if count > len(specs):
                raise ValueError(f"L1 task {location.task_id} declares too many {io} ports for its graph stage")
            for index in range(count):
                if config.tensor_names is None or specs[index].name in config.tensor_names:
                    builder.add(operator, location, stage, owner_id, io, index, descriptors[index], specs[index])
    if not builder.records:
        raise ValueError("L1 dump filters selected no task Tensor records")
    return tuple(builder.records)


def _budget_ways_out(records: Any, config: Any, budget_bytes: int) -> str:
    """The ways to fit an L1 launch within the Device memory budget, for the ``MemoryError``."""
    count = max(1, len(records))
    per_record = (budget_bytes - L1_DUMP_PAYLOAD_BASE) // count // 64 * 64  # payload slots are 64-byte aligned
    fits = f"about {per_record} bytes each fit this budget" if per_record >= 64 else "a cap stores a prefix"
    return (
        f"store a prefix of each of the {len(records)} records with max_bytes_per_tensor= ({fits}; the "
        "records are then truncated), keep statistics instead of the "
        'payloads that do not fit with on_budget="statistics", select fewer records (stages, task_ids, owner_ids, '
        "io), or raise device_memory_budget_mb"
    )


def prepare_l1_dump(
    runtime: Any, graph: Any, parameters: Sequence[Any], config: Any, *, rank: int, device: Any
) -> PreparedL1Dump:
    """Plan the records, check the ABI and memory limits, and allocate the Device buffer.

    Args:
        runtime: The prepared runtime.
        graph: Its graph.
        parameters: The launch's ABI parameters.
        config: The dump config.
        rank: Job-global rank.
        device: The kernel's device.
    """
    if runtime is None:
        raise ValueError("L1 Tensor dump requires the prepared MegaKernel runtime")
    records = layout_records(build_record_plans(runtime, graph, parameters, config, rank), config)
    budget_bytes = config.device_memory_budget_mb * 1024 * 1024
    pool = pool_for(records, config)  # conditional statistics records copy into a budget-bounded pool
    total_bytes = align_up(max(buffer_end(records), pool[0] + pool[1]))
    if total_bytes >= 1 << 32:
        raise ValueError("L1 dump buffer exceeds the 32-bit payload-offset ABI")
    if total_bytes > budget_bytes:
        raise MemoryError(
            f"L1 dump requires {total_bytes} Device bytes, exceeding "
            f"device_memory_budget_mb={config.device_memory_budget_mb} ({budget_bytes} bytes); "
            f"{_budget_ways_out(records, config, budget_bytes)}"
        )
    packed = pack_l1_buffer([record.entry for record in records], pool=pool)
    # Only the header and record table carry information before the launch; the payload area is zeros,
    # so the Device buffer is allocated zeroed and just that prefix is copied over.
    buffer = torch.zeros(len(packed), dtype=torch.uint8, device=device)
    table = torch.frombuffer(memoryview(packed)[:L1_DUMP_PAYLOAD_BASE], dtype=torch.uint8)
    buffer[:L1_DUMP_PAYLOAD_BASE].copy_(table)
    runtime_config = runtime.normal_tensor.clone()
    runtime_config[RuntimeConfigC.diagnostic_mode.offset] = L1_DIAGNOSTIC_MODE
    return PreparedL1Dump(runtime_config=runtime_config, buffer=buffer, records=records, total_bytes=len(packed))
