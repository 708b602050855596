"""Which L1 task groups of an invocation become task-record packs, and what each pack holds.

A task group (``GroupWrite.task``) is packable when it sits directly below ``stages/{stage}``, is named
``task_dir(taskId, coreId if workerId is not None else None)``, has no sub-groups, holds at least one record and
every array directly in it is either

* a record: not empty, at least 1-D, at most ``min(PACK_MAX_RECORD_BYTES, chunk_bytes)`` bytes (so the tasks
  layout stores it as one chunk of the record's own shape), no dimension named ``task`` or ``statistic``, and
  neither its name nor the names of its pack arrays (``{record}_offset``, ``{record}_stats``) taken by another
  array of the pack; or
* a 1-D int64 row coordinate whose values are exactly ``arange(start, stop)`` and that fits one chunk,

and its attributes give an integer ``taskId`` and, for each other per-task attribute it has
(:data:`~megadump_zarr.layout.packs.TASK_COLUMNS`, ``tileRows``, ``coreType``), an integer >= 0 or ``null`` (a
pair of them for ``tileRows``, text for ``coreType``); a record's ``sourceOffsetBytes`` likewise.
Packable tasks of one stage with the same signature (each record's name, dtype, shape and dimensions, then
each coordinate's name and length, then every attribute that is not stored per task) share one pack, numbered
(``pack_name``) in the order of their first task; rows follow the invocation's order of task groups. A
signature that only one task of its stage has (a ragged tile: its shape is unique in the stage) is not packed:
a one-row pack stores more documents and bytes than the task group it replaces, so that task stays a plain
task group (``MIN_PACK_TASKS``). See :mod:`megadump_zarr.store.packs` and :mod:`megadump_zarr.layout.packs`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from megadump_zarr.layout.packs import (
    CORE_TYPE_ARRAY,
    NONE,
    STATISTIC_ARRAY,
    STATISTIC_DIM,
    TASK_ATTRIBUTES_ATTR,
    TASK_COLUMNS,
    TASK_COUNT_ATTR,
    TASK_DIM,
    TILE_ROWS,
    offset_array,
    pack_name,
    row_bound_arrays,
    stats_array,
)
from megadump_zarr.layout.paths import task_dir
from megadump_zarr.store.encoding import RAW_BELOW_BYTES
from megadump_zarr.store.metadata import dumps
from megadump_zarr.store.packs import PACK_MAX_RECORD_BYTES

__all__ = ["MIN_PACK_TASKS", "PackColumn", "PackGroup", "PackRecord", "pack_groups_of"]

MIN_PACK_TASKS = 2
"""Tasks of one stage and signature below this count stay task groups (a one-row pack costs more files and
bytes than the group it would replace: its arrays along ``task``, a pack group and shard indexes)."""

_RESERVED_DIMS = frozenset((TASK_DIM, STATISTIC_DIM))
_OFFSET = "sourceOffsetBytes"


@dataclass
class PackColumn:
    """One array of a pack that is not a record: values along ``task`` (or the ``statistic`` coordinate).

    Args:
        name: Component name (``task_id``, ``token_start``, ``input_00_x_stats``, ...).
        data: Its values (int64, float64 or a numpy ``<U`` string dtype), little-endian, C-contiguous.
        dims: Its dimension names.
    """

    name: str
    data: np.ndarray
    dims: tuple[str, ...]
    document: bytes | None = field(default=None, repr=False)  # set by the writer
    written: bool = False  # set by the writer once its chunk and zarr.json are stored


@dataclass
class PackRecord:
    """One record component of a pack: one row per task.

    Args:
        name: Component name (``input_00_x``).
        shape: The record's shape.
        dims: The record's dimension names.
        rows: The record of each task (C-contiguous, little-endian, one dtype and shape).
        shared: The record attributes every row holds alike (``recordAttributes``).
        raw: Stored uncompressed (the tasks layout's raw rule: under 256 bytes).
    """

    name: str
    shape: tuple[int, ...]
    dims: tuple[str, ...]
    rows: list[np.ndarray]
    shared: dict[str, Any]
    raw: bool
    document: bytes | None = field(default=None, repr=False)  # set by the writer
    written: bool = False  # set by the writer once every shard and the zarr.json are stored
    stats: PackColumn | None = field(default=None, repr=False)  # ``{record}_stats``, set by the writer

    @property
    def dtype(self) -> np.dtype:
        """The rows' dtype."""
        return self.rows[0].dtype

    @property
    def nbytes(self) -> int:
        """Bytes of one record."""
        return self.rows[0].nbytes


@dataclass
class PackGroup:
    """One pack: ``stages/{stage}/pack_{pppp}`` and its arrays.

    Args:
        path: Pack group path relative to the invocation group.
        attrs_json: The pack group's encoded attributes (``taskCount``, ``taskAttributes``, ...).
        tasks: The packed task groups' paths (relative to the invocation group), in row order.
        columns: The arrays along ``task`` written before the records (ids, row bounds, offsets, the
            ``statistic`` coordinate).
        records: The record components.
        coordinates: The record arrays' CF ``coordinates`` attribute (the per-task arrays, space-separated).
    """

    path: str
    attrs_json: bytes
    tasks: list[str]
    columns: list[PackColumn]
    records: list[PackRecord]
    coordinates: str = ""


def _optional_int(value: Any) -> int | None | bool:
    """``value`` as an int >= 0, ``NONE`` for None, or ``False`` when it is neither."""
    if value is None:
        return NONE
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) and value >= 0:
        return int(value)
    return False


def _task_row(path: str, attrs: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any], str] | None:
    """``(shared attributes, per-task values by array name, signature text)`` of a packable task group, or
    ``None`` when its attributes or name do not fit the per-task arrays."""
    shared = dict(attrs)  # copied along the paths values are taken from; the rest is shared, never mutated
    values: dict[str, Any] = {}
    for name, where in TASK_COLUMNS:
        holder = shared
        for step in where[:-1]:
            inner = holder.get(step) if isinstance(holder, dict) else None
            if isinstance(inner, dict):
                inner = holder[step] = dict(inner)
            holder = inner
        if not isinstance(holder, dict) or where[-1] not in holder:
            if name == TASK_COLUMNS[0][0]:
                return None  # a pack row is a task: its id is required
            continue
        value = _optional_int(holder.pop(where[-1]))
        if value is False or (name == TASK_COLUMNS[0][0] and value == NONE):
            return None
        values[name] = value
    key, start, stop = TILE_ROWS
    if key in shared:
        tile = shared.pop(key)
        if tile is None:
            values[start] = values[stop] = NONE
        elif (
            isinstance(tile, list)
            and len(tile) == 2
            and all(type(_optional_int(v)) is int and v is not None for v in tile)
        ):
            values[start], values[stop] = int(tile[0]), int(tile[1])
        else:
            return None
    if "coreType" in shared:
        core_type = shared.pop("coreType")
        if not isinstance(core_type, str) or "\x00" in core_type:
            return None
        values[CORE_TYPE_ARRAY] = core_type
    worker = values.get("worker_id", NONE)
    core = values.get("core_id", NONE)
    if worker != NONE and core == NONE:
        return None
    if path.rpartition("/")[2] != task_dir(values[TASK_COLUMNS[0][0]], None if worker == NONE else core):
        return None  # the reader names each row's group from its ids
    return shared, values, dumps(shared).decode() + "|" + ",".join(sorted(values))


def _record_row(attrs: Mapping[str, Any]) -> tuple[dict[str, Any], int | None | bool]:
    """``(shared attributes, sourceOffsetBytes as stored or None when absent; False: not packable)``."""
    shared = dict(attrs)
    if _OFFSET not in shared:
        return shared, None
    return shared, _optional_int(shared.pop(_OFFSET))


def _is_range(values: np.ndarray) -> bool:
    n = values.shape[0]
    start = int(values[0])
    if n <= 64:
        return values.tolist() == list(range(start, start + n))
    return bool(np.array_equal(values, np.arange(start, start + n, dtype=np.int64)))


def pack_groups_of(
    declared: Sequence[Any],
    groups: Mapping[str, Mapping[str, Any]],
    records: Sequence[tuple[str, np.ndarray, tuple[str, ...], dict[str, Any]]],
    coords: Mapping[tuple[str, str], tuple[np.ndarray, str]],
    *,
    chunk_bytes: int,
    encode: Callable[[Mapping[str, Any], str], bytes],
    label: Callable[[str], str],
) -> tuple[list[PackGroup], set[str]]:
    """Group an invocation's packable task groups into packs.

    Args:
        declared: The invocation's ``GroupWrite`` list (its order is the rows' order).
        groups: Every group path (declared and implicit) to its attributes.
        records: ``(path, data, dims, attrs)`` of every data array, validated and normalised.
        coords: ``(group, dim) -> (values, first array path)`` of every coordinate, validated.
        chunk_bytes: The writer's chunk size.
        encode: Encodes one record's attributes (``(attrs, path)``; raises naming the path).
        label: A path relative to the invocation as users see it (for messages).

    Returns:
        ``(packs, packed)``: the packs and the set of task group paths they hold.

    Raises:
        ValueError: A pack's path is taken by a declared group or array.
    """
    candidates = {g.path for g in declared if getattr(g, "task", False)}
    if not candidates:
        return [], set()
    for path in groups:
        parent = path.rpartition("/")[0]
        if parent in candidates:  # a task group with a sub-group stays a task group
            candidates.discard(parent)
    limit = min(PACK_MAX_RECORD_BYTES, int(chunk_bytes))
    members: dict[str, list[int]] = {}
    for index, (path, data, dims, _) in enumerate(records):
        group, _, name = path.rpartition("/")
        if group not in candidates:
            continue
        if data.ndim < 1 or data.size == 0 or data.nbytes > limit or not _RESERVED_DIMS.isdisjoint(dims):
            candidates.discard(group)
            continue
        members.setdefault(group, []).append(index)
    ranges: dict[str, list[tuple[str, int, int]]] = {}
    for (group, dim), (values, _) in coords.items():
        if group not in candidates:
            continue
        n = values.shape[0]
        if values.dtype != np.int64 or values.ndim != 1 or n < 1 or n * 8 > chunk_bytes or not _is_range(values):
            candidates.discard(group)
            continue
        start = int(values[0])
        ranges.setdefault(group, []).append((dim, start, start + n))

    builders: dict[tuple[str, Any], list[_Row]] = {}
    for g in declared:
        path = g.path
        if path not in candidates or path not in members:
            continue
        parts = path.split("/")
        if len(parts) != 3 or parts[0] != "stages":
            continue
        row = _row(path, g.attrs, [records[i] for i in members[path]], ranges.get(path, []), encode)
        if row is not None:
            builders.setdefault((f"stages/{parts[1]}", row.signature), []).append(row)

    packs: list[PackGroup] = []
    packed: set[str] = set()
    numbers: dict[str, int] = {}
    taken = {r[0] for r in records} | {f"{g}/{d}" for g, d in coords}
    for (stage, _), rows in builders.items():
        if len(rows) < MIN_PACK_TASKS:
            continue  # a shape unique in its stage: its task group is smaller than a one-row pack
        number = numbers.get(stage, 0)
        numbers[stage] = number + 1
        path = f"{stage}/{pack_name(number)}"
        if path in groups or path in taken:
            raise ValueError(f"group {label(path)!r} would collide with the task-record pack {label(path)!r}")
        packs.append(_pack(path, stage, groups, rows))
        packed.update(r.path for r in rows)
    return packs, packed


@dataclass
class _Row:
    """One packable task: its path, per-task values, shared attributes, records and row bounds."""

    path: str
    values: dict[str, Any]
    shared: dict[str, Any]
    records: list[tuple[str, np.ndarray, tuple[str, ...], dict[str, Any], int | None]]
    bounds: list[tuple[str, int, int]]
    signature: Any


def _row(
    path: str,
    attrs: Mapping[str, Any],
    records: list[tuple[str, np.ndarray, tuple[str, ...], dict[str, Any]]],
    bounds: list[tuple[str, int, int]],
    encode: Callable[[Mapping[str, Any], str], bytes],
) -> _Row | None:
    """A packable task's row, or ``None`` when it does not fit a pack (it then stays a task group)."""
    task = _task_row(path, attrs)
    if task is None:
        return None
    shared, values, task_signature = task
    kept = []
    names = [name for name, _ in TASK_COLUMNS] + [CORE_TYPE_ARRAY, STATISTIC_ARRAY, *TILE_ROWS[1:]]
    signature: list[Any] = [task_signature]
    for record_path, data, dims, record_attrs in records:
        record_shared, offset = _record_row(record_attrs)
        if offset is False:
            return None
        name = record_path.rpartition("/")[2]
        names += [name, offset_array(name), stats_array(name)]
        kept.append((name, data, dims, record_shared, offset))
        signature.append((name, data.dtype.str, data.shape, dims, offset is None, encode(record_shared, record_path)))
    for dim, start, stop in bounds:
        names += [*row_bound_arrays(dim)]
        signature.append((dim, stop - start))
    if len(set(names)) != len(names):
        return None  # a record or dimension whose pack arrays would take another's name
    return _Row(path, values, shared, kept, bounds, tuple(signature))


def _int_column(name: str, values: list[int]) -> PackColumn:
    return PackColumn(name, np.asarray(values, dtype="<i8"), (TASK_DIM,))


def _pack(path: str, stage: str, groups: Mapping[str, Mapping[str, Any]], rows: list[_Row]) -> PackGroup:
    stage_name = groups.get(stage, {}).get("stage")
    if not isinstance(stage_name, str):
        stage_name = stage.rpartition("/")[2]
    count = len(rows)
    first = rows[0]
    columns: list[PackColumn] = []
    for name in first.values:
        values = [r.values[name] for r in rows]
        if name == CORE_TYPE_ARRAY:
            width = max(1, max(len(v) for v in values))
            columns.append(PackColumn(name, np.asarray(values, dtype=f"<U{width}"), (TASK_DIM,)))
        else:
            columns.append(_int_column(name, values))
    for position, (dim, _, _) in enumerate(first.bounds):
        start, stop = row_bound_arrays(dim)
        columns.append(_int_column(start, [r.bounds[position][1] for r in rows]))
        columns.append(_int_column(stop, [r.bounds[position][2] for r in rows]))
    coordinates = [c.name for c in columns]
    components = []
    for position, (name, data, dims, shared, offset) in enumerate(first.records):
        picked = [r.records[position] for r in rows]
        offsets = None if offset is None else np.asarray([p[4] for p in picked], dtype="<i8")
        if offsets is not None:
            columns.append(PackColumn(offset_array(name), offsets, (TASK_DIM,)))
        rows_data = [p[1] for p in picked]
        components.append(
            PackRecord(name, tuple(data.shape), tuple(dims), rows_data, shared, data.nbytes < RAW_BELOW_BYTES)
        )
    attrs = {
        "stage": stage_name,
        TASK_COUNT_ATTR: count,
        TASK_ATTRIBUTES_ATTR: first.shared,
    }
    return PackGroup(path, dumps(attrs), [r.path for r in rows], columns, components, " ".join(coordinates))
