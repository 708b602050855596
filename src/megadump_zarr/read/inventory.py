"""Readers' side of the window inventory (:mod:`megadump_zarr.layout.inventory`): a whole chunk read from a committed
window must be one its array's inventory entry lists, with that entry's digest, and the array's document (the one
the reader uses) must have the digest the inventory records.

:class:`Inventories` holds each window's parsed inventory (read once per window, by the integrity store,
:mod:`megadump_zarr.read.integrity`) and each array's checked document digest; :meth:`Inventories.check` raises
:class:`~megadump_zarr.read.errors.DumpIntegrityError` naming the array and the chunk, never returning a value read
from a chunk that is not its place's. One crc32c pass per chunk gives both its checksum check and its digest.
"""

from __future__ import annotations

from types import MappingProxyType

from collections.abc import Mapping
import math
from typing import Any

from megadump_zarr.layout.inventory import (
    INVENTORY_FILE,
    InventoryEntry,
    InventoryError,
    metadata_digest,
    parse_inventory,
)
from megadump_zarr.read.errors import DumpIntegrityError

__all__ = ["Inventories", "grid_index"]


def grid_index(shape: tuple[int, ...], chunks: tuple[int, ...], coords: tuple[int, ...]) -> int | None:
    """The C-order position of chunk ``coords`` in a regular grid (``None``: outside it).

    Args:
        shape: The array's shape.
        chunks: Its chunk shape.
        coords: The chunk's grid coordinates.
    """
    counts = [-(-s // c) for s, c in zip(shape, chunks)]
    if len(coords) != len(counts) or not all(0 <= i < n for i, n in zip(coords, counts)):
        return None
    index = 0
    for i, n in zip(coords, counts):
        index = index * n + i
    return index if math.prod(counts) else None


_NOT_INVENTORIED: Mapping[str, InventoryEntry] = MappingProxyType({})
"""A window read without an inventory (:class:`Inventories` with ``required=False``): nothing to check against."""


class Inventories:
    """The inventories of a dump's committed windows, by window key, as the integrity store reads them.

    Args:
        url: The dump root as given, for messages.
        required: Whether a committed window without an inventory is refused (False only for a store whose
            documents are made in memory from another tool's files, e.g. an msprobe directory read in place:
            nothing of ours wrote them, so there is no inventory to hold them to).
    """

    def __init__(self, url: str = "", required: bool = True) -> None:
        self._url = url
        self._required = required
        self._windows: dict[str, Mapping[str, InventoryEntry] | DumpIntegrityError] = {}
        self._documents: dict[str, str] = {}  # array key -> its checked document digest
        self.pending: dict[str, Any] = {}  # window -> the read of its inventory in flight (the integrity store's)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["pending"] = {}  # reads in flight belong to this process's event loop
        return state

    def known(self, window: str) -> bool:
        """Whether the window's inventory was read."""
        return window in self._windows

    def learn(self, window: str, raw: bytes | None) -> None:
        """Parse a window's inventory (its bytes; ``None``: absent, which every read of its chunks then names).

        Args:
            window: The window key (``""`` when the store is the window).
            raw: The inventory file's bytes.
        """
        key = f"{window}/{INVENTORY_FILE}" if window else INVENTORY_FILE
        if raw is None and not self._required:
            self._windows[window] = _NOT_INVENTORIED
            return
        if raw is None:
            self._windows[window] = DumpIntegrityError(
                f"{key}{self._where()} is missing: a committed window lists every array it holds and its chunks' "
                "digests there, so none of its chunks can be trusted",
                key=key,
            )
            return
        try:
            self._windows[window] = parse_inventory(raw, key).arrays
        except InventoryError as error:
            self._windows[window] = DumpIntegrityError(f"{error}{self._where()}", key=key)

    def _where(self) -> str:
        return f" in {self._url}" if self._url else ""

    def check(
        self,
        window: str,
        array_key: str,
        doc: Mapping[str, Any],
        chunk_key: str,
        index: int | None,
        digest: int,
        stored: bool = True,
        trailing: bool = True,
    ) -> None:
        """Refuse a chunk that is not its place's (or whose array or document is not its writer's).

        Args:
            window: The window key.
            array_key: The array's key (relative to the root).
            doc: The array's document as the reader uses it.
            chunk_key: The chunk's key.
            index: Its position in the grid's C order (``None``: not a chunk of the grid).
            digest: Its digest (:func:`~megadump_zarr.layout.inventory.chunk_digest` of its stored bytes).
            trailing: The digest is the chunk's own valid trailing crc32c (its bytes are whole; otherwise a changed
                byte and a chunk from elsewhere look alike).
            stored: Whether the array is stored (a pack's records, described as arrays of their own, are not: their
                chunks lie in the pack's arrays, whose whole shards the inventory binds).

        Raises:
            DumpIntegrityError: Naming the array or the chunk, and what is wrong.
        """
        entries = self._windows.get(window)
        if isinstance(entries, DumpIntegrityError):
            raise DumpIntegrityError(f"chunk {chunk_key} cannot be trusted: {entries}", key=chunk_key)
        if entries is None or entries is _NOT_INVENTORIED or not stored:
            return
        path = array_key[len(window) + 1 :] if window else array_key
        entry = entries.get(path)
        if entry is None:
            raise DumpIntegrityError(
                f"array {array_key}{self._where()} is not in its window's inventory: its writer did not write it "
                "(added or moved in); its chunks are not read",
                key=array_key,
            )
        if self._documents.get(array_key) != entry.metadata:
            document = metadata_digest(doc)
            if document != entry.metadata:
                raise DumpIntegrityError(
                    f"array {array_key}{self._where()}: its document has digest {document}, but the window "
                    f"inventory records {entry.metadata}: the document was edited (data_type, shape or attributes)",
                    key=f"{array_key}/zarr.json",
                )
            self._documents[array_key] = document
        recorded = entry.chunks[index] if index is not None and index < len(entry.chunks) else -1
        if recorded is None:
            return
        if recorded != digest:
            raise DumpIntegrityError(
                f"chunk {chunk_key}{self._where()} of array {array_key} has digest {digest:08x}, but the window "
                + (
                    f"inventory records {recorded:08x} for this place: "
                    + (
                        "a chunk from elsewhere (another task, window or dump)"
                        if trailing
                        else "it is corrupt, or a chunk from elsewhere (another task, window or dump)"
                    )
                    if recorded >= 0
                    else "inventory lists no such chunk"
                ),
                key=chunk_key,
            )
