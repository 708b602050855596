"""Matching the two sides of a comparison: a dump's records in execution order, the records of two dumps
matched by identity (:func:`match_records`: rank, step, kernel, direction, the invocation's order within its
step, then the record's path inside its invocation; never by the position of a window), the names of a dump and a reference (:func:`reference_order`),
the key columns that identify each compared pair, and a full-length reference aligned with a stitched L1
tensor.

What a side is (dump, reference, array) is :mod:`megadump_zarr.analyse.side`'s business; which records a
selection keeps is :mod:`megadump_zarr.read.select`'s (the one filter engine); metrics and verdicts are
:mod:`megadump_zarr.analyse.pairs`' and :mod:`megadump_zarr.analyse.verdict`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
import math
import numbers
from typing import Any

import numpy as np
import pandas as pd

from megadump_zarr.analyse.metrics import shape_of
from megadump_zarr.layout.paths import WINDOW_KEY

__all__ = [
    "KEY_COLUMNS",
    "PAIR_COLUMNS",
    "RecordMatch",
    "StepPairing",
    "align_reference",
    "check_pair",
    "common_keys",
    "execution_order",
    "holds_payload",
    "match_by_identity",
    "match_records",
    "merged_order",
    "name_filter",
    "record_keys",
    "reference_order",
    "scalar",
    "selected_keys",
]

KEY_COLUMNS = (
    "rank",
    "window",
    "invocation",
    "step",
    "direction",
    "kernel",
    "level",
    "stage",
    "task_id",
    "worker",
    "owner_id",
    "core_type",
    "core_id",
    "io",
    "index",
    "name",
    "path",
)
"""Columns identifying the compared tensor (None where they do not apply); A's record, or B's when only B
has it."""

PAIR_COLUMNS = ("step_b", "path_b")
"""The step and path of B's record of a compared pair (None when B has none): they differ from A's ``step`` and
``path`` when steps are paired explicitly (``pair=``) or the dumps number their windows differently."""


def scalar(value: Any) -> Any:
    """A plain Python value for a key cell (NaN / NA → None)."""
    if value is None:
        return None
    try:
        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        pass
    if isinstance(value, np.generic):
        return value.item()
    return value


def holds_payload(row: Mapping[str, Any]) -> bool:
    """Whether a ``records()`` row stored its payload (False: statistics only; a table without the
    ``payload`` column is a tensor-mode dump, every record has one).

    Args:
        row: A ``records()`` row.
    """
    value = scalar(row.get("payload"))
    return True if value is None else bool(value)


def name_filter(names: str | Iterable[str] | None) -> list[str] | None:
    """``compare``'s ``names`` argument as a list (None: no filter).

    Args:
        names: One name, several, or None.
    """
    if names is None:
        return None
    if isinstance(names, str):
        return [names]
    return [str(n) for n in names]


_PHASES = {"before": 0, "input": 0, "after": 1, "output": 1}


def execution_order(records: pd.DataFrame) -> pd.DataFrame:
    """``records`` stably sorted into execution order.

    The key is (rank, window, invocation, task id, worker, capture phase), ties kept in the given
    order. Task ids are assigned in the kernel graph's topological order and tasks run in id order,
    so this is "stage groups in the order they were executed, then task"; within a task (or an L0
    invocation) tensors captured before the task ran (inputs) come before those captured after it
    (outputs); an ``aiv_pipeline`` task's workers run one after the other. A ``records()`` table that
    is already in execution order is returned unchanged.

    Args:
        records: A ``records()`` table (or a filtered part of it).
    """
    if records.empty:
        return records

    def column(name: str, fill: float) -> np.ndarray:
        if name not in records.columns:
            return np.full(len(records), fill)
        return pd.to_numeric(records[name], errors="coerce").astype("float64").fillna(fill).to_numpy()

    if "capture_phase" in records.columns:
        phase_source = records["capture_phase"]
    elif "io" in records.columns:
        phase_source = records["io"]
    else:
        phase_source = pd.Series([None] * len(records), index=records.index)
    phase = np.array([_PHASES.get(v, 0) if isinstance(v, str) else 0 for v in phase_source], dtype=np.float64)
    keys = [
        np.arange(len(records)),
        phase,
        column("worker", -1),
        column("task_id", -1),
        column("invocation", -1),
        column("window", -1),
        column("rank", -1),
    ]
    return records.iloc[np.lexsort(keys)]


_LISTS = (list, tuple, set, frozenset, range)


def selected_keys(select: Mapping[str, Any]) -> dict[str, Any]:
    """The key columns a selection names with one value each (``rank=0`` → ``rank``; ``task=3`` → ``task_id``);
    a dump-vs-reference row takes them where its records leave a key unknown. A list of values, a task
    group name, an invocation group name and the filters that are no key column (``owner``, ``core``) name none.

    Args:
        select: The record selection of ``compare`` (None values already left out).
    """
    out = {}
    for key, value in select.items():
        if isinstance(value, _LISTS) or (key in ("task", "invocation") and isinstance(value, str)):
            continue
        column = "task_id" if key == "task" else key
        if column in KEY_COLUMNS:
            out[column] = value
    return out


def record_keys(row: pd.Series | Mapping[str, Any]) -> dict[str, Any]:
    """The key columns of one ``records()`` row (None where absent or missing).

    Args:
        row: A ``records()`` row (a Series, or a dict of ``to_dict("records")``).
    """
    return {k: scalar(row.get(k)) for k in KEY_COLUMNS}


def common_keys(rows: pd.DataFrame, name: str) -> dict[str, Any]:
    """Key columns shared by every row of ``rows`` (None where they differ)."""
    keys: dict[str, Any] = dict.fromkeys(KEY_COLUMNS)
    for k in KEY_COLUMNS:
        if k in rows.columns and len(rows):
            values = {scalar(v) for v in rows[k]}
            if len(values) == 1:
                keys[k] = values.pop()
    keys["name"] = name
    return keys


def _take_rows(x: Any, rows: np.ndarray) -> Any:
    """``x`` restricted to the given indices along axis 0 (lazy inputs stay lazy)."""
    import xarray as xr

    if isinstance(x, xr.DataArray):
        return x.isel({x.dims[0]: rows})
    if type(x).__module__.startswith("torch"):
        import torch

        return x[torch.as_tensor(rows, device=x.device)]
    if hasattr(x, "oindex"):  # zarr arrays: orthogonal (integer array) indexing
        return x.oindex[rows]
    if hasattr(x, "shape") and hasattr(x, "__getitem__"):
        return x[rows]
    return np.asarray(x)[rows]


def align_reference(tensor: Any, ref: Any) -> tuple[Any, str]:
    """Align a full-length reference with a stitched L1 tensor that holds only the captured rows.

    ``Dump.tensor`` stitches an L1 tensor from its task records: rows no selected task captured are
    absent, and the global row index is the coordinate named like the first dimension. The
    reference's rows are taken at those indices, so a dump of some owners/tasks compares with a whole
    eager tensor.
    """
    import xarray as xr

    if not isinstance(tensor, xr.DataArray) or tensor.attrs.get("level") != "L1" or not tensor.dims:
        return ref, ""
    dim = tensor.dims[0]
    shape_t, shape_r = shape_of(tensor), shape_of(ref)
    if dim not in tensor.coords or not shape_r or shape_t[1:] != shape_r[1:]:
        return ref, ""
    rows = np.asarray(tensor.coords[dim].values)
    if rows.dtype.kind not in "iu":
        return ref, ""
    n = shape_r[0]
    if rows.size == n and np.array_equal(rows, np.arange(n)):
        return ref, ""
    if rows.size and (rows.min() < 0 or rows.max() >= n):
        return ref, ""
    return _take_rows(ref, rows.astype(np.int64)), f"reference rows aligned to the {rows.size} captured rows of {n}"


def merged_order(keys_a: list[Any], keys_b: list[Any]) -> list[Any]:
    """``keys_a`` in order, with keys found only in ``keys_b`` placed after their predecessor in ``keys_b``."""
    in_a = set(keys_a)
    after: dict[Any, list[Any]] = {}
    previous = None
    for key in keys_b:
        if key in in_a:
            previous = key
        else:
            after.setdefault(previous, []).append(key)
    order = list(after.get(None, []))
    for key in keys_a:
        order.append(key)
        order.extend(after.get(key, []))
    return order


@dataclass(frozen=True)
class RecordMatch:
    """One record of a dump comparison with its ``records()`` row on each side.

    Args:
        path: A's record path relative to its dump root (B's when only B has the record).
        row_a: Its row in dump A (under test), None when only B has it.
        row_b: Its row in dump B (reference), None when only A has it.
        notes: What the pairing says about this record (a step that is on one side only, a window
            without a step paired by its index).
    """

    path: str
    row_a: dict[str, Any] | None
    row_b: dict[str, Any] | None
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.row_a is None and self.row_b is None:
            raise ValueError(f"RecordMatch {self.path!r}: row_a and row_b are both None (a record is on a side)")

    @property
    def present(self) -> dict[str, Any]:
        """The row of A when A has the record, else B's."""
        return self.row_a if self.row_a is not None else self.row_b  # type: ignore[return-value]

    @property
    def only(self) -> str | None:
        """``"a"`` or ``"b"`` when one side only has the record, None when both have it."""
        if self.row_a is not None and self.row_b is not None:
            return None
        return "a" if self.row_a is not None else "b"

    @property
    def path_b(self) -> str | None:
        """B's record path (None when B has no such record)."""
        return None if self.row_b is None else str(self.row_b["path"])


@dataclass(frozen=True)
class StepPairing:
    """How the steps of two dumps were paired (by equal step unless ``pair`` says otherwise).

    Args:
        pairs: ``(step of A, step of B)`` compared with each other, in A's order.
        only_a: Steps of A no step of B was paired with (their records are ``missing``).
        only_b: Steps of B no step of A was paired with.
        window_steps: ``(side, window)`` of windows that record no step: their window index stands in for it.
    """

    pairs: tuple[tuple[int, int], ...] = ()
    only_a: tuple[int, ...] = ()
    only_b: tuple[int, ...] = ()
    window_steps: tuple[tuple[str, int], ...] = field(default_factory=tuple)

    def line(self) -> str | None:
        """One line naming the steps present on one side only (None when every step is paired)."""
        if not self.only_a and not self.only_b:
            return None
        parts = []
        for side, steps in (("a", self.only_a), ("b", self.only_b)):
            if steps:
                parts.append(f"step{'s' if len(steps) > 1 else ''} {', '.join(map(str, steps))} only in dump {side}")
        paired = ", ".join(f"{a}->{b}" for a, b in self.pairs) or "none"
        return (
            f"unpaired steps: {'; '.join(parts)} (steps paired: {paired}); "
            "pair other steps explicitly with --pair A_STEP:B_STEP (pair={A_STEP: B_STEP})"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``result.attrs["pairing"]``)."""
        return {
            "pairs": [list(p) for p in self.pairs],
            "only_a": list(self.only_a),
            "only_b": list(self.only_b),
            "window_steps": [list(w) for w in self.window_steps],
        }


def _step_number(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < 0:
        raise ValueError(f"pair: {what} must be a step number (an integer >= 0), got {value!r}")
    return int(value)


def check_pair(pair: Mapping[int, int] | Iterable[tuple[int, int]] | None) -> dict[int, int]:
    """``compare``'s ``pair`` argument as ``{step of A: step of B}`` (empty: steps pair with equal steps).

    Args:
        pair: A mapping ``{step of A: step of B}``, ``(a, b)`` tuples, or None.

    Raises:
        ValueError: A step that is not an integer >= 0, an A step given twice, or a B step two A steps
            would be compared with (the message names them).
    """
    if pair is None:
        return {}
    items = list(pair.items()) if isinstance(pair, Mapping) else list(pair)
    out: dict[int, int] = {}
    taken: dict[int, int] = {}
    for item in items:
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise ValueError(f"pair: each entry must be (step of A, step of B), got {item!r}")
        a, b = _step_number(item[0], "a step of A"), _step_number(item[1], "a step of B")
        if a in out and out[a] != b:
            raise ValueError(f"pair: step {a} of A is paired twice ({out[a]} and {b})")
        if b in taken and taken[b] != a:
            raise ValueError(f"pair: step {b} of B is paired with two steps of A ({taken[b]} and {a})")
        out[a], taken[b] = b, a
    return out


def _inner_path(path: str, invocation_name: Any) -> str | None:
    """The record's path inside its invocation group (None when ``path`` is no record path of a window)."""
    match = WINDOW_KEY.match(path)
    if match is None:
        return None
    rest = match.group(2)
    if isinstance(invocation_name, str) and rest.startswith(invocation_name + "/"):
        return rest[len(invocation_name) + 1 :]
    head, sep, inner = rest.partition("/")
    return inner if sep and head.startswith("invocation_") else None


def _identities(rows: list[dict[str, Any]], side: str) -> tuple[list[tuple[Any, ...]], list[tuple[str, int]]]:
    """Each row's identity ``(rank, step, kernel, direction, occurrence, path inside the invocation)`` and the
    windows whose step is unknown (their index stands in for the step). A row whose path is no record path of
    a window is identified by its path."""
    steps: list[int | None] = []
    fallback: dict[int, None] = {}
    for row in rows:
        step = scalar(row.get("step"))
        if step is None:
            window = scalar(row.get("window"))
            step = None if window is None else int(window)
            if window is not None:
                fallback[int(window)] = None
        steps.append(None if step is None else int(step))
    groups: dict[tuple[Any, ...], dict[tuple[Any, ...], None]] = {}
    for row, step in zip(rows, steps):
        group = (scalar(row.get("rank")), step, scalar(row.get("kernel")), scalar(row.get("direction")))
        order = (_sortable(row.get("window")), _sortable(row.get("invocation")))
        groups.setdefault(group, {})[order] = None
    occurrence = {group: {key: i for i, key in enumerate(sorted(seen))} for group, seen in groups.items()}
    out: list[tuple[Any, ...]] = []
    for row, step in zip(rows, steps):
        path = str(row["path"])
        inner = _inner_path(path, scalar(row.get("invocation_name")))
        if inner is None:
            out.append(("path", path))
            continue
        group = (scalar(row.get("rank")), step, scalar(row.get("kernel")), scalar(row.get("direction")))
        nth = occurrence[group][(_sortable(row.get("window")), _sortable(row.get("invocation")))]
        out.append((*group, nth, inner))
    return out, [(side, w) for w in fallback]


def _sortable(value: Any) -> int:
    value = scalar(value)
    return -1 if value is None else int(value)


def _step_of(identity: tuple[Any, ...]) -> int | None:
    return None if identity[0] in ("path", "unpaired a") else identity[1]


def _with_step(identity: tuple[Any, ...], step: int | None) -> tuple[Any, ...]:
    return identity if identity[0] == "path" else (identity[0], step, *identity[2:])


def match_by_identity(
    records_a: pd.DataFrame, records_b: pd.DataFrame, pair: Mapping[int, int] | None = None
) -> tuple[list[RecordMatch], StepPairing]:
    """The records of two dumps matched by identity, and how their steps were paired.

    A record's identity is its rank, its step (the invocation's ``step``; a window that records none:
    its window index, and a note says so), kernel, direction, the order of its invocation among the
    invocations of that kernel and direction in the step, and its path inside the invocation group
    (stage, task, port, name). Windows are never paired by position: a step of A is compared with the
    same step of B, or with the step ``pair`` names. A step present on one side only gives ``missing``
    records whose note names it. Matches come in A's execution order, B-only records after their
    predecessor in B (:func:`merged_order`).

    Args:
        records_a: Dump A's selected records, in execution order (:func:`execution_order`).
        records_b: Dump B's.
        pair: ``{step of A: step of B}`` (:func:`check_pair`); other steps pair with equal steps.
    """
    pair = check_pair(pair)
    rows_a, rows_b = records_a.to_dict("records"), records_b.to_dict("records")
    ids_a, windows_a = _identities(rows_a, "a")
    ids_b, windows_b = _identities(rows_b, "b")
    steps_a = list(dict.fromkeys(s for s in map(_step_of, ids_a) if s is not None))
    steps_b = set(s for s in map(_step_of, ids_b) if s is not None)
    explicit_b = set(pair.values())
    # A's step s meets B's step pair.get(s, s); a B step claimed by an explicit pair meets no other A step
    target = {s: pair[s] if s in pair else (s if s not in explicit_b else None) for s in steps_a}
    keyed_a: dict[tuple[Any, ...], dict[str, Any]] = {}
    own_step: dict[tuple[Any, ...], int | None] = {}
    for identity, row in zip(ids_a, rows_a):
        step = _step_of(identity)
        goal = target.get(step, step) if step is not None else None
        # a step of A whose B step an explicit pair took meets nothing in B
        key = _with_step(identity, goal) if goal is not None or step is None else ("unpaired a", *identity)
        keyed_a[key], own_step[key] = row, step
    keyed_b = {i: row for i, row in zip(ids_b, rows_b)}
    back = {b: a for a, b in target.items() if b is not None}
    paired = tuple((a, b) for a, b in target.items() if b is not None and b in steps_b)
    only_a = tuple(sorted(a for a, b in target.items() if b is None or b not in steps_b))
    only_b = tuple(sorted(s for s in steps_b if s not in back))
    fallback: set[tuple[str, int]] = {*windows_a, *windows_b}
    matches = []
    for key in merged_order(list(keyed_a), list(keyed_b)):
        row_a, row_b = keyed_a.get(key), keyed_b.get(key)
        present = row_a if row_a is not None else row_b
        notes = []
        if row_a is None and _step_of(key) in only_b:
            notes.append(f"step {_step_of(key)} of dump b: no step of dump a is paired with it")
        elif row_b is None and own_step.get(key) in only_a:
            notes.append(f"step {own_step[key]} of dump a: no step of dump b is paired with it")
        for side, row in (("a", row_a), ("b", row_b)):
            window = None if row is None or scalar(row.get("step")) is not None else scalar(row.get("window"))
            if window is not None and (side, int(window)) in fallback:
                notes.append(f"window {window} of dump {side} records no step: its window index stands in for it")
        matches.append(RecordMatch(str(present["path"]), row_a, row_b, tuple(notes)))
    pairing = StepPairing(paired, only_a, only_b, (*windows_a, *windows_b))
    return matches, pairing


def match_records(
    records_a: pd.DataFrame, records_b: pd.DataFrame, pair: Mapping[int, int] | None = None
) -> list[RecordMatch]:
    """The records of two dumps matched by identity (:func:`match_by_identity`).

    Args:
        records_a: Dump A's selected records, in execution order (:func:`execution_order`).
        records_b: Dump B's.
        pair: ``{step of A: step of B}``; other steps pair with equal steps.
    """
    return match_by_identity(records_a, records_b, pair)[0]


def reference_order(records: pd.DataFrame, wanted: list[str]) -> tuple[list[str], set[str]]:
    """The order a dump is compared with a reference in: the wanted names by their first record in
    execution order, names the dump does not hold last (in the order wanted); and the names it holds.

    Args:
        records: The dump's selected records, in execution order.
        wanted: The names to compare.
    """
    first_seen: dict[str, int] = {}
    for position, name in enumerate(records["name"]):
        first_seen.setdefault(str(name), position)
    asked: dict[str, int] = {}
    for position, name in enumerate(wanted):
        asked.setdefault(name, position)
    ordered = sorted(wanted, key=lambda n: (first_seen.get(n, math.inf), asked[n]))
    return ordered, set(first_seen)
