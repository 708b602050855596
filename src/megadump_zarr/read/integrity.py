"""No silent fill values: a zarr store wrapper that refuses missing or corrupt chunks of committed windows.

zarr reads a missing chunk as the array's fill value (zeros here), and a corrupt chunk fails deep in a
codec (``RuntimeError`` from blosc, a bare ``ValueError`` from ``crc32c``). A committed window
(``complete`` or ``aborted``) lists every array it holds and each chunk's digest in its inventory
(:mod:`megadump_zarr.layout.inventory`). :class:`IntegrityStore` wraps the dump's store and parses no catalogue:
the reader that owns it says which windows are committed and gives their consolidated array documents as read
(``committed``). A key is a chunk of a committed window's array when the window's inventory lists that array (the
longest listed path that prefixes the key; an array the documents describe and the inventory does not list is
refused as added or moved in), and then:

- a ``get`` that finds nothing raises :class:`~megadump_zarr.read.errors.DumpIntegrityError` naming the key;
- a whole-chunk ``get`` is checked once against the inventory: one crc32c pass gives the chunk's digest and
  checks its trailing ``crc32c`` (:func:`~megadump_zarr.layout.inventory.chunk_digest`), so a mismatch names the key
  and what is wrong, and a reader of what this store checked need not check the checksum again (:meth:`checks`).

Keys of torn (``writing``) windows, documents and anything outside a committed window pass through
unchanged. A packed record is read by row (:mod:`megadump_zarr.read.pack_rows`), after its own check of its
shard's index: an absent row of a committed window is refused there, naming the record's chunk and the shard.
:func:`guard_read` turns a codec failure of an array read (chunks written without a checksum) into the same
error, naming the chunk that fails.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
import itertools
from typing import Any

import numpy as np
from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import WrapperStore

from megadump_zarr.layout.inventory import INVENTORY_FILE, chunk_digest
from megadump_zarr.read.errors import DumpIntegrityError
from megadump_zarr.read.inventory import Inventories, grid_index

__all__ = [
    "Committed",
    "IntegrityStore",
    "chunk_grid",
    "guard_read",
    "guard_window_group",
    "has_crc32c",
    "verify_crc32c",
]


Committed = Callable[[str], "Mapping[str, dict[str, Any]] | None"]
"""``committed(window key) -> its consolidated nodes as stored`` (path below the window -> document) when the
reader read the window as committed, else ``None``."""


def chunk_grid(doc: Mapping[str, Any]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """``(shape, chunk_shape)`` of a regular-grid array document, or ``None`` when it is not one.

    Args:
        doc: The array's ``zarr.json`` document.
    """
    shape = doc.get("shape")
    grid = doc.get("chunk_grid")
    if not isinstance(shape, list) or not isinstance(grid, Mapping) or grid.get("name") != "regular":
        return None
    config = grid.get("configuration")
    chunks = config.get("chunk_shape") if isinstance(config, Mapping) else None
    if not isinstance(chunks, list) or len(chunks) != len(shape):
        return None
    if not all(type(d) is int and d >= 0 for d in shape) or not all(type(c) is int and c > 0 for c in chunks):
        return None
    return tuple(shape), tuple(chunks)


def _coords(doc: Mapping[str, Any], name: str) -> tuple[int, ...] | None:
    """Chunk coordinates encoded in ``name`` (relative to the array) under the document's key encoding."""
    encoding = doc.get("chunk_key_encoding")
    kind, sep = "default", "/"
    if isinstance(encoding, Mapping):
        kind = encoding.get("name", "default")
        config = encoding.get("configuration")
        sep = (
            config.get("separator", "/" if kind == "default" else ".")
            if isinstance(config, Mapping)
            else ("/" if kind == "default" else ".")
        )
    if kind == "default":
        if name == "c":
            return ()
        if not name.startswith("c" + sep):
            return None
        name = name[2:]
    elif kind != "v2":
        return None
    parts = name.split(sep)
    if not all(p.isdigit() and p.isascii() for p in parts):
        return None
    return tuple(int(p) for p in parts)


def _expected_chunk(doc: Mapping[str, Any], name: str) -> bool:
    """Whether chunk ``name`` (relative to its array, ``c.0.0``) lies in the array's grid: its writer wrote it."""
    grid, coords = chunk_grid(doc), _coords(doc, name)
    return grid is not None and coords is not None and grid_index(*grid, coords) is not None


def has_crc32c(doc: Mapping[str, Any]) -> bool:
    codecs = doc.get("codecs")
    if not isinstance(codecs, list) or not codecs:
        return False
    last = codecs[-1]
    name = last.get("name") if isinstance(last, Mapping) else last
    return name == "crc32c"


def below_checks(store: Store) -> Store:
    """The dump's store below its integrity checks (what reads that check what they read themselves use: a
    pack's shard index, its per-task arrays)."""
    return store.wrapped if isinstance(store, IntegrityStore) else store


def _none_committed(window: str) -> None:
    """No window is committed (a store wrapped without a reader's catalogue checks nothing)."""


class IntegrityStore(WrapperStore[Store]):
    """A read-only store wrapper that refuses missing and corrupt chunks of committed windows.

    Args:
        store: The dump's store.
        committed: Which windows are committed, and their consolidated nodes as stored (see :data:`Committed`).
        url: The dump root as given, for messages.
        inventories: The windows' inventories, as read (one per dump, shared by its copies of this store).
        depth: Path components of a window key (2 below a dump root, 0 when the store is the window).
    """

    def __init__(
        self,
        store: Store,
        committed: Committed | None = None,
        url: str = "",
        inventories: Inventories | None = None,
        depth: int = 2,
    ) -> None:
        super().__init__(store)
        self._committed = committed or _none_committed
        self._url = url
        self._inventories = inventories if inventories is not None else Inventories(url)
        self._depth = depth

    def _with_store(self, store: Store) -> IntegrityStore:
        return type(self)(store, self._committed, self._url, self._inventories, self._depth)

    def _window(self, key: str) -> tuple[str, Mapping[str, dict[str, Any]]] | None:
        """``(window key, its nodes)`` when ``key`` lies below a committed window's node (not a document)."""
        parts = key.split("/")
        if len(parts) <= self._depth + 1 or parts[-1] in ("zarr.json", INVENTORY_FILE):
            return None
        window = "/".join(parts[: self._depth])
        nodes = self._committed(window)
        return None if nodes is None else (window, nodes)

    def _array(self, key: str) -> tuple[str, str, dict[str, Any]] | None:
        """``(window, array key, array document)`` when ``key`` lies inside an array of a committed window: one its
        inventory lists, else (an array added or moved in, which the check refuses) one its documents describe."""
        found = self._window(key)
        if found is None:
            return None
        window, nodes = found
        listed = self._inventories.listed(window)
        rest = key.split("/")[self._depth :]
        for source in (listed, nodes):
            for cut in range(len(rest) - 1, 0, -1):  # "." separator: one component; "/": several
                path = "/".join(rest[:cut])
                if path in source:
                    doc = nodes.get(path)
                    if not isinstance(doc, dict) or doc.get("node_type") != "array":
                        break
                    return window, f"{window}/{path}" if window else path, doc
        return None

    def checks(self, key: str) -> bool:
        """Whether a whole-chunk ``get`` of ``key`` through this store checks its trailing crc32c (its reader then
        need not check it again).

        Args:
            key: The chunk's key relative to the root.
        """
        found = self._array(key)
        return found is not None and has_crc32c(found[2])

    def check_read(self, key: str, data: bytes) -> None:
        """Check a whole chunk that a fast path read below this store (its bytes ``data``) as a ``get`` would.

        Args:
            key: The chunk's key relative to the root.
            data: Its stored bytes.

        Raises:
            DumpIntegrityError: It is corrupt, or not its place's (the window inventory).
        """
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.sync import sync

        if self._window(key) is None:
            return
        prototype = default_buffer_prototype()
        sync(self._learn_inventory(key, prototype))
        self._check(key, prototype.buffer.from_bytes(data), None)

    def check_whole(self, key: str) -> None:
        """Read the whole chunk ``key`` (a pack's shard, whose rows are read by byte range, which the inventory
        cannot bind) and refuse it as a whole-chunk ``get`` would (once per key).

        Args:
            key: The chunk's key relative to the root.

        Raises:
            DumpIntegrityError: It is missing, corrupt, or not its place's (the window inventory).
        """
        from zarr.core.buffer import default_buffer_prototype
        from zarr.core.sync import sync

        checked = self.__dict__.setdefault("_whole_checked", set())
        if key in checked or self._window(key) is None:
            return
        sync(self.get(key, default_buffer_prototype()))
        checked.add(key)

    async def _learn_inventory(self, key: str, prototype: BufferPrototype) -> None:
        """Read the inventory of the committed window of ``key`` (once per window)."""
        found = self._window(key)
        if found is None or self._inventories.known(found[0]):
            return
        window = found[0]
        pending = self._inventories.pending  # concurrent first reads of one window share one read of it
        fetch = pending.get(window)
        if fetch is None:
            fetch = pending[window] = asyncio.ensure_future(
                self._store.get(f"{window}/{INVENTORY_FILE}" if window else INVENTORY_FILE, prototype)
            )
        raw = await fetch
        if not self._inventories.known(window):
            self._inventories.learn(window, None if raw is None else raw.to_bytes())
        pending.pop(window, None)

    @property
    def wrapped(self) -> Store:
        """The dump's own store, without the checks (``verify`` reports what this wrapper would refuse)."""
        return self._store

    def __eq__(self, value: object) -> bool:
        return isinstance(value, IntegrityStore) and self._store == value._store

    def __hash__(self) -> int:
        return hash(id(self._store))

    def __str__(self) -> str:
        return str(self._store)

    def __repr__(self) -> str:
        return f"IntegrityStore({self._store!r})"

    def _where(self) -> str:
        return f" in {self._url}" if self._url else ""

    def _check(self, key: str, value: Buffer | None, byte_range: ByteRequest | None) -> Buffer | None:
        found = self._array(key)
        if found is None:
            return value
        window, array_key, doc = found
        name = key[len(array_key) + 1 :]
        if value is None:
            if _expected_chunk(doc, name):
                raise DumpIntegrityError(
                    f"chunk {key}{self._where()} is missing: its window is committed, so every chunk of "
                    f"{array_key} (shape {doc.get('shape')}) must exist",
                    key=key,
                )
            return value
        if byte_range is None:  # a whole chunk: one crc32c pass for its checksum and its inventory digest
            data = value.as_numpy_array()
            digest, trailing = chunk_digest(data) if data.size else (0, False)
            if has_crc32c(doc) and not trailing:
                verify_crc32c(key, data, self._where())
            coords = _coords(doc, name)
            grid = chunk_grid(doc)
            index = grid_index(*grid, coords) if grid is not None and coords is not None else None
            self._inventories.check(window, array_key, doc, key, index, digest, trailing)
        return value

    async def get(self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None) -> Buffer | None:
        value = await self._store.get(key, prototype, byte_range)
        if value is None or byte_range is None:
            await self._learn_inventory(key, prototype)
        return self._check(key, value, byte_range)

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        key_ranges = list(key_ranges)
        values = await self._store.get_partial_values(prototype, key_ranges)
        for (key, byte_range), value in zip(key_ranges, values):
            if value is None or byte_range is None:
                await self._learn_inventory(key, prototype)
        return [self._check(key, value, byte_range) for (key, byte_range), value in zip(key_ranges, values)]


def verify_crc32c(key: str, data: np.ndarray, where: str = "") -> None:
    """Check the trailing little-endian crc32c of a stored chunk.

    Args:
        key: The chunk's key (for the message).
        data: The stored bytes (uint8).
        where: `` in ROOT`` for the message.

    Raises:
        DumpIntegrityError: Too short to hold a checksum, or the checksum does not match.
    """
    import google_crc32c

    data = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    if data.size < 4:
        raise DumpIntegrityError(
            f"chunk {key}{where} is corrupt: {data.size} bytes, too short to hold its crc32c checksum", key=key
        )
    stored = int.from_bytes(bytes(data[-4:]), "little")
    computed = int(google_crc32c.value(data[:-4].tobytes() if not data[:-4].flags.c_contiguous else data[:-4]))
    if stored != computed:
        raise DumpIntegrityError(
            f"chunk {key}{where} is corrupt: crc32c checksum mismatch (stored {stored:#010x}, "
            f"computed {computed:#010x})",
            key=key,
        )


def guard_read(array: Any, key: str, read: Callable[[], Any], root: str = "") -> Any:
    """Run ``read()`` (a read of zarr ``array``) and turn a codec failure into :class:`DumpIntegrityError`.

    A chunk that decodes badly (blosc garbage, a cut-short zstd frame, a checksum mismatch when zarr
    checks it) is located by reading the touched chunks one by one, so the message names its key.

    Args:
        array: The zarr array being read.
        key: The array's key relative to the root.
        read: The read, e.g. ``lambda: array[0:8]``.
        root: The dump root, for messages.
    """
    try:
        return read()
    except DumpIntegrityError:
        raise
    except (RuntimeError, ValueError, TypeError, OSError, EOFError) as error:
        if isinstance(error, (FileNotFoundError, PermissionError)):
            raise
        bad = _find_bad_chunk(array, key)
        where = f" in {root}" if root else ""
        target = f"chunk {bad}" if bad else f"a chunk of {key}"
        raise DumpIntegrityError(
            f"{target}{where} is corrupt: it does not decode "
            f"({type(error).__name__}: {' '.join(str(error).split())[:200]})",
            key=bad or key,
        ) from None


def _find_bad_chunk(array: Any, key: str) -> str | None:
    """The key of the first chunk of ``array`` that fails to read (at most 4096 are tried)."""
    try:
        shape, chunks = tuple(array.shape), tuple(array.chunks)
        grid = tuple(-(-s // c) for s, c in zip(shape, chunks))
        for coords in itertools.islice(itertools.product(*(range(n) for n in grid)), 4096):
            try:
                array.get_block_selection(coords)
            except DumpIntegrityError as error:
                return error.key
            except Exception:
                return f"{key}/{array.metadata.encode_chunk_key(coords)}"
    except Exception:
        return None
    return None


def guard_window_group(group: Any, url: str = "") -> Any:
    """The same zarr window group, reopened over an :class:`IntegrityStore` when the window is committed.

    For readers that open one window directly with zarr (``export-hdf5``) rather than through ``open_dump``; its
    packed records are read by row (:mod:`megadump_zarr.read.pack_rows`), whose index check refuses what is
    missing.

    Args:
        group: A ``zarr.Group`` of a window (``rank_{r}/window_{wwww}``).
        url: The window as given, for messages.
    """
    import zarr

    from megadump_zarr.read.location import get_json

    window = group.path
    prefix = f"{window}/" if window else ""
    doc = get_json(group.store, f"{prefix}zarr.json") or {}
    attrs = doc.get("attributes")
    consolidated = doc.get("consolidated_metadata")
    nodes = consolidated.get("metadata") if isinstance(consolidated, Mapping) else None
    if (
        not isinstance(attrs, Mapping)
        or attrs.get("status") not in ("complete", "aborted")
        or not isinstance(nodes, Mapping)
    ):
        return group
    depth = len(window.split("/")) if window else 0
    store = IntegrityStore(group.store, lambda key: nodes if key == window else None, url, depth=depth)
    return zarr.open_group(store, path=window, mode="r", zarr_format=3)
