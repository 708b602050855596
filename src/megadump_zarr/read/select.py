"""Choosing what a ``Dump`` read means: windows, data groups and tensor records by rank, window,
invocation, stage, io, kernel, task, owner and core, and the "choose one of" errors when a choice is
ambiguous.

The record filters (:data:`FILTERS`, :func:`filter_mask`, :func:`select_records`) are the one filter engine:
``Dump.tensor``, ``Dump.dataset``, ``analyse.compare`` and every ``megadump`` command that takes
``--owner``/``--core``/... apply them to a ``records()`` frame (``compare`` also filters by any other
``records()`` column, ``columns=True``); :func:`no_match_message` says, when they match nothing, which
filter emptied the selection and which values exist there ("no records with owner 9; owners: 0, 1, 2, 3").

Everything here works on catalogue metadata (``WindowInfo``, ``DataGroup``, ``records()`` frames);
nothing reads chunk data.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
import fnmatch
import re
from typing import Any

import numpy as np
import pandas as pd

from megadump_zarr.read.catalog import DataGroup, WindowInfo

__all__ = [
    "FILTERS",
    "RecordFilter",
    "check_tensor_choice",
    "filter_mask",
    "no_match_message",
    "select_records",
    "describe_group",
    "listing",
    "match_invocation",
    "pick_groups",
    "pick_tensor_rows",
    "pick_windows",
    "single_group",
    "stage_component",
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
            raise ValueError(
                f"rank {rank} has no complete window in {root}; windows: {listed}; "
                "pass window= to read an incomplete one"
            )
        return complete
    chosen = [w for w in mine if w.window == int(window)]
    if not chosen:
        listed = listing([f"{w.window} ({w.status})" for w in mine])
        raise ValueError(f"rank {rank} has no window {window} in {root}; windows: {listed}")
    return chosen


def pick_groups(
    infos: list[WindowInfo],
    groups_of: Callable[[WindowInfo], list[DataGroup]],
    rank: int,
    invocation: int | str | None,
    stage: str | None,
    task: int | str | None,
    root: str,
) -> list[DataGroup]:
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
            g
            for g in groups
            if match_invocation(invocation, g.invocation, g.invocation_name)
            and (stage is None or stage in (g.stage, g.stage_component))
            and (task is None or (g.task_name == task if isinstance(task, str) else g.task_id == int(task)))
        ]
        if found:
            return found
    wanted = ", ".join(
        f"{k}={v!r}" for k, v in (("invocation", invocation), ("stage", stage), ("task", task)) if v is not None
    )
    raise ValueError(
        f"no data group matches {wanted or 'the defaults'} in rank {rank} "
        f"window(s) {[w.window for w in infos]} of {root}; data groups: "
        f"{listing([describe_group(g) for g in everything]) or 'none'}"
    )


def single_group(groups: list[DataGroup]) -> DataGroup:
    """The one data group of a non-empty match.

    Args:
        groups: The matching data groups (from :func:`pick_groups`).

    Raises:
        ValueError: Several groups match; the message says which argument tells them apart and lists them.
    """
    if len(groups) > 1:
        if len({g.invocation_name for g in groups}) > 1:
            hint, options = (
                "invocation=",
                [f"{g.invocation} ({g.invocation_name}, kernel {g.kernel!r})" for g in groups],
            )
        elif len({g.stage for g in groups}) > 1:
            hint, options = "stage=", [repr(g.stage) for g in groups]
        else:
            hint, options = "task=", [f"{g.task_id} ({g.task_name!r})" for g in groups]
        options = list(dict.fromkeys(options))
        raise ValueError(
            f"{len(groups)} data groups match in rank {groups[0].rank} window {groups[0].window}; "
            f"choose one with {hint}: {listing(options)}"
        )
    return groups[0]


def pick_tensor_rows(
    infos: list[WindowInfo],
    frame_of: Callable[[WindowInfo], pd.DataFrame],
    name: str,
    *,
    rank: int,
    invocation: int | str | None,
    stage: str | None,
    io: str | None,
    kernel: str | None,
    task: int | str | None,
    root: str,
    owner: int | None = None,
    core: int | str | None = None,
    core_type: str | None = None,
) -> pd.DataFrame:
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
        owner: L1 owner id (e.g. the expert); None: any.
        core: L1 core id, or core type and id (``MIX5``); None: any.
        core_type: L1 core type (``AIC``, ``AIV``, ``MIX``); None: any.

    Raises:
        ValueError: No record matches: the message names the filter that left nothing and the values
            that exist, or lists the tensors of those windows when none is named ``name``.
    """
    select = {
        "invocation": invocation,
        "kernel": kernel,
        "stage": stage,
        "io": io,
        "task": task,
        "owner": owner,
        "core_type": core_type,
        "core": core,
    }
    named = []
    for info in infos:
        frame = frame_of(info)
        of_name = frame[frame["name"] == name]
        selected = select_records(of_name, select)
        if len(selected):
            return selected
        named.append(of_name)
    windows = [w.window for w in infos]
    if any(len(f) for f in named):
        why = no_match_message(pd.concat(named), select, what=f"records of tensor {name!r}")
        raise ValueError(f"{why} (rank {rank} window(s) {windows} of {root})")
    names = sorted({n for info in infos for n in frame_of(info)["name"]})
    hint = "; a record path is read with record_array(path)" if "/" in str(name) else ""
    raise ValueError(
        f"no tensor {name!r} matches in rank {rank} window(s) {windows} of {root}; tensors: "
        f"{listing(names) or 'none'}{hint}"
    )


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
            raise ValueError(
                f"tensor {name!r} is stored by {len(invocations)} invocations; choose one with "
                f"invocation= or kernel=: {listing(options)}"
            )
        return False
    keys = rows.groupby(["invocation_name", "stage", "io", "index"], sort=True, dropna=False).size()
    if len(keys) > 1:
        frame = rows.drop_duplicates(["invocation_name", "stage", "io", "index"])
        options = [
            f"invocation={r.invocation} ({r.kernel}) stage={r.stage!r} io={r.io!r} index={r.index}"
            for r in frame.itertuples()
        ]
        what = (
            "io="
            if len({o for o in frame["io"]}) > 1 and len(set(frame["stage"])) == 1
            else ("stage=" if len(set(frame["stage"])) > 1 else "invocation=")
        )
        raise ValueError(
            f"tensor {name!r} matches {len(frame)} (invocation, stage, io, index) choices; "
            f"choose with {what}: {listing(options)}"
        )
    return True


# ---------------------------------------------------------------------------------------------- record filters
@dataclass(frozen=True)
class RecordFilter:
    """One record filter: its keyword, the ``records()`` column it reads and how messages name it.

    Args:
        key: The keyword (``owner``, ``core_type``, ...), also the CLI flag (``--owner``, ``--core-type``).
        column: The ``records()`` column.
        label: Singular, for messages (``owner``).
        plural: Plural, for the list of existing values (``owners``).
    """

    key: str
    column: str
    label: str
    plural: str

    def __post_init__(self) -> None:
        for name in ("key", "column", "label", "plural"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"RecordFilter.{name} must be a non-empty string, got {getattr(self, name)!r}")


FILTERS = (
    RecordFilter("rank", "rank", "rank", "ranks"),
    RecordFilter("window", "window", "window", "windows"),
    RecordFilter("invocation", "invocation", "invocation", "invocations"),
    RecordFilter("kernel", "kernel", "kernel", "kernels"),
    RecordFilter("direction", "direction", "direction", "directions"),
    RecordFilter("stage", "stage", "stage", "stages"),
    RecordFilter("task", "task_id", "task", "tasks"),
    RecordFilter("owner", "owner_id", "owner", "owners"),
    RecordFilter("core_type", "core_type", "core type", "core types"),
    RecordFilter("core", "core_id", "core", "cores"),
    RecordFilter("io", "io", "io", "io values"),
    RecordFilter("name", "name", "name", "names"),
)
"""The record filters, in the order they are applied and explained."""

_BY_KEY = {f.key: f for f in FILTERS}
_CORE = re.compile(r"^([A-Za-z_]+)(\d+)$")


def stage_component(group: Any) -> str | None:
    """The stage path component of an L1 data group path (``.../invocation_X/stages/<stage>/task_Y``)."""
    parts = str(group).split("/")
    return parts[4] if len(parts) > 4 and parts[3] == "stages" else None


def _column(frame: pd.DataFrame, name: str) -> pd.Series:
    if name in frame.columns:
        return frame[name]
    return pd.Series([None] * len(frame), index=frame.index, dtype=object)


def _equal(values: pd.Series, value: Any) -> np.ndarray:
    present = values.notna().to_numpy(dtype=bool)
    out = np.zeros(len(values), dtype=bool)
    if not present.any():
        return out
    kept = values[present]
    if isinstance(value, (bool, np.bool_)):
        return out
    if isinstance(value, (int, np.integer)):
        numeric = pd.to_numeric(kept, errors="coerce")
        out[present] = (numeric == int(value)).fillna(False).to_numpy(dtype=bool)
    else:
        out[present] = (kept.astype(str) == str(value)).to_numpy(dtype=bool)
    return out


def _as_int(value: Any) -> Any:
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return value


def _core_text(core_type: Any, core_id: Any) -> str | None:
    if core_type is None or pd.isna(core_type):
        return None if core_id is None or pd.isna(core_id) else str(int(core_id))
    return f"{core_type}{'' if core_id is None or pd.isna(core_id) else int(core_id)}"


def filter_mask(frame: pd.DataFrame, key: str, value: Any, *, columns: bool = False) -> np.ndarray:
    """Which rows of a ``records()`` frame one filter keeps.

    Values: ``rank``/``window``/``owner``: an int; ``invocation``: an id, or a group name
    (``invocation_000002_forward``); ``task``: an id, or a task group name (``task_000003``);
    ``stage``: the stage name or its path component; ``core``: a core id (``5``), or type and id
    (``MIX5``, any letter case); ``core_type``: ``AIC``/``AIV``/``MIX`` (any letter case); ``kernel``,
    ``direction``, ``io``: the value; ``name``: a name, a shell-style pattern, or a list of them (a
    name that equals a pattern matches, so names holding ``*``, ``[`` or ``/`` select themselves).
    A list (or tuple/set) of values for any other key keeps rows matching any of them. A row missing
    the column's value (an L0 row's owner) never matches. With ``columns``, a key that is no filter but a
    column of ``frame`` (``task_id``, ``step``, ``path``, ``payload``, ...) keeps the rows whose cell
    equals the value (or one of a list's values).

    Args:
        frame: A ``records()`` frame (or part of one).
        key: The filter (a key of :data:`FILTERS`, or with ``columns`` a column of ``frame``).
        value: The wanted value.
        columns: Also accept any column of ``frame`` as a key.

    Raises:
        ValueError: An unknown filter key (the message lists the filters, and with ``columns`` the columns).
    """
    spec = _BY_KEY.get(key)
    if spec is None:
        if columns and key in frame.columns:
            return _cell_mask(frame[key], value)
        raise ValueError(_unknown(key, frame, columns))
    if key == "name":
        return _name_mask(_column(frame, "name"), [value] if isinstance(value, str) else [str(v) for v in value])
    if isinstance(value, (list, tuple, set, frozenset, range)):
        out = np.zeros(len(frame), dtype=bool)
        for v in value:
            out |= filter_mask(frame, key, v)
        return out
    value = _as_int(value)
    if key == "invocation" and isinstance(value, str):
        return _equal(_column(frame, "invocation_name"), value)
    if key == "task" and isinstance(value, str):
        groups = _column(frame, "group")
        return np.array([isinstance(g, str) and g.rpartition("/")[2] == value for g in groups], dtype=bool)
    if key == "stage":
        components = _column(frame, "group").map(stage_component)
        return _equal(_column(frame, "stage"), value) | _equal(components, value)
    if key == "core_type":
        return _equal(
            _column(frame, "core_type").map(lambda t: t.upper() if isinstance(t, str) else t), str(value).upper()
        )
    if key == "core" and isinstance(value, str):
        match = _CORE.match(value.strip())
        if match is None:
            return np.zeros(len(frame), dtype=bool)
        wanted = f"{match.group(1).upper()}{int(match.group(2))}"
        texts = [_core_text(t, i) for t, i in zip(_column(frame, "core_type"), _column(frame, "core_id"))]
        return np.array([t is not None and t.upper() == wanted for t in texts], dtype=bool)
    return _equal(_column(frame, spec.column), value)


_GLOB = frozenset("*?[")


def _name_mask(names: pd.Series, patterns: list[str]) -> np.ndarray:
    """Rows whose name equals a pattern or matches it shell-style (a pattern without ``*?[`` only by
    equality, which is what fnmatch would say: a set look-up instead of a match per row)."""
    exact = [p for p in patterns if not _GLOB & set(p)]
    globs = [p for p in patterns if _GLOB & set(p)]
    out = names.isin(exact).to_numpy(dtype=bool, copy=True) if exact else np.zeros(len(names), dtype=bool)
    if globs:
        out |= np.array(
            [isinstance(n, str) and any(n == p or fnmatch.fnmatchcase(n, p) for p in globs) for n in names],
            dtype=bool,
        )
    return out


def _cell_mask(values: pd.Series, value: Any) -> np.ndarray:
    """A column that is no filter (``columns=True``): cells equal to ``value``, or to one of a list's values;
    a missing cell never matches."""
    if isinstance(value, (list, tuple, set, frozenset, range)):
        kept = values.isin(list(value))
    else:
        kept = values == value
    return kept.fillna(False).to_numpy(dtype=bool)


def _unknown(key: str, frame: pd.DataFrame, columns: bool) -> str:
    message = f"unknown record filter {key!r}; filters: {', '.join(_BY_KEY)}"
    return f"{message}, or a records() column: {', '.join(map(str, frame.columns))}" if columns else message


def _active(select: Mapping[str, Any], frame: pd.DataFrame, columns: bool = False) -> list[tuple[RecordFilter, Any]]:
    """The filters ``select`` sets (None: not set), in :data:`FILTERS` order, then the plain columns in the
    order given (``columns``), each as a :class:`RecordFilter`."""
    unknown = [k for k in select if k not in _BY_KEY and not (columns and k in frame.columns)]
    if unknown:
        raise ValueError(_unknown(unknown[0], frame, columns))
    active = [(f, select[f.key]) for f in FILTERS if select.get(f.key) is not None]
    plain = [RecordFilter(k, k, k, f"{k} values") for k in select if k not in _BY_KEY and select[k] is not None]
    return active + [(f, select[f.key]) for f in plain]


def select_records(frame: pd.DataFrame, select: Mapping[str, Any], *, columns: bool = False) -> pd.DataFrame:
    """The rows of ``frame`` that every filter in ``select`` keeps (filters left at None are ignored).

    Args:
        frame: A ``records()`` frame.
        select: ``{filter key: value}`` (see :func:`filter_mask`).
        columns: Also filter by any other column of ``frame`` (equality, or membership for a list).

    Raises:
        ValueError: An unknown filter key (the message lists the filters, and with ``columns`` the columns).
    """
    mask = np.ones(len(frame), dtype=bool)
    for spec, value in _active(select, frame, columns):
        mask &= filter_mask(frame, spec.key, value, columns=columns)
    return frame[mask]


def _shown(spec: RecordFilter, value: Any) -> str:
    if isinstance(value, (list, tuple, set, frozenset)):
        return " or ".join(_shown(spec, v) for v in value)
    return repr(value) if isinstance(value, str) and spec.key in ("name", "stage", "kernel") else str(value)


def _existing(frame: pd.DataFrame, spec: RecordFilter) -> list[str]:
    if spec.key == "core":
        values = {_core_text(t, i) for t, i in zip(_column(frame, "core_type"), _column(frame, "core_id"))}
        return sorted(v for v in values if v is not None)
    if spec.key == "invocation":
        values = {
            (int(i), str(n))
            for i, n in zip(_column(frame, "invocation"), _column(frame, "invocation_name"))
            if i is not None and not pd.isna(i)
        }
        return [f"{i} ({n})" for i, n in sorted(values)]
    if spec.key not in _BY_KEY:  # a plain column (columns=True): its values as written (a cell may be a tuple)
        return sorted(
            {str(v) for v in _column(frame, spec.column) if v is not None and not (np.ndim(v) == 0 and pd.isna(v))}
        )
    values = [v for v in _column(frame, spec.column) if v is not None and not (not isinstance(v, str) and pd.isna(v))]
    if spec.key == "stage":
        return list(dict.fromkeys(str(v) for v in values))  # execution order
    unique = set(int(v) if isinstance(v, (int, np.integer, float, np.floating)) else str(v) for v in values)
    return [str(v) for v in sorted(unique, key=lambda v: (isinstance(v, str), v))]


def no_match_message(
    frame: pd.DataFrame, select: Mapping[str, Any], what: str = "records", *, columns: bool = False
) -> str | None:
    """Why ``select`` keeps no row of ``frame``: the first filter (in :data:`FILTERS` order) that leaves
    nothing, and the values its column takes among the rows the filters before it kept.

    ``no records with owner 9; owners: 0, 1, 2, 3``; ``no records with stage 'x' among those with
    invocation 2; stages there: expert_up, expert_down``. None when some row matches.

    Args:
        frame: A ``records()`` frame.
        select: The filters (see :func:`select_records`).
        what: What the rows are, for the message (``records``, ``records of tensor 'ws'``).
        columns: Also filter by any other column of ``frame`` (as :func:`select_records`).
    """
    if len(frame) == 0:
        return f"no {what}"
    kept = frame
    before: list[str] = []
    for spec, value in _active(select, frame, columns):
        narrowed = kept[filter_mask(kept, spec.key, value, columns=columns)]
        if len(narrowed) == 0:
            existing = _existing(kept, spec)
            among = f" among those with {' and '.join(before)}" if before else ""
            there = " there" if before else ""
            if existing:
                return f"no {what} with {spec.label} {_shown(spec, value)}{among}; {spec.plural}{there}: {listing(existing)}"
            return f"no {what} with {spec.label} {_shown(spec, value)}{among}: they have no {spec.label}" + (
                " (L0 records have no stage, task, owner, core or io)"
                if spec.key in ("stage", "task", "owner", "core", "core_type", "io")
                else ""
            )
        kept = narrowed
        before.append(f"{spec.label} {_shown(spec, value)}")
    return None
