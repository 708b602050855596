"""A committed packed window's packs read and checked as whole columns: what their rows must satisfy to stand
for task groups.

:func:`pack_tables` reads every pack of a window (one concurrent batch of its arrays along ``task`` and the window's
inventory, :func:`batch_keys`), decodes them (:func:`~megadump_zarr.read.pack_columns.decode_columns`: each chunk
the one the inventory lists for its place) and checks them with whole-column numpy reads
(:func:`check_pack`): ids, row bounds against the records' shapes and offsets, record documents, group names
unique in the window and never both stored and packed. A malformed pack raises
:class:`~megadump_zarr.read.errors.DumpIntegrityError` naming its document or chunk (a torn window's pack cut
short is left out instead). The records table (:mod:`megadump_zarr.read.pack_records`) and the task groups the
rows stand for (:mod:`megadump_zarr.read.pack_record`) are built from the checked :class:`PackTable` s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
import math
import re
from typing import Any

import numpy as np

from megadump_zarr.layout.packs import (
    CORE_TYPE_ARRAY,
    NONE,
    PACK_PREFIX,
    RECORD_ATTRIBUTES_ATTR,
    STATISTICS,
    TASK_ARRAY,
    TASK_ATTRIBUTES_ATTR,
    TASK_COLUMNS,
    TILE_ROWS,
    offset_array,
    row_bound_arrays,
    stats_array,
)
from megadump_zarr.layout.paths import task_dir
from megadump_zarr.layout.schema import PACK_STORAGE, STORAGE_ATTR
from megadump_zarr.read.documents import itemsize
from megadump_zarr.layout.inventory import INVENTORY_FILE
from megadump_zarr.read.errors import DumpIntegrityError
from megadump_zarr.read.inventory import read_inventory
from megadump_zarr.read.pack_columns import column_keys, decode_columns, row_dims

__all__ = [
    "PACK",
    "PACK_PATH",
    "PACK_TASK",
    "Fetch",
    "PackTable",
    "batch_keys",
    "check_pack",
    "first_row",
    "first_rows",
    "is_packed",
    "pack_tables",
    "rest_nodes",
    "window_column_keys",
    "window_packs",
]


@dataclass(frozen=True)
class PackTable:
    """One pack of a window, decoded and checked.

    Args:
        pack: The pack's path relative to the window (``invocation_.../stages/{stage}/pack_0000``).
        count: Its rows (``taskCount``).
        shared: What its tasks hold alike (``taskAttributes``).
        columns: Its arrays along ``task`` (component -> values).
        records: Its record arrays' documents (component -> document).
        groups: Each row's task group name (``task_000003``, ``task_000003_worker_001``).
    """

    pack: str
    count: int
    shared: dict[str, Any]
    columns: dict[str, np.ndarray]
    records: dict[str, dict[str, Any]]
    groups: list[str]

    def __post_init__(self) -> None:
        if len(self.groups) != self.count:
            raise ValueError(f"PackTable.groups: {len(self.groups)} names for {self.count} rows")


PACK = re.compile(rf"^[^/]+/stages/[^/]+/{re.escape(PACK_PREFIX)}\d+")
"""A path (relative to a window) at or below a pack."""
PACK_PATH = re.compile(rf"^([^/]+/stages/[^/]+/{re.escape(PACK_PREFIX)}\d+)(?:/|$)")
"""The pack a path (relative to a window) is at or below (group 1)."""
PACK_TASK = re.compile(rf"^([^/]+/stages/[^/]+/{re.escape(PACK_PREFIX)}\d+)/{re.escape(TASK_ARRAY)}$")
"""A pack's task id array (group 1: the pack)."""

Fetch = Callable[[list[str]], list["bytes | None"]]
"""Reads keys (relative to the root) concurrently, ``None`` for an absent one: a pack's arrays along ``task`` are
what a packed window's records are read from."""


def is_packed(doc: Any) -> bool:
    """Whether a parsed window document's manifest names the packs layout (what readers dispatch on).

    Args:
        doc: The window document, parsed (``None``: it did not parse).
    """
    attrs = doc.get("attributes") if isinstance(doc, dict) else None
    return isinstance(attrs, dict) and attrs.get(STORAGE_ATTR) == PACK_STORAGE


def window_column_keys(window: str, doc: Any) -> list[str]:
    """The keys (relative to the root) a committed window document's packs are read from: the chunks of their
    per-task arrays and the window's inventory (``[]`` when it holds no pack or no consolidated metadata: the
    catalogue names that).

    Args:
        window: The window key.
        doc: The window document, parsed (the catalogue parses it once, for this and for ``window_info``).
    """
    try:
        packs, _ = window_packs(doc["consolidated_metadata"]["metadata"])
    except (TypeError, KeyError, AttributeError):
        return []
    return batch_keys(window, packs) if packs else []


class _NotOneRecordPerRow(ValueError):
    """A record array that cannot hold one record per row (named by its pack's task id array)."""


def window_packs(nodes: Mapping[str, Any]) -> tuple[dict[str, dict[str, dict[str, Any]]], dict[str, Any]]:
    """A window's packs (pack path -> its nodes, the pack group's own among them) and its other nodes.

    A pack is a group with a task id array; what lies below a pack path without one is neither.

    Args:
        nodes: The window's nodes (path relative to the window -> document).
    """
    packs: dict[str, dict[str, dict[str, Any]]] = {}
    for path, node in nodes.items():
        match = PACK_TASK.match(path)
        if match and isinstance(node, dict) and node.get("node_type") == "array":
            packs[match.group(1)] = {}
    kept: dict[str, Any] = {}
    for path, node in nodes.items():
        match = PACK_PATH.match(path) if PACK.match(path) else None
        if match is None:
            kept[path] = node
        elif match.group(1) in packs and isinstance(node, dict):
            packs[match.group(1)][path] = node
    return packs, kept


def rest_nodes(nodes: Mapping[str, Any]) -> dict[str, Any]:
    """A window's nodes that are not at or below a pack (invocation groups, stored arrays, statistics tables)."""
    return {path: node for path, node in nodes.items() if not (PACK.match(path) and PACK_PATH.match(path))}


def batch_keys(window: str, packs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The keys (relative to the root) :func:`pack_tables` reads in one batch: the chunk of every pack array along
    ``task``, then the window's inventory (which lists each chunk's digest).

    Args:
        window: The window key.
        packs: Pack path -> its nodes (:func:`window_packs`).
    """
    root = f"{window}/" if window else ""
    return [root + key for pack in sorted(packs) for key in column_keys(pack, packs[pack]).values()] + [
        root + INVENTORY_FILE
    ]


def pack_tables(
    window: str,
    packs: Mapping[str, dict[str, dict[str, Any]]],
    fetch: Fetch,
    strict: bool = True,
    stored: Mapping[str, Any] | None = None,
) -> list[PackTable]:
    """Some packs of a window, their arrays along ``task`` read with the window's inventory (one batch,
    :func:`batch_keys`), decoded and checked.

    Args:
        window: The window key.
        packs: Pack path -> its nodes (:func:`window_packs`).
        fetch: Reads keys relative to the root.
        strict: A malformed pack raises (a committed window: each chunk must be the one its inventory lists); else
            it is left out (a torn window's pack cut short; a torn window's chunks are not inventoried).
        stored: The window's other nodes: a task group stored there and packed too raises.

    Raises:
        DumpIntegrityError: A malformed pack (naming its document or chunk and what is wrong), a committed window's
            inventory missing or not valid, a task group in two packs, or both stored and packed.
    """
    root = f"{window}/" if window else ""
    if not packs:
        return []
    keys = batch_keys(window, packs)
    fetched = dict(zip(keys, fetch(keys)))
    inventory = None
    if strict:
        inventory, problem = read_inventory(fetched[root + INVENTORY_FILE], root + INVENTORY_FILE)
        if problem is not None:
            raise DumpIntegrityError(f"the packs cannot be trusted: {problem.message()}", key=problem.key)
    tables: list[PackTable] = []
    seen: set[str] = set()
    for pack in sorted(packs):
        chunks = {name: fetched[root + key] for name, key in column_keys(pack, packs[pack]).items()}
        label = root + pack
        try:
            count, shared, columns, records = decode_columns(pack, packs[pack], chunks, label, inventory)
            groups = check_pack(label, count, shared, columns, records)
        except _NotOneRecordPerRow as error:
            if not strict:
                continue
            raise DumpIntegrityError(f"malformed task-record pack: {error}", key=f"{label}/{TASK_ARRAY}") from None
        except ValueError as error:  # ColumnChunkError included
            if not strict:
                continue
            raise DumpIntegrityError(f"malformed task-record pack: {error}", key=str(error).partition(":")[0]) from None
        stage = pack.rpartition("/")[0]
        paths = [f"{stage}/{group}" for group in groups]
        clash = next((path for path in paths if path in seen), None)
        if clash is not None:
            if not strict:
                continue
            raise DumpIntegrityError(
                f"{window}/{pack}: task group {clash} is also in another pack", key=f"{window}/{clash}"
            )
        seen.update(paths)
        tables.append(PackTable(pack, count, shared, columns, records, groups))
    if stored is not None and {"/".join(path.split("/")[:4]) for path in stored} & seen:
        clash = next(path for path in _packed_paths(tables) if path in stored)
        where = f"{window}/{clash}" if window else clash
        raise DumpIntegrityError(f"{where} is both stored and in a task-record pack", key=where)
    return tables


def _packed_paths(tables: list[PackTable]) -> Iterator[str]:
    """The paths of the task groups, row coordinates and records the packs stand for: each pack's groups with their
    row coordinates, then its records row by row."""
    for table in tables:
        stage = table.pack.rpartition("/")[0]
        dims = row_dims(table.records, table.columns)
        for group in table.groups:
            yield f"{stage}/{group}"
            yield from (f"{stage}/{group}/{dim}" for dim in dims)
        for component in table.records:
            yield from (f"{stage}/{group}/{component}" for group in table.groups)


def _holds(shared: Mapping[str, Any], path: tuple[str, ...]) -> bool:
    holder: Any = shared
    for step in path[:-1]:
        holder = holder.get(step) if isinstance(holder, dict) else None
    return isinstance(holder, dict)


def check_pack(
    label: str,
    count: int,
    shared: dict[str, Any],
    columns: Mapping[str, np.ndarray],
    records: Mapping[str, dict[str, Any]],
) -> list[str]:
    """Check that a pack's rows can stand for task groups; give each row's task group name.

    Whole columns at once: ids (an id >= 0 or none, a worker's core), row bounds, each record's document (one
    record per row, sharded), offsets and statistics, each row coordinate's bounds against the records along it
    (their length, and a whole-row slice's first row, :func:`first_rows`), group names unique.

    Args:
        label: The pack as messages name it (window key included).
        count: Its rows.
        shared: Its ``taskAttributes``.
        columns: Its arrays along ``task``, decoded.
        records: Its record arrays' documents.

    Raises:
        ValueError: Naming the array, the row and what is wrong.
    """
    _check_task_columns(label, count, shared, columns)
    dims = row_dims(records, columns)
    _check_ids_and_bounds(label, count, columns, dims)
    _check_records(label, count, columns, records)
    for component, doc in records.items():
        _check_sharded(f"{label}/{component}/zarr.json", doc, count)
    _check_coordinates(label, count, columns, records, dims)
    ids = columns[TASK_ARRAY].tolist()
    workers = columns["worker_id"].tolist() if "worker_id" in columns else [NONE] * count
    cores = columns["core_id"].tolist() if "core_id" in columns else [NONE] * count
    groups = [task_dir(t) if w == NONE else task_dir(t, c) for t, w, c in zip(ids, workers, cores)]
    if len(set(groups)) != count:
        seen: set[str] = set()
        twice = next(group for group in groups if group in seen or seen.add(group))
        raise ValueError(f"{label}/{TASK_ARRAY}: task group {twice!r} appears twice")
    return groups


def _check_task_columns(label: str, count: int, shared: dict[str, Any], columns: Mapping[str, np.ndarray]) -> None:
    for name, path in TASK_COLUMNS:
        if name not in columns:
            continue
        values = columns[name]
        if values.dtype.kind != "i":
            raise ValueError(f"{label}/{name}/zarr.json: data_type must be int64")
        if values.ndim != 1:
            raise ValueError(f"{label}/{name}/zarr.json: must be int64 along task")
        if bool(np.any(values < NONE)):
            row = int(np.argmax(values < NONE))
            raise ValueError(f"{label}/{name}: row {row} holds {int(values[row])}, not an id (>= 0) or {NONE} (none)")
        if count and not _holds(shared, path):
            raise ValueError(
                f"{label}/zarr.json: attributes.{TASK_ATTRIBUTES_ATTR} has no {'.'.join(path[:-1])} object for {name}"
            )
    key, start, stop = TILE_ROWS
    if (start in columns) != (stop in columns):
        raise ValueError(f"{label}/{start if start not in columns else stop}/zarr.json: {key} needs both arrays")
    if CORE_TYPE_ARRAY in columns and columns[CORE_TYPE_ARRAY].dtype.kind != "U":
        raise ValueError(f"{label}/{CORE_TYPE_ARRAY}/zarr.json: data_type must be fixed_length_utf32")


def _first(mask: np.ndarray) -> int | None:
    return int(np.argmax(mask)) if bool(np.any(mask)) else None


def _check_ids_and_bounds(label: str, count: int, columns: Mapping[str, np.ndarray], dims: list[str]) -> None:
    """Each row's ids name a task group, and its row bounds are bounds (the first row that fails, ids first)."""
    ids = columns[TASK_ARRAY]
    workers, cores = columns.get("worker_id"), columns.get("core_id")
    worker = workers if workers is not None else np.full(count, NONE)
    core = cores if cores is not None else np.full(count, NONE)
    found = []
    row = _first((ids < 0) | ((worker != NONE) & (core < 0)))
    if row is not None:
        task, w = ids.tolist()[row], worker.tolist()[row]
        c = None if cores is None or core.tolist()[row] == NONE else core.tolist()[row]
        what = (
            f"{label}/{TASK_ARRAY}: row {row} holds task {None if task == NONE else task}, "
            f"worker {None if w == NONE else w}, core {c}: not a task group's ids"
        )
        found.append((row, 0, what))
    for i, dim in enumerate(dims):
        first, last = row_bound_arrays(dim)
        starts, stops = columns[first].tolist(), columns[last].tolist()
        row = _first(np.asarray(columns[last]) < np.asarray(columns[first]))
        if row is not None:
            found.append(
                (row, i + 1, f"{label}/{first}: row {row} holds [{starts[row]}, {stops[row]}), not row bounds")
            )
    if found:
        raise ValueError(min(found)[2])


def _check_records(
    label: str, count: int, columns: Mapping[str, np.ndarray], records: Mapping[str, dict[str, Any]]
) -> None:
    for name, doc in records.items():
        if not isinstance(doc["attributes"][RECORD_ATTRIBUTES_ATTR], dict):
            raise ValueError(f"{label}/{name}/zarr.json: attributes.{RECORD_ATTRIBUTES_ATTR} is not an object")
        offsets = columns.get(offset_array(name))
        if offsets is not None and (offsets.dtype.kind != "i" or offsets.ndim != 1):
            raise ValueError(f"{label}/{offset_array(name)}/zarr.json: must be int64 along task")
        stats = columns.get(stats_array(name))
        if stats is None:
            continue
        if stats.dtype.kind != "f" or stats.shape != (count, len(STATISTICS)):
            raise ValueError(
                f"{label}/{stats_array(name)}/zarr.json: must be float64 of shape [{count}, {len(STATISTICS)}]"
            )
        counts = stats[:, [i for i, key in enumerate(STATISTICS) if key.endswith("Count")]]
        if not bool(np.all((counts >= 0) & (counts <= 2**53) & (counts == np.trunc(counts)))):
            raise ValueError(f"{label}/{stats_array(name)}: a count column holds a value that is not a count")


def _check_sharded(where: str, doc: dict[str, Any], count: int) -> None:
    """A record array's document is ``count`` rows of one record each, sharded, the index at the end."""
    shape = doc.get("shape")
    if not isinstance(shape, list) or len(shape) < 2 or shape[0] != count:
        raise _NotOneRecordPerRow(f"{where}: shape {shape!r} must be [{count}, *record_shape]")
    try:
        (sharding,) = doc.get("codecs")
        config = sharding["configuration"]
        assert sharding["name"] == "sharding_indexed" and config.get("index_location", "end") == "end"
        inner, shard = list(config["chunk_shape"]), list(doc["chunk_grid"]["configuration"]["chunk_shape"])
        list(config["codecs"])
    except (TypeError, ValueError, KeyError, AssertionError):
        raise _NotOneRecordPerRow(
            f"{where}: a pack record array must have one sharding_indexed codec (index at the end)"
        ) from None
    record = shape[1:]
    if inner != [1, *record] or len(shard) != len(shape) or shard[1:] != record:
        raise _NotOneRecordPerRow(
            f"{where}: inner chunk {inner!r} / shard {shard!r} do not hold one record of {record!r}"
        )
    if not isinstance(shard[0], int) or shard[0] < 1:
        raise _NotOneRecordPerRow(f"{where}: shard shape {shard!r} has no rows")


def _check_coordinates(
    label: str,
    count: int,
    columns: Mapping[str, np.ndarray],
    records: Mapping[str, dict[str, Any]],
    dims: list[str],
) -> None:
    """Each row coordinate ``[start, stop)`` against the records along it: their length (every record, truncated
    ones too: the bound that keeps a hostile ``[0, 10**12]`` from any reader) and a whole-row slice's first row
    (the writer derives it from ``sourceOffsetBytes``; a swapped row fails it too). The first row that fails."""
    if not count:
        return
    found = []
    for i, dim in enumerate(dims):
        where = f"{label}/{row_bound_arrays(dim)[0]}"
        starts, stops = (np.asarray(columns[name]) for name in row_bound_arrays(dim))
        for j, (name, doc) in enumerate(records.items()):
            names = doc.get("dimension_names") or []
            if dim in names[2:]:
                what = (
                    f"{where}: the row coordinate {dim!r} names a dimension of the record {name} that is not its "
                    "first: only row coordinates are stored"
                )
                found.append((0, i, j, 0, what))
                continue
            if len(names) < 2 or names[1] != dim:
                continue
            rows = doc["shape"][1]
            row = _first(stops - starts != rows)
            if row is not None:
                start, stop = starts.tolist()[row], stops.tolist()[row]
                what = f"{where}: row {row} holds {dim} [{start}, {stop}), {stop - start} rows; its record {name} holds {rows}"
                found.append((row, i, j, 1, what))
            attrs = doc["attributes"][RECORD_ATTRIBUTES_ATTR]
            if attrs.get("truncated"):
                continue
            whole, firsts = _first_rows(attrs, doc, columns.get(offset_array(name)), count)
            if whole is not None:
                row = _first(whole & (firsts != starts))
                if row is not None:
                    start, stop = starts.tolist()[row], stops.tolist()[row]
                    what = (
                        f"{where}: row {row} holds {dim} [{start}, {stop}) but its record {name} starts at row "
                        f"{int(firsts[row])} ({offset_array(name)})"
                    )
                    found.append((row, i, j, 2, what))
    if found:
        raise ValueError(min(found)[4])


def first_rows(
    attrs: Mapping[str, Any], shape: Any, size: int, offsets: np.ndarray
) -> tuple[np.ndarray | None, np.ndarray]:
    """The whole-row rule (the writer's, for a record's row coordinate): which of some offsets place a whole-row
    slice of the declared tensor, and each one's first global row (``None``: no offset can, whatever it is).

    A record is a whole-row slice when its ``actualShape`` is its stored shape and equals ``declaredShape`` but
    along axis 0; its first row is then ``sourceOffsetBytes`` over the bytes of one row, when that divides.

    Args:
        attrs: The record's attributes (``actualShape``, ``declaredShape``).
        shape: Its stored shape.
        size: Bytes per element of its stored ``data_type``.
        offsets: Its ``sourceOffsetBytes``, one per row of a pack (int64; ``NONE``: none).
    """
    actual, declared = attrs.get("actualShape"), attrs.get("declaredShape")
    none = (None, np.zeros(0, dtype=np.int64))
    if (
        not isinstance(actual, list)
        or not isinstance(declared, list)
        or not actual
        or len(actual) != len(declared)
        or list(actual[1:]) != list(declared[1:])
        or not isinstance(shape, list)
        or list(actual) != list(shape)
    ):
        return none
    row_bytes = math.prod(int(d) for d in actual[1:]) * size
    if row_bytes <= 0:
        return none
    return (offsets != NONE) & (offsets % row_bytes == 0), offsets // row_bytes


def first_row(attrs: Mapping[str, Any], shape: Any, size: int) -> int | None:
    """The first global row of a whole-row slice of its declared tensor (``None``: not one): :func:`first_rows`
    of its ``sourceOffsetBytes``.

    Args:
        attrs: The record's attributes (``actualShape``, ``declaredShape``, ``sourceOffsetBytes``).
        shape: Its stored shape.
        size: Bytes per element of its stored ``data_type``.
    """
    offset = attrs.get("sourceOffsetBytes")
    if type(offset) is not int or not 0 <= offset < 2**63:
        return None
    whole, firsts = first_rows(attrs, shape, size, np.array([offset], dtype=np.int64))
    return int(firsts[0]) if whole is not None and bool(whole[0]) else None


def _first_rows(
    attrs: Mapping[str, Any], doc: dict[str, Any], offsets: np.ndarray | None, count: int
) -> tuple[np.ndarray | None, np.ndarray]:
    """Which rows of a pack's record are a whole-row slice of the declared tensor, and each one's first global row
    (:func:`first_rows`; the offsets all rows share when the pack stores none per row)."""
    if offsets is None:
        offset = attrs.get("sourceOffsetBytes")
        if type(offset) is not int:
            return None, np.zeros(0, dtype=np.int64)
        offsets = np.full(count, offset, dtype=np.int64)
    return first_rows(attrs, doc["shape"][1:], itemsize(doc.get("data_type")), offsets)
