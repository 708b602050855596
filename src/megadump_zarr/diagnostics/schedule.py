"""Diagnostic step actions and the profiler-style step schedule."""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

__all__ = ["DiagnosticAction", "schedule"]


class DiagnosticAction(Enum):
    """What a diagnostic session does during one user step (torch.profiler.ProfilerAction's shape)."""

    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


def _non_negative(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"schedule {name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"schedule {name} must be non-negative, got {value}")
    return value


def schedule(
    *, wait: int, warmup: int, active: int, repeat: int = 0, skip_first: int = 0
) -> Callable[[int], DiagnosticAction]:
    """Return a step → action function with ``torch.profiler.schedule`` semantics.

    After ``skip_first`` steps, cycles of ``wait`` idle steps, ``warmup`` steps and ``active``
    recording steps repeat ``repeat`` times (0 = forever); the last active step of a cycle is
    ``RECORD_AND_SAVE``, which closes the dump window.

    Args:
        wait: Idle steps at the start of each cycle.
        warmup: Warm-up steps (nothing is copied) before recording.
        active: Recording steps per cycle; must be positive.
        repeat: Number of cycles, 0 for unlimited.
        skip_first: Steps ignored before the first cycle.
    """
    wait = _non_negative("wait", wait)
    warmup = _non_negative("warmup", warmup)
    active = _non_negative("active", active)
    repeat = _non_negative("repeat", repeat)
    skip_first = _non_negative("skip_first", skip_first)
    if active == 0:
        raise ValueError("schedule active must be positive, got 0")
    cycle = wait + warmup + active

    def action_for(step: int) -> DiagnosticAction:
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"schedule step must be a non-negative int, got {step!r}")
        if step < skip_first:
            return DiagnosticAction.NONE
        step -= skip_first
        if repeat and step // cycle >= repeat:
            return DiagnosticAction.NONE
        position = step % cycle
        if position < wait:
            return DiagnosticAction.NONE
        if position < wait + warmup:
            return DiagnosticAction.WARMUP
        return DiagnosticAction.RECORD if position < cycle - 1 else DiagnosticAction.RECORD_AND_SAVE

    return action_for
