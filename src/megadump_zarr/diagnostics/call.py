"""What a MegaKernel launch hands a diagnostic session, and what it gets back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["DiagnosticCall", "LaunchArguments", "LaunchContext"]


@dataclass
class LaunchArguments:
    """The native arguments of one launch.

    Args:
        runtime_config: Packed RuntimeConfigC bytes (uint8 tensor on the kernel's device).
        event_counters: Event-driven dependency counters (int32 tensor, one per task).
        diagnostic_buffer: The Device buffer of an L1 dump; any valid tensor when diagnostics are off
            (the executor only reads it when the runtime config's diagnostic mode asks).
        profile_buffer: Cycle-profiling buffer slot (unused by the reference runtime).
    """

    runtime_config: Any
    event_counters: Any
    diagnostic_buffer: Any
    profile_buffer: Any = None


@dataclass
class LaunchContext:
    """One launch as seen by a diagnostic session before it runs.

    Args:
        runtime: The prepared runtime (rank, kernel_name, graph, normal_tensor, host_config, ...).
        direction: ``"forward"`` or ``"backward"``.
        parameters: The native ABI parameter list (tensors), in param_position order.
        fallback_event_counters: Event counters to use when the session does not replace them.
    """

    runtime: Any
    direction: str
    parameters: Sequence[Any]
    fallback_event_counters: Any

    def ordinary_arguments(self) -> LaunchArguments:
        """Arguments of an undiagnosed launch: the runtime's own config, no diagnostic buffer."""
        counters = self.fallback_event_counters
        placeholder = self.runtime.normal_tensor if counters is None else counters
        return LaunchArguments(self.runtime.normal_tensor, counters, placeholder, counters)


class DiagnosticCall:
    """A session's handle on one launch; the base class changes nothing.

    Args:
        arguments: The launch arguments to run with.
    """

    def __init__(self, arguments: LaunchArguments) -> None:
        self.arguments = arguments

    def complete(self) -> None:
        """Called after the launch succeeded."""

    def cancel(self) -> None:
        """Called when the launch failed; the launch's exception is re-raised after it."""
