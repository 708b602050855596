"""Choosing what a ``Dump`` read means: windows, data groups and tensor records by rank, window,
invocation, stage, io, kernel and task, and the "choose one of" errors when a choice is ambiguous.

Everything here works on catalogue metadata (``WindowInfo``, ``DataGroup``, ``records()`` frames);
nothing reads chunk data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from megadump_zarr.read.catalog import DataGroup, WindowInfo

__all__ = [
    "check_tensor_choice",
    "describe_group",
    "listing",
    "match_invocation",
    "pick_groups",
    "pick_tensor_rows",
    "pick_windows",
    "single_group",
]

_LIST_LIMIT = 24


def listing(items: Sequence[str]) -> str:
    """``items`` joined for an error message, the first few only.

    Args:
        items: The options to list.
    """
    shown = list(items[:_LIST_LIMIT])
    more = f", ... ({len(items) - _LIST_LIMIT} more)" if len(items) > _LIST_LIMIT else ""
    return ", ".join(shown) + more


def describe_group(g: DataGroup) -> str:
    """Where a data group lies, for error messages.

    Args:
        g: The data group.
    """
    where = f"rank={g.rank} window={g.window} invocation={g.invocation} ({g.invocation_name}, kernel {g.kernel!r})"
    if g.level == "L1":
        where += f" stage={g.stage!r} task={g.task_name!r}"
    return where


def match_invocation(value: int | str | None, invocation_id: Any, invocation_name: str) -> bool:
    """Whether an ``invocation=`` choice selects an invocation.

    Args:
        value: The choice: None (any), an invocation id, or a group name (a digit string is an id too).
        invocation_id: The invocation's id (may be missing).
        invocation_name: The invocation's group name.
    """
    if value is None:
        return True
    if isinstance(value, str):
        return value == invocation_name or (value.isdigit() and int(value) == invocation_id)
    return invocation_id is not None and invocation_id is not pd.NA and int(invocation_id) == int(value)


def pick_windows(infos: list[WindowInfo], rank: int, window: int | None, root: str) -> list[WindowInfo]:
    """The windows a read of ``rank`` looks in.

    Args:
        infos: Every window of the dump.
        rank: The rank.
        window: Window index; None: every complete window of the rank.
        root: The dump root, for messages.

    Raises:
        ValueError: The rank has no window, no complete one (with ``window=None``), or not ``window``.
    """
    mine = [w for w in infos if w.rank == rank]
    if not mine:
        ranks = sorted({w.rank for w in infos})
        raise ValueError(f"rank {rank} has no windows in {root}; ranks with windows: {ranks}")
    if window is None:
        complete = [w for w in mine if w.status == "complete"]
        if not complete:
            listed = listing([f"{w.window} ({w.status})" for w in mine])
            raise ValueError(f"rank {rank} has no complete window in {root}; windows: {listed}; "
                             "pass window= to read an incomplete one")
        return complete
    chosen = [w for w in mine if w.window == int(window)]
    if not chosen:
        listed = listing([f"{w.window} ({w.status})" for w in mine])
        raise ValueError(f"rank {rank} has no window {window} in {root}; windows: {listed}")
    return chosen


def pick_groups(infos: list[WindowInfo], groups_of: Callable[[WindowInfo], list[DataGroup]], rank: int,
                invocation: int | str | None, stage: str | None, task: int | str | None,
                root: str) -> list[DataGroup]:
    """The data groups of the first window in ``infos`` that has any matching the choices.

    Args:
        infos: The candidate windows (from :func:`pick_windows`), in order.
        groups_of: The data groups of one window.
        rank: The rank, for messages.
        invocation: Invocation id or group name; None: any.
        stage: L1 stage name (original or path component); None: any.
        task: L1 task id or task group name; None: any.
        root: The dump root, for messages.

    Raises:
        ValueError: No data group matches (the message lists them all).
    """
    everything: list[DataGroup] = []
    for info in infos:
        groups = groups_of(info)
        everything.extend(groups)
        found = [
            g for g in groups
            if match_invocation(invocation, g.invocation, g.invocation_name)
            and (stage is None or stage in (g.stage, g.stage_component))
            and (task is None or (g.task_name == task if isinstance(task, str) else g.task_id == int(task)))
        ]
        if found:
            return found
    wanted = ", ".join(f"{k}={v!r}" for k, v in (("invocation", invocation), ("stage", stage), ("task", task)) if v is not None)
    raise ValueError(f"no data group matches {wanted or 'the defaults'} in rank {rank} "
                     f"window(s) {[w.window for w in infos]} of {root}; data groups: "
                     f"{listing([describe_group(g) for g in everything]) or 'none'}")


def single_group(groups: list[DataGroup]) -> DataGroup:
    """The one data group of a non-empty match.

    Args:
        groups: The matching data groups (from :func:`pick_groups`).

    Raises:
        ValueError: Several groups match; the message says which argument tells them apart and lists them.
    """
    if len(groups) > 1:
        if len({g.invocation_name for g in groups}) > 1:
            hint, options = "invocation=", [f"{g.invocation} ({g.invocation_name}, kernel {g.kernel!r})" for g in groups]
        elif len({g.stage for g in groups}) > 1:
            hint, options = "stage=", [repr(g.stage) for g in groups]
        else:
            hint, options = "task=", [f"{g.task_id} ({g.task_name!r})" for g in groups]
        options = list(dict.fromkeys(options))
        raise ValueError(f"{len(groups)} data groups match in rank {groups[0].rank} window {groups[0].window}; "
                         f"choose one with {hint}: {listing(options)}")
    return groups[0]


def pick_tensor_rows(infos: list[WindowInfo], frame_of: Callable[[WindowInfo], pd.DataFrame], name: str, *,
                     rank: int, invocation: int | str | None, stage: str | None, io: str | None,
                     kernel: str | None, task: int | str | None, root: str) -> pd.DataFrame:
    """The ``records()`` rows of tensor ``name`` in the first window in ``infos`` that has any matching.

    Args:
        infos: The candidate windows (from :func:`pick_windows`), in order.
        frame_of: The records frame of one window.
        name: The tensor's logical name.
        rank: The rank, for messages.
        invocation: Invocation id or group name; None: any.
        stage: L1 stage (original or path component); None: any.
        io: ``input`` or ``output``; None: any.
        kernel: Kernel name; None: any.
        task: L1 task id or task group name; None: any.
        root: The dump root, for messages.

    Raises:
        ValueError: No record matches (the message lists the tensors of those windows).
    """
    for info in infos:
        frame = frame_of(info)
        selected = frame[frame["name"] == name]
        if invocation is not None:
            selected = selected[[match_invocation(invocation, i, n) for i, n in
                                 zip(selected["invocation"], selected["invocation_name"])]]
        if kernel is not None:
            selected = selected[selected["kernel"] == kernel]
        if stage is not None:
            components = selected["group"].map(lambda g: g.split("/")[4] if g.count("/") >= 4 else None)
            selected = selected[(selected["stage"] == stage) | (components == stage)]
        if io is not None:
            selected = selected[selected["io"] == io]
        if task is not None:
            if isinstance(task, str):
                selected = selected[selected["group"].map(lambda g: g.rpartition("/")[2] == task)]
            else:
                selected = selected[selected["task_id"] == int(task)]
        if len(selected):
            return selected
    names = sorted({n for info in infos for n in frame_of(info)["name"]})
    raise ValueError(f"no tensor {name!r} matches in rank {rank} window(s) {[w.window for w in infos]} of "
                     f"{root}; tensors: {listing(names) or 'none'}")


def check_tensor_choice(name: str, rows: pd.DataFrame) -> bool:
    """Check that a tensor's matching rows are one choice; says whether they are L1 records.

    L0 rows must come from one invocation; L1 rows from one (invocation, stage, io, index).

    Args:
        name: The tensor's logical name, for messages.
        rows: Its matching ``records()`` rows (from :func:`pick_tensor_rows`).

    Returns:
        True for L1 records (to be stitched), False for L0 ones.

    Raises:
        ValueError: The rows are several choices; the message lists them and the argument to choose with.
    """
    invocations = rows.drop_duplicates("invocation_name")
    l1 = rows["io"].notna()
    if not l1.any():
        if len(invocations) > 1:
            options = [f"invocation={r.invocation} ({r.kernel} {r.direction})" for r in invocations.itertuples()]
            raise ValueError(f"tensor {name!r} is stored by {len(invocations)} invocations; choose one with "
                             f"invocation= or kernel=: {listing(options)}")
        return False
    keys = rows.groupby(["invocation_name", "stage", "io", "index"], sort=True, dropna=False).size()
    if len(keys) > 1:
        frame = rows.drop_duplicates(["invocation_name", "stage", "io", "index"])
        options = [f"invocation={r.invocation} ({r.kernel}) stage={r.stage!r} io={r.io!r} index={r.index}"
                   for r in frame.itertuples()]
        what = "io=" if len({o for o in frame["io"]}) > 1 and len(set(frame["stage"])) == 1 else (
            "stage=" if len(set(frame["stage"])) > 1 else "invocation=")
        raise ValueError(f"tensor {name!r} matches {len(frame)} (invocation, stage, io, index) choices; "
                         f"choose with {what}: {listing(options)}")
    return True
