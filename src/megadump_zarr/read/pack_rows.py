"""Packed records read where they are stored: row ``r`` of a task-record pack's array, ``(array, row)``.

A window of the packs layout stores the small records of a stage as task-record packs (:mod:`megadump_zarr.store.packs`):
sharded arrays with one row per task, one inner chunk per row. Readers find a packed record from its pack's
checked arrays along ``task`` (:mod:`megadump_zarr.read.pack_record`) and open it as
:class:`~megadump_zarr.read.pack_arrays.RowArray`, row ``r`` of the stored pack array (what
``zarr.open_array(pack)[r]`` reads: the fast path reads the same inner chunk with one ranged read, zarr's own
sharding codec is the fallback); :class:`PackedWindow` reads a window's rows, each found by its
:class:`~megadump_zarr.store.packs.ShardSource` (inner chunk ``slot`` of a shard), and :func:`split_shard` takes
the rows of one shard from its whole bytes (what ``verify`` reads a shard by).

Never silent zeros: zarr reads an absent inner chunk as the fill value, so before a row of a committed window
is read its shard's index is checked (one suffix read per shard, kept): a missing shard, a shard index whose
checksum fails, an entry outside its shard, or a row the shard does not hold raises
:class:`~megadump_zarr.read.errors.DumpIntegrityError` naming the record's chunk and the shard. An inner chunk
whose crc32c fails is named with both checksums, as a tasks-layout chunk is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import threading
from typing import Any

from zarr.abc.store import RangeByteRequest, Store, SuffixByteRequest

from megadump_zarr.read.errors import DumpIntegrityError
from megadump_zarr.read.integrity import below_checks
from megadump_zarr.store.packs import ShardSource, decode_index, index_nbytes

__all__ = ["PackedWindow", "sized_store", "split_shard"]

_Index = tuple[list[tuple[int, int] | None], int | None]


def _corrupt_index(shard: str, key: str, error: ValueError) -> DumpIntegrityError:
    """A shard index that does not decode, named for the record chunk ``key`` read through it."""
    why = str(error).removeprefix(f"{shard}: ")
    return DumpIntegrityError(f"shard {shard} of chunk {key} is corrupt: {why}", key=key)


def _entry(
    shard: str, entries: list[tuple[int, int] | None], size: int | None, source: ShardSource, key: str, final: bool
) -> tuple[int, int] | None:
    """``(offset, nbytes)`` of a record chunk's inner chunk in its shard; ``None``: absent from a torn window's.

    Args:
        shard: The shard's key.
        entries: Its decoded index.
        size: Its stored size, when known.
        source: The record chunk's source.
        key: The record chunk's key (``{record}/c.0.0``).
        final: Its window is committed (an absent inner chunk is then damage).

    Raises:
        DumpIntegrityError: Absent from a committed window's shard, or an entry outside the shard.
    """
    entry = entries[source.slot]
    if entry is None:
        if final:
            raise DumpIntegrityError(
                f"chunk {key} is missing: its window is committed, but shard {shard} holds no inner chunk {source.slot}",
                key=key,
            )
        return None
    offset, nbytes = entry
    limit = None if size is None else size - index_nbytes(source.count)
    if nbytes == 0 or (limit is not None and offset + nbytes > limit):
        raise DumpIntegrityError(
            f"chunk {key} is corrupt: shard {shard} index entry {source.slot} "
            f"(offset {offset}, {nbytes} bytes) lies outside the shard's "
            f"{'data' if limit is None else f'{limit} data bytes'}",
            key=key,
        )
    return entry


def _short_read(shard: str, source: ShardSource, entry: tuple[int, int], got: int, key: str) -> DumpIntegrityError:
    """An inner chunk whose ranged read came back short: its index entry reaches past the shard's end."""
    offset, nbytes = entry
    return DumpIntegrityError(
        f"chunk {key} is corrupt: shard {shard} index entry {source.slot} "
        f"(offset {offset}, {nbytes} bytes) lies outside the shard (read {got} bytes)",
        key=key,
    )


def split_shard(
    chunks: list[tuple[str, ShardSource]], shard: str, raw: bytes | None, sized: bool, final: bool = True
) -> list[tuple[str, bytes | DumpIntegrityError | None]]:
    """The record chunks of one shard taken from its whole stored bytes (one read of it), each as
    :meth:`PackedWindow.locate` and a ranged read give it: its bytes, ``None`` (no shard, or an absent inner chunk
    of a torn window), or the :class:`DumpIntegrityError` they raise, with the same text.

    Args:
        chunks: ``(record chunk key, source)`` of the shard's inner chunks (keys relative to the root).
        shard: The shard's key relative to the root.
        raw: The shard's stored bytes (``None``: absent).
        sized: The store tells sizes (the entries are then checked against the shard's size).
        final: Its window is committed (an absent inner chunk is then damage).
    """
    if raw is None:
        return [(key, None) for key, _ in chunks]
    size = len(raw) if sized else None
    split: list[tuple[str, bytes | DumpIntegrityError | None]] = []
    decoded: dict[int, list[tuple[int, int] | None] | ValueError] = {}
    for key, source in chunks:
        count = source.count
        if count not in decoded:
            try:  # the suffix read of the index, from the same bytes
                decoded[count] = decode_index(raw[max(0, len(raw) - index_nbytes(count)) :], count, shard)
            except ValueError as error:
                decoded[count] = error
        entries = decoded[count]
        if isinstance(entries, ValueError):
            split.append((key, _corrupt_index(shard, key, entries)))
            continue
        try:
            entry = _entry(shard, entries, size, source, key, final)
        except DumpIntegrityError as error:
            split.append((key, error))
            continue
        if entry is None:
            split.append((key, None))
            continue
        offset, nbytes = entry
        data = raw[offset : offset + nbytes]  # the ranged read
        split.append((key, data if len(data) == nbytes else _short_read(shard, source, entry, len(data), key)))
    return split


def sized_store(store: Store) -> Store | None:
    """The store to ask a shard's size when it tells it cheaply (a stat or a HEAD; the base class reads the
    whole value), below the dump's integrity checks; ``None`` when it does not.

    Args:
        store: The dump's store.
    """
    inner = below_checks(store)
    return inner if type(inner).getsize is not Store.getsize else None


@dataclass
class PackedWindow:
    """Reads a window's packed records by row: each row's shard index checked first (kept per shard).

    Args:
        window: The window key (``rank_0/window_0000``; ``""`` when the store's root is the window).
        final: The window is committed: an absent inner chunk is damage, not a row still being written.
    """

    window: str
    final: bool
    _indexes: dict[str, _Index] = field(default_factory=dict, repr=False)
    _opened: dict[str, tuple[Store, Any]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __getstate__(self) -> dict[str, Any]:  # shipped to dask workers: caches stay behind
        state = dict(self.__dict__)
        state["_indexes"], state["_opened"], state["_lock"] = {}, {}, None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _key(self, rel: str) -> str:
        return f"{self.window}/{rel}" if self.window else rel

    def open_pack(self, store: Store, array: str, doc: dict[str, Any]) -> Any:
        """The zarr array of stored pack array ``array`` (key relative to the root), opened once per store (its
        document parsed once for all its rows)."""
        opened = self._opened.get(array)
        if opened is not None and opened[0] is store:
            return opened[1]
        from megadump_zarr.read.documents import open_array_checked

        zarray = open_array_checked(store, array, doc)
        self._opened[array] = (store, zarray)
        return zarray

    # ------------------------------------------------------------------ the shard index check
    def index(self, store: Store, shard: str, count: int, key: str) -> _Index | None:
        """A shard's decoded index and size (kept); ``None``: no shard.

        Args:
            store: The dump's store.
            shard: The shard's key relative to the root.
            count: Inner chunks per shard.
            key: The record chunk read through it, for messages.
        """
        cached = self._indexes.get(shard)
        if cached is not None and len(cached[0]) == count:
            return cached
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.sync import sync

        # below the dump's integrity checks, which would name only the shard: the check names the record too
        stored = below_checks(store)

        async def read() -> tuple[Any, int | None]:
            value = await stored.get(shard, default_buffer_prototype(), SuffixByteRequest(index_nbytes(count)))
            size, sizes = None, sized_store(store)
            if value is not None and sizes is not None:
                try:
                    size = await sizes.getsize(shard)
                except (FileNotFoundError, NotImplementedError):
                    size = None
            return value, size

        value, size = sync(read())
        if value is None:
            return None
        try:
            entries = decode_index(value.to_bytes(), count, shard)
        except ValueError as error:
            raise _corrupt_index(shard, key, error) from None
        found = (entries, size)
        with self._lock:
            self._indexes[shard] = found
        return found

    def locate(self, store: Store, rel: str, source: ShardSource, where: str = "") -> tuple[str, int, int] | None:
        """``(shard key, offset, nbytes)`` of record chunk ``rel`` (relative to the window), its shard index
        checked; ``None``: absent from a torn window.

        Args:
            store: The dump's store.
            rel: The record chunk's key relative to the window (``.../task_000001/output_00_y/c.0.0``).
            source: Where it is: an inner chunk of a shard of its pack array.
            where: `` in ROOT`` for messages.

        Raises:
            DumpIntegrityError: See the module docstring.
        """
        key, shard = self._key(rel), self._key(source.shard)
        found = self.index(store, shard, source.count, key)
        if found is None:
            if self.final:
                raise DumpIntegrityError(
                    f"chunk {key}{where} is missing: its window is committed, but its shard {shard} is missing",
                    key=key,
                )
            return None
        entry = _entry(shard, found[0], found[1], source, key, self.final)
        return None if entry is None else (shard, entry[0], entry[1])

    def read_row(self, store: Store, record: Any) -> bytes | None:
        """The stored inner chunk of a packed record (its chunk, checksum included), as :meth:`read_chunk` reads it.

        Args:
            store: The dump's store.
            record: The record (:class:`~megadump_zarr.read.pack_record.PackedRecord`).
        """
        return self.read_chunk(store, record.chunk, record.source())

    def read_chunk(self, store: Store, rel: str, source: ShardSource, where: str = "") -> bytes | None:
        """The stored bytes of record chunk ``rel`` (its inner chunk, checksum included): one ranged read after
        the index check; ``None``: absent from a torn window.

        Args:
            store: The dump's store.
            rel: The record chunk's key relative to the window.
            source: Where it is: an inner chunk of a shard of its pack array.
            where: `` in ROOT`` for messages.
        """
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.sync import sync

        found = self.locate(store, rel, source, where)
        if found is None:
            return None
        shard, offset, nbytes = found
        value = sync(store.get(shard, default_buffer_prototype(), RangeByteRequest(offset, offset + nbytes)))
        if value is None:
            if self.final:
                raise DumpIntegrityError(
                    f"chunk {self._key(rel)}{where} is missing: its shard {shard} is gone", key=self._key(rel)
                )
            return None
        data = value.to_bytes()
        if len(data) != nbytes:
            raise _short_read(shard, source, (offset, nbytes), len(data), self._key(rel))
        return data
