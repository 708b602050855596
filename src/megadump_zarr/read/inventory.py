"""The window inventory's one rule (:mod:`megadump_zarr.layout.inventory`), for the readers and ``verify``: every array
a committed window holds is listed with its document's digest, and every chunk with its place's digest.

:func:`read_inventory` parses a window's inventory; :func:`inventory_problems` yields each way an array, its document
or its chunks are not what the inventory lists, as :class:`InventoryProblem` values. ``verify`` collects them all;
the readers' :class:`Inventories` (one per dump, fed by the integrity store, :mod:`megadump_zarr.read.integrity`)
raises the first as :class:`~megadump_zarr.read.errors.DumpIntegrityError`, never returning a value read from a chunk
that is not its place's. One crc32c pass per chunk gives both its checksum check and its digest.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
import math
from types import MappingProxyType
from typing import Any

from megadump_zarr.layout.inventory import (
    INVENTORY_DIGEST_ATTR,
    INVENTORY_FILE,
    InventoryEntry,
    InventoryError,
    inventory_digest,
    metadata_digest,
    parse_inventory,
)
from megadump_zarr.read.errors import DumpIntegrityError

__all__ = ["Inventories", "InventoryProblem", "grid_index", "inventory_problems", "read_inventory"]

_ELSEWHERE = "a chunk from elsewhere (another task, window or dump, or swapped with another)"


@dataclass(frozen=True)
class InventoryProblem:
    """One way a window's inventory, or an array, document or chunk it lists, is not its writer's.

    Args:
        key: The store key of what is wrong (the inventory file, an array, its ``zarr.json``, a chunk).
        subject: What that is, as a message names it (``"chunk"``, ``"array"``, ...).
        what: What is wrong with it, a sentence that follows the subject.
    """

    key: str
    subject: str
    what: str

    def __post_init__(self) -> None:
        for name in ("key", "subject", "what"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"InventoryProblem.{name} {getattr(self, name)!r} is not a non-empty string")

    def message(self, where: str = "") -> str:
        """The readers' sentence: subject, key (and ``where``, the dump), what is wrong."""
        return f"{self.subject} {self.key}{where} {self.what}"

    @property
    def described(self) -> str:
        """``verify``'s description, which its report shows next to the key."""
        return f"{self.subject} {self.what}"


def read_inventory(
    raw: bytes | None, key: str, recorded: Any = None, check_recorded: bool = False
) -> tuple[dict[str, InventoryEntry], InventoryProblem | None]:
    """A window's inventory entries by array path (``{}`` when it cannot be used), and what is wrong with it.

    Args:
        raw: The inventory file's bytes (``None``: absent).
        key: Its key.
        recorded: The SHA-256 the window document records for it (``attributes.inventoryDigest``).
        check_recorded: Whether to compare it with ``recorded``.
    """
    subject = "the window inventory"
    if raw is None:
        what = "is missing: a committed window lists every array it holds and its chunks' digests there"
        return {}, InventoryProblem(key, subject, what)
    try:
        entries = dict(parse_inventory(raw, key).arrays)
    except InventoryError as error:
        return {}, InventoryProblem(key, subject, "is not valid: " + str(error).removeprefix(key).lstrip(": "))
    if check_recorded and (not isinstance(recorded, str) or inventory_digest(raw) != recorded):
        shown = repr(recorded) if len(repr(recorded)) <= 80 else repr(recorded)[:77] + "..."
        what = (
            f"has SHA-256 {inventory_digest(raw)[:16]}..., not the one the window document records (attributes."
            f"{INVENTORY_DIGEST_ATTR} {shown}): the inventory was replaced or edited"
        )
        return entries, InventoryProblem(key, subject, what)
    return entries, None


def inventory_problems(
    array_key: str,
    entry: InventoryEntry | None,
    doc: Mapping[str, Any] | None = None,
    grid: int | None = None,
    chunks: Iterable[tuple[str, int | None, int, bool]] = (),
) -> Iterator[InventoryProblem]:
    """Each way an array, its document or its chunks are not what its window's inventory lists.

    Args:
        array_key: The array's key.
        entry: Its inventory entry (``None``: the inventory does not list it).
        doc: Its document, to compare with the entry's digest (``None``: not compared).
        grid: How many chunks its grid holds (``None``: not compared).
        chunks: ``(chunk key, position in the grid's C order or None, digest, trailing)`` of chunks read, where the
            digest is :func:`~megadump_zarr.layout.inventory.chunk_digest` of its stored bytes and ``trailing``
            says they end with their own valid crc32c (whole bytes: otherwise a changed byte and a chunk from
            elsewhere look alike).
    """
    if entry is None:
        what = "is not in the window inventory: its writer did not write it there (added or moved in)"
        yield InventoryProblem(array_key, "array", what)
        return
    if doc is not None and (digest := metadata_digest(doc)) != entry.metadata:
        what = f"has digest {digest} but the window inventory records {entry.metadata}: the document was edited"
        yield InventoryProblem(f"{array_key}/zarr.json", "array document", f"{what} (in every copy)")
    if grid is not None and grid != len(entry.chunks):
        what = f"gives a grid of {grid} chunk(s) but the window inventory lists {len(entry.chunks)}"
        yield InventoryProblem(f"{array_key}/zarr.json", "array document", what)
    for key, index, digest, trailing in chunks:
        recorded = entry.chunks[index] if index is not None and index < len(entry.chunks) else -1
        if recorded == -1:
            what = f"is not in the window inventory ({len(entry.chunks)} chunk(s) listed for its array)"
            yield InventoryProblem(key, "chunk", what)
        elif recorded is not None and recorded != digest:
            why = _ELSEWHERE if trailing else f"it is corrupt, or {_ELSEWHERE}"
            what = f"has digest {digest:08x} but the window inventory records {recorded:08x} for this place: {why}"
            yield InventoryProblem(key, "chunk", what)


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
        self._where = f" in {url}" if url else ""
        self._required = required
        self._windows: dict[str, Mapping[str, InventoryEntry] | InventoryProblem] = {}
        self._documents: dict[str, str] = {}  # array key -> its checked document digest
        self.pending: dict[str, Any] = {}  # window -> the read of its inventory in flight (the integrity store's)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["pending"] = {}  # reads in flight belong to this process's event loop
        return state

    def known(self, window: str) -> bool:
        """Whether the window's inventory was read."""
        return window in self._windows

    def listed(self, window: str) -> Mapping[str, InventoryEntry]:
        """The arrays the window's inventory lists, by path below the window (empty: not read, or not usable).

        Args:
            window: The window key.
        """
        entries = self._windows.get(window)
        return entries if isinstance(entries, Mapping) else _NOT_INVENTORIED

    def learn(self, window: str, raw: bytes | None) -> None:
        """Parse a window's inventory (its bytes; ``None``: absent, which every read of its chunks then names).

        Args:
            window: The window key (``""`` when the store is the window).
            raw: The inventory file's bytes.
        """
        if raw is None and not self._required:
            self._windows[window] = _NOT_INVENTORIED
            return
        entries, problem = read_inventory(raw, f"{window}/{INVENTORY_FILE}" if window else INVENTORY_FILE)
        self._windows[window] = entries if problem is None else problem

    def check(
        self,
        window: str,
        array_key: str,
        doc: Mapping[str, Any],
        chunk_key: str,
        index: int | None,
        digest: int,
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
            trailing: The digest is the chunk's own valid trailing crc32c.

        Raises:
            DumpIntegrityError: Naming the array, its document or the chunk, and what is wrong.
        """
        entries = self._windows.get(window)
        if isinstance(entries, InventoryProblem):
            raise DumpIntegrityError(
                f"chunk {chunk_key} cannot be trusted: {entries.message(self._where)}", key=chunk_key
            )
        if entries is None or entries is _NOT_INVENTORIED:
            return
        entry = entries.get(array_key[len(window) + 1 :] if window else array_key)
        checked = entry is not None and self._documents.get(array_key) == entry.metadata
        chunk = [(chunk_key, index, digest, trailing)]
        for problem in inventory_problems(array_key, entry, None if checked else doc, chunks=chunk):
            raise DumpIntegrityError(problem.message(self._where), key=problem.key)
        if entry is not None:
            self._documents[array_key] = entry.metadata
