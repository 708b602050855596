"""One packed record as a reader opens it: row ``row`` of its pack's record array, described from the pack's checked
arrays along ``task`` (:class:`~megadump_zarr.read.pack_checks.PackTable`) for that row only.

:class:`PackedTasks` finds the task a path of the records table (``{stage}/{task group}/{record}``) names in a
committed window's packs, and gives a :class:`PackedRecord` (the record: its pack array, row, shape, dimension
names, attributes) or a :class:`PackedCoordinate` (a row coordinate: its bounds). Nothing is built for the other
rows of the window.
"""

from __future__ import annotations

from dataclasses import dataclass
import functools
from typing import Any

from megadump_zarr.layout.packs import RECORD_ATTRIBUTES_ATTR
from megadump_zarr.read.pack_checks import PackTable
from megadump_zarr.read.pack_columns import pack_rows, row_dims
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


def _row_table(table: PackTable, row: int) -> tuple[Any, list[str]]:
    """One row of a pack decoded (:func:`~megadump_zarr.read.pack_columns.pack_rows` of that row alone), and the
    pack's row coordinates."""
    columns = {
        name: values[row : row + 1] if len(values) == table.count else values for name, values in table.columns.items()
    }
    return pack_rows(1, table.shared, columns, table.records), row_dims(table.records, table.columns)


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
    """The task groups of a committed window's checked packs, found by path (relative to the window).

    Args:
        tables: The window's packs, read and checked (:func:`~megadump_zarr.read.pack_checks.pack_tables`).
    """

    def __init__(self, tables: list[PackTable]) -> None:
        self.tables = tables

    @functools.cached_property
    def _rows(self) -> dict[str, tuple[PackTable, int]]:
        """Task group path -> ``(pack, row)``."""
        found: dict[str, tuple[PackTable, int]] = {}
        for table in self.tables:
            stage = table.pack.rpartition("/")[0]
            for row, group in enumerate(table.groups):
                found[f"{stage}/{group}"] = (table, row)
        return found

    def find(self, rel: str) -> PackedRecord | PackedCoordinate | None:
        """The packed record or row coordinate at ``rel`` (``None``: not one).

        Args:
            rel: A path relative to the window (``{stage}/{task group}/{name}``).
        """
        group, _, name = rel.rpartition("/")
        found = self._rows.get(group)
        if found is None:
            return None
        table, row = found
        record = table.records.get(name)
        rows, dims = _row_table(table, row)
        if record is None:
            if name not in dims:
                return None
            start, stop = rows.tasks[0]["coords"][name]
            return PackedCoordinate(name, int(start), int(stop))
        if not isinstance((record.get("attributes") or {}).get(RECORD_ATTRIBUTES_ATTR), dict):
            return None
        coords = {dim: (int(a), int(b)) for dim, (a, b) in rows.tasks[0]["coords"].items()}
        return PackedRecord(
            rel, f"{table.pack}/{name}", row, record, _record_doc(record, rows.records[name][0]), coords
        )
