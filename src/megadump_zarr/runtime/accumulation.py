"""A scheduling-dependent reduction order, on purpose: the fixture of a determinism check.

On a device, a split-K reduction whose partial sums are added in the order the workers finish gives
float results that differ in the last bits from run to run. :class:`AccumulationOrder` reproduces that in
the reference runtime: ``MegaKernel(..., accumulation_order=AccumulationOrder(("expert_down",), seed=1))``
makes the named stages' tile functions that reduce through :func:`accumulate` (or :func:`split_k_matmul`)
add their partial sums in an order permuted by the run's ``seed``, the task and the worker (core) it runs
on. Two runs with different seeds (a different scheduling) differ bit for bit in those stages' outputs and
everything computed from them; ``megadump compare A B --bitwise --by core`` names those tasks and cores.
Without the option (the default) every reduction runs in its natural order and runs are bitwise identical.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["AccumulationOrder", "accumulate", "split_k_matmul"]


@dataclass(frozen=True)
class AccumulationOrder:
    """Which stages reduce in a worker-dependent order, and the run's scheduling seed.

    Args:
        stages: Stage (operator diagnostic) names whose reductions are permuted; at least one.
        seed: The run's scheduling: two runs with different seeds add partial sums in different orders.
    """

    stages: tuple[str, ...]
    seed: int = 0

    def __post_init__(self) -> None:
        stages = self.stages
        if isinstance(stages, str) or not isinstance(stages, (tuple, list)) or not stages:
            raise ValueError(f"AccumulationOrder.stages must be a non-empty tuple of stage names, got {stages!r}")
        if not all(isinstance(s, str) and s for s in stages):
            raise ValueError(f"AccumulationOrder.stages must hold non-empty stage names, got {stages!r}")
        object.__setattr__(self, "stages", tuple(stages))
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"AccumulationOrder.seed must be an int >= 0, got {self.seed!r}")

    def order(self, parts: int, stage: str, task_id: int, core_id: int | None) -> list[int]:
        """The order in which ``parts`` partial sums of one task are added (natural for other stages): a
        rotation by ``seed + task_id + core_id`` (reversed for every other block of ``parts`` seeds), so
        consecutive seeds always give a task different orders.

        Args:
            parts: How many partial sums.
            stage: The task's stage.
            task_id: The task.
            core_id: The worker (core) it runs on (None: not known, taken as 0).
        """
        order = list(range(parts))
        if stage not in self.stages or parts < 2:
            return order
        start = (self.seed + task_id + (core_id or 0)) % parts  # the worker whose partial sum lands first
        order = order[start:] + order[:start]
        return order[::-1] if (self.seed // parts) % 2 else order


def accumulate(tile: Any, parts: Sequence[torch.Tensor]) -> torch.Tensor:
    """The sum of ``parts``, added one by one in the tile's accumulation order.

    Args:
        tile: The executor's :class:`~megadump_zarr.runtime.executor.Tile` (its ``accumulation_order``
            and ``core_id``; a tile without them adds in natural order).
        parts: Partial sums of one shape (at least one).

    Raises:
        ValueError: No parts.
    """
    if not parts:
        raise ValueError("accumulate needs at least one partial sum")
    option = getattr(tile, "accumulation_order", None)
    order = list(range(len(parts)))
    if option is not None:
        task = tile.task
        order = option.order(len(parts), task.stage, task.task_id, getattr(tile, "core_id", None))
    total = parts[order[0]].clone()
    for k in order[1:]:
        total += parts[k]
    return total


def split_k_matmul(tile: Any, a: torch.Tensor, b: torch.Tensor, parts: int = 4) -> torch.Tensor:
    """``a @ b`` for a tile: a plain matmul unless the tile's stage has a permuted accumulation order, then
    the sum of ``parts`` split-K partial products in that order (last-bit differences, as on a device).

    Args:
        tile: The executor's tile.
        a: Left operand (``m × k``).
        b: Right operand (``k × n``).
        parts: Split-K pieces (at most ``k``).
    """
    option = getattr(tile, "accumulation_order", None)
    if option is None or tile.task.stage not in option.stages or a.shape[-1] < 2:
        return a @ b
    k = a.shape[-1]
    bounds = [round(i * k / min(parts, k)) for i in range(min(parts, k) + 1)]
    pieces = [a[..., lo:hi] @ b[lo:hi] for lo, hi in zip(bounds, bounds[1:])]
    return accumulate(tile, pieces)
