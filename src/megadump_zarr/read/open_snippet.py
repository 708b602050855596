"""Where a record's stored values open with plain xarray, as a line of Python a user can paste.

``xr.open_zarr('<root>/<zarr_group>')['<variable>']`` for a record stored as an array of its own (the group is
its task group, or its L0 invocation group), followed by ``.isel(task=<pack_row>)`` for a record stored as a row
of a task-record pack (the group is the pack). The records table's ``zarr_group``, ``variable`` and ``pack_row``
columns (:mod:`megadump_zarr.read.catalog`) say the same; ``megadump ls`` and ``show`` print this line.
"""

from __future__ import annotations

import math
import os
from typing import Any

__all__ = ["open_snippet", "record_snippet"]


def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def open_snippet(root: str, group: str, variable: str, row: int = -1) -> str:
    """``xr.open_zarr('<root>/<group>')['<variable>']`` (``.isel(task=<row>)`` when ``row >= 0``).

    Args:
        root: The dump root (a local path is made absolute, so the line opens from any directory).
        group: The group below the root that plain ``xr.open_zarr`` opens.
        variable: The variable in it.
        row: The record's row along ``task`` in a pack (-1: not packed).
    """
    base = root if "://" in root else os.path.abspath(os.path.expanduser(root))
    location = base.rstrip("/") + "/" + group
    text = f"xr.open_zarr({location!r})[{variable!r}]"
    return text + (f".isel(task={int(row)})" if row >= 0 else "")


def record_snippet(root: str, row: Any) -> str | None:
    """The :func:`open_snippet` of a records-table row (``None``: it stores no payload).

    Args:
        root: The dump root.
        row: A row of ``Dump.records()`` (a mapping or a pandas row).
    """
    group, variable = row.get("zarr_group"), row.get("variable")
    if _missing(group) or _missing(variable):
        return None
    pack_row = row.get("pack_row")
    return open_snippet(root, str(group), str(variable), -1 if _missing(pack_row) else int(pack_row))
