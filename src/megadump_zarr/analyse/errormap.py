"""Error maps: a :func:`~megadump_zarr.analyse.compare` result aggregated per owner, core or task.

::

    result = compare("run_npu", "run_ref")
    error_map(result, by="owner")   # one row per (rank, window, invocation, kernel, stage, owner_id)

Each row counts the verdicts of the records in its group and keeps the worst errors (largest
``max_abs`` and ``max_rel``) and where the worst relative error is (``worst_name``, ``worst_path``). A
kernel engineer sees at a glance which expert on which core drifts; the CLI prints it with
``megadump compare A B --by owner|core|task`` and ``megadump plot --kind errormap`` draws it.
:func:`mapped_by` says what a map asked by owner is drawn by when the records have no owners (cores, then
tasks).

Groups come in execution order (the order their first record appears in the result). L0 records
(no stage, owner or core) form one group per invocation with those keys missing.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from megadump_zarr.analyse.matching import scalar
from megadump_zarr.analyse.verdict import FAILING, VERDICTS

__all__ = ["BY_FALLBACK", "BY_KEYS", "error_map", "error_map_columns", "mapped_by"]

BY_KEYS: dict[str, tuple[str, ...]] = {
    "owner": ("owner_id",),
    "core": ("core_type", "core_id"),
    "task": ("task_id", "owner_id", "core_type", "core_id"),
}
"""The key columns of each ``by``."""

_GROUP = ("rank", "window", "invocation", "kernel", "stage")

BY_FALLBACK: dict[str, tuple[str, ...]] = {
    "owner": ("owner", "core", "task"),
    "core": ("core", "task"),
    "task": ("task",),
}
"""What an error map asked ``by`` one thing is drawn by, in order of preference: records without owners are
mapped by core, records without cores by task."""

_IDENTITY = {"owner": "owner_id", "core": "core_id", "task": "task_id"}


def mapped_by(result: pd.DataFrame, by: str) -> str:
    """The first of :data:`BY_FALLBACK` ``[by]`` that some staged (L1) record of ``result`` has a key for;
    ``by`` itself where none has (an L0 result).

    Args:
        result: A :func:`~megadump_zarr.analyse.compare` result.
        by: ``"owner"``, ``"core"`` or ``"task"``.

    Raises:
        ValueError: ``by`` is not one of them.
    """
    if by not in BY_FALLBACK:
        raise ValueError(f"by must be one of {', '.join(BY_FALLBACK)}, got {by!r}")
    if result is None or not len(result) or "stage" not in result.columns:
        return by
    staged = result[result["stage"].notna()]
    for candidate in BY_FALLBACK[by]:
        column = _IDENTITY[candidate]
        if column in staged.columns and staged[column].notna().any():
            return candidate
    return by


def error_map_columns(by: str) -> tuple[str, ...]:
    """Columns of :func:`error_map`'s frame for ``by``."""
    return _GROUP + BY_KEYS[by] + ("records", *VERDICTS, "failing", "max_abs", "max_rel", "worst_name", "worst_path")


def error_map(result: pd.DataFrame, by: str = "owner") -> pd.DataFrame:
    """Verdict counts and worst errors of a compare result per (rank, window, invocation, stage) and owner,
    core or task (``kernel`` is carried along: an invocation runs one kernel).

    Args:
        result: A :func:`~megadump_zarr.analyse.compare` result.
        by: ``"owner"`` (``owner_id``), ``"core"`` (``core_type``, ``core_id``) or ``"task"`` (``task_id``
            with its owner and core).

    Returns:
        A DataFrame with columns ``error_map_columns(by)``: the group keys, ``records``, one count column
        per verdict (``pass``, ``fail``, ``shape_mismatch``, ...), ``failing`` (records that do not pass,
        ``missing`` included), the largest ``max_abs`` and ``max_rel`` (NaN when no record of the group
        has metrics), and ``worst_name``/``worst_path`` of the record with the largest ``max_rel``.

    Raises:
        ValueError: ``by`` is not one of ``owner``, ``core``, ``task``.
    """
    if by not in BY_KEYS:
        raise ValueError(f"by must be one of {', '.join(BY_KEYS)}, got {by!r}")
    columns = list(error_map_columns(by))
    if result is None or len(result) == 0:
        return pd.DataFrame(columns=columns)
    keys = [k for k in _GROUP + BY_KEYS[by]]
    frame = result.sort_index(kind="stable").copy()
    for key in keys:
        if key not in frame.columns:
            frame[key] = None
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    max_abs = pd.to_numeric(frame.get("max_abs"), errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    max_rel = pd.to_numeric(frame.get("max_rel"), errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    key_values = [[scalar(v) for v in frame[k]] for k in keys]
    verdicts = frame["verdict"].tolist()
    names = frame["name"].tolist() if "name" in frame.columns else [None] * len(frame)
    paths = frame["path"].tolist() if "path" in frame.columns else [None] * len(frame)
    for i in range(len(frame)):
        key = tuple(values[i] for values in key_values)
        group = groups.get(key)
        if group is None:
            group = groups[key] = {
                **dict(zip(keys, key)),
                "records": 0,
                **dict.fromkeys(VERDICTS, 0),
                "failing": 0,
                "max_abs": np.nan,
                "max_rel": np.nan,
                "worst_name": None,
                "worst_path": None,
            }
        group["records"] += 1
        verdict = verdicts[i]
        if verdict in group:
            group[verdict] += 1
        if verdict in FAILING or verdict == "missing":
            group["failing"] += 1
        if not np.isnan(max_abs[i]) and not max_abs[i] <= group["max_abs"]:
            group["max_abs"] = float(max_abs[i])
        if not np.isnan(max_rel[i]) and not max_rel[i] <= group["max_rel"]:
            group["max_rel"] = float(max_rel[i])
            group["worst_name"], group["worst_path"] = names[i], paths[i]
    out = pd.DataFrame(list(groups.values()), columns=columns)
    for col in ("rank", "window", "invocation", "owner_id", "core_id", "task_id"):
        if col in out.columns:
            out[col] = pd.array([None if scalar(v) is None else int(v) for v in out[col]], dtype="Int64")
    return out
