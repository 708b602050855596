"""Where a record's payload is stored and how it is read: its own array, or one row of a pack (issue 21).

A record of the records table is stored one of two ways:

- :class:`TaskArray`: its own Zarr array (an L0 record, an L1 record in ``layout="tasks"``, or a record too
  large to pack), read as that array;
- :class:`PackRow`: row ``pack_row`` of the pack record array ``pack_array`` (``layout="packs"``,
  :mod:`megadump_zarr.store.packs`), read natively as ``zarr`` array ``pack_array[pack_row]``: one inner chunk
  of one shard, which zarr's sharding codec reads with a partial read of the shard.

"Never silent zeros": zarr reads an inner chunk that its shard index marks absent (or a shard that is not
there) as fill values. Before a packed row is read, :class:`ShardIndexes` reads the shard's index (one suffix
read per shard, cached), checks its crc32c and the row's entry, and refuses, for a committed window, a missing
shard, a missing entry, an entry outside the shard's data or an index that does not decode, with
:class:`~megadump_zarr.read.errors.DumpIntegrityError` naming the record and the shard key.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
import math
import threading
from typing import Any

import numpy as np
from zarr.abc.store import Store, SuffixByteRequest
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

from megadump_zarr.read.errors import DumpIntegrityError
from megadump_zarr.store.packs import TASK_ARRAY, TASK_ARRAYS, TASKS_ATTR, decode_index, index_nbytes

__all__ = ["PackRow", "PackRowArray", "RecordSource", "ShardIndexes", "TaskArray", "record_source"]

_INDEXES_KEPT = 256  # decoded shard indexes kept per dump (a 4 MiB shard of 8 KiB rows: 512 entries, 8 KiB)
_ARRAYS_KEPT = 64  # opened pack arrays kept per dump (a pack array's document lists its rows' attributes)


@dataclass(frozen=True)
class TaskArray:
    """A record stored as its own Zarr array.

    Args:
        key: The array's key relative to the dump root (the records table's ``path``).
        doc: Its ``zarr.json`` document.
    """

    key: str
    doc: Mapping[str, Any]

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise ValueError(f"TaskArray.key must be a non-empty array key, got {self.key!r}")


@dataclass(frozen=True)
class PackRow:
    """A record stored as one row of a task-record pack.

    Args:
        record: The record's path relative to the root (the records table's ``path``; names its rank, window,
            invocation, stage, task and name in messages).
        array: The pack record array's key relative to the root (``pack_array``).
        row: The record's row in it (``pack_row``).
        doc: The record's document (dtype, shape, dimension names, attributes of its row).
        committed: Whether its window was committed (a missing row is then damage, not a torn write).
    """

    record: str
    array: str
    row: int
    doc: Mapping[str, Any]
    committed: bool

    def __post_init__(self) -> None:
        if not isinstance(self.array, str) or not self.array:
            raise ValueError(f"PackRow.array must be a pack array key, got {self.array!r} (record {self.record})")
        if type(self.row) is not int or self.row < 0:
            raise ValueError(f"PackRow.row must be a row index >= 0, got {self.row!r} (record {self.record})")


RecordSource = TaskArray | PackRow


def record_source(
    record: str, doc: Mapping[str, Any], stored_at: tuple[str, int] | None, committed: bool
) -> RecordSource:
    """The source of a record from its records-table columns.

    Args:
        record: Its ``path``.
        doc: Its document.
        stored_at: ``(pack_array, pack_row)`` of a packed record, ``None`` for a record with its own array.
        committed: Whether its window was committed.
    """
    if stored_at is None:
        return TaskArray(record, doc)
    return PackRow(record, stored_at[0], int(stored_at[1]), doc, committed)


class ShardIndexes:
    """Decoded shard indexes of a dump's pack arrays, checked before a packed row is read.

    Args:
        store: The stored (physical) store of the dump root.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._indexes: OrderedDict[str, tuple[list[tuple[int, int] | None], int | None]] = OrderedDict()
        self._arrays: OrderedDict[str, Any] = OrderedDict()
        self._tasks: OrderedDict[str, list[Any]] = OrderedDict()
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:  # dask may pickle a read to a worker: the caches stay behind
        return {"store": self.store}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["store"])

    def array(self, key: str) -> Any:
        """The pack array ``key`` opened with zarr (one ``get`` of its document, cached)."""
        with self._lock:
            found = self._arrays.get(key)
            if found is not None:
                self._arrays.move_to_end(key)
                return found
        import zarr

        try:
            found = zarr.open_array(self.store, path=key, mode="r", zarr_format=3)
        except FileNotFoundError:
            raise DumpIntegrityError(
                f"pack array {key} is missing (no {key}/zarr.json)", key=f"{key}/zarr.json"
            ) from None
        with self._lock:
            self._arrays[key] = found
            while len(self._arrays) > _ARRAYS_KEPT:
                self._arrays.popitem(last=False)
        return found

    def row_coords(self, source: PackRow) -> dict[str, tuple[int, int]]:
        """The row coordinates of ``source``'s task, ``dim -> (start, stop)`` (its rows are
        ``arange(start, stop)``), from the pack's task id array document (one ``get`` per pack, cached).

        Raises:
            DumpIntegrityError: The pack has no task id array, or its entry for the row is malformed.
        """
        pack = source.array.rpartition("/")[0]
        with self._lock:
            tasks = self._tasks.get(pack)
        if tasks is None:
            tasks = self._read_tasks(pack, source)
        entry = tasks[source.row] if source.row < len(tasks) else None
        coords = entry.get("coords") if isinstance(entry, dict) else None
        where = f"{pack}/{TASK_ARRAY}/zarr.json"
        if not isinstance(coords, dict):
            raise DumpIntegrityError(
                f"record {source.record}: {where} has no attributes.{TASKS_ATTR}[{source.row}].coords", key=where
            )
        found: dict[str, tuple[int, int]] = {}
        for dim, bounds in coords.items():
            if (
                not isinstance(bounds, list)
                or len(bounds) != 2
                or not all(type(b) is int for b in bounds)
                or bounds[1] < bounds[0]
            ):
                raise DumpIntegrityError(
                    f"record {source.record}: {where} attributes.{TASKS_ATTR}[{source.row}].coords.{dim} "
                    f"{str(bounds)[:60]} is not [start, stop]",
                    key=where,
                )
            found[dim] = (bounds[0], bounds[1])
        return found

    def _read_tasks(self, pack: str, source: PackRow) -> list[Any]:
        from megadump_zarr.read.location import get_json

        for name in TASK_ARRAYS:  # format 2's task_id, format 1's task
            doc = get_json(self.store, f"{pack}/{name}/zarr.json")
            if isinstance(doc, dict):
                tasks = (doc.get("attributes") or {}).get(TASKS_ATTR)
                if isinstance(tasks, list):
                    with self._lock:
                        self._tasks[pack] = tasks
                        while len(self._tasks) > _ARRAYS_KEPT:
                            self._tasks.popitem(last=False)
                    return tasks
        where = f"{pack}/{TASK_ARRAY}/zarr.json"
        raise DumpIntegrityError(
            f"record {source.record}: its pack {pack} has no task id array with attributes.{TASKS_ATTR}", key=where
        )

    def check(self, source: PackRow, array: Any) -> str:
        """Check that the shard holding ``source``'s row has its inner chunk; return the shard's key.

        Args:
            source: The packed record.
            array: Its pack array (:meth:`array`).

        Raises:
            DumpIntegrityError: For a committed window: the shard is missing, or its index does not decode,
                has no entry for the row, or points outside the shard. A torn window's index that does not
                decode is refused too; its missing rows read as fill values (not written yet).
        """
        shard_rows, inner_rows = _shard_layout(array, source)
        coords = (source.row // shard_rows, *(0 for _ in array.shape[1:]))
        shard = f"{source.array}/{array.metadata.encode_chunk_key(coords)}"
        count = shard_rows // inner_rows
        found = self._index(shard, count, source)
        if found is None:
            if source.committed:
                raise DumpIntegrityError(
                    f"record {source.record} is missing: its window is committed, but its shard {shard} "
                    f"(row {source.row} of {source.array}) is not stored",
                    key=shard,
                )
            return shard
        entries, size = found
        slot = (source.row % shard_rows) // inner_rows
        entry = entries[slot]
        if entry is None:
            if source.committed:
                raise DumpIntegrityError(
                    f"record {source.record} is missing: its window is committed, but shard {shard} holds no "
                    f"inner chunk {slot} (row {source.row} of {source.array})",
                    key=shard,
                )
            return shard
        offset, nbytes = entry
        limit = None if size is None else size - index_nbytes(count)
        if nbytes == 0 or (limit is not None and offset + nbytes > limit):
            raise DumpIntegrityError(
                f"record {source.record} is corrupt: shard {shard} index entry {slot} (offset {offset}, "
                f"{nbytes} bytes) lies outside the shard's {'data' if limit is None else f'{limit} data bytes'}",
                key=shard,
            )
        return shard

    def _index(self, shard: str, count: int, source: PackRow) -> tuple[list[tuple[int, int] | None], int | None] | None:
        with self._lock:
            cached = self._indexes.get(shard)
            if cached is not None and len(cached[0]) == count:
                self._indexes.move_to_end(shard)
                return cached
        prototype = default_buffer_prototype()
        value = sync(self.store.get(shard, prototype, SuffixByteRequest(index_nbytes(count))))
        if value is None:
            return None
        try:
            entries = decode_index(value.to_bytes(), count, shard)
        except ValueError as error:
            why = str(error).removeprefix(f"{shard}: ")
            raise DumpIntegrityError(
                f"record {source.record} is corrupt: its shard {shard}: {why}", key=shard
            ) from None
        size = None
        if type(self.store).getsize is not Store.getsize:  # a stat or a HEAD; the base class reads it all
            try:
                size = sync(self.store.getsize(shard))
            except (FileNotFoundError, NotImplementedError):
                size = None
        found = (entries, size)
        with self._lock:
            self._indexes[shard] = found
            while len(self._indexes) > _INDEXES_KEPT:
                self._indexes.popitem(last=False)
        return found


def _shard_layout(array: Any, source: PackRow) -> tuple[int, int]:
    """``(rows per shard, rows per inner chunk)`` of a pack array (one sharding codec, rows along axis 0)."""
    from zarr.codecs import ShardingCodec

    codecs = getattr(array.metadata, "codecs", ())
    sharding = codecs[0] if len(codecs) == 1 and isinstance(codecs[0], ShardingCodec) else None
    shard_shape = tuple(array.shards or ())  # zarr's ``chunks`` of a sharded array is its inner chunk
    if sharding is None or len(shard_shape) != array.ndim or array.ndim < 1:
        raise DumpIntegrityError(
            f"record {source.record}: {source.array} is not a pack record array (one sharding_indexed codec)",
            key=f"{source.array}/zarr.json",
        )
    inner = tuple(sharding.chunk_shape)
    if inner[1:] != tuple(array.shape[1:]) or shard_shape[1:] != inner[1:] or shard_shape[0] % inner[0]:
        raise DumpIntegrityError(
            f"record {source.record}: {source.array} has inner chunk {list(inner)} and shard {list(shard_shape)}, "
            f"which do not hold whole records of {list(array.shape[1:])}",
            key=f"{source.array}/zarr.json",
        )
    return int(shard_shape[0]), int(inner[0])


class PackRowArray:
    """One packed record as an array: its shape, dtype and one chunk, read as ``pack_array[pack_row]`` after
    the shard index check (:class:`ShardIndexes`).

    Args:
        source: The packed record.
        indexes: The dump's shard indexes.
    """

    def __init__(self, source: PackRow, indexes: ShardIndexes) -> None:
        self.source, self.indexes = source, indexes
        pack = indexes.array(source.array)
        if source.row >= int(pack.shape[0]):
            raise DumpIntegrityError(
                f"record {source.record}: row {source.row} is past the {int(pack.shape[0])} rows of {source.array}",
                key=f"{source.array}/zarr.json",
            )
        self.shape = tuple(int(d) for d in pack.shape[1:])
        self.dtype = pack.dtype
        self.ndim = len(self.shape)
        self.chunks = tuple(max(1, d) for d in self.shape)
        self.nbytes = math.prod(self.shape) * self.dtype.itemsize

    def _read(self) -> np.ndarray:
        pack = self.indexes.array(self.source.array)
        shard = self.indexes.check(self.source, pack)
        try:
            return np.asarray(pack[self.source.row])
        except DumpIntegrityError:
            raise
        except (RuntimeError, ValueError, TypeError, EOFError) as error:  # a codec or checksum failure
            text = " ".join(str(error).split())[:200]
            why = "crc32c checksum mismatch" if "checksum" in text.lower() else "it does not decode"
            raise DumpIntegrityError(
                f"record {self.source.record} is corrupt: row {self.source.row} of shard {shard}: {why} "
                f"({type(error).__name__}: {text})",
                key=shard,
            ) from None

    def __getitem__(self, selection: Any) -> np.ndarray:
        return self._read()[selection]

    def get_block_selection(self, coords: Any) -> np.ndarray:
        """The record's one block (what :func:`~megadump_zarr.read.integrity.guard_read` probes)."""
        return self._read()

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        data = self._read()
        return data if dtype is None else data.astype(dtype)
