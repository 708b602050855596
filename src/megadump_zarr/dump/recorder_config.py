"""``RecorderConfig``: the flight recorder's ring, triggers and limits (``TensorDumpConfig(recorder=...)``)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
import math
from pathlib import Path
from typing import Any

__all__ = ["RecorderConfig"]


def _count(name: str, value: Any, *, minimum: int, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        kind = "an integer or None" if optional else "an integer"
        raise TypeError(f"RecorderConfig.{name} must be {kind}, got {value!r}")
    if value < minimum:
        raise ValueError(f"RecorderConfig.{name} must be >= {minimum}, got {value!r}")


def _positive_float(name: str, value: Any, *, optional: bool = False, zero: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"RecorderConfig.{name} must be a number{' or None' if optional else ''}, got {value!r}")
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        bound = ">= 0" if zero else "> 0"
        raise ValueError(f"RecorderConfig.{name} must be a finite number {bound}, got {value!r}")


@dataclass(frozen=True)
class RecorderConfig:
    """A flight recorder: every selected step is captured (tensors and their device statistics) and kept in a
    bounded ring; nothing is exported until a trigger fires. Then the ring's steps and the triggering step
    are committed as one ordinary window (attribute ``recorderTrigger`` says what fired), then the
    ``after_steps`` following steps as another; the recorder goes on.

    Args:
        ring_steps: Steps kept before the triggering step (K, >= 0; the oldest is dropped first).
        ring_bytes: Most payload bytes the ring holds (> 0); a step that would pass it drops the oldest
            steps, and a step larger than it on its own is not kept (a trigger on it still commits it).
        spill_dir: A local scratch directory: each kept step's payloads are written there and read back
            from memory-mapped files when committed (host memory stays small); None keeps them in memory.
        after_steps: Steps recorded after the trigger, committed as a second window (>= 0).
        cooldown_steps: Steps after a trigger during which no trigger fires (>= 0; the after-steps are
            never triggers either).
        max_triggers: Most triggers that commit windows (>= 1); None: no cap. Past it the recorder keeps
            no step (captures stop).
        nonfinite: Fire when a record holds NaN or Inf and was finite the last time it was seen.
        norm_k: Fire when a record's L2 norm is more than ``norm_k`` robust spreads from the median of its
            last ``norm_history`` norms (spread: ``max(1.4826 * MAD, norm_floor * |median|)``); None: off.
        norm_history: How many past norms of each record identity the baseline holds (N, >= 2).
        norm_min_history: Norms a record needs before the norm trigger looks at it (>= 1, <= N).
        norm_floor: The spread's floor relative to the median (>= 0): a constant weight's norm has no MAD.
        predicate: ``row -> bool``, called with each statistics row as a dict (keys ``rank``, ``step``,
            ``kernel``, ``direction``, ``stage``, ``task_id``, ``owner_id``, ``core_type``, ``core_id``, ``io``,
            ``index``, ``name``, ``dtype``, ``shape``, ``element_count``, ``nan_count``, ``inf_count``,
            ``min``, ``max``, ``mean``, ``l2norm``); a true result fires. One that raises is reported once
            and disabled.
        replicas: Shell-style tensor name patterns of records that should be identical on every rank
            (a replicated weight, an all-reduced gradient); written into each window for ``megadump watch``.
    """

    ring_steps: int = 8
    ring_bytes: int = 256 << 20
    spill_dir: str | Path | None = None
    after_steps: int = 0
    cooldown_steps: int = 0
    max_triggers: int | None = 8
    nonfinite: bool = True
    norm_k: float | None = 8.0
    norm_history: int = 32
    norm_min_history: int = 8
    norm_floor: float = 0.01
    predicate: Callable[[dict[str, Any]], Any] | None = None
    replicas: str | Collection[str] | None = None

    def __post_init__(self) -> None:
        """Validate every field (messages name the field and the value)."""
        _count("ring_steps", self.ring_steps, minimum=0)
        _count("ring_bytes", self.ring_bytes, minimum=1)
        _count("after_steps", self.after_steps, minimum=0)
        _count("cooldown_steps", self.cooldown_steps, minimum=0)
        _count("max_triggers", self.max_triggers, minimum=1, optional=True)
        _count("norm_history", self.norm_history, minimum=2)
        _count("norm_min_history", self.norm_min_history, minimum=1)
        if self.norm_min_history > self.norm_history:
            raise ValueError(
                f"RecorderConfig.norm_min_history must be <= norm_history ({self.norm_history}), "
                f"got {self.norm_min_history!r}"
            )
        _positive_float("norm_k", self.norm_k, optional=True)
        _positive_float("norm_floor", self.norm_floor, zero=True)
        if not isinstance(self.nonfinite, bool):
            raise TypeError(f"RecorderConfig.nonfinite must be a bool, got {self.nonfinite!r}")
        if self.predicate is not None and not callable(self.predicate):
            raise TypeError(f"RecorderConfig.predicate must be callable or None, got {self.predicate!r}")
        if self.spill_dir is not None:
            if not isinstance(self.spill_dir, (str, Path)) or not str(self.spill_dir) or "://" in str(self.spill_dir):
                raise ValueError(f"RecorderConfig.spill_dir must be a local directory path, got {self.spill_dir!r}")
            object.__setattr__(self, "spill_dir", Path(self.spill_dir).expanduser())
        object.__setattr__(self, "replicas", _patterns(self.replicas))
        if not self.nonfinite and self.norm_k is None and self.predicate is None:
            raise ValueError(
                "RecorderConfig needs a trigger: nonfinite=True, a norm_k, or a predicate "
                f"(got nonfinite={self.nonfinite!r}, norm_k={self.norm_k!r}, predicate={self.predicate!r})"
            )


def _patterns(value: Any) -> tuple[str, ...] | None:
    if value is None:
        return None
    values = (value,) if isinstance(value, str) else tuple(value) if isinstance(value, Collection) else None
    if not values or not all(isinstance(v, str) and v for v in values):
        raise ValueError(f"RecorderConfig.replicas must be non-empty name patterns, got {value!r}")
    return values
