"""The events :func:`~megadump_zarr.analyse.watch.watch` yields, and how one committed window turns into them.

* :class:`WindowEvent`: a window was committed (rank, window, status, its user steps, what fired).
* :class:`StepEvent`: the newest statistics of one stage × owner (or core) at one step: the L2 norm of its
  output records together (all records when it has no output), NaN and Inf counts.
* :class:`AnomalyEvent`: something went wrong, named: rank, step, stage, task, owner, core, record and what
  fired (``source``: ``recorder`` for a flight recorder's trigger, ``statistics`` for NaN/Inf in the stored
  statistics of a window no recorder wrote, ``replica`` for records that should be equal across ranks).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
import math
from typing import Any

import numpy as np
import pandas as pd

from megadump_zarr.analyse.matching import scalar
from megadump_zarr.layout.recorder import (
    KIND_NONFINITE,
    PART_TRIGGER,
    RECORDER_PART,
    RECORDER_STEPS,
    RECORDER_TRIGGER,
)

__all__ = ["AnomalyEvent", "StepEvent", "WatchEvent", "WindowEvent", "window_events"]

SOURCE_RECORDER = "recorder"
SOURCE_STATISTICS = "statistics"
SOURCE_REPLICA = "replica"


@dataclass(frozen=True)
class WindowEvent:
    """A window was committed.

    Args:
        rank: Rank.
        window: Window index.
        status: ``complete`` or ``aborted``.
        steps: The user steps its records hold, ascending.
        trigger: The flight recorder's trigger kind (None: not a recorder window).
        part: The recorder part (``trigger``/``after``; None: not a recorder window).
    """

    rank: int
    window: int
    status: str
    steps: tuple[int, ...]
    trigger: str | None = None
    part: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The event as JSON-ready values (``event: "window"``)."""
        return {"event": "window", **asdict(self), "steps": list(self.steps)}


@dataclass(frozen=True)
class StepEvent:
    """The statistics of one stage × owner (or core) at one step.

    Args:
        rank: Rank.
        window: Window index.
        step: User step.
        kernel: Kernel name.
        direction: ``forward``/``backward``.
        stage: L1 stage (None at L0).
        owner: Owner id (None when the tasks have none: then ``core`` names the group).
        core: ``{coreType}{coreId}`` when the group is a core (None otherwise).
        l2norm: The L2 norm of the group's output records together (all its records when it has none).
        nan_count: NaN count over the group's records.
        inf_count: Inf count over the group's records.
        records: Records in the group.
    """

    rank: int
    window: int
    step: int
    kernel: str
    direction: str
    stage: str | None
    owner: int | None
    core: str | None
    l2norm: float | None
    nan_count: int
    inf_count: int
    records: int

    @property
    def group(self) -> str:
        """``stage/owner N`` or ``stage/CORE`` (``name`` at L0)."""
        who = f"owner {self.owner}" if self.owner is not None else (self.core or "")
        return "/".join(part for part in (self.stage or "", who) if part) or self.kernel

    def to_dict(self) -> dict[str, Any]:
        """The event as JSON-ready values (``event: "step"``)."""
        return {"event": "step", **asdict(self), "group": self.group}


@dataclass(frozen=True)
class AnomalyEvent:
    """Something went wrong, named.

    Args:
        kind: ``nonfinite``, ``norm``, ``predicate`` (recorder triggers) or ``replica``.
        source: ``recorder``, ``statistics`` or ``replica``.
        rank: Rank (for a replica: the rank that diverges).
        window: Window index.
        step: User step.
        kernel: Kernel name.
        direction: Direction.
        stage: L1 stage (None at L0).
        task: Task id (None at L0).
        owner: Owner id (None when none).
        core: ``{coreType}{coreId}`` (None at L0).
        record: Tensor name.
        io: Port direction (or the L0 role).
        index: Port index.
        value: What fired (norm, NaN + Inf count; None when none).
        threshold: The threshold crossed (None when none).
        detail: One sentence.
    """

    kind: str
    source: str
    rank: int
    window: int
    step: int | None
    kernel: str | None
    direction: str | None
    stage: str | None
    task: int | None
    owner: int | None
    core: str | None
    record: str | None
    io: str | None
    index: int | None
    value: float | None
    threshold: float | None
    detail: str

    def to_dict(self) -> dict[str, Any]:
        """The event as JSON-ready values (``event: "anomaly"``)."""
        return {"event": "anomaly", **asdict(self)}

    def describe(self) -> str:
        """One line: what fired, where."""
        where = [f"rank {self.rank}", f"step {self.step}"]
        where += [
            f"{k} {v}" for k, v in (("stage", self.stage), ("task", self.task), ("owner", self.owner)) if v is not None
        ]
        where += [f"core {self.core}"] if self.core else []
        where += [
            f"record {self.record}" + (f" ({self.io}[{self.index}])" if self.io and self.index is not None else "")
        ]
        return f"{self.kind}: " + ", ".join(where) + f" — {self.detail}"


WatchEvent = WindowEvent | StepEvent | AnomalyEvent


def _int(value: Any) -> int | None:
    value = scalar(value)
    return None if value is None else int(value)


def _core(row: Any) -> str | None:
    core_type, core_id = scalar(row.get("core_type")), _int(row.get("core_id"))
    return None if core_type is None or core_id is None else f"{core_type}{core_id}"


def _trigger_event(rank: int, window: int, trigger: dict[str, Any]) -> AnomalyEvent:
    kind = str(trigger.get("kind"))
    value, threshold = trigger.get("value"), trigger.get("threshold")
    if kind == KIND_NONFINITE:
        detail = f"the recorder's nonfinite trigger fired: {value:g} NaN/Inf" if value is not None else "NaN/Inf"
    elif threshold is not None and value is not None:
        detail = f"the recorder's {kind} trigger fired: L2 norm {value:.6g}, beyond {threshold:.6g} of its baseline"
    else:
        detail = f"the recorder's {kind} trigger fired"
    return AnomalyEvent(
        kind,
        SOURCE_RECORDER,
        _int(trigger.get("rank")) if trigger.get("rank") is not None else rank,
        window,
        _int(trigger.get("step")),
        trigger.get("kernel"),
        trigger.get("direction"),
        trigger.get("stage"),
        _int(trigger.get("task")),
        _int(trigger.get("owner")),
        trigger.get("core"),
        trigger.get("record"),
        trigger.get("io"),
        _int(trigger.get("index")),
        value,
        threshold,
        detail,
    )


def _nonfinite_event(rank: int, window: int, records: pd.DataFrame) -> AnomalyEvent | None:
    counts = records["nan_count"].fillna(0).astype(np.int64) + records["inf_count"].fillna(0).astype(np.int64)
    bad = records[counts.to_numpy() > 0]
    if bad.empty:
        return None
    row = bad.iloc[0]
    nan, inf = int(_int(row.get("nan_count")) or 0), int(_int(row.get("inf_count")) or 0)
    return AnomalyEvent(
        KIND_NONFINITE,
        SOURCE_STATISTICS,
        rank,
        window,
        _int(row.get("step")),
        scalar(row.get("kernel")),
        scalar(row.get("direction")),
        scalar(row.get("stage")),
        _int(row.get("task_id")),
        _int(row.get("owner_id")),
        _core(row),
        scalar(row.get("name")),
        scalar(row.get("io")) or scalar(row.get("role")),
        _int(row.get("index")),
        float(nan + inf),
        None,
        f"{nan} NaN and {inf} Inf in the stored statistics ({len(bad)} record(s) of the window hold some)",
    )


def step_events(rank: int, window: int, records: pd.DataFrame) -> list[StepEvent]:
    """One :class:`StepEvent` per step × kernel × direction × stage × owner (or core) of a window's records.

    Args:
        rank: Rank.
        window: Window index.
        records: The window's rows of ``Dump.records()``.
    """
    events = []
    frame = records.assign(
        _stage=records["stage"].astype(object).where(records["stage"].notna(), None),
        _owner=records["owner_id"].astype(object).where(records["owner_id"].notna(), None),
    )
    frame["_core"] = [None if o is not None else _core(r) for o, (_, r) in zip(frame["_owner"], frame.iterrows())]
    keys = ["step", "kernel", "direction", "_stage", "_owner", "_core"]
    for key, rows in frame.groupby(keys, sort=True, dropna=False):
        step, kernel, direction, stage, owner, core = (scalar(k) for k in key)
        outputs = rows[rows["io"] == "output"] if "io" in rows else rows
        picked = outputs if len(outputs) else rows
        norms = picked["l2norm"].dropna().to_numpy(dtype=np.float64)
        norm = float(math.sqrt(float(np.sum(norms * norms)))) if norms.size else None
        events.append(
            StepEvent(
                rank,
                window,
                int(step),
                str(kernel),
                str(direction),
                stage,
                None if owner is None else int(owner),
                core,
                norm,
                int(rows["nan_count"].fillna(0).sum()),
                int(rows["inf_count"].fillna(0).sum()),
                len(rows),
            )
        )
    return events


def window_events(rank: int, window: int, status: str, attrs: dict[str, Any], records: pd.DataFrame) -> list[Any]:
    """The events of one committed window: the window, its steps' statistics, then its anomaly (if any).

    A flight recorder's window names what fired (its trigger part; the after-steps name nothing new); a
    window no recorder wrote names its first record (execution order) whose statistics count NaN or Inf.

    Args:
        rank: Rank.
        window: Window index.
        status: ``complete``/``aborted``.
        attrs: The window's attributes.
        records: The window's rows of ``Dump.records()``, in execution order.
    """
    trigger = attrs.get(RECORDER_TRIGGER) if isinstance(attrs.get(RECORDER_TRIGGER), dict) else None
    part = attrs.get(RECORDER_PART) if trigger is not None else None
    steps = tuple(sorted({int(s) for s in records["step"].dropna()})) if len(records) else ()
    if trigger is not None and isinstance(attrs.get(RECORDER_STEPS), list):
        steps = tuple(int(s) for s in attrs[RECORDER_STEPS])
    events: list[Any] = [
        WindowEvent(rank, window, status, steps, None if trigger is None else trigger.get("kind"), part)
    ]
    if len(records):
        events.extend(step_events(rank, window, records))
    if trigger is not None:
        if part == PART_TRIGGER:
            events.append(_trigger_event(rank, window, trigger))
    elif len(records):
        anomaly = _nonfinite_event(rank, window, records)
        if anomaly is not None:
            events.append(anomaly)
    return events
