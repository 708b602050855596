"""Fault injection into the reference runtime: one task of one stage computes a wrong output.

::

    from tests._faults import inject_fault

    block = MoEBlock()
    with inject_fault(block.expert_kernel, "expert_down", owner=1, delta=0.5) as fault:
        ...  # run the block under a dump; expert_down's task for expert 1 writes ys + 0.5
    fault.calls  # how many tiles were perturbed

The operator's ``tile_fn`` is wrapped: it runs as usual, then every element of its output operands that
the tile changed gets ``delta`` added (so exactly what that task wrote is wrong, nothing else). Compiled
tasks call ``task.operator.tile_fn`` at run time, so the wrapper applies to cached runtimes too.
"""

from __future__ import annotations

from collections.abc import Iterator
import contextlib
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Fault:
    """What :func:`inject_fault` did."""

    stage: str
    owner: int | None
    start: int | None
    delta: float
    calls: int = 0
    task_ids: list[int] = field(default_factory=list)


def _operator(kernel: Any, stage: str) -> Any:
    for operator in kernel.graph.operators:
        if operator.name == stage:
            return operator
    raise ValueError(
        f"kernel {getattr(kernel, 'kernel_name', kernel)!r} has no stage {stage!r}; "
        f"stages: {[o.name for o in kernel.graph.operators]}"
    )


@contextlib.contextmanager
def inject_fault(
    kernel: Any, stage: str, *, owner: int | None = None, start: int | None = None, delta: float = 0.5
) -> Iterator[Fault]:
    """Make one task of ``stage`` wrong: the tile for ``owner`` (owner-split stages) or the tile whose
    first row is ``start`` (row-split stages) adds ``delta`` to every output element it wrote.

    Args:
        kernel: A ``MegaKernel`` (e.g. ``MoEBlock().expert_kernel``).
        stage: The operator (stage) name.
        owner: The owner id of the task to perturb.
        start: The first row of the tile to perturb (when ``owner`` is None).
        delta: Added to the perturbed elements.
    """
    if owner is None and start is None:
        raise ValueError("inject_fault needs owner= or start=")
    operator = _operator(kernel, stage)
    original = operator.tile_fn
    fault = Fault(stage, owner, start, delta)
    positions = [spec.param_position for spec in operator.outputs]

    def wrapped(tile: Any) -> None:
        chosen = tile.owner_id == owner if owner is not None else tile.start == start
        if not chosen:
            original(tile)
            return
        before = [tile.params[p].clone() for p in positions]
        original(tile)
        for p, old in zip(positions, before):
            out = tile.params[p]
            written = out != old
            with torch.no_grad():
                out[written] = out[written] + torch.tensor(delta, dtype=out.dtype, device=out.device)
        fault.calls += 1
        fault.task_ids.append(int(tile.task.task_id))

    operator.tile_fn = wrapped
    try:
        yield fault
    finally:
        operator.tile_fn = original


def fail_once_for_owner(kernel: Any, stage: str, owner: int) -> None:
    """Make ``stage``'s tile for ``owner`` raise ``RuntimeError("simulated hang")`` once (a launch that dies
    midway: the tasks before it captured, the rest pending); later launches run as usual.

    Args:
        kernel: A ``MegaKernel`` (e.g. ``MoEBlock().expert_kernel``).
        stage: The operator (stage) name.
        owner: The owner id whose tile fails.
    """
    operator = _operator(kernel, stage)
    original = operator.tile_fn

    def hang(tile: Any) -> None:
        if tile.owner_id == owner:
            operator.tile_fn = original
            raise RuntimeError("simulated hang")
        original(tile)

    operator.tile_fn = hang


def dump_demo_step(
    root: Any,
    level: str,
    *,
    fault: dict[str, Any] | None = None,
    weight_bump: float = 0.0,
    stages: tuple[str, ...] = ("expert_up", "expert_down", "combine"),
    layout: str = "tasks",
) -> Fault | None:
    """One forward step of the demo block (default ``DemoConfig``, deterministic) under an L0 or L1 dump.

    Args:
        root: The dump root to write.
        level: ``"L0"`` (every kernel) or ``"L1"`` (``stages`` of ``moe_experts``).
        fault: Keyword arguments of :func:`inject_fault`, plus ``kernel`` (an attribute of ``MoEBlock``,
            default ``"expert_kernel"``).
        weight_bump: Added to ``w_down[1]`` before the step (a wrong weight, an input of the expert kernel).
        stages: L1 stages to dump.
        layout: The L1 layout (``"tasks"`` or ``"packs"``).

    Returns:
        The injected :class:`Fault`, or None.
    """
    from megadump_zarr import TensorDumpConfig, tensor_dump
    from megadump_zarr.demo.model import DemoConfig, MoEBlock

    block = MoEBlock(DemoConfig())
    if weight_bump:
        with torch.no_grad():
            block.w_down[1] += weight_bump
    config = (
        TensorDumpConfig(root, level="L1", kernel_names="moe_experts", stages=stages, layout=layout)
        if level == "L1"
        else TensorDumpConfig(root, level="L0")
    )
    injected = None
    with tensor_dump(config) as dumper:
        if fault is not None:
            options = dict(fault)
            kernel = getattr(block, options.pop("kernel", "expert_kernel"))
            with inject_fault(kernel, **options) as injected:
                block(block.make_input())
        else:
            block(block.make_input())
        dumper.step()
    return injected
