"""L1 task operand views: the default (split-axis tile) view, resolver contexts and bound checks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from typing import Any

import torch

from megadump_zarr.runtime import operator_diagnostic_name

__all__ = ["L1TensorView", "L1TensorViewContext", "default_tensor_view", "resolve_view", "validate_view_bounds"]


@dataclass(frozen=True)
class L1TensorView:
    """A resolved task operand the device worker copies.

    Args:
        source_offset_bytes: Byte offset from the operand's ABI parameter.
        shape: Task-local logical shape (contiguous from the offset).
        note: Optional note stored with the record.
    """

    source_offset_bytes: int
    shape: tuple[int, ...]
    note: str = ""


@dataclass
class L1TensorViewContext:
    """What an operator's ``diagnostic_view_resolver`` is given for one task operand."""

    operator: Any
    task_id: int
    owner_id: int | None
    task_desc: Any
    tensor_desc: Any
    tensor_spec: Any
    io: str
    index: int
    parameters: Sequence[Any]
    runtime_config: Any
    rank: int
    stage: str
    default_view: L1TensorView
    parameter_cache: dict[int, Any]
    core_id: int = 0
    owner_context: Any = None

    def parameter_cpu(self, position: int) -> Any:
        """One ABI parameter on CPU; the debug-only transfer is cached per launch.

        Args:
            position: Zero-based native parameter position.
        """
        if position not in self.parameter_cache:
            parameter = self.parameters[position]
            if not torch.is_tensor(parameter):
                raise TypeError(f"L1 dump parameter {position} must be torch.Tensor, got {type(parameter).__name__}")
            self.parameter_cache[position] = parameter.detach().contiguous().cpu()
        return self.parameter_cache[position]

    def make_view(
        self, shape: Sequence[int], *, source_offset_bytes: int | None = None, note: str = ""
    ) -> L1TensorView:
        """A checked view relative to this operand's ABI parameter.

        Args:
            shape: Task-local contiguous shape.
            source_offset_bytes: Byte offset from the parameter's data pointer (default: the default view's).
            note: Explanation kept with the record.
        """
        resolved_shape = tuple(int(dim) for dim in shape)
        if any(dim < 0 for dim in resolved_shape):
            raise ValueError(f"L1 dump view shape must be non-negative, got {resolved_shape}")
        offset = self.default_view.source_offset_bytes if source_offset_bytes is None else source_offset_bytes
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise ValueError(f"L1 dump source offset must be a non-negative integer, got {offset!r}")
        return L1TensorView(offset, resolved_shape, note)


def default_tensor_view(
    operator: Any,
    task_desc: Any,
    tensor_desc: Any,
    tensor_spec: Any,
    io: str,
    index: int,
    *,
    allow_strided: bool = False,
) -> L1TensorView:
    """The static task range of one operand: its split axis cut to the tile, the final tile clipped.

    Args:
        operator: The operator.
        task_desc: Native TaskDesc (``task_split_value`` = rows per tile).
        tensor_desc: Native TensorDesc (``base_ptr_offset`` in elements, ``data_type`` = element bytes).
        tensor_spec: Graph spec (declared shape).
        io: ``input`` or ``output``.
        index: Port index.
        allow_strided: Skip the contiguity and row-alignment refusals (a resolver will decide).
    """
    if tensor_desc.dynamic_shape:
        raise ValueError(
            f"L1 dump stage {operator_diagnostic_name(operator)!r} Tensor {tensor_spec.name!r} has dynamic shape; "
            "configure OperatorNode.diagnostic_view_resolver"
        )
    shape = [int(dim) for dim in tensor_spec.shape]
    axis = _split_axis(operator, io, index)
    if axis is not None and shape:
        if not 0 <= axis < len(shape):
            raise ValueError(f"L1 dump split dimension {axis} is invalid for Tensor {tensor_spec.name!r} shape {shape}")
        width = shape[axis]
        count = min(width, int(task_desc.task_split_value))
        if count < width and prod(shape[:axis]) > 1 and not allow_strided:
            raise ValueError("L1 default view cannot copy a non-contiguous split; configure diagnostic_view_resolver")
        row_elements = prod(shape[axis + 1 :])
        if row_elements and width:
            base = int(tensor_desc.base_ptr_offset)
            if base % row_elements and not allow_strided:
                raise ValueError("L1 default split offset is not row-aligned; configure diagnostic_view_resolver")
            first_row = base // row_elements % width
            count = min(count, width - first_row)
        shape[axis] = count
    return L1TensorView(int(tensor_desc.base_ptr_offset) * int(tensor_desc.data_type), tuple(shape))


def _split_axis(operator: Any, io: str, index: int) -> int | None:
    split = operator.split_spec
    if io == "input":
        for input_index, dim in split.split_inputs or ():
            if input_index == index:
                return None if dim == -1 else int(dim)
        return None
    if index >= len(split.split_output_dims):
        return None
    dim = int(split.split_output_dims[index])
    return None if dim == -1 else dim


def resolve_view(context_fields: dict[str, Any]) -> L1TensorView:
    """The view of one selected operand: the operator's resolver's, else the default one.

    Args:
        context_fields: ``L1TensorViewContext`` fields except ``default_view``.
    """
    operator, tensor_desc, spec, stage = (
        context_fields[k] for k in ("operator", "tensor_desc", "tensor_spec", "stage")
    )
    resolver = getattr(operator, "diagnostic_view_resolver", None)
    if tensor_desc.dynamic_shape:
        default = L1TensorView(
            int(tensor_desc.base_ptr_offset) * int(tensor_desc.data_type), tuple(int(d) for d in spec.shape)
        )
    else:
        default = default_tensor_view(
            operator,
            context_fields["task_desc"],
            tensor_desc,
            spec,
            context_fields["io"],
            context_fields["index"],
            allow_strided=resolver is not None,
        )
    if resolver is None:
        if tensor_desc.dynamic_shape:
            raise ValueError(f"L1 dump stage {stage!r} Tensor {spec.name!r} needs a diagnostic_view_resolver")
        return default
    if not callable(resolver):
        raise TypeError(f"L1 dump diagnostic_view_resolver for stage {stage!r} must be callable")
    view = resolver(L1TensorViewContext(default_view=default, **context_fields))
    if not isinstance(view, L1TensorView):
        raise TypeError(f"L1 dump resolver for stage {stage!r} must return L1TensorView, got {type(view).__name__}")
    return view


def validate_view_bounds(parameter: Any, view: L1TensorView, tensor_name: str) -> tuple[torch.dtype, int]:
    """Check a view against its ABI parameter; return the dtype and the view's full byte count.

    Args:
        parameter: The ABI parameter.
        view: The resolved view.
        tensor_name: For messages.
    """
    if not torch.is_tensor(parameter):
        raise TypeError(f"L1 dump Tensor {tensor_name!r} must map to torch.Tensor, got {type(parameter).__name__}")
    if not parameter.is_contiguous():
        raise ValueError(f"L1 dump Tensor {tensor_name!r} ABI parameter must be contiguous")
    offset = view.source_offset_bytes
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset < 1 << 64:
        raise ValueError(f"L1 dump Tensor {tensor_name!r} source offset must be a non-negative uint64")
    if any(isinstance(dim, bool) or not isinstance(dim, int) or dim < 0 for dim in view.shape):
        raise ValueError(f"L1 dump Tensor {tensor_name!r} view shape must contain non-negative integers")
    element_size = int(parameter.element_size())
    if offset % element_size:
        raise ValueError(f"L1 dump Tensor {tensor_name!r} source offset must align to its element byte size")
    full_bytes = prod(view.shape) * element_size
    parameter_bytes = int(parameter.numel()) * element_size
    if offset + full_bytes > parameter_bytes:
        raise ValueError(
            f"L1 dump view for Tensor {tensor_name!r} exceeds its ABI parameter: "
            f"offset={offset}, bytes={full_bytes}, parameter_bytes={parameter_bytes}"
        )
    return parameter.dtype, full_bytes
