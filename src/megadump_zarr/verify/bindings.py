"""What binds stored values to their place beyond the window inventory (a self-consistent forger could rewrite
the inventory with the documents): each checked from what the window's own names and documents say.

- a task group's ``taskId`` equals the number in its name (``task_000002`` holds task 2);
- a row coordinate (the array in a record's group named like the record's first dimension) is ``int64``, as
  long as the record, and equals ``arange(start, start + rows)`` where ``start`` is the record's first row by
  the writer's rule (``sourceOffsetBytes`` a whole number of rows of a whole-row slice);
- a group's ``taskCount`` (a task-record pack) equals the rows of every array along its ``task`` dimension.

A statistics table is bound by the inventory alone (its chunks and documents are listed like any array's).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from megadump_zarr.layout.paths import TASK_DIR
from megadump_zarr.verify.report import CheckState, short

__all__ = ["check_bindings", "check_coordinate_values"]


def _row_coordinates(nodes: dict[str, Any]) -> dict[str, list[tuple[str, int, int]]]:
    """Stored row coordinate path -> ``(record path, first row, rows)`` of each record along it: the first row by
    the writer's rule (:func:`~megadump_zarr.read.pack_checks.first_row`) where the record is a whole-row slice of its declared tensor, not
    truncated, with an ``actualShape`` of integers.

    Args:
        nodes: Path below the window -> document (a task-record pack's coordinates are bounds along ``task``,
            checked with the pack: ``read.pack_checks.check_pack``).
    """
    from megadump_zarr.layout.dtypes import itemsize
    from megadump_zarr.read.pack_checks import first_row

    found: dict[str, list[tuple[str, int, int]]] = {}
    for path, doc in nodes.items():
        attrs = doc.get("attributes") if isinstance(doc, dict) else None
        dims = doc.get("dimension_names") if isinstance(doc, dict) else None
        if not isinstance(attrs, dict) or "name" not in attrs or not isinstance(dims, list) or not dims:
            continue
        parent = path.rpartition("/")[0]
        coordinate = f"{parent}/{dims[0]}" if parent else str(dims[0])
        actual = attrs.get("actualShape")
        if (
            not isinstance(nodes.get(coordinate), dict)
            or attrs.get("truncated")
            or (isinstance(actual, list) and not all(type(d) is int for d in actual))
        ):
            continue
        start = first_row(attrs, doc.get("shape"), itemsize(doc.get("data_type")))
        if start is not None:
            found.setdefault(coordinate, []).append((path, start, int(doc["shape"][0])))
    return found


def check_bindings(
    state: CheckState, window: str, stored: dict[str, Any], nodes: dict[str, Any]
) -> list[tuple[str, list[tuple[str, int, int]]]]:
    """Task ids against group names, task counts against rows, row coordinates' documents; returns the row
    coordinates whose values :func:`check_coordinate_values` checks once the chunk check has read them (their paths
    are added to ``state.keep``).

    Args:
        state: The window's check state.
        window: The window key.
        stored: The window's consolidated metadata as stored.
        nodes: Its nodes but a task-record pack's.
    """
    _check_task_ids(state, window, nodes)
    _check_task_counts(state, window, stored)
    wanted = []
    for coordinate, records in sorted(_row_coordinates(nodes).items()):
        doc = nodes[coordinate]
        record, start, rows = records[0]
        if doc.get("data_type") != "int64" or doc.get("shape") != [rows]:
            state.add(
                f"{window}/{coordinate}/zarr.json",
                f"row coordinate of {record.rpartition('/')[2]} is {short(doc.get('data_type'))} of shape "
                f"{short(doc.get('shape'))}, not int64 of shape [{rows}]",
            )
            continue
        for other, other_start, _ in records[1:]:
            if other_start != start:
                state.add(
                    f"{window}/{other}/zarr.json",
                    f"attributes.sourceOffsetBytes puts its first row at {other_start}, its sibling "
                    f"{record.rpartition('/')[2]}'s at {start}: they share one row coordinate",
                )
        state.keep.add(coordinate)
        wanted.append((coordinate, records))
    return wanted


def check_coordinate_values(
    state: CheckState,
    store: Any,
    window: str,
    nodes: dict[str, Any],
    wanted: list[tuple[str, list[tuple[str, int, int]]]],
) -> None:
    """Each row coordinate equals ``arange(start, start + rows)`` of its records (decoded from the bytes the chunk
    check kept when they are stored plainly, read with zarr otherwise).

    Args:
        state: The window's check state (``state.kept``: array path -> its chunks' bytes).
        store: The dump store.
        window: The window key.
        nodes: The window's nodes.
        wanted: What :func:`check_bindings` returned.
    """
    from megadump_zarr.read.documents import open_array_checked

    for coordinate, records in wanted:
        doc = nodes[coordinate]
        record, start, rows = records[0]
        key = f"{window}/{coordinate}"
        values = _plain_values(doc, state.kept.pop(coordinate, []), rows)
        if values is None:
            try:
                values = np.asarray(open_array_checked(store, key, doc)[...])
            except Exception:  # noqa: BLE001 - a chunk that does not read is named by the chunk check
                continue
        if not np.array_equal(values, np.arange(start, start + rows, dtype=np.int64)):
            state.add(
                key,
                f"row coordinate holds rows {short(values[:4].tolist())}... but its record "
                f"{record.rpartition('/')[2]} starts at row {start} (sourceOffsetBytes)",
            )


def _plain_values(doc: dict[str, Any], chunks: list[Any], rows: int) -> np.ndarray | None:
    """An int64 coordinate decoded from its one chunk when stored plainly (little-endian bytes + crc32c)."""
    codecs = doc.get("codecs")
    names = [c.get("name") if isinstance(c, dict) else c for c in codecs] if isinstance(codecs, list) else []
    endian = (
        ((codecs[0].get("configuration") or {}).get("endian") if names[:1] == ["bytes"] else None) if names else None
    )
    if names != ["bytes", "crc32c"] or endian != "little" or len(chunks) != 1 or chunks[0] is None:
        return None
    raw = bytes(chunks[0])
    chunk = (doc.get("chunk_grid") or {}).get("configuration", {}).get("chunk_shape")
    if not isinstance(chunk, list) or len(raw) != 8 * chunk[0] + 4:
        return None
    return np.frombuffer(raw[:-4], dtype="<i8")[:rows]


def _check_task_ids(state: CheckState, window: str, nodes: dict[str, Any]) -> None:
    for path, doc in nodes.items():
        match = TASK_DIR.match(path.rpartition("/")[2])
        if match is None or not isinstance(doc, dict) or doc.get("node_type") != "group":
            continue
        attrs = doc.get("attributes")
        task_id = attrs.get("taskId") if isinstance(attrs, dict) else None
        if task_id is not None and task_id != int(match.group(1)):
            state.add(
                f"{window}/{path}/zarr.json",
                f"attributes.taskId {short(task_id)} disagrees with its group's name {match.group(0)!r}",
            )


def _check_task_counts(state: CheckState, window: str, stored: dict[str, Any]) -> None:
    from megadump_zarr.read.bindings import task_count_mismatches

    for group, count, name, rows in task_count_mismatches(stored):
        state.add(
            f"{window}/{group}/zarr.json",
            f"attributes.taskCount {short(count)} disagrees with the {rows} rows of {name} along task",
        )
