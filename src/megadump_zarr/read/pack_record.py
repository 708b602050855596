"""One packed record as a reader opens it: row ``row`` of its pack's record array, described from the pack's checked
arrays along ``task`` (:class:`~megadump_zarr.read.pack_checks.PackTable`) for that row only.

:class:`PackedTasks` finds the task a path of the records table (``{stage}/{task group}/{record}``) names in a
window's packs (committed, or torn and listed), and gives a :class:`PackedRecord` (the record: its pack array, row,
shape, dimension names, attributes) or a :class:`PackedCoordinate` (a row coordinate: its bounds). Nothing is built
for the other rows of the window. The views that list groups (``Dump.tree``, ``Dump.dataset``, ``export_hdf5``)
take the task groups, their attributes and members from it too (:meth:`PackedTasks.groups`,
:meth:`~PackedTasks.task_attributes`, :meth:`~PackedTasks.members`).
"""

from __future__ import annotations

from dataclasses import dataclass
import functools
from typing import Any

from megadump_zarr.layout.packs import RECORD_ATTRIBUTES_ATTR, row_bound_arrays
from megadump_zarr.read.pack_checks import PackTable
from megadump_zarr.read.pack_columns import pack_rows, record_rows, row_dims
from megadump_zarr.store.packs import ShardSource

__all__ = ["PackedCoordinate", "PackedRecord", "PackedTasks"]


@dataclass(frozen=True)
class PackedRecord:
    """One packed record: row ``row`` of its pack's record array.

    Args:
        path: The record's path relative to the window (``{stage}/{task group}/{record}``).
        array: Its pack array's path relative to the window.
        row: Its row in the pack array.
        pack_doc: The pack array's stored document.
        doc: The record's own description, as a task group's record array document holds it (shape, data type,
            dimension names, fill value, its chunk's codecs, attributes).
        coords: Its task's row coordinates: dimension -> ``(start, stop)``.
    """

    path: str
    array: str
    row: int
    pack_doc: dict[str, Any]
    doc: dict[str, Any]
    coords: dict[str, tuple[int, int]]

    def __post_init__(self) -> None:
        if self.row < 0:
            raise ValueError(f"PackedRecord.row: {self.row} is negative ({self.path})")

    @property
    def shape(self) -> tuple[int, ...]:
        """The record's shape (the pack array's without its ``task`` axis)."""
        return tuple(int(s) for s in self.doc["shape"])

    @property
    def chunk(self) -> str:
        """The key its one chunk is named by, relative to the window (``{path}/c.0.0``): the tasks layout's key of the
        same record's chunk."""
        return f"{self.path}/c" + ".0" * len(self.shape)

    def source(self) -> ShardSource:
        """Where its chunk is: inner chunk ``row % rows per shard`` of shard ``c.{row // rows per shard}.0...``."""
        per_shard = int(self.pack_doc["chunk_grid"]["configuration"]["chunk_shape"][0])
        zeros = ".0" * len(self.shape)
        return ShardSource(f"{self.array}/c.{self.row // per_shard}{zeros}", self.row % per_shard, per_shard)


@dataclass(frozen=True)
class PackedCoordinate:
    """A packed task's row coordinate: int64 ``arange(start, stop)`` along ``dim``.

    Args:
        dim: The dimension (the coordinate's name).
        start: Its first row.
        stop: One past its last row.
    """

    dim: str
    start: int
    stop: int

    def __post_init__(self) -> None:
        if self.stop < self.start:
            raise ValueError(f"PackedCoordinate.stop: {self.stop} is below start {self.start} ({self.dim})")

    @property
    def doc(self) -> dict[str, Any]:
        """What readers ask of a coordinate's document: node type, shape, data type, dimension name."""
        return {
            "node_type": "array",
            "shape": [self.stop - self.start],
            "data_type": "int64",
            "dimension_names": [self.dim],
            "attributes": {},
        }


def _is_record(doc: dict[str, Any]) -> bool:
    """Whether a pack's record array document describes one record per row (its ``recordAttributes``)."""
    return isinstance((doc.get("attributes") or {}).get(RECORD_ATTRIBUTES_ATTR), dict)


def _record_doc(pack_doc: dict[str, Any], attrs: dict[str, Any]) -> dict[str, Any]:
    """One record's description from its pack array's document and its row's attributes."""
    shape = list(pack_doc["shape"][1:])
    (sharding,) = pack_doc["codecs"]
    doc: dict[str, Any] = {
        "node_type": "array",
        "shape": shape,
        "data_type": pack_doc.get("data_type"),
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(shape)}},
        "fill_value": pack_doc.get("fill_value"),
        "codecs": list(sharding["configuration"]["codecs"]),
        "attributes": attrs,
    }
    dims = pack_doc.get("dimension_names")
    if isinstance(dims, list) and len(dims) == len(pack_doc["shape"]):
        doc["dimension_names"] = list(dims[1:])
    return doc


class PackedTasks:
    """The task groups of a window's checked packs, found by path (relative to the window).

    Args:
        tables: The window's packs, read and checked (:func:`~megadump_zarr.read.pack_checks.pack_tables`).
    """

    def __init__(self, tables: list[PackTable]) -> None:
        self.tables = tables
        self._found: dict[str, PackedRecord | PackedCoordinate | None] = {}
        self._attributes: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self._tasks: dict[str, list[dict[str, Any]]] = {}

    def groups(self) -> list[str]:
        """Every task group the packs' rows stand for (paths relative to the window), pack by pack, in row order."""
        return list(self._rows)

    def task_attributes(self, group: str) -> dict[str, Any] | None:
        """The attributes of task group ``group`` (what its pack's tasks share, with its row's values of the arrays
        along ``task``); ``None``: not a packed task group. Each pack's rows are decoded once, when first asked.

        Args:
            group: A path relative to the window (``{stage}/{task group}``).
        """
        found = self._rows.get(group)
        if found is None:
            return None
        table, row, _ = found
        if table.pack not in self._tasks:
            self._tasks[table.pack] = pack_rows(table.count, table.shared, table.columns, {}).tasks
        return dict(self._tasks[table.pack][row]["attrs"])

    def members(self, group: str) -> list[str]:
        """The names of task group ``group``'s row coordinates and records (``[]``: not a packed task group),
        each one :meth:`find` describes.

        Args:
            group: A path relative to the window (``{stage}/{task group}``).
        """
        found = self._rows.get(group)
        if found is None:
            return []
        table, _, dims = found
        return [*dims, *(name for name, doc in table.records.items() if _is_record(doc))]

    def _record_attributes(self, table: PackTable, row: int, component: str) -> dict[str, Any]:
        """One record's attributes in one row of a pack: its record array's rows decoded once
        (:func:`~megadump_zarr.read.pack_columns.record_rows`), when one of them is first opened."""
        key = (table.pack, component)
        if key not in self._attributes:
            self._attributes[key] = record_rows(table.count, {component: table.records[component]}, table.columns)[
                component
            ]
        return self._attributes[key][row]

    @functools.cached_property
    def _rows(self) -> dict[str, tuple[PackTable, int, list[str]]]:
        """Task group path -> ``(pack, row, the pack's row coordinates)``."""
        found: dict[str, tuple[PackTable, int, list[str]]] = {}
        for table in self.tables:
            stage = table.pack.rpartition("/")[0]
            dims = row_dims(table.records, table.columns)
            for row, group in enumerate(table.groups):
                found[f"{stage}/{group}"] = (table, row, dims)
        return found

    def find(self, rel: str) -> PackedRecord | PackedCoordinate | None:
        """The packed record or row coordinate at ``rel`` (``None``: not one), described once.

        Args:
            rel: A path relative to the window (``{stage}/{task group}/{name}``).
        """
        if rel not in self._found:
            self._found[rel] = self._describe(rel)
        return self._found[rel]

    def _describe(self, rel: str) -> PackedRecord | PackedCoordinate | None:
        group, _, name = rel.rpartition("/")
        found = self._rows.get(group)
        if found is None:
            return None
        table, row, dims = found
        coords = {}
        for dim in dims:
            start, stop = (int(table.columns[bound][row]) for bound in row_bound_arrays(dim))
            coords[dim] = (start, stop)
        record = table.records.get(name)
        if record is None:
            return PackedCoordinate(name, *coords[name]) if name in coords else None
        if not _is_record(record):
            return None
        doc = _record_doc(record, self._record_attributes(table, row, name))
        return PackedRecord(rel, f"{table.pack}/{name}", row, record, doc, coords)
