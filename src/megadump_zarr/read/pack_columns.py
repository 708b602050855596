"""A task-record pack's arrays along ``task``, read and decoded: each row's task group and record attributes.

A pack (:mod:`megadump_zarr.store.packs`, names in :mod:`megadump_zarr.layout.packs`) stores what a task group
holds for its task as ordinary arrays along ``task`` (ids, row bounds, offsets, statistics), each one raw chunk
whose digest its window's inventory lists (:mod:`megadump_zarr.layout.inventory`), and what its tasks hold alike
once, as attributes. :func:`column_keys` names the chunks to read (one batch per window, with the window's
inventory), :func:`decode_pack` checks and decodes them with whole-column numpy reads and gives each row's task
entry and record attributes, from which :mod:`megadump_zarr.read.pack_record` finds the task groups the rows
stand for.

Every bound is checked before anything is allocated: each array's shape against the pack's ``taskCount`` and
``task_id``, each chunk's length against its shape; a chunk that is absent, damaged or not the one the window
inventory lists for its place raises :class:`ColumnChunkError` naming its key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
import json
import math
import struct
from typing import Any

import google_crc32c
import numpy as np

from megadump_zarr.layout.packs import (
    CORE_TYPE_ARRAY,
    NONE,
    RECORD_ATTRIBUTES_ATTR,
    STATISTIC_ARRAY,
    STATISTICS,
    TASK_ARRAY,
    TASK_ATTRIBUTES_ATTR,
    TASK_COLUMNS,
    TASK_COUNT_ATTR,
    TILE_ROWS,
    offset_array,
    row_bound_arrays,
    stats_array,
)
from megadump_zarr.layout.inventory import InventoryEntry, chunk_digest, metadata_digest
from megadump_zarr.layout.paths import task_dir

__all__ = [
    "ColumnChunkError",
    "PackRows",
    "column_keys",
    "decode_columns",
    "decode_pack",
    "is_record",
    "pack_rows",
    "record_rows",
    "row_dims",
]

_CRC = struct.Struct("<I")
_BYTES = {"name": "bytes", "configuration": {"endian": "little"}}
_DTYPES = {"int64": np.dtype("<i8"), "float64": np.dtype("<f8")}


class ColumnChunkError(ValueError):
    """A pack array's chunk that is absent, damaged or not its place's (the message names its key)."""


@dataclass(frozen=True)
class PackRows:
    """One pack's rows, decoded.

    Args:
        tasks: Each row's ``{"group": name, "attrs": task group attributes, "coords": {dim: [start, stop]}}``.
        records: Record component -> each row's record attributes.
    """

    tasks: list[dict[str, Any]]
    records: dict[str, list[dict[str, Any]]]


def is_record(doc: Any) -> bool:
    """Whether a pack array's document is a record array's (it carries ``recordAttributes``)."""
    attrs = doc.get("attributes") if isinstance(doc, dict) else None
    return isinstance(attrs, dict) and RECORD_ATTRIBUTES_ATTR in attrs


def _arrays(pack: str, nodes: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The pack's arrays among ``nodes``: component -> document."""
    prefix = f"{pack}/"
    return {
        path[len(prefix) :]: doc
        for path, doc in nodes.items()
        if path.startswith(prefix) and "/" not in path[len(prefix) :] and isinstance(doc, dict)
    }


def column_keys(pack: str, nodes: Mapping[str, Any]) -> dict[str, str]:
    """Component -> chunk key (relative to what ``pack`` is relative to) of each array of the pack that is not a
    record (each is one chunk).

    Args:
        pack: The pack's path.
        nodes: Nodes holding the pack's array documents.
    """
    found = {}
    for name, doc in _arrays(pack, nodes).items():
        shape = doc.get("shape")
        if doc.get("node_type") == "array" and not is_record(doc) and isinstance(shape, list):
            found[name] = f"{pack}/{name}/c" + ".0" * len(shape)
    return found


def _dtype(data_type: Any, where: str) -> np.dtype:
    if isinstance(data_type, str) and data_type in _DTYPES:
        return _DTYPES[data_type]
    if (
        isinstance(data_type, dict)
        and data_type.get("name") == "fixed_length_utf32"
        and isinstance(data_type.get("configuration"), dict)
        and type(data_type["configuration"].get("length_bytes")) is int
        and 0 < data_type["configuration"]["length_bytes"] <= 4096
        and data_type["configuration"]["length_bytes"] % 4 == 0
    ):
        return np.dtype(f"<U{data_type['configuration']['length_bytes'] // 4}")
    raise ValueError(f"{where}: data_type {str(data_type)[:80]!r} is not int64, float64 or fixed_length_utf32")


def decode_column(
    doc: dict[str, Any], raw: bytes | None, where: str, key: str, rows: int, listed: Any = ...
) -> np.ndarray:
    """The values of one pack array that is not a record, from its one stored chunk.

    Args:
        doc: Its document.
        raw: Its chunk's bytes (``None``: absent).
        where: Its document, for messages (``.../pack_0000/task_id/zarr.json``).
        key: Its chunk's key, for messages.
        rows: The pack's rows: the length of its first dimension (``None`` is never passed: the
            ``statistic`` coordinate is checked against :data:`STATISTICS` instead).
        listed: Its array's entry in the window inventory (``None``: the inventory does not list it); ``...`` (the
            default): its window has no inventory to check it against (a torn window).

    Raises:
        ValueError: A document that is not one raw chunk of ``rows`` rows (naming the field).
        ColumnChunkError: The document or the chunk is not the one the window inventory lists for its place, or
            the chunk is absent, the wrong size or fails its crc32c.
    """
    dtype = _dtype(doc.get("data_type"), where)
    shape = doc.get("shape")
    if not isinstance(shape, list) or not 1 <= len(shape) <= 2 or not all(type(d) is int and d >= 0 for d in shape):
        raise ValueError(f"{where}: shape {str(shape)[:80]} is not one or two lengths")
    if shape[0] != rows:
        raise ValueError(f"{where}: shape {shape} does not hold the pack's {rows} rows")
    grid = (doc.get("chunk_grid") or {}).get("configuration") if isinstance(doc.get("chunk_grid"), dict) else None
    if not isinstance(grid, dict) or grid.get("chunk_shape") != [max(1, d) for d in shape]:
        raise ValueError(f"{where}: chunk_grid {str(doc.get('chunk_grid'))[:80]} is not one chunk of the array")
    codecs = doc.get("codecs")
    if codecs not in ([_BYTES], [_BYTES, {"name": "crc32c"}]):
        raise ValueError(f"{where}: codecs {str(codecs)[:120]} are not one raw chunk (bytes, crc32c)")
    checksum = len(codecs) == 2
    if listed is not ...:
        _check_document(where, doc, listed)
    size = math.prod(shape) * dtype.itemsize
    if size == 0:
        return np.zeros(shape, dtype=dtype)
    if raw is None:
        raise ColumnChunkError(f"{key}: chunk is missing")
    if len(raw) != size + 4 * checksum:
        raise ColumnChunkError(f"{key}: chunk is {len(raw)} bytes, expected {size + 4 * checksum}")
    body = raw[:size]
    digest = None
    if checksum:
        (stored,) = _CRC.unpack(raw[size:])
        actual = google_crc32c.value(body)
        if actual != stored:
            raise ColumnChunkError(f"{key}: checksum mismatch (stored {stored:#010x}, computed {actual:#010x})")
        digest = stored  # (the inventory's digest of a chunk ending with its valid crc32c)
    if listed is not ...:
        _check_chunk(key, listed, chunk_digest(raw)[0] if digest is None else digest)
    return np.frombuffer(body, dtype=dtype).reshape(shape)


def _check_document(where: str, doc: dict[str, Any], listed: InventoryEntry | None) -> None:
    """Refuse a column whose document is not the one its window's inventory lists."""
    if listed is None:
        raise ColumnChunkError(f"{where}: its array is not in the window inventory (added or moved in)")
    if (meta := metadata_digest(doc)) != listed.metadata:
        raise ColumnChunkError(
            f"{where}: has digest {meta} but the window inventory records {listed.metadata}: the document was edited"
        )


def _check_chunk(key: str, listed: InventoryEntry, digest: int) -> None:
    """Refuse a column chunk that is not the one its window's inventory lists for its place."""
    recorded = listed.chunks[0] if len(listed.chunks) == 1 else -1
    if recorded != digest:
        shown = "no chunk" if recorded is None else "another grid" if recorded == -1 else f"digest {recorded:08x}"
        raise ColumnChunkError(
            f"{key}: digest {digest:08x} is not the chunk the window inventory lists for this place ({shown}): "
            "a chunk written for another array"
        )


def _copies(value: Any, count: int) -> list[Any]:
    """``count`` independent copies of a JSON value."""
    text = json.dumps(value)
    return json.loads("[" + ",".join([text] * count) + "]") if count else []


def _int_or_none(values: np.ndarray) -> list[int | None]:
    return [None if v == NONE else v for v in values.tolist()]


def decode_pack(
    pack: str,
    nodes: Mapping[str, Any],
    chunks: Mapping[str, bytes | None],
    label: str,
    inventory: Mapping[str, InventoryEntry] | None = None,
) -> tuple[PackRows, dict[str, np.ndarray]]:
    """Each row of a pack: its task entry and its record attributes, decoded from the pack's arrays (its rows
    unchecked: ``read.pack_checks`` checks them).

    Args:
        pack: The pack's path relative to the window.
        nodes: The window's nodes (the pack group, its arrays).
        chunks: Component -> stored chunk of each array :func:`column_keys` names (``None``: absent).
        label: The pack as messages name it (window key included).
        inventory: The window inventory's entries by array path below the window, each chunk checked against its
            entry (``None``: not checked, a torn window's).

    Returns:
        ``(rows, columns)``: the rows, and every array decoded (component -> values).

    Raises:
        ValueError: A malformed pack (naming the document and field).
        ColumnChunkError: An array's chunk absent, damaged or not its place's.
    """
    count, shared, columns, records = decode_columns(pack, nodes, chunks, label, inventory)
    return pack_rows(count, shared, columns, records), columns


def decode_columns(
    pack: str,
    nodes: Mapping[str, Any],
    chunks: Mapping[str, bytes | None],
    label: str,
    inventory: Mapping[str, InventoryEntry] | None = None,
) -> tuple[int, dict[str, Any], dict[str, np.ndarray], dict[str, dict[str, Any]]]:
    """A pack's group attributes and its arrays along ``task``, checked and decoded (no row is built).

    Args:
        pack: The pack's path relative to the window.
        nodes: The window's nodes (the pack group, its arrays).
        chunks: Component -> stored chunk of each array :func:`column_keys` names (``None``: absent).
        label: The pack as messages name it (window key included).
        inventory: The window inventory's entries by array path below the window, each chunk checked against its
            entry (``None``: not checked, a torn window's).

    Returns:
        ``(count, shared, columns, records)``: its ``taskCount``, its ``taskAttributes``, every array that is not a
        record decoded (component -> values), and its record arrays' documents (component -> document).

    Raises:
        ValueError: A malformed pack (naming the document and field).
        ColumnChunkError: An array's chunk absent, damaged or not its place's.
    """
    group = nodes.get(pack)
    attrs = group.get("attributes") if isinstance(group, dict) and group.get("node_type") == "group" else None
    where = f"{label}/zarr.json"
    if not isinstance(attrs, dict):
        raise ValueError(f"{where}: the pack group's document is missing or not a group")
    count, shared = attrs.get(TASK_COUNT_ATTR), attrs.get(TASK_ATTRIBUTES_ATTR)
    if type(count) is not int or count < 0 or not isinstance(shared, dict):
        raise ValueError(
            f"{where}: attributes {TASK_COUNT_ATTR} (an integer >= 0) and {TASK_ATTRIBUTES_ATTR} (an object) are required"
        )
    arrays = _arrays(pack, nodes)
    for name, doc in arrays.items():
        if doc.get("node_type") != "array":
            raise ValueError(
                f"{label}/{name}/zarr.json: node_type {doc.get('node_type')!r} must be 'array' (a pack holds arrays only)"
            )
    if TASK_ARRAY not in arrays:
        raise ValueError(f"{label}/{TASK_ARRAY}/zarr.json: a pack needs its task id array")
    records = {name: doc for name, doc in arrays.items() if is_record(doc)}
    columns: dict[str, np.ndarray] = {}
    for name, doc in sorted(arrays.items(), key=lambda item: item[0] != TASK_ARRAY):  # the task ids first
        if name in records:
            continue
        rows = len(STATISTICS) if name == STATISTIC_ARRAY else count
        listed = ... if inventory is None else inventory.get(f"{pack}/{name}")
        columns[name] = decode_column(
            doc, chunks.get(name), f"{label}/{name}/zarr.json", f"{label}/{name}/c", rows, listed
        )
    _check_names(label, records, arrays, columns)
    return count, shared, columns, records


def row_dims(records: Mapping[str, dict[str, Any]], columns: Mapping[str, np.ndarray]) -> list[str]:
    """The row coordinates of a pack: the first record dimensions with their ``{dim}_start``/``{dim}_stop``."""
    dims = []
    for doc in records.values():
        names = doc.get("dimension_names")
        if isinstance(names, list) and len(names) > 1 and isinstance(names[1], str):
            start, stop = row_bound_arrays(names[1])
            if (start in columns or stop in columns) and names[1] not in dims:
                dims.append(names[1])
    return dims


def _check_names(
    label: str, records: Mapping[str, Any], arrays: Mapping[str, Any], columns: Mapping[str, np.ndarray]
) -> None:
    """Every array of the pack is one the format names: a pack never holds an array readers would skip."""
    known = {name for name, _ in TASK_COLUMNS} | {CORE_TYPE_ARRAY, STATISTIC_ARRAY, *TILE_ROWS[1:]}
    known |= {name for record in records for name in (record, offset_array(record), stats_array(record))}
    for dim in row_dims(records, columns):
        known |= set(row_bound_arrays(dim))
        missing = [name for name in row_bound_arrays(dim) if name not in columns]
        if missing:
            raise ValueError(f"{label}/{missing[0]}/zarr.json: the row coordinate {dim!r} needs both its bounds")
    for name in arrays:  # (an aborted window keeps the offsets of a record array whose shards failed)
        if name not in known and not name.endswith(("_offset", "_stats")):
            raise ValueError(f"{label}/{name}/zarr.json: {name!r} is not an array of a task-record pack")
    if STATISTIC_ARRAY in columns and columns[STATISTIC_ARRAY].tolist() != list(STATISTICS):
        raise ValueError(
            f"{label}/{STATISTIC_ARRAY}: names {columns[STATISTIC_ARRAY].tolist()}, not {list(STATISTICS)}"
        )


def _tasks(
    count: int, shared: dict[str, Any], columns: Mapping[str, np.ndarray], records: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Each row's task entry: its group name, its task attributes and its row coordinates' bounds (the rows
    checked first: ``read.pack_checks.check_pack``)."""
    attrs = _copies(shared, count)
    values: dict[str, list[Any]] = {}
    for name, path in TASK_COLUMNS:
        if name not in columns:
            continue
        values[name] = _int_or_none(columns[name])
        for row, value in zip(attrs, values[name]):
            holder = row
            for step in path[:-1]:
                holder = holder[step]
            holder[path[-1]] = value
    key, start, stop = TILE_ROWS
    if start in columns:
        for row, a, b in zip(attrs, _int_or_none(columns[start]), _int_or_none(columns[stop])):
            row[key] = None if a is None or b is None else [a, b]
    if CORE_TYPE_ARRAY in columns:
        for row, value in zip(attrs, columns[CORE_TYPE_ARRAY].tolist()):
            row["coreType"] = value
    ids = values[TASK_ARRAY]
    workers = values.get("worker_id", [None] * count)
    cores = values.get("core_id", [None] * count)
    bounds = {
        dim: tuple(columns[name].tolist() for name in row_bound_arrays(dim)) for dim in row_dims(records, columns)
    }
    return [
        {
            "group": task_dir(ids[row], None if workers[row] is None else cores[row]),
            "attrs": attrs[row],
            "coords": {dim: [starts[row], stops[row]] for dim, (starts, stops) in bounds.items()},
        }
        for row in range(count)
    ]


def record_rows(
    count: int, records: Mapping[str, dict[str, Any]], columns: Mapping[str, np.ndarray]
) -> dict[str, list[dict[str, Any]]]:
    """Each record's attributes of each row: what the rows share, its offset and its statistics."""
    found = {}
    for name, doc in records.items():
        rows = _copies(doc["attributes"][RECORD_ATTRIBUTES_ATTR], count)
        offsets = columns.get(offset_array(name))
        if offsets is not None:
            for row, value in zip(rows, _int_or_none(offsets)):
                row["sourceOffsetBytes"] = value
        stats = columns.get(stats_array(name))
        if stats is not None:
            # counts are integers; so are the min and max of an integer or boolean record (exact up to 2**53)
            integral = {key for key in STATISTICS if key.endswith("Count")}
            if str(doc.get("data_type")).startswith(("int", "uint", "bool")):
                integral |= {"min", "max"}
            for row, values in zip(rows, stats.tolist()):
                row["stats"] = {
                    key: None if value != value else (int(value) if key in integral else value)
                    for key, value in zip(STATISTICS, values)
                }
        found[name] = rows
    return found


def pack_rows(
    count: int, shared: dict[str, Any], columns: Mapping[str, np.ndarray], records: Mapping[str, dict[str, Any]]
) -> PackRows:
    """Each row of a checked pack (``read.pack_checks.check_pack``): its task entry and its record attributes.

    Args:
        count: Its rows.
        shared: Its ``taskAttributes``.
        columns: Its arrays along ``task``, decoded.
        records: Its record arrays' documents.
    """
    return PackRows(_tasks(count, shared, columns, records), record_rows(count, records, columns))
