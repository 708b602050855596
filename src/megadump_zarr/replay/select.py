"""Which task a replay runs: one stage, one task (by id or owner), one invocation, one rank, from the records."""

from __future__ import annotations

from dataclasses import dataclass
import numbers

import numpy as np
import pandas as pd

__all__ = ["TaskSelection", "select_task"]


@dataclass(frozen=True)
class TaskSelection:
    """The records of one task of one invocation.

    Args:
        rank: Rank.
        window: Window index.
        invocation: Invocation id.
        invocation_name: Its group name.
        stage: Stage.
        task_id: Global task id.
        owner_id: The task's owner (None when not owner-split).
        kernel: Kernel name.
        records: The task's records (every worker group), in execution order.
    """

    rank: int
    window: int
    invocation: int
    invocation_name: str
    stage: str
    task_id: int
    owner_id: int | None
    kernel: str
    records: pd.DataFrame


def _values(frame: pd.DataFrame, column: str) -> str:
    values = sorted({int(v) if not isinstance(v, str) else v for v in frame[column].dropna()}, key=str)
    values = sorted(values, key=lambda v: (isinstance(v, str), v))
    return ", ".join(str(v) for v in values) or "none"


def select_task(
    records: pd.DataFrame,
    *,
    stage: str,
    task_id: int | None = None,
    owner: int | None = None,
    invocation: int | None = None,
    rank: int | None = None,
    window: int | None = None,
) -> TaskSelection:
    """The one task the selectors name.

    Args:
        records: ``Dump.records(...)``.
        stage: Stage name.
        task_id: Global task id (or ``owner``).
        owner: Owner id of an owner-split task (or ``task_id``).
        invocation: Invocation id (default: the first one holding the task).
        rank: Rank (default: the lowest holding the task).
        window: Window index (default: any).

    Raises:
        ValueError: Missing or contradictory selectors, or nothing matching; the message lists what exists.
    """
    if (task_id is None) == (owner is None):
        raise ValueError("replay needs exactly one of task_id= and owner=")
    for name, value in (
        ("task_id", task_id),
        ("owner", owner),
        ("invocation", invocation),
        ("rank", rank),
        ("window", window),
    ):
        if value is not None and (
            isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or value < 0
        ):
            raise ValueError(f"replay {name} must be a non-negative integer, got {value!r}")
    # numpy integers straight from records() are integers too
    task_id, owner, invocation, rank, window = (
        None if v is None else int(v) for v in (task_id, owner, invocation, rank, window)
    )
    l1 = records[records["level"] == "L1"] if len(records) else records
    if not len(l1):
        raise ValueError("replay needs L1 (task-boundary) records; this dump holds none")
    frame = l1
    for column, value, label in (("rank", rank, "rank"), ("window", window, "window")):
        if value is not None:
            chosen = frame[frame[column] == value]
            if not len(chosen):
                raise ValueError(f"no L1 records in {label} {value}; {label}s: {_values(frame, column)}")
            frame = chosen
    chosen = frame[frame["stage"] == stage]
    if not len(chosen):
        raise ValueError(f"no stage {stage!r} in the dump; stages: {_values(frame, 'stage')}")
    frame = chosen
    if invocation is not None:
        chosen = frame[frame["invocation"] == invocation]
        if not len(chosen):
            raise ValueError(
                f"stage {stage!r} is not in invocation {invocation}; invocations: {_values(frame, 'invocation')}"
            )
        frame = chosen
    if owner is not None:
        chosen = frame[frame["owner_id"] == owner]
        if not len(chosen) and not frame["owner_id"].notna().any():
            raise ValueError(
                f"stage {stage!r} is not split by owner (its tasks have no owner id): choose a task "
                f"by its id (task_id=, --task); tasks: {_values(frame, 'task_id')}"
            )
        if not len(chosen):
            raise ValueError(f"stage {stage!r} has no task of owner {owner}; owners: {_values(frame, 'owner_id')}")
        ids = sorted({int(v) for v in chosen["task_id"]})
        if len(ids) > 1:
            raise ValueError(
                f"stage {stage!r} has {len(ids)} tasks of owner {owner} (task ids {', '.join(map(str, ids))}); "
                "choose one with task_id="
            )
        frame = chosen
    else:
        chosen = frame[frame["task_id"] == task_id]
        if not len(chosen):
            raise ValueError(f"stage {stage!r} has no task {task_id}; tasks: {_values(frame, 'task_id')}")
        frame = chosen
    first = frame.sort_values(["rank", "window", "invocation"]).iloc[0]
    frame = frame[
        (frame["rank"] == first["rank"])
        & (frame["window"] == first["window"])
        & (frame["invocation"] == first["invocation"])
    ]
    owner_value = first["owner_id"]
    return TaskSelection(
        rank=int(first["rank"]),
        window=int(first["window"]),
        invocation=int(first["invocation"]),
        invocation_name=str(first["invocation_name"]),
        stage=stage,
        task_id=int(first["task_id"]),
        owner_id=None if pd.isna(owner_value) else int(owner_value),
        kernel=str(first["kernel"]),
        records=frame.reset_index(drop=True),
    )
