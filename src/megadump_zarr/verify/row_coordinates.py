"""A task group's row coordinates hold the rows its records say they hold.

In the tasks layout an L1 record that is a proper row slice of its tensor has a coordinate array named
after its first dimension in its task group (``token``): the global rows, ``arange(start, start + rows)``
with ``start = sourceOffsetBytes / row bytes`` (the writer's rule). Checking those values against the
records' attributes binds the coordinate to its place by value: a coordinate chunk copied from another
task or window that is valid there holds other rows here and is a problem; such a coordinate needs no
``chunkCrc32c`` and is not counted as *not bound*. Packed task groups are checked by ``verify.packs``.
"""

from __future__ import annotations

from math import prod
from typing import Any

import numpy as np

from megadump_zarr.verify.chunks import open_array
from megadump_zarr.verify.report import CheckState

__all__ = ["check_row_coordinates", "row_coordinates"]


def _rows_of(store: Any, key: str, doc: dict[str, Any]) -> tuple[int, int] | None:
    """``(first row, row count)`` a record's attributes give it along axis 0, or None (not a row slice)."""
    attrs = doc.get("attributes")
    if not isinstance(attrs, dict) or attrs.get("truncated"):
        return None
    actual, declared, offset = attrs.get("actualShape"), attrs.get("declaredShape"), attrs.get("sourceOffsetBytes")
    if not (isinstance(actual, list) and isinstance(declared, list) and actual and isinstance(offset, int)):
        return None
    if len(actual) != len(declared) or actual[1:] != declared[1:]:
        return None
    try:
        row_bytes = prod(int(d) for d in actual[1:]) * open_array(store, key, doc).dtype.itemsize
    except Exception:  # a document the readers refuse: the document checks name it
        return None
    if row_bytes <= 0 or offset % row_bytes:
        return None
    return offset // row_bytes, int(actual[0])


def row_coordinates(
    store: Any, window: str, arrays: dict[str, dict[str, Any]], skip: set[str] | frozenset[str] = frozenset()
) -> dict[str, tuple[str, int, int]]:
    """The row coordinate arrays of the task groups, each with a record that uses it and that record's rows.

    Args:
        store: The dump store.
        window: The window key.
        arrays: The window's arrays (path below the window -> document).
        skip: Paths not to consider (packed records: ``verify.packs`` checks them).

    Returns:
        coordinate path -> ``(record path, first row, row count)``.
    """
    found: dict[str, tuple[str, int, int]] = {}
    for path, doc in sorted(arrays.items()):
        dims = doc.get("dimension_names")
        if path in skip or not isinstance(dims, list) or not dims or not isinstance(dims[0], str):
            continue
        group, _, _ = path.rpartition("/")
        coordinate = f"{group}/{dims[0]}" if group else dims[0]
        if coordinate == path or coordinate in found or coordinate in skip or coordinate not in arrays:
            continue
        rows = _rows_of(store, f"{window}/{path}", doc)
        if rows is not None:
            found[coordinate] = (path, *rows)
    return found


def check_row_coordinates(
    state: CheckState, store: Any, window: str, coordinates: dict[str, tuple[str, int, int]], arrays: dict[str, Any]
) -> None:
    """Each row coordinate holds ``arange(first row, first row + row count)`` of the record that uses it.

    Args:
        state: The window's check state.
        store: The dump store.
        window: The window key.
        coordinates: From :func:`row_coordinates`.
        arrays: The window's arrays (path below the window -> document).
    """
    for path, (record, start, count) in sorted(coordinates.items()):
        key = f"{window}/{path}"
        try:
            values = np.asarray(open_array(store, key, arrays[path])[...])
        except Exception:  # a missing or damaged chunk: the chunk check names it
            continue
        expected = np.arange(start, start + count, dtype=np.int64)
        if values.shape == expected.shape and np.array_equal(values, expected):
            continue
        held = f"rows {int(values[0])}..{int(values[-1])}" if values.ndim == 1 and values.size else f"{values.shape}"
        state.add(
            key,
            f"row coordinate holds {held}, but {record.rpartition('/')[2]} of its task group holds rows "
            f"{start}..{start + count - 1} (attributes.sourceOffsetBytes): a coordinate chunk from another task "
            f"or window",
        )
