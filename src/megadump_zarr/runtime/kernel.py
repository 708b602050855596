"""The torch-facing MegaKernel and its launch protocol."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from megadump_zarr.diagnostics import DiagnosticCall, LaunchContext, active_session
from megadump_zarr.runtime.compiler import PreparedRuntime, check_parameters, compile_runtime
from megadump_zarr.runtime.executor import execute
from megadump_zarr.runtime.graph import Graph

__all__ = ["MegaKernel", "megakernel_apply"]


def _checked_order(option: Any) -> Any:
    """``accumulation_order`` as given, refused unless None or an ``AccumulationOrder``."""
    from megadump_zarr.runtime.accumulation import AccumulationOrder

    if option is not None and not isinstance(option, AccumulationOrder):
        raise TypeError(f"accumulation_order must be an AccumulationOrder or None, got {type(option).__name__}")
    return option


def _checked_rank(rank: Any) -> int | None:
    """The constructor's rank as an int (None stays None); a bool, float, string or negative is refused.

    ``int(1.5)`` would silently write the window under ``rank_1/``: refuse instead, naming the value.
    numpy integers are accepted (ranks often come from arrays or ``records()``).
    """
    if rank is None:
        return None
    if isinstance(rank, (bool, np.bool_)) or not isinstance(rank, (int, np.integer)):
        raise ValueError(
            f"MegaKernel rank must be a non-negative integer or None, got {rank!r} ({type(rank).__name__})"
        )
    if rank < 0:
        raise ValueError(f"MegaKernel rank must be a non-negative integer or None, got {rank!r}")
    return int(rank)


def _current_rank(rank: Any) -> int:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return int(torch.distributed.get_rank())
    checked = _checked_rank(rank)
    return 0 if checked is None else checked


class MegaKernel:
    """A compiled graph launched as one persistent kernel.

    Args:
        graph: The compute graph.
        name: Stable diagnostic kernel name.
        num_workers: Worker count.
        execution_mode: ``"event_driven"`` or ``"aiv_pipeline"``.
        vector_worker_stride: Workers per vector group in event-driven mode.
        owner_label: Business name of task owners (``"expert"``).
        owner_context: Object handed to diagnostic view resolvers.
        rank: Rank to report when torch.distributed is not initialised.
        accumulation_order: Make the named stages' reductions add partial sums in a worker-dependent
            order (:class:`~megadump_zarr.runtime.accumulation.AccumulationOrder`: a determinism-check
            fixture); None (default): natural order, runs are bitwise identical.
    """

    def __init__(
        self,
        graph: Graph,
        *,
        name: str,
        num_workers: int = 8,
        execution_mode: str = "event_driven",
        vector_worker_stride: int = 2,
        owner_label: str = "",
        owner_context: Any = None,
        rank: int | None = None,
        accumulation_order: Any = None,
    ) -> None:
        self.graph = graph
        self.kernel_name = name
        self._options = dict(
            num_workers=num_workers,
            execution_mode=execution_mode,
            vector_worker_stride=vector_worker_stride,
            owner_label=owner_label,
            owner_context=owner_context,
            accumulation_order=_checked_order(accumulation_order),
        )
        self._rank = _checked_rank(rank)  # refused here, before any launch
        self._cache: dict[tuple, PreparedRuntime] = {}

    @property
    def rank(self) -> int:
        """torch.distributed's rank when initialised, else the given rank (default 0)."""
        return _current_rank(self._rank)

    def prepare(self, parameters: Sequence[torch.Tensor]) -> PreparedRuntime:
        """Compile (once per parameter signature) and return the prepared runtime.

        Args:
            parameters: The native parameter list.
        """
        check_parameters(
            self.graph, parameters
        )  # every launch, not only when compiling: cheap, and a cache hit must not skip it
        key = tuple((tuple(p.shape), p.dtype, str(p.device)) for p in parameters) + (self.rank,)
        runtime = self._cache.get(key)
        if runtime is None:
            runtime = compile_runtime(
                self.graph, parameters, kernel_name=self.kernel_name, rank=self.rank, **self._options
            )
            self._cache[key] = runtime
        return runtime

    def launch(self, parameters: Sequence[torch.Tensor], *, direction: str = "forward") -> PreparedRuntime:
        """Run the kernel once, letting the active diagnostic session take part.

        The session's ``prepare_call`` returns the arguments to run with; ``complete()`` follows a
        successful run, ``cancel()`` a failed one (whose exception is re-raised).

        Args:
            parameters: The native parameter list; outputs are written in place.
            direction: ``"forward"`` or ``"backward"``.
        """
        runtime = self.prepare(parameters)
        counters = torch.zeros(max(len(runtime.tasks), 1), dtype=torch.int32, device=runtime.device)
        context = LaunchContext(runtime, direction, tuple(parameters), counters)
        session = active_session()
        call = session.prepare_call(context) if session is not None else DiagnosticCall(context.ordinary_arguments())
        try:
            execute(runtime, parameters, call.arguments)
        except BaseException:
            call.cancel()
            raise
        call.complete()
        return runtime


class _KernelFunction(torch.autograd.Function):
    """Autograd bridge: forward and backward each run a MegaKernel launch."""

    @staticmethod
    def forward(ctx: Any, block: Any, *inputs: torch.Tensor) -> Any:  # noqa: D102
        outputs, saved = block.run_forward(inputs)
        ctx.block = block
        ctx.save_for_backward(*saved)
        return outputs

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> Any:  # noqa: D102
        return (None, *ctx.block.run_backward(ctx.saved_tensors, grads))


def megakernel_apply(block: Any, *inputs: torch.Tensor) -> Any:
    """Run ``block`` under autograd: ``block.run_forward(inputs) -> (outputs, saved)`` and
    ``block.run_backward(saved, grads) -> input grads`` each launch a compiled kernel.

    Args:
        block: An object with ``run_forward`` and ``run_backward``.
        inputs: Differentiable inputs.
    """
    return _KernelFunction.apply(block, *inputs)
