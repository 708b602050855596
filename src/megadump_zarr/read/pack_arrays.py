"""A packed record as an array: row ``r`` of its pack's stored array (:class:`RowArray`), and a packed task's row
coordinate computed from its ``coords`` entry (:class:`RangeArray`).

Both are sources of a record's lazy array (:class:`~megadump_zarr.read.lazy.RecordArray`): they answer what it
asks of a zarr array (``shape``, ``dtype``, ``chunks``, basic selections, the one block); where a row is stored
and the check of its shard's index are :mod:`megadump_zarr.read.pack_rows`'. A row is read by the fast path where its
codecs allow (one ranged read of its inner chunk located by :meth:`RowArray.locate`, checksum checked and decoded in
the calling thread, :mod:`megadump_zarr.read.chunks`), else by zarr's sharding codec, whose errors are named: a
crc32c mismatch of the inner chunk with both checksums, as a chunk of the tasks layout.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from zarr.abc.store import Store

from megadump_zarr.store.packs import ShardSource

__all__ = ["RangeArray", "RowArray", "is_packed_array"]


class RowArray:
    """Row ``row`` of a stored pack array: one packed record, read after its shard's index check (the fast path's one
    ranged read of its inner chunk, else zarr's sharding codec).

    Shape, dtype and chunks are the record's (one chunk: the row's inner chunk). Reads return numpy arrays.

    Args:
        packs: The window's :class:`~megadump_zarr.read.pack_rows.PackedWindow`.
        store: The dump's store.
        array: The pack array's key relative to the root.
        doc: The pack array's stored document.
        row: The record's row in it.
        key: The record's path (relative to the root), for messages.
        shape: The record's shape.
        root: The dump root, for messages (``""``: none).
        source: Where its chunk is in the pack array's shards
            (:meth:`~megadump_zarr.read.pack_record.PackedRecord.source`).
    """

    def __init__(
        self,
        packs: Any,
        store: Store,
        array: str,
        doc: dict[str, Any],
        row: int,
        key: str,
        shape: tuple[int, ...],
        root: str,
        source: ShardSource,
    ) -> None:
        self.packs, self.store, self.array_key, self.doc = packs, store, array, doc
        self.row, self.key, self.root, self.source = row, key, root, source
        self.pack = packs.open_pack(store, array, doc)
        self.shape, self.ndim, self.dtype = shape, len(shape), self.pack.dtype
        self.chunks = shape if all(shape) else tuple(max(1, s) for s in shape)
        self.chunk_key = f"{key}/c{'.0' * len(shape)}"
        self._rel = self.chunk_key[len(packs.window) + 1 :] if packs.window else self.chunk_key
        self._checked = False
        self._reader: Any = False  # the fast path's reader of the row (read.chunks.ChunkReader), once made

    def __repr__(self) -> str:
        return f"<RowArray {self.array_key} row {self.row}: {self.key}>"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("pack", None)
        state["_reader"] = False
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.pack = self.packs.open_pack(self.store, self.array_key, self.doc)

    @property
    def _where(self) -> str:
        return f" in {self.root}" if self.root else ""

    def check(self) -> bool:
        """Check the row's entry in its shard index (once); ``False``: absent from a torn window's shard."""
        if self._checked:
            return True
        present = self.locate() is not None
        self._checked = present
        return present

    def locate(self) -> tuple[str, int, int] | None:
        """``(shard key, offset, nbytes)`` of the row's inner chunk, index checked (``None``: absent, torn); its
        shard is checked whole against the window inventory first (rows are read by byte range, which the
        inventory cannot bind; the integrity store checks each shard once)."""
        located = self.packs.locate(self.store, self._rel, self.source, self._where)
        if located is not None:
            from megadump_zarr.read.errors import DumpIntegrityError
            from megadump_zarr.read.integrity import IntegrityStore

            if isinstance(self.store, IntegrityStore):
                try:
                    self.store.check_whole(located[0])
                except DumpIntegrityError:
                    self._diagnose()  # the row's own chunk, named, when its checksum fails: damage, not a move
                    raise
        return located

    def __getitem__(self, selection: Any) -> Any:
        if not isinstance(selection, tuple):
            selection = (selection,)
        if not self.check():
            empty = np.full(self.shape, self.pack.fill_value, dtype=self.dtype)
            return empty[selection]
        whole = self._whole()
        if whole is not None:
            return whole[selection]
        try:
            return self.pack[(self.row, *selection)]
        except (RuntimeError, ValueError, TypeError, EOFError) as error:
            self._diagnose()
            raise error

    def get_block_selection(self, coords: tuple[int, ...]) -> Any:
        """The record's chunk (it has one: ``coords`` are zeros)."""
        return self[...]

    def _whole(self) -> np.ndarray | None:
        """The whole record by the fast path (one ranged read of its inner chunk, checked and decoded here,
        :func:`~megadump_zarr.read.chunks.row_reader`); ``None`` when it cannot (other codecs, or a chunk that fails:
        zarr then reads it, and says why). Zarr's own read of a row costs a second read of the shard index, each
        time."""
        from megadump_zarr.read.chunks import row_reader

        if self._reader is False:
            self._reader = row_reader(self)
        if self._reader is None or not self.shape:
            return None
        try:
            return self._reader.read(0, self.shape[0])
        except Exception:  # noqa: BLE001 - zarr reads it again and raises (or fills) exactly as it would have
            return None

    def _diagnose(self) -> None:
        """A read failed in a codec: check the row's inner chunk's crc32c, naming it (raises on a mismatch)."""
        from megadump_zarr.read.integrity import has_crc32c, verify_crc32c

        inner = (self.doc.get("codecs") or [{}])[0].get("configuration") or {}
        if not has_crc32c({"codecs": inner.get("codecs")}):
            return
        data = self.packs.read_chunk(self.store, self._rel, self.source, self._where)
        if data is not None:
            verify_crc32c(self.chunk_key, np.frombuffer(data, dtype=np.uint8), self._where)


class RangeArray:
    """A packed task's row coordinate: int64 ``arange(start, stop)`` from its ``coords`` entry (nothing read)."""

    def __init__(self, start: int, stop: int) -> None:
        self.start, self.stop = start, stop
        self.shape, self.ndim, self.dtype = (stop - start,), 1, np.dtype(np.int64)
        self.chunks = (max(1, stop - start),)

    def __getitem__(self, selection: Any) -> Any:
        return np.arange(self.start, self.stop, dtype=np.int64)[selection]

    def get_block_selection(self, coords: tuple[int, ...]) -> Any:
        return self[...]


def is_packed_array(array: Any) -> bool:
    """Whether ``array`` is a packed record or computed row coordinate (not a zarr array)."""
    return isinstance(array, (RowArray, RangeArray))
