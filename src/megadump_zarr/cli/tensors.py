"""Pick one tensor of a dump from a command-line SELECTOR (``show`` and ``plot``)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
import os
from typing import Any

from megadump_zarr.cli.common import CliError, matching_records
from megadump_zarr.layout.paths import WINDOW_KEY
from megadump_zarr.cli.render import is_missing

__all__ = ["Selected", "flat_head", "select_tensor"]

_LISTED = 12


@dataclass
class Selected:
    """The chosen tensor.

    Args:
        data: The lazy DataArray (logical shape; stitched for L1 tensors of several records).
        records: Its records (rows of ``records()``).
        path: The record path when it is one record, else None.
    """

    data: Any
    records: Any
    path: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return str(self.data.name if self.data.name is not None else self.records["name"].iloc[0])


def _relative(dump: Any, selector: str) -> str:
    """A selector given as a full local path below the dump root, made relative to it."""
    text = selector.strip()
    root = dump.root
    if "://" not in root and os.path.isabs(text):
        absolute_root = os.path.abspath(os.path.expanduser(root))
        candidate = os.path.abspath(text)
        if candidate.startswith(absolute_root + os.sep):
            return os.path.relpath(candidate, absolute_root).replace(os.sep, "/")
    if text.startswith(root.rstrip("/") + "/"):
        return text[len(root.rstrip("/")) + 1 :]
    return text.strip("/")


def _unique(frame: Any, column: str) -> Any:
    """The one value ``column`` takes over ``frame`` (None when missing everywhere or not unique)."""
    values = [v for v in frame[column].tolist() if not is_missing(v)]
    if not values or len(set(values)) != 1:
        return None
    value = values[0]
    return value.item() if hasattr(value, "item") else value


def _listing(values: list[str]) -> str:
    more = f", ... ({len(values) - _LISTED} more)" if len(values) > _LISTED else ""
    return ", ".join(values[:_LISTED]) + more


def _flag_hint(message: str) -> str:
    """Translate the read API's keyword hints (``invocation=``) into the command's flags."""
    for word in ("invocation", "stage", "io", "kernel", "task", "window", "rank", "owner", "core_type", "core"):
        flag = word.replace("_", "-")
        message = message.replace(f"{word}=:", f"--{flag}:").replace(f"{word}= or", f"--{flag} or")
        message = message.replace(f"{word}=", f"--{flag} ")
    return message


def _name_from_patterns(records: Any, patterns: list[str], root: str) -> str:
    """The one tensor name that ``--name`` patterns select (``show``/``plot`` without a SELECTOR)."""
    from megadump_zarr.read.select import filter_mask

    names = sorted({str(n) for n in records[filter_mask(records, "name", patterns)]["name"]})
    if len(names) == 1:
        return names[0]
    if not names:
        every = sorted({str(n) for n in records["name"]})
        raise CliError(
            f"no tensor named {' or '.join(map(repr, patterns))} in {root}; tensors: {_listing(every) or 'none'}"
        )
    raise CliError(f"--name selects {len(names)} tensors in {root}: {_listing(names)}; give one name")


def select_tensor(dump: Any, selector: str | None, args: argparse.Namespace) -> Selected:
    """Resolve SELECTOR: a record path relative to the root, or a tensor name narrowed by the filters.

    A tensor name is taken as it is, so names holding ``/`` select themselves; a record path (the
    ``path`` column of ``ls``) is recognised by its ``rank_R/window_WWWW/...`` form. Without a SELECTOR,
    ``--name`` names the tensor. A name matching one record gives that record; several records of one
    (invocation, stage, io, index) are stitched with ``Dump.tensor``, which ``--owner``/``--core``/
    ``--core-type`` narrow to that owner's or core's records.

    Raises:
        CliError: No such tensor or record (exit 2), filters that keep none of its records (exit 2, naming
            the filter and the values that exist), or an ambiguous choice (exit 2, saying how to choose).
    """
    include = bool(getattr(args, "include_incomplete", False))
    everything = dump.records(include_incomplete=True if selector is not None else include)
    patterns = [p for p in (getattr(args, "name", None) or [])]
    if selector is None:
        if not patterns:
            raise CliError("give a SELECTOR (a record path or tensor name) or --name")
        selector = _name_from_patterns(dump.records(include_incomplete=include), patterns, dump.root)
    names = set(everything["name"].astype(str))
    relative = selector if selector in names else _relative(dump, selector)
    if relative not in names and (WINDOW_KEY.match(relative) or relative in set(everything["path"])):
        rows = everything[everything["path"] == relative]
        try:
            data = dump.record_array(relative)
        except ValueError as error:
            raise CliError(f"{error}; list record paths with 'megadump ls {dump.root} --quiet'") from None
        return Selected(data, rows, relative)
    if relative not in names:
        what = (
            "neither a tensor name nor a record path (rank_R/window_WWWW/invocation_.../...)"
            if "/" in relative
            else "not a tensor name"
        )
        listed = sorted(names)
        raise CliError(f"no tensor named {relative!r} in {dump.root}: {what}; tensors: {_listing(listed) or 'none'}")
    records = matching_records(dump, args, extra={"name": [relative]})
    rows = records[records["name"].astype(str) == relative]
    if len(rows) == 1:
        path = str(rows["path"].iloc[0])
        return Selected(dump.record_array(path), rows, path)
    select: dict[str, Any] = {}
    for key, column in (
        ("rank", "rank"),
        ("window", "window"),
        ("invocation", "invocation"),
        ("stage", "stage"),
        ("io", "io"),
        ("kernel", "kernel"),
    ):
        value = getattr(args, key, None)
        if value is None:
            value = _unique(rows, column)
        if value is not None:
            select[key] = value
    for key in ("task", "owner", "core", "core_type"):
        if getattr(args, key, None) is not None:
            select[key] = getattr(args, key)
    select.setdefault("rank", 0)
    if rows["io"].isna().all():  # L0: every record is a whole tensor; several means an ambiguous choice
        options = [f"{r.path}" for r in rows.itertuples()]
        raise CliError(
            f"tensor {relative!r} is stored by {len(rows)} records; narrow it with --window/--invocation/"
            f"--kernel or pass a record path: {_listing(options)}"
        )
    try:
        data = dump.tensor(relative, **select)
    except ValueError as error:
        raise CliError(_flag_hint(str(error))) from None
    notes = []
    for key, label in (("owner", "owner"), ("core", "core"), ("core_type", "core type")):
        if getattr(args, key, None) is not None:
            notes.append(f"records of {label} {getattr(args, key)}")
    if "path" in rows.columns and data.attrs.get("records") is not None and data.attrs["records"] != len(rows):
        notes.append(f"stitched from {data.attrs['records']} records")
    return Selected(data, rows, None, notes)


def flat_head(data: Any, n: int) -> Any:
    """The first ``n`` elements of ``data`` in C order, reading only the leading rows needed."""
    import math

    import numpy as np

    if n <= 0:
        return np.empty(0)
    if data.ndim == 0:
        return np.asarray(data.values).reshape(1)
    per_row = math.prod(int(s) for s in data.shape[1:])
    rows = min(int(data.shape[0]), max(1, math.ceil(n / per_row))) if per_row else 0
    values = np.asarray(data.isel({data.dims[0]: slice(0, rows)}).values)
    return values.reshape(-1)[:n]
