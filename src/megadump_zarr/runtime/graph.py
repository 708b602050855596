"""The MegaKernel compute graph: tensor specs, split specs, operators and graph-derived tensor roles."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
import heapq
from math import prod
from typing import Any

import torch

from megadump_zarr.runtime.abi import TaskAiCoreType

__all__ = [
    "Graph",
    "GraphTensor",
    "OperatorNode",
    "SplitSpec",
    "TensorSpec",
    "operator_diagnostic_name",
]

_CORE_TYPES = {
    "cube": TaskAiCoreType.TASK_AICORE_CUBE,
    "vector": TaskAiCoreType.TASK_AICORE_VECTOR,
    "mix": TaskAiCoreType.TASK_AICORE_MIX,
}


@dataclass(frozen=True)
class TensorSpec:
    """One operand of an operator, bound to a native ABI parameter.

    Args:
        name: Logical tensor name; equal names across operators are the same logical tensor.
        shape: Declared shape.
        dtype: Element type.
        param_position: Zero-based position in the kernel's native parameter list.
        dims: Optional dimension names (one per axis) used by the store; defaults to ``dim_0``, ...
        dynamic: True when the task-local extent is data-dependent (the ABI's ``dynamic_shape``);
            such operands need the operator's ``diagnostic_view_resolver`` for L1 dumps.
    """

    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    param_position: int
    dims: tuple[str, ...] | None = None
    dynamic: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"TensorSpec name must be a non-empty string, got {self.name!r}")
        object.__setattr__(self, "shape", tuple(int(dim) for dim in self.shape))
        if any(dim < 0 for dim in self.shape):
            raise ValueError(f"TensorSpec {self.name!r} shape must be non-negative, got {self.shape}")
        if not isinstance(self.dtype, torch.dtype):
            raise TypeError(f"TensorSpec {self.name!r} dtype must be a torch.dtype, got {self.dtype!r}")
        if isinstance(self.param_position, bool) or not isinstance(self.param_position, int) or self.param_position < 0:
            raise ValueError(
                f"TensorSpec {self.name!r} param_position must be a non-negative int, got {self.param_position!r}"
            )
        if self.dims is not None:
            object.__setattr__(self, "dims", tuple(self.dims))
            if len(self.dims) != len(self.shape):
                raise ValueError(f"TensorSpec {self.name!r} has {len(self.dims)} dims for shape {self.shape}")

    @property
    def dtype_size(self) -> int:
        """Element size in bytes (the ABI's ``data_type``)."""
        return torch.empty((), dtype=self.dtype).element_size()

    @property
    def dim_names(self) -> tuple[str, ...]:
        """Dimension names, generated when not declared."""
        return self.dims if self.dims is not None else tuple(f"dim_{axis}" for axis in range(len(self.shape)))

    def row_elements(self, axis: int) -> int:
        """Elements in one slice along ``axis`` (the product of the trailing extents).

        Args:
            axis: Split axis.
        """
        return prod(self.shape[axis + 1 :])


@dataclass(frozen=True)
class SplitSpec:
    """How an operator's tiles cut its operands.

    Args:
        split_inputs: ``(input index, dim)`` pairs; dim -1 means not split.
        split_output_dims: One dim per output; -1 means not split.
    """

    split_inputs: tuple[tuple[int, int], ...] = ()
    split_output_dims: tuple[int, ...] = ()


@dataclass(eq=False)
class OperatorNode:
    """One graph operator; each becomes a diagnostic stage and one or more tasks.

    Args:
        name: Diagnostic (stage) name.
        core_type: ``"cube"``, ``"vector"`` or ``"mix"`` (or a ``TaskAiCoreType``).
        inputs: Input operand specs, in ABI order.
        outputs: Output operand specs, in ABI order.
        tile_fn: ``tile_fn(tile: Tile) -> None`` computing the operator on one tile in place.
        split_spec: Which operand axes tiles split.
        tile_rows: Rows per tile along the split axis (the task's ``task_split_value``); None = one tile.
        owners: When given, one task per owner id (for example one per expert) instead of row tiles.
        diagnostic_view_resolver: Optional ``resolver(L1TensorViewContext) -> L1TensorView``.
        diagnostic_host_ports: When true, L1 dumps describe ports from the graph specs (dynamic), not
            from the native TaskDesc arrays.
    """

    name: str
    core_type: Any
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    tile_fn: Callable[[Any], None]
    split_spec: SplitSpec = field(default_factory=SplitSpec)
    tile_rows: int | None = None
    owners: Sequence[int] | None = None
    diagnostic_view_resolver: Callable[[Any], Any] | None = None
    diagnostic_host_ports: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.core_type, str):
            if self.core_type not in _CORE_TYPES:
                raise ValueError(
                    f"operator {self.name!r} core_type must be one of {sorted(_CORE_TYPES)}, got {self.core_type!r}"
                )
            self.core_type = _CORE_TYPES[self.core_type]
        self.core_type = TaskAiCoreType(self.core_type)
        self.inputs = tuple(self.inputs)
        self.outputs = tuple(self.outputs)
        if self.tile_rows is not None and (isinstance(self.tile_rows, bool) or self.tile_rows <= 0):
            raise ValueError(f"operator {self.name!r} tile_rows must be positive, got {self.tile_rows!r}")
        if self.owners is not None:
            self.owners = tuple(int(owner) for owner in self.owners)

    def split_axis(self, io: str, index: int) -> int | None:
        """The split axis of one port, or None.

        Args:
            io: ``"input"`` or ``"output"``.
            index: Port index.
        """
        if io == "input":
            for input_index, dim in self.split_spec.split_inputs:
                if input_index == index:
                    return None if dim == -1 else int(dim)
            return None
        dims = self.split_spec.split_output_dims
        if index >= len(dims) or dims[index] == -1:
            return None
        return int(dims[index])


def operator_diagnostic_name(operator: Any) -> str:
    """The stage name an operator is dumped under.

    Args:
        operator: A graph operator.
    """
    return str(getattr(operator, "name"))


@dataclass(frozen=True)
class GraphTensor:
    """A logical tensor with its graph-derived role.

    Args:
        name: Logical name.
        param_position: Native ABI parameter position.
        role: ``external_input`` (consumed, never produced), ``stage_output`` (produced and consumed)
            or ``final_output`` (produced, never consumed).
        producers: Stage names writing it, in order.
        consumers: Stage names reading it, in order.
        declared_shape: Shape from the first spec naming it.
        spec: That spec.
    """

    name: str
    param_position: int
    role: str
    producers: tuple[str, ...]
    consumers: tuple[str, ...]
    declared_shape: tuple[int, ...]
    spec: TensorSpec


class Graph:
    """An ordered operator graph (program order is a valid execution order).

    Args:
        operators: Operators in program order.
    """

    def __init__(self, operators: Sequence[OperatorNode]) -> None:
        self.operators = tuple(operators)
        for operator in self.operators:
            if not isinstance(operator, OperatorNode):
                raise TypeError(f"Graph operators must be OperatorNode, got {type(operator).__name__}")
        self._check_tensor_bindings()

    def _check_tensor_bindings(self) -> None:
        seen: dict[str, TensorSpec] = {}
        for operator in self.operators:
            for spec in (*operator.inputs, *operator.outputs):
                first = seen.setdefault(spec.name, spec)
                if first.param_position != spec.param_position or first.dtype != spec.dtype:
                    raise ValueError(
                        f"tensor {spec.name!r} is bound to parameter {first.param_position} ({first.dtype}) and "
                        f"{spec.param_position} ({spec.dtype}) in operator {operator.name!r}"
                    )

    def dependencies(self) -> list[set[int]]:
        """For each operator, the earlier operators it must wait for (read-after-write,
        write-after-read and write-after-write on logical tensors and on shared parameters)."""
        last_writer: dict[int, int] = {}
        readers: dict[int, list[int]] = {}
        deps: list[set[int]] = []
        for index, operator in enumerate(self.operators):
            mine: set[int] = set()
            for spec in operator.inputs:
                if spec.param_position in last_writer:
                    mine.add(last_writer[spec.param_position])
            for spec in operator.outputs:
                position = spec.param_position
                if position in last_writer:
                    mine.add(last_writer[position])
                mine.update(reader for reader in readers.get(position, ()) if reader != index)
            for spec in operator.inputs:
                readers.setdefault(spec.param_position, []).append(index)
            for spec in operator.outputs:
                last_writer[spec.param_position] = index
                readers[spec.param_position] = []
            mine.discard(index)
            deps.append(mine)
        return deps

    def topological_sort(self) -> list[OperatorNode]:
        """Operators in dependency order, ties broken by program order."""
        deps = self.dependencies()
        waiting = [len(d) for d in deps]
        users: dict[int, list[int]] = {}
        for index, required in enumerate(deps):
            for earlier in required:
                users.setdefault(earlier, []).append(index)
        ready = [index for index, count in enumerate(waiting) if count == 0]
        heapq.heapify(ready)
        order = []
        while ready:
            index = heapq.heappop(ready)
            order.append(self.operators[index])
            for user in users.get(index, ()):
                waiting[user] -= 1
                if waiting[user] == 0:
                    heapq.heappush(ready, user)
        return order

    def tensors(self) -> list[GraphTensor]:
        """Logical tensors in order of first appearance, with roles, producers and consumers."""
        specs: dict[str, TensorSpec] = {}
        producers: dict[str, list[str]] = {}
        consumers: dict[str, list[str]] = {}
        for operator in self.topological_sort():
            stage = operator_diagnostic_name(operator)
            for spec in operator.inputs:
                specs.setdefault(spec.name, spec)
                consumers.setdefault(spec.name, []).append(stage)
            for spec in operator.outputs:
                specs.setdefault(spec.name, spec)
                producers.setdefault(spec.name, []).append(stage)
        described = []
        for name, spec in specs.items():
            made = tuple(producers.get(name, ()))
            used = tuple(consumers.get(name, ()))
            role = "external_input" if not made else ("stage_output" if used else "final_output")
            described.append(GraphTensor(name, spec.param_position, role, made, used, spec.shape, spec))
        return described
