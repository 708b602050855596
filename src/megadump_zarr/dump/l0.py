"""L0: logical tensors at the kernel boundary, with their roles and stage ports."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from megadump_zarr.runtime import GraphTensor, operator_diagnostic_name

__all__ = ["L0Tensor", "describe_graph_tensors"]


@dataclass(frozen=True)
class L0Tensor:
    """A logical tensor and the operator ports that produce and consume it.

    Args:
        graph_tensor: Name, parameter position, role, producers, consumers, declared shape.
        ports: ``{"stage", "io", "index"}`` for every operator port bound to it, in execution order.
    """

    graph_tensor: GraphTensor
    ports: tuple[dict[str, Any], ...]

    @property
    def name(self) -> str:
        """Logical name."""
        return self.graph_tensor.name

    @property
    def role(self) -> str:
        """Graph-derived role."""
        return self.graph_tensor.role

    @property
    def param_position(self) -> int:
        """Native parameter position."""
        return self.graph_tensor.param_position


def describe_graph_tensors(graph: Any) -> tuple[L0Tensor, ...]:
    """Every logical tensor of ``graph`` with its role and ports.

    Args:
        graph: A runtime graph.
    """
    ports: dict[str, list[dict[str, Any]]] = {}
    for operator in graph.topological_sort():
        stage = operator_diagnostic_name(operator)
        for io, specs in (("input", operator.inputs), ("output", operator.outputs)):
            for index, spec in enumerate(specs):
                ports.setdefault(spec.name, []).append({"stage": stage, "io": io, "index": index})
    return tuple(L0Tensor(tensor, tuple(ports.get(tensor.name, ()))) for tensor in graph.tensors())
