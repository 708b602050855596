"""The flight recorder: a bounded ring of the last steps (tensors and device statistics), exported only when a
trigger fires.

The dumper hands each finished step's invocations to :meth:`FlightRecorder.end_step`, which returns the
windows to commit now (:class:`Commit`: invocations and extra window attributes; usually none). The ring is
bounded by steps and payload bytes (the oldest step is dropped first); with a spill directory each kept step's
payloads are written there and memory-mapped back. Nothing the recorder does stops the user's step: a failed
spill keeps the step in memory (or drops it when it does not fit), a failed commit is logged
(:meth:`FlightRecorder.commit_failed`) and, after :data:`MAX_FAILURES` in a row, disarms the recorder.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
import itertools
import logging
from pathlib import Path
import shutil
import tempfile
from typing import Any

import numpy as np

from megadump_zarr.dump.recorder_config import RecorderConfig
from megadump_zarr.dump.triggers import Firing, TriggerSet, step_rows
from megadump_zarr.layout.recorder import (
    PART_AFTER,
    PART_TRIGGER,
    RECORDER_PART,
    RECORDER_REPLICAS,
    RECORDER_STEPS,
    RECORDER_TRIGGER,
)

__all__ = ["MAX_FAILURES", "Commit", "FlightRecorder"]

LOG = logging.getLogger("megadump_zarr.recorder")
MAX_FAILURES = 3
"""Commits that may fail in a row before the recorder disarms (keeps nothing more)."""


@dataclass(frozen=True)
class Commit:
    """One window the recorder asks the dumper to commit.

    Args:
        invocations: The steps' invocations, in step order.
        attrs: Extra window attributes (``recorderTrigger``, ``recorderPart``, ``recorderSteps``, ...).
    """

    invocations: tuple[Any, ...]
    attrs: dict[str, Any]


@dataclass
class _Step:
    step: int
    invocations: list[Any]
    nbytes: int
    spill: Path | None = None


class FlightRecorder:
    """The ring, the triggers and the after-trigger bookkeeping of one dumper.

    Args:
        config: The recorder's configuration.
    """

    def __init__(self, config: RecorderConfig) -> None:
        self.config = config
        self.triggers = TriggerSet(
            nonfinite=config.nonfinite,
            norm_k=config.norm_k,
            norm_history=config.norm_history,
            norm_min_history=config.norm_min_history,
            norm_floor=config.norm_floor,
            predicate=config.predicate,
        )
        self._ring: deque[_Step] = deque()
        self._ring_bytes = 0
        self._after: list[_Step] = []
        self._after_left = 0
        self._firing: Firing | None = None
        self._quiet_until = -1  # last step of the cooldown
        self._fired = 0
        self._failures = 0
        self.armed = True
        self.dropped_steps = 0
        self._spill_root: Path | None = None
        self._spill_ids = itertools.count()

    # ------------------------------------------------------------------ state
    @property
    def capturing(self) -> bool:
        """Whether steps are still captured (False once disarmed, or once the trigger cap is spent and no
        after-steps are pending)."""
        if not self.armed:
            return False
        spent = self.config.max_triggers is not None and self._fired >= self.config.max_triggers
        return not spent or self._after_left > 0

    @property
    def ring_bytes(self) -> int:
        """Payload bytes the ring holds now."""
        return self._ring_bytes

    @property
    def ring_steps(self) -> tuple[int, ...]:
        """The steps the ring holds now, oldest first."""
        return tuple(s.step for s in self._ring)

    # ------------------------------------------------------------------ steps
    def end_step(self, step: int, invocations: Sequence[Any]) -> list[Commit]:
        """Take one finished step: evaluate the triggers, keep it in the ring or commit.

        Args:
            step: The user step.
            invocations: Its completed invocations (``DumpInvocation``).

        Returns:
            The windows to commit now, in order (empty on most steps).
        """
        if not self.armed:
            return []
        invocations = list(invocations)
        commits: list[Commit] = []
        in_after = self._after_left > 0
        armed = not in_after and step > self._quiet_until and self._may_fire()
        try:
            firing = self.triggers.evaluate(step, step_rows(invocations), armed=armed)
        except Exception as error:  # noqa: BLE001 - a broken trigger never stops the kernel
            LOG.error("flight recorder: the triggers raised %r at step %d; the recorder is disarmed", error, step)
            self.armed = False
            self._clear_ring()
            return []
        record = _Step(step, invocations, sum(i.payload_bytes for i in invocations))
        if in_after:
            self._after.append(record)
            self._after_left -= 1
            if self._after_left == 0:
                commits.append(self._after_commit())
            return commits
        if firing is not None:
            commits.append(self._trigger_commit(firing, record))
            return commits
        if self.capturing:
            self._keep(record)
        return commits

    def close(self) -> list[Commit]:
        """The session ends: the after-steps recorded so far, when a trigger's are pending; the ring is dropped."""
        commits = []
        if self._after and self.armed:
            self._after_left = 0
            commits.append(self._after_commit())
        self._clear_ring()
        if self._spill_root is not None:
            shutil.rmtree(self._spill_root, ignore_errors=True)
            self._spill_root = None
        return commits

    def commit_failed(self, error: BaseException) -> None:
        """A commit failed (full disk, store error): log it; disarm after :data:`MAX_FAILURES` in a row.

        Args:
            error: What failed.
        """
        self._failures += 1
        if self._failures >= MAX_FAILURES:
            LOG.error(
                "flight recorder: %d commits failed in a row (last: %r); the recorder is disarmed",
                self._failures,
                error,
            )
            self.armed = False
            self._clear_ring()
        else:
            LOG.error("flight recorder: a window could not be committed: %r; its steps are dropped", error)

    def commit_succeeded(self) -> None:
        """A commit succeeded: the failure count starts again."""
        self._failures = 0

    # ------------------------------------------------------------------ internals
    def _may_fire(self) -> bool:
        return self.config.max_triggers is None or self._fired < self.config.max_triggers

    def _trigger_commit(self, firing: Firing, record: _Step) -> Commit:
        steps = [*self._ring, record]
        self._ring.clear()
        self._ring_bytes = 0
        self._fired += 1
        self._quiet_until = firing.step + self.config.after_steps + self.config.cooldown_steps
        self._firing = firing
        self._after_left = self.config.after_steps
        self._after = []
        return self._commit(steps, PART_TRIGGER)

    def _after_commit(self) -> Commit:
        steps, self._after = self._after, []
        return self._commit(steps, PART_AFTER)

    def _commit(self, steps: list[_Step], part: str) -> Commit:
        assert self._firing is not None
        attrs: dict[str, Any] = {
            RECORDER_TRIGGER: self._firing.to_attrs(),
            RECORDER_PART: part,
            RECORDER_STEPS: [s.step for s in steps],
        }
        if self.config.replicas:
            attrs[RECORDER_REPLICAS] = list(self.config.replicas)
        invocations = tuple(i for s in steps for i in s.invocations)
        for s in steps:
            s.spill = None  # the files stay until the window is written: the memory maps hold them open
        return Commit(invocations, attrs)

    def _keep(self, record: _Step) -> None:
        limit_steps, limit_bytes = self.config.ring_steps, self.config.ring_bytes
        if limit_steps == 0 or record.nbytes > limit_bytes:
            self.dropped_steps += 1
            return
        while self._ring and (len(self._ring) >= limit_steps or self._ring_bytes + record.nbytes > limit_bytes):
            self._drop_oldest()
        if self.config.spill_dir is not None:
            self._spill(record)
        self._ring.append(record)
        self._ring_bytes += record.nbytes

    def _drop_oldest(self) -> None:
        old = self._ring.popleft()
        self._ring_bytes -= old.nbytes
        self.dropped_steps += 1
        _remove(old.spill)

    def _clear_ring(self) -> None:
        while self._ring:
            self._drop_oldest()

    def _spill(self, record: _Step) -> None:
        """Write a step's payloads to the scratch directory and keep memory maps of them instead; on an
        OSError (a full disk) the step stays in memory."""
        try:
            if self._spill_root is None:
                base = Path(self.config.spill_dir)  # type: ignore[arg-type]
                base.mkdir(parents=True, exist_ok=True)
                self._spill_root = Path(tempfile.mkdtemp(prefix="megadump_recorder_", dir=base))
            folder = self._spill_root / f"step_{next(self._spill_ids):08d}"
            folder.mkdir()
            record.spill = folder
            for invocation in record.invocations:
                invocation.l1_snapshots[:] = [
                    replace(s, data=_spilled(folder, s.data)) for s in invocation.l1_snapshots
                ]
                invocation.snapshots[:] = [
                    (t, replace(s, data=_spilled(folder, s.data))) for t, s in invocation.snapshots
                ]
        except OSError as error:
            LOG.warning("flight recorder: step %d could not be spilled (%r); it stays in memory", record.step, error)
            _remove(record.spill)
            record.spill = None


_names = itertools.count()


def _spilled(folder: Path, data: np.ndarray) -> np.ndarray:
    """``data`` written to a file in ``folder``, returned as a read-only memory map of the same dtype and shape."""
    path = folder / f"{next(_names):08d}.bin"
    contiguous = np.ascontiguousarray(data)
    with open(path, "wb") as handle:
        handle.write(contiguous.view(np.uint8).reshape(-1).data if contiguous.size else b"")
    if contiguous.size == 0:
        return contiguous.copy()
    return np.memmap(path, dtype=contiguous.dtype, mode="r", shape=contiguous.shape)


def _remove(folder: Path | None) -> None:
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
