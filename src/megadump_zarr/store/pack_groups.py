"""Which L1 task groups of an invocation become task-record packs (schema 7), and what each pack holds.

A task group (``GroupWrite.task``) is packable when it sits directly below ``stages/{stage}``, is named
``task_*``, has no sub-groups, holds at least one record and every array directly in it is either

* a record: not empty, at least 1-D, at most ``min(PACK_MAX_RECORD_BYTES, chunk_bytes)`` bytes (so schema 6
  stores it as one chunk of the record's own shape), no dimension named ``task``, ``field``, ``task_id``,
  ``owner_id``, ``core_id`` or ``row_fields``, not itself named like a pack's own arrays, and neither its name nor a dimension starting
  with ``global_`` (format 3's row coordinate arrays, ``global_{dim}``); or
* a 1-D int64 row coordinate whose values are exactly ``arange(start, stop)`` and that fits one chunk,

and its attributes give an integer ``taskId`` (``owner.id`` and ``coreId``: an integer or ``None``).
Packable tasks of one stage with the same signature (each record's name, dtype, shape and dimensions,
then each coordinate's name and length) share one pack, numbered (``pack_name``) in the order of their
first task; rows follow the invocation's order of task groups. A signature that only one task of its stage
has (a ragged tile: its shape is unique in the stage) is not packed: a one-row pack stores more documents and
bytes than the task group it replaces, so that task stays a plain task group (``MIN_PACK_TASKS``). See
:mod:`megadump_zarr.store.packs`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from megadump_zarr.store.encoding import RAW_BELOW_BYTES
from megadump_zarr.store.metadata import dumps
from megadump_zarr.store.pack_fields import FIELDS_ARRAY, FIELDS_DIM
from megadump_zarr.store.packs import (
    CORE_ARRAY,
    INDEX_ARRAYS,
    OWNER_ARRAY,
    PACK_COORDINATES,
    ROW_COORDINATE_PREFIX,
    PACK_ATTR,
    PACK_MAX_RECORD_BYTES,
    PACK_VERSION,
    TASK_ARRAY,
    TASK_DIM,
    pack_name,
    row_coordinate_attrs,
    row_coordinate_name,
)

__all__ = ["MIN_PACK_TASKS", "PackGroup", "PackRecord", "pack_groups_of"]

MIN_PACK_TASKS = 2
"""Tasks of one stage and signature below this count stay task groups (a one-row pack costs more files and
bytes than the group it would replace: 3 index arrays, a pack group and shard indexes)."""

_RESERVED = frozenset((*INDEX_ARRAYS, TASK_DIM, FIELDS_DIM))


@dataclass
class PackRecord:
    """One record component of a pack: one row per task.

    Args:
        name: Component name (``input_00_x``).
        shape: The record's shape.
        dims: The record's dimension names.
        rows: The record of each task (C-contiguous, little-endian, one dtype and shape).
        attrs_json: Each row's encoded attributes (without ``stats`` when the writer adds them).
        raw: Stored uncompressed (the schema-6 raw rule: under 256 bytes).
    """

    name: str
    shape: tuple[int, ...]
    dims: tuple[str, ...]
    rows: list[np.ndarray]
    attrs_json: list[bytes]
    raw: bool
    document: bytes | None = field(default=None, repr=False)  # set by the writer
    written: bool = False  # set by the writer once every shard and the zarr.json are stored

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
        attrs_json: The pack group's encoded attributes.
        tasks: The packed task groups' paths (relative to the invocation group), in row order.
        aux: ``(name, data, dims, attrs_json)`` of the ``task_id``, ``owner_id``, ``core_id`` and ``global_{dim}``
            arrays.
        records: The record components.
        coordinates: The record arrays' CF ``coordinates`` attribute (the aux arrays and ``row_fields``,
            space-separated).
        task_rows: Each row's task entry (``{"group", "attrs", "coords"}``), encoded as one JSON list: format 4
            keeps its varying numbers in ``row_fields`` (:mod:`.pack_fields`), written with the last record.
    """

    path: str
    attrs_json: bytes
    tasks: list[str]
    aux: list[tuple[str, np.ndarray, tuple[str, ...], bytes]]
    records: list[PackRecord]
    coordinates: str = PACK_COORDINATES
    task_rows: bytes = b"[]"
    jobs: list[Any] = field(default_factory=list)  # the aux arrays as the writer's ArrayJobs (set by invocation_nodes)
    fields_document: bytes | None = field(default=None, repr=False)  # row_fields' zarr.json, set by the writer
    fields_written: bool = False  # set once row_fields' chunk and zarr.json are stored
    join: Any = field(default=None, repr=False)  # the writer's row_fields join (pack_writer._PackJoin)


def _optional_int(value: Any) -> int | None | bool:
    """``value`` as an int, ``-1`` for None, or ``False`` when it is neither."""
    if value is None:
        return -1
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    return False


def _is_range(values: np.ndarray) -> bool:
    n = values.shape[0]
    start = int(values[0])
    if n <= 64:
        return values.tolist() == list(range(start, start + n))
    return bool(np.array_equal(values, np.arange(start, start + n, dtype=np.int64)))


def pack_groups_of(
    declared: Sequence[Any],
    groups: Mapping[str, Mapping[str, Any]],
    encoded: Mapping[str, bytes],
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
        encoded: Every group path to its encoded attributes.
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
        if parent in candidates:  # a task group with a sub-group stays a schema-6 group
            candidates.discard(parent)
    limit = min(PACK_MAX_RECORD_BYTES, int(chunk_bytes))
    members: dict[str, list[int]] = {}
    for index, (path, data, dims, _) in enumerate(records):
        group, _, name = path.rpartition("/")
        if group not in candidates:
            continue
        if (
            data.ndim < 1
            or data.size == 0
            or data.nbytes > limit
            or name in _RESERVED
            or not _RESERVED.isdisjoint(dims)
            or any(part.startswith(ROW_COORDINATE_PREFIX) for part in (name, *dims))
        ):
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

    builders: dict[tuple[str, Any], list[tuple[str, int, int, int]]] = {}
    for g in declared:
        path = g.path
        if path not in candidates or path not in members:
            continue
        parts = path.split("/")
        if len(parts) != 3 or parts[0] != "stages" or not parts[2].startswith("task_"):
            continue
        attrs = g.attrs
        task_id = attrs.get("taskId")
        owner = attrs.get("owner")
        owner_id = _optional_int(owner.get("id") if isinstance(owner, Mapping) else None)
        core_id = _optional_int(attrs.get("coreId"))
        if (
            isinstance(task_id, (bool, np.bool_))
            or not isinstance(task_id, (int, np.integer))
            or owner_id is False
            or core_id is False
        ):
            continue
        signature = (
            tuple(
                (records[i][0].rpartition("/")[2], records[i][1].dtype.str, records[i][1].shape, records[i][2])
                for i in members[path]
            ),
            tuple((dim, stop - start) for dim, start, stop in ranges.get(path, ())),
        )
        builders.setdefault((f"stages/{parts[1]}", signature), []).append((path, int(task_id), owner_id, core_id))

    packs: list[PackGroup] = []
    packed: set[str] = set()
    numbers: dict[str, int] = {}
    taken = {r[0] for r in records} | {f"{g}/{d}" for g, d in coords}
    for (stage, signature), tasks in builders.items():
        if len(tasks) < MIN_PACK_TASKS:
            continue  # a shape unique in its stage: its task group is smaller than a one-row pack
        number = numbers.get(stage, 0)
        numbers[stage] = number + 1
        path = f"{stage}/{pack_name(number)}"
        if path in groups or path in taken:
            raise ValueError(f"group {label(path)!r} would collide with the task-record pack {label(path)!r}")
        packs.append(_pack(path, stage, groups, encoded, records, members, ranges, tasks, encode))
        packed.update(t[0] for t in tasks)
    return packs, packed


def _pack(
    path: str,
    stage: str,
    groups: Mapping[str, Mapping[str, Any]],
    encoded: Mapping[str, bytes],
    records: Sequence[tuple[str, np.ndarray, tuple[str, ...], dict[str, Any]]],
    members: dict[str, list[int]],
    ranges: dict[str, list[tuple[str, int, int]]],
    tasks: list[tuple[str, int, int, int]],
    encode: Callable[[Mapping[str, Any], str], bytes],
) -> PackGroup:
    stage_name = groups.get(stage, {}).get("stage")
    if not isinstance(stage_name, str):
        stage_name = stage.rpartition("/")[2]
    count = len(tasks)
    first = tasks[0][0]
    coordinate_keys = [dumps(dim) for dim, _, _ in ranges.get(first, ())]
    entries = []
    for task_path, _, _, _ in tasks:
        bounds = b",".join(
            key + b":[%d,%d]" % (start, stop)
            for key, (_, start, stop) in zip(coordinate_keys, ranges.get(task_path, ()))
        )
        entries.append(
            b'{"group":'
            + dumps(task_path.rpartition("/")[2])
            + b',"attrs":'
            + encoded[task_path]
            + b',"coords":{'
            + bounds
            + b"}}"
        )
    columns = np.array([t[1:] for t in tasks], dtype=np.int64).reshape(count, 3)
    aux = [
        (TASK_ARRAY, np.ascontiguousarray(columns[:, 0]), (TASK_DIM,), b"{}"),
        (OWNER_ARRAY, np.ascontiguousarray(columns[:, 1]), (TASK_DIM,), b"{}"),
        (CORE_ARRAY, np.ascontiguousarray(columns[:, 2]), (TASK_DIM,), b"{}"),
    ]
    coordinates = [PACK_COORDINATES]
    for position, (dim, start, stop) in enumerate(ranges.get(first, ())):  # format 3: each row's global indices
        starts = np.array([ranges[t[0]][position][1] for t in tasks], dtype=np.int64)
        values = starts[:, None] + np.arange(stop - start, dtype=np.int64)[None, :]
        name = row_coordinate_name(dim)
        aux.append((name, values, (TASK_DIM, dim), dumps(row_coordinate_attrs(dim))))
        coordinates.append(name)
    coordinates.append(FIELDS_ARRAY)
    components = []
    for position, index in enumerate(members[first]):
        name = records[index][0].rpartition("/")[2]
        picked = [records[members[t[0]][position]] for t in tasks]
        rows = [r[1] for r in picked]
        components.append(
            PackRecord(
                name,
                tuple(rows[0].shape),
                tuple(picked[0][2]),
                rows,
                [encode(r[3], r[0]) for r in picked],
                rows[0].nbytes < RAW_BELOW_BYTES,
            )
        )
    attrs_json = dumps({PACK_ATTR: PACK_VERSION, "stage": stage_name, "taskCount": count})
    return PackGroup(
        path,
        attrs_json,
        [t[0] for t in tasks],
        aux,
        components,
        " ".join(coordinates),
        b"[" + b",".join(entries) + b"]",
    )
