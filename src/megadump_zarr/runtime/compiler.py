"""Compile a graph and its parameters into tasks, worker schedules and the packed RuntimeConfig."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from math import ceil, prod
from typing import Any

import torch

from megadump_zarr.runtime.abi import (
    MAX_PORTS,
    MAX_TASKS,
    RuntimeConfigC,
    TaskAiCoreType,
    TensorDescC,
    pack_runtime_config,
)
from megadump_zarr.runtime.graph import Graph, OperatorNode, TensorSpec, operator_diagnostic_name

__all__ = [
    "CompiledTask",
    "PreparedRuntime",
    "RuntimeMetadata",
    "RuntimeSpec",
    "check_parameters",
    "compile_runtime",
    "shard_view_resolver",
    "worker_shard",
]

EXECUTION_MODES = ("event_driven", "aiv_pipeline")


@dataclass(frozen=True)
class RuntimeSpec:
    """Execution settings the dumper reads from ``runtime.spec``.

    Args:
        execution_mode: ``"event_driven"`` (each task on one worker) or ``"aiv_pipeline"`` (each task
            broadcast to every worker, each worker a row shard).
        vector_worker_stride: Workers per vector core group in event-driven mode.
        owner_context: Opaque object handed to diagnostic view resolvers (for example an expert layout).
        num_workers: Worker count.
        accumulation_order: Stages whose reductions add partial sums in a worker-dependent order
            (:class:`~megadump_zarr.runtime.accumulation.AccumulationOrder`; None: natural order).
    """

    execution_mode: str = "event_driven"
    vector_worker_stride: int = 2
    owner_context: Any = None
    num_workers: int = 8
    accumulation_order: Any = None


@dataclass(frozen=True)
class RuntimeMetadata:
    """Graph-level metadata kept beside the native config.

    Args:
        task_owner_ids: Business owner (for example expert id) per task id.
    """

    task_owner_ids: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class CompiledTask:
    """One task as the executor runs it.

    Args:
        task_id: Stable global task id (index into ``all_tasks``).
        stage: Stage (operator diagnostic) name.
        operator: The operator.
        task_index: Index of the task within its stage.
        start: First row of the tile along the split axis (None when the task is not row-split).
        stop: One past the last row.
        owner_id: Owner of an owner-split task, else None.
        core_id: The worker it is scheduled on in event-driven mode (cube and mix tasks: schedule index
            modulo half the workers; vector tasks: modulo workers / vector_worker_stride), else None.
    """

    task_id: int
    stage: str
    operator: OperatorNode
    task_index: int
    start: int | None
    stop: int | None
    owner_id: int | None
    core_id: int | None = None


@dataclass
class PreparedRuntime:
    """Everything a launch and a diagnostic session read about one compiled kernel."""

    rank: int
    kernel_name: str
    graph: Graph
    normal_tensor: torch.Tensor
    host_config: RuntimeConfigC
    metadata: RuntimeMetadata
    task_stage_names: dict[int, str]
    owner_label: str
    spec: RuntimeSpec
    tasks: tuple[CompiledTask, ...]
    device: torch.device


def worker_shard(start: int, stop: int, worker: int, num_workers: int) -> tuple[int, int]:
    """Rows ``[begin, end)`` of a tile that one broadcast worker handles (possibly empty).

    Args:
        start: First row of the tile.
        stop: One past the last row of the tile.
        worker: Worker id.
        num_workers: Workers sharing the tile.
    """
    rows = max(stop - start, 0)
    per_worker = ceil(rows / num_workers) if rows else 0
    begin = min(start + worker * per_worker, stop)
    return begin, min(begin + per_worker, stop)


def shard_view_resolver(context: Any) -> Any:
    """L1 view resolver for aiv_pipeline operators: the calling worker's row shard of the tile.

    Args:
        context: The dumper's ``L1TensorViewContext`` (uses ``default_view``, ``core_id``,
            ``runtime_config.num_workers``, ``tensor_spec``, ``make_view``).
    """
    spec = context.tensor_spec
    axis = context.operator.split_axis(context.io, context.index)
    default = context.default_view
    if axis is None:
        return default
    element_size = spec.dtype_size
    row_bytes = spec.row_elements(axis) * element_size
    start = default.source_offset_bytes // row_bytes if row_bytes else 0
    stop = start + default.shape[axis]
    begin, end = worker_shard(start, stop, context.core_id, int(context.runtime_config.num_workers))
    shape = list(default.shape)
    shape[axis] = end - begin
    return context.make_view(shape, source_offset_bytes=begin * row_bytes)


def _split_width(operator: OperatorNode) -> int | None:
    for index, spec in enumerate(operator.outputs):
        axis = operator.split_axis("output", index)
        if axis is not None:
            return spec.shape[axis]
    for index, spec in enumerate(operator.inputs):
        axis = operator.split_axis("input", index)
        if axis is not None:
            return spec.shape[axis]
    return None


def check_parameters(graph: Graph, parameters: Sequence[Any]) -> torch.device:
    """Check every operand's parameter (tensor, dtype, size, contiguity, one device); return the device.

    Args:
        graph: The compute graph.
        parameters: The native ABI parameter list.
    """
    device = None
    for operator in graph.operators:
        for spec in (*operator.inputs, *operator.outputs):
            if spec.param_position >= len(parameters):
                raise ValueError(
                    f"operator {operator.name!r} tensor {spec.name!r} needs parameter {spec.param_position}, "
                    f"got {len(parameters)} parameters"
                )
            parameter = parameters[spec.param_position]
            if not torch.is_tensor(parameter):
                raise TypeError(
                    f"parameter {spec.param_position} ({spec.name!r}) must be a torch.Tensor, got {type(parameter).__name__}"
                )
            if parameter.dtype != spec.dtype:
                raise TypeError(
                    f"parameter {spec.param_position} ({spec.name!r}) must be {spec.dtype}, got {parameter.dtype}"
                )
            if parameter.numel() < prod(spec.shape):
                raise ValueError(
                    f"parameter {spec.param_position} ({spec.name!r}) holds {parameter.numel()} elements, "
                    f"fewer than its declared shape {spec.shape}"
                )
            if not parameter.is_contiguous():
                raise ValueError(f"parameter {spec.param_position} ({spec.name!r}) must be contiguous")
            if device is None:
                device = parameter.device
            elif parameter.device != device:
                raise ValueError(
                    f"parameter {spec.param_position} ({spec.name!r}) is on {parameter.device}, others on {device}"
                )
    return device if device is not None else torch.device("cpu")


def _tensor_desc(spec: TensorSpec, axis: int | None, start: int | None) -> TensorDescC:
    offset = start * spec.row_elements(axis) if axis is not None and start is not None else 0
    return TensorDescC(
        input_position=spec.param_position,
        data_type=spec.dtype_size,
        base_ptr_offset=offset,
        dynamic_shape=int(spec.dynamic),
    )


def _operator_tasks(operator: OperatorNode) -> list[tuple[int | None, int | None, int | None, int]]:
    """(start, stop, owner, split value) per task of one operator."""
    width = _split_width(operator)
    if operator.owners is not None:
        return [(None, None, owner, width or 0) for owner in operator.owners]
    if width is None:
        return [(None, None, None, 0)]
    tile = operator.tile_rows or max(width, 1)
    count = max(ceil(width / tile), 1)
    return [(i * tile, min((i + 1) * tile, width), None, tile) for i in range(count)]


def compile_runtime(
    graph: Graph,
    parameters: Sequence[Any],
    *,
    kernel_name: str,
    rank: int = 0,
    num_workers: int = 8,
    execution_mode: str = "event_driven",
    vector_worker_stride: int = 2,
    owner_label: str = "",
    owner_context: Any = None,
    accumulation_order: Any = None,
) -> PreparedRuntime:
    """Tile every operator, place tasks on workers and pack the RuntimeConfig on the parameters' device.

    Args:
        graph: The compute graph.
        parameters: The native ABI parameter list (tensors).
        kernel_name: Stable diagnostic name of the kernel.
        rank: Job-global rank.
        num_workers: Worker count (cube + vector workers in event-driven mode).
        execution_mode: ``"event_driven"`` or ``"aiv_pipeline"``.
        vector_worker_stride: Workers per vector core group in event-driven mode.
        owner_label: Business name of task owners (for example ``"expert"``).
        owner_context: Object handed to diagnostic view resolvers.
        accumulation_order: An :class:`~megadump_zarr.runtime.accumulation.AccumulationOrder` (None: natural).
    """
    if execution_mode not in EXECUTION_MODES:
        raise ValueError(f"execution_mode must be one of {list(EXECUTION_MODES)}, got {execution_mode!r}")
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 2:
        raise ValueError(f"num_workers must be an int >= 2, got {num_workers!r}")
    device = check_parameters(graph, parameters)
    config = RuntimeConfigC()
    config.num_workers = num_workers
    schedules: dict[TaskAiCoreType, list[int]] = {core: [] for core in TaskAiCoreType}
    tasks: list[CompiledTask] = []
    owners: dict[int, int] = {}
    stages: dict[int, str] = {}
    for operator in graph.topological_sort():
        stage = operator_diagnostic_name(operator)
        if len(operator.inputs) > MAX_PORTS or len(operator.outputs) > MAX_PORTS:
            raise ValueError(f"operator {stage!r} has more than {MAX_PORTS} inputs or outputs")
        for task_index, (start, stop, owner, split_value) in enumerate(_operator_tasks(operator)):
            task_id = len(tasks)
            if task_id >= MAX_TASKS:
                raise ValueError(f"kernel {kernel_name!r} needs more than {MAX_TASKS} tasks; raise tile_rows")
            desc = config.all_tasks[task_id]
            desc.task_index = task_index
            desc.core_type = int(operator.core_type)
            desc.num_inputs = len(operator.inputs)
            desc.num_outputs = len(operator.outputs)
            desc.task_split_value = split_value
            for index, spec in enumerate(operator.inputs):
                desc.inputs[index] = _tensor_desc(spec, operator.split_axis("input", index), start)
            for index, spec in enumerate(operator.outputs):
                desc.outputs[index] = _tensor_desc(spec, operator.split_axis("output", index), start)
            schedules[operator.core_type].append(task_id)
            core_id = None
            if execution_mode == "event_driven":
                group = (
                    num_workers // vector_worker_stride
                    if operator.core_type == TaskAiCoreType.TASK_AICORE_VECTOR
                    else num_workers // 2
                )
                core_id = (len(schedules[operator.core_type]) - 1) % max(group, 1)
            tasks.append(CompiledTask(task_id, stage, operator, task_index, start, stop, owner, core_id))
            stages[task_id] = stage
            if owner is not None:
                owners[task_id] = owner
    for slot, (core, field_name) in enumerate(
        (
            (TaskAiCoreType.TASK_AICORE_CUBE, "cube_task_indices"),
            (TaskAiCoreType.TASK_AICORE_VECTOR, "vector_task_indices"),
            (TaskAiCoreType.TASK_AICORE_MIX, "mix_task_indices"),
        )
    ):
        indices = getattr(config, field_name)
        for position, task_id in enumerate(schedules[core]):
            indices[position] = task_id
        config.task_index_num[slot] = len(schedules[core])
    config.num_tasks = len(tasks)
    spec = RuntimeSpec(execution_mode, vector_worker_stride, owner_context, num_workers, accumulation_order)
    return PreparedRuntime(
        rank=rank,
        kernel_name=kernel_name,
        graph=graph,
        normal_tensor=pack_runtime_config(config, device),
        host_config=config,
        metadata=RuntimeMetadata(owners),
        task_stage_names=stages,
        owner_label=owner_label,
        spec=spec,
        tasks=tuple(tasks),
        device=device,
    )
