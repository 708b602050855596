"""The flight recorder's triggers over one step's device statistics (numpy only, bounded state per record).

A record's identity across steps is rank, kernel, direction, occurrence of the kernel in its step, stage,
task id, worker, port and name (:func:`identity`). Three triggers look at each step's rows, in this order,
and the first record (in the step's record order) of the first trigger that fires names the firing:

* ``nonfinite``: a record holds NaN or Inf and was finite the last time it was seen (or is new);
* ``norm``: a record's L2 norm lies more than ``k`` robust spreads from the median of its last N norms
  (spread ``max(1.4826 * MAD, floor * |median|)``), once it has ``min_history`` norms;
* ``predicate``: the user's callable returns true for a row (a dict).

Baselines are updated on every step, armed or not, so a cooldown never leaves a stale baseline behind.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
import logging
import math
from typing import Any

import numpy as np

from megadump_zarr.layout.recorder import KIND_NONFINITE, KIND_NORM, KIND_PREDICATE, TRIGGER_FIELDS

__all__ = ["Firing", "StepRow", "TriggerSet", "identity", "step_rows"]

LOG = logging.getLogger("megadump_zarr.recorder")
_MAD_SCALE = 1.4826  # MAD of a normal sample times this estimates its standard deviation


@dataclass(frozen=True, slots=True)
class StepRow:
    """One record's statistics in a step, with what names it.

    Args:
        key: The record's identity across steps (:func:`identity`).
        rank: Rank.
        kernel: Kernel name.
        direction: ``forward``/``backward``.
        stage: L1 stage (None at L0).
        task: L1 task id (None at L0).
        owner: Owner id (None when none).
        core_type: ``AIC``/``AIV``/``MIX`` (None at L0).
        core_id: Core id (None at L0).
        io: Port direction, or the L0 role.
        index: Port index (None at L0).
        name: Tensor name.
        dtype: dtype name.
        shape: Logical shape.
        element_count: Elements reduced.
        nan_count: NaN count.
        inf_count: Inf count.
        min: Finite minimum (None: none).
        max: Finite maximum (None: none).
        mean: Finite mean (None: none).
        l2norm: L2 norm of the finite elements (None: none).
    """

    key: tuple[Any, ...]
    rank: int
    kernel: str
    direction: str
    stage: str | None
    task: int | None
    owner: int | None
    core_type: str | None
    core_id: int | None
    io: str
    index: int | None
    name: str
    dtype: str
    shape: tuple[int, ...]
    element_count: int
    nan_count: int
    inf_count: int
    min: float | None
    max: float | None
    mean: float | None
    l2norm: float | None

    def as_dict(self, step: int) -> dict[str, Any]:
        """The row as the predicate sees it.

        Args:
            step: The user step.
        """
        return {
            "rank": self.rank,
            "step": step,
            "kernel": self.kernel,
            "direction": self.direction,
            "stage": self.stage,
            "task_id": self.task,
            "owner_id": self.owner,
            "core_type": self.core_type,
            "core_id": self.core_id,
            "io": self.io,
            "index": self.index,
            "name": self.name,
            "dtype": self.dtype,
            "shape": self.shape,
            "element_count": self.element_count,
            "nan_count": self.nan_count,
            "inf_count": self.inf_count,
            "min": self.min,
            "max": self.max,
            "mean": self.mean,
            "l2norm": self.l2norm,
        }


@dataclass(frozen=True, slots=True)
class Firing:
    """What fired: the trigger, the step and record, the value and the threshold it crossed.

    Args:
        kind: ``nonfinite``, ``norm`` or ``predicate``.
        step: The user step.
        row: The record that fired.
        value: The L2 norm (norm), the NaN + Inf count (nonfinite), None (predicate).
        threshold: The largest distance from the median the norm may have (norm); None otherwise.
    """

    kind: str
    step: int
    row: StepRow
    value: float | None
    threshold: float | None

    def to_attrs(self) -> dict[str, Any]:
        """The ``recorderTrigger`` window attribute (keys :data:`~megadump_zarr.layout.recorder.TRIGGER_FIELDS`)."""
        row = self.row
        core = None if row.core_type is None or row.core_id is None else f"{row.core_type}{row.core_id}"
        values = (
            self.kind,
            self.step,
            row.rank,
            row.kernel,
            row.direction,
            row.stage,
            row.task,
            row.owner,
            row.core_type,
            row.core_id,
            core,
            row.name,
            row.io,
            row.index,
            _json_number(self.value),
            _json_number(self.threshold),
        )
        return dict(zip(TRIGGER_FIELDS, values))


def _json_number(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def _none(value: int) -> int | None:
    return None if value < 0 else int(value)


def _finite(value: Any) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def identity(rank: int, kernel: str, direction: str, occurrence: int, statistics_row: Any) -> tuple[Any, ...]:
    """A record's identity across steps.

    Args:
        rank: Rank.
        kernel: Kernel name.
        direction: Direction.
        occurrence: Earlier launches of this kernel and direction in the step.
        statistics_row: The dumper's ``StatisticsRow``.
    """
    r = statistics_row
    return (rank, kernel, direction, occurrence, r.stage, r.task_id, r.worker, r.io, r.index, r.name)


def step_rows(invocations: Sequence[Any]) -> list[StepRow]:
    """The statistics rows of one step's invocations (``DumpInvocation``), in record order.

    Args:
        invocations: The step's invocations.
    """
    rows = []
    for invocation in invocations:
        level_l1 = invocation.level == "L1"
        for r in invocation.statistics:
            s = r.statistics
            rows.append(
                StepRow(
                    identity(invocation.rank, invocation.kernel_name, invocation.direction, invocation.occurrence, r),
                    invocation.rank,
                    invocation.kernel_name,
                    invocation.direction,
                    r.stage if level_l1 else None,
                    _none(r.task_id) if level_l1 else None,
                    _none(r.owner_id),
                    r.core_type or None,
                    _none(r.core_id) if level_l1 else None,
                    r.io,
                    _none(r.index),
                    r.name,
                    r.dtype,
                    tuple(r.shape),
                    int(s.element_count),
                    int(s.nan_count),
                    int(s.inf_count),
                    _finite(s.min),
                    _finite(s.max),
                    _finite(s.mean),
                    _finite(s.l2norm),
                )
            )
    return rows


class _NormBaseline:
    """The last N norms of every record identity, as one array (row per identity)."""

    def __init__(self, history: int) -> None:
        self.history = history
        self.rows: dict[tuple[Any, ...], int] = {}
        self.values = np.full((16, history), np.nan)
        self.counts = np.zeros(16, dtype=np.int64)
        self.cursor = np.zeros(16, dtype=np.int64)

    def index(self, keys: Sequence[tuple[Any, ...]]) -> np.ndarray:
        out = np.empty(len(keys), dtype=np.int64)
        for i, key in enumerate(keys):
            row = self.rows.get(key)
            if row is None:
                row = self.rows[key] = len(self.rows)
                if row >= len(self.counts):
                    grow = len(self.counts)
                    self.values = np.vstack([self.values, np.full((grow, self.history), np.nan)])
                    self.counts = np.concatenate([self.counts, np.zeros(grow, dtype=np.int64)])
                    self.cursor = np.concatenate([self.cursor, np.zeros(grow, dtype=np.int64)])
            out[i] = row
        return out

    def check(self, at: np.ndarray, norms: np.ndarray, k: float, floor: float, minimum: int) -> tuple[int, float]:
        """The first position whose norm is out of its baseline and its threshold; then record the norms.

        Returns ``(-1, nan)`` when none is. A position repeated within one step is checked once.
        """
        at, first = np.unique(at, return_index=True)
        norms = norms[first]
        order = np.argsort(first)
        at, norms, first = at[order], norms[order], first[order]
        found, threshold = -1, math.nan
        ready = self.counts[at] >= minimum
        if ready.any():
            with np.errstate(invalid="ignore"), _quiet_nan():
                past = self.values[at[ready]]
                median = np.nanmedian(past, axis=1)
                mad = np.nanmedian(np.abs(past - median[:, None]), axis=1)
                spread = np.maximum(_MAD_SCALE * mad, floor * np.abs(median))
                limit = k * spread
                out = np.isfinite(norms[ready]) & np.isfinite(median) & (np.abs(norms[ready] - median) > limit)
            hits = np.flatnonzero(out)
            if hits.size:
                found = int(first[ready][hits[0]])
                threshold = float(limit[hits[0]])
        self.values[at, self.cursor[at]] = norms
        self.cursor[at] = (self.cursor[at] + 1) % self.history
        self.counts[at] += 1
        return found, threshold


class _quiet_nan:
    """Silence numpy's "All-NaN slice" warning (a record whose recent norms are all missing)."""

    def __enter__(self) -> None:
        import warnings

        self._catch = warnings.catch_warnings()
        self._catch.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc: Any) -> None:
        self._catch.__exit__(*exc)


class TriggerSet:
    """The recorder's triggers and their state (one per dumper).

    Args:
        nonfinite: Whether the nonfinite trigger is on.
        norm_k: The norm trigger's ``k`` (None: off).
        norm_history: Norms kept per record identity.
        norm_min_history: Norms needed before a record is checked.
        norm_floor: The spread's floor relative to the median.
        predicate: The user's predicate (None: off).
    """

    def __init__(
        self,
        *,
        nonfinite: bool,
        norm_k: float | None,
        norm_history: int,
        norm_min_history: int,
        norm_floor: float,
        predicate: Callable[[dict[str, Any]], Any] | None,
    ) -> None:
        self.nonfinite = nonfinite
        self.norm_k = norm_k
        self.norm_floor = norm_floor
        self.norm_min_history = norm_min_history
        self.predicate = predicate
        self._baseline = _NormBaseline(norm_history)
        self._nonfinite_seen: set[tuple[Any, ...]] = set()

    def evaluate(self, step: int, rows: Sequence[StepRow], *, armed: bool) -> Firing | None:
        """Update the baselines with one step's rows; return what fires (None when disarmed or nothing does).

        Args:
            step: The user step.
            rows: The step's rows in record order.
            armed: Whether a firing may be returned (False during a cooldown or the after-steps).
        """
        firings: list[Firing] = []
        bad = self._nonfinite_rows(rows)
        if self.nonfinite and bad:
            first = rows[bad[0]]
            firings.append(Firing(KIND_NONFINITE, step, first, float(first.nan_count + first.inf_count), None))
        if self.norm_k is not None and rows:
            found, threshold = self._norm(rows)
            if found >= 0:
                firings.append(Firing(KIND_NORM, step, rows[found], rows[found].l2norm, threshold))
        if not armed:
            return None
        if firings:
            return firings[0]
        return self._predicate(step, rows)

    def _nonfinite_rows(self, rows: Sequence[StepRow]) -> list[int]:
        """Positions of rows that turned non-finite; remember which records are non-finite now."""
        found = []
        seen = self._nonfinite_seen
        for i, row in enumerate(rows):
            if row.nan_count or row.inf_count:
                if row.key not in seen:
                    found.append(i)
                    seen.add(row.key)
            elif row.key in seen:
                seen.discard(row.key)
        return found

    def _norm(self, rows: Sequence[StepRow]) -> tuple[int, float]:
        at = self._baseline.index([row.key for row in rows])
        norms = np.array([math.nan if row.l2norm is None else row.l2norm for row in rows], dtype=np.float64)
        assert self.norm_k is not None
        return self._baseline.check(at, norms, self.norm_k, self.norm_floor, self.norm_min_history)

    def _predicate(self, step: int, rows: Sequence[StepRow]) -> Firing | None:
        predicate = self.predicate
        if predicate is None:
            return None
        for row in rows:
            try:
                fired = bool(predicate(row.as_dict(step)))
            except Exception as error:  # noqa: BLE001 - a user predicate never stops the kernel
                LOG.warning("flight recorder: the predicate raised %r at step %d; it is disabled", error, step)
                self.predicate = None
                return None
            if fired:
                return Firing(KIND_PREDICATE, step, row, None, None)
        return None
