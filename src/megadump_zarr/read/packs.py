"""Schema 7 read as schema 6: a read-only zarr store that serves task-record packs as task groups.

A schema-7 window stores the small records of a stage as packs (:mod:`megadump_zarr.store.packs`):
sharded arrays with one row per task. :class:`PackedView` wraps a dump's store and serves, over such a
window, exactly the key space a schema-6 window of the same records has, so every reader (catalogue,
``Dump``, compare, verify, engine, report, HDF5 export) reads it unchanged:

- ``{window}/zarr.json`` of a committed window: the stored document with every node at or below a pack
  replaced by the pack's schema-6 nodes (:func:`~megadump_zarr.store.packs.expand_pack`: task groups,
  record arrays, row coordinates), in zarr's order. A torn window's document passes through.
- ``{task group}/zarr.json``: the task group's document with inline consolidated metadata of its
  arrays (so plain ``xr.open_zarr(consolidated=True)`` opens it); ``{array}/zarr.json``: its document.
- a record chunk: the shard's inner chunk, byte for byte the schema-6 chunk (checksum included), read
  with one ranged read after the shard's index (one suffix read per shard, cached); a row-coordinate
  chunk: ``arange(start, stop)`` computed from the task's attributes. A caller holding a whole shard (``verify``
  reads each once) takes its virtual chunks from those bytes with :meth:`PackedView.split_shard`: the same
  bytes, ``None`` or errors as those reads.
- listings of a packed window show the virtual keys and every stored key that is not a pack's; the
  pack keys themselves stay readable. Everything outside packed windows passes through unchanged.

A committed window's expansion (:mod:`megadump_zarr.read.pack_nodes`) is built from its document alone (one ``get``, kept while the stored
document bytes stay the same); a torn window's is built from a listing and the packs' own documents.

Damage is named: a shard index whose checksum fails, an index entry outside its shard, or a row of a
committed window that its shard does not hold raises
:class:`~megadump_zarr.read.errors.DumpIntegrityError` naming the shard and the virtual chunk; a
missing shard reads as a missing chunk (``None``), which :class:`~megadump_zarr.read.integrity.IntegrityStore`
refuses for a committed window, as for schema 6.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, defaultdict
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
import re
from typing import Any, TypeVar

import google_crc32c
from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, Store, SuffixByteRequest
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype
from zarr.storage import WrapperStore

from megadump_zarr.read.errors import DumpIntegrityError
from megadump_zarr.read.location import parse_json
from megadump_zarr.read.pack_nodes import (
    MARKER,
    PACK_DOC,
    PACK_PATH,
    expand_packs,
    index_document,
    replace_packs,
)
from megadump_zarr.store.metadata import consolidated_sort_key, dumps
from megadump_zarr.store.packs import (
    TASK_ARRAYS,
    RangeSource,
    ShardSource,
    decode_index,
    index_nbytes,
    range_chunk,
)
from megadump_zarr.layout.paths import RANK_DIR, WINDOW_PATH

__all__ = ["PackedView", "base_store", "find_view", "packed_view"]

_CONSOLIDATED = re.compile(rb'"consolidated_metadata"\s*:\s*\{')
_COMMITTED = re.compile(rb'"status"\s*:\s*"(?:complete|aborted)"')
_FINAL = ("complete", "aborted")
_PACKED_WINDOWS = 8  # expansions kept (a 4096-record window's: ~20 MB of documents and dicts)
_PLAIN_WINDOWS = 65536  # windows known to hold no pack (a few bytes each)
_INDEXES = 256  # shard indexes kept
_INDEX_DOCS = 64  # root and rank documents kept
_PARSED_KEPT = 4  # decoded window documents waiting for the catalogue
_T = TypeVar("_T")


@dataclass
class _Window:
    """One window as the view serves it.

    Args:
        stamp: Length and crc32c of the stored window document (``None``: none yet); the document itself
            is not kept.
        final: Committed with consolidated metadata: the stored documents never change again.
        packed: Holds at least one pack.
        document: The virtual window document (committed packed windows).
        virtual: Virtual nodes, path relative to the window -> document.
        children: Virtual task group -> its arrays' paths.
        sources: Virtual chunk key relative to the window -> where its bytes are.
        doc_keys: Keys (relative to the root) of the virtual nodes' documents.
        chunk_keys: ``(virtual chunk key, shard key or None)`` relative to the root, for listings.
        pack_docs: A torn window's pack documents the expansion was built from.
    """

    stamp: tuple[int, int] | None
    final: bool
    packed: bool = False
    document: bytes | None = None
    virtual: dict[str, dict[str, Any]] = field(default_factory=dict)
    children: dict[str, list[str]] = field(default_factory=dict)
    sources: dict[str, ShardSource | RangeSource] = field(default_factory=dict)
    doc_keys: list[str] = field(default_factory=list)
    chunk_keys: list[tuple[str, str | None]] = field(default_factory=list)
    pack_docs: frozenset[str] = frozenset()
    encoded: dict[str, bytes] = field(default_factory=dict)
    parsed: dict[str, Any] | None = None  # ``document`` decoded, handed once to the catalogue (take_document)


def _stamp(raw: bytes | None) -> tuple[int, int] | None:
    """What tells a stored document from another without keeping it: its length and crc32c."""
    return None if raw is None else (len(raw), google_crc32c.value(raw))


def _committed_nodes(raw: bytes, key: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """``(document, consolidated nodes)`` of a committed window document, else ``None`` (torn)."""
    doc = parse_json(raw, key)
    attrs = doc.get("attributes")
    consolidated = doc.get("consolidated_metadata")
    nodes = consolidated.get("metadata") if isinstance(consolidated, dict) else None
    if not isinstance(attrs, dict) or attrs.get("status") not in _FINAL or not isinstance(nodes, dict):
        return None
    return doc, nodes


def _looks_committed(raw: bytes) -> bool:
    """A fast test that a document without pack names is a committed window's (no parse needed; compact or
    indented JSON, as schema 5's zarr-python wrote it)."""
    return _CONSOLIDATED.search(raw) is not None and _COMMITTED.search(raw) is not None


def _finish(window: str, state: _Window) -> _Window:
    """Fill the listing and parent tables of an expanded window."""
    prefix = f"{window}/" if window else ""
    children: dict[str, list[str]] = defaultdict(list)
    for path, node in state.virtual.items():
        if node.get("node_type") == "array":
            children[path.rpartition("/")[0]].append(path)
    state.children = dict(children)
    state.doc_keys = [f"{prefix}{path}/zarr.json" for path in state.virtual]
    state.chunk_keys = [
        (f"{prefix}{key}", f"{prefix}{source.shard}" if isinstance(source, ShardSource) else None)
        for key, source in state.sources.items()
    ]
    state.packed = True
    return state


def _corrupt_index(shard: str, key: str, error: ValueError) -> DumpIntegrityError:
    """A shard index that does not decode, named for the virtual chunk ``key`` read through it."""
    why = str(error).removeprefix(f"{shard}: ")
    return DumpIntegrityError(f"shard {shard} of chunk {key} is corrupt: {why}", key=key)


def _entry(
    shard: str,
    entries: list[tuple[int, int] | None],
    size: int | None,
    source: ShardSource,
    key: str,
    final: bool,
) -> tuple[int, int] | None:
    """``(offset, nbytes)`` of a virtual chunk's inner chunk in its shard; ``None``: absent from a torn window's.

    Args:
        shard: The shard's key.
        entries: Its decoded index.
        size: Its stored size, when known.
        source: The virtual chunk's source.
        key: The virtual chunk's key.
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


def _slice(data: bytes, byte_range: ByteRequest | None) -> bytes:
    if byte_range is None:
        return data
    if isinstance(byte_range, RangeByteRequest):
        return data[byte_range.start : byte_range.end]
    if isinstance(byte_range, OffsetByteRequest):
        return data[byte_range.offset :]
    if isinstance(byte_range, SuffixByteRequest):
        return data[len(data) - min(byte_range.suffix, len(data)) :]
    raise TypeError(f"unexpected byte_range {byte_range!r}")


class PackedView(WrapperStore[Store]):
    """A read-only store that serves schema-7 task-record packs as schema-6 task groups.

    Args:
        store: The dump's store (root: the dump root, or the window itself with ``window=""``).
        window: ``None``: the store is a dump root (windows are ``rank_{r}/window_{wwww}``); else the key of
            the store's only window (``""`` when the store's root is the window).
    """

    def __init__(self, store: Store, window: str | None = None) -> None:
        super().__init__(store)
        if window is not None and not isinstance(window, str):
            raise ValueError(f"PackedView.window must be a window key or None, got {type(window).__name__}")
        self._window = None if window is None else window.strip("/")
        self._reset()

    def _reset(self) -> None:
        self._packed: OrderedDict[str, _Window] = OrderedDict()
        self._plain: OrderedDict[str, _Window] = OrderedDict()
        self._indexes: OrderedDict[str, tuple[list[tuple[int, int] | None], int | None]] = OrderedDict()
        self._inflight: dict[tuple[str, str], asyncio.Future[Any]] = {}
        self._index_docs: OrderedDict[str, tuple[tuple[int, int] | None, bytes]] = OrderedDict()

    # ------------------------------------------------------------------ plumbing
    def _with_store(self, store: Store) -> PackedView:
        return type(self)(store, self._window)

    def __getstate__(self) -> dict[str, Any]:
        return {"store": self._store, "window": self._window}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._store = state["store"]
        self._window = state["window"]
        self._reset()

    def __eq__(self, value: object) -> bool:
        return isinstance(value, PackedView) and self._window == value._window and self._store == value._store

    def __hash__(self) -> int:
        return hash(id(self._store))

    def __str__(self) -> str:
        return str(self._store)

    def __repr__(self) -> str:
        return f"PackedView({self._store!r})"

    @property
    def read_only(self) -> bool:
        return True

    @property
    def supports_writes(self) -> bool:
        return False

    @property
    def supports_deletes(self) -> bool:
        return False

    def _refuse(self) -> None:
        raise ValueError(f"{self!r} is read-only: a dump is read through it, never written")

    def _check_writable(self) -> None:
        self._refuse()

    async def set(self, key: str, value: Buffer) -> None:
        self._refuse()

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        self._refuse()

    async def _set_many(self, values: Iterable[tuple[str, Buffer]]) -> None:
        self._refuse()

    async def delete(self, key: str) -> None:
        self._refuse()

    async def delete_dir(self, prefix: str) -> None:
        self._refuse()

    async def clear(self) -> None:
        self._refuse()

    async def _shared(self, kind: str, key: str, make: Callable[[], Awaitable[_T]]) -> _T:
        """Run ``make()`` once for concurrent callers asking for the same ``(kind, key)``."""
        loop = asyncio.get_running_loop()
        pending = self._inflight.get((kind, key))
        if pending is not None and pending.get_loop() is loop:
            return await asyncio.shield(pending)
        future: asyncio.Future[Any] = loop.create_future()
        self._inflight[(kind, key)] = future
        try:
            value = await make()
        except asyncio.CancelledError:
            future.cancel()
            raise
        except BaseException as error:
            future.set_exception(error)
            future.exception()  # retrieved: no "never retrieved" warning when nobody else waited
            raise
        else:
            future.set_result(value)
            return value
        finally:
            if self._inflight.get((kind, key)) is future:
                del self._inflight[(kind, key)]

    # ------------------------------------------------------------------ windows
    def _window_of(self, key: str) -> str | None:
        """The window key holding ``key`` (a key strictly below a window), else ``None``."""
        if self._window is not None:
            if not self._window:
                return ""
            return self._window if key.startswith(self._window + "/") else None
        parts = key.split("/", 2)
        if len(parts) < 3 or not parts[0].startswith("rank_") or not parts[1].startswith("window_"):
            return None
        window = f"{parts[0]}/{parts[1]}"
        return window if WINDOW_PATH.match(window) else None

    def _index_depth(self, key: str) -> int | None:
        """For the root's and the ranks' documents (which may repeat complete windows): the path
        components of a window key inside them."""
        if self._window is not None:
            return None
        if key == "zarr.json":
            return 2
        if key.endswith("/zarr.json") and key.count("/") == 1 and RANK_DIR.match(key[: -len("/zarr.json")]):
            return 1
        return None

    def _doc_key(self, window: str) -> str:
        return f"{window}/zarr.json" if window else "zarr.json"

    def _prefix(self, window: str) -> str:
        return f"{window}/" if window else ""

    def _cached(self, window: str) -> _Window | None:
        state = self._packed.get(window)
        if state is not None:
            self._packed.move_to_end(window)
            return state
        return self._plain.get(window)

    def _keep(self, window: str, state: _Window) -> _Window:
        self._packed.pop(window, None)
        self._plain.pop(window, None)
        table, limit = (self._packed, _PACKED_WINDOWS) if state.packed else (self._plain, _PLAIN_WINDOWS)
        table[window] = state
        while len(table) > limit:
            table.popitem(last=False)
        if state.packed:  # decoded documents not taken by now never will be: keep the memory bounded
            for old in list(table.values())[:-_PARSED_KEPT]:
                old.parsed = None
        return state

    async def _raw(self, window: str) -> bytes | None:
        value = await self._store.get(self._doc_key(window), default_buffer_prototype())
        return None if value is None else value.to_bytes()

    async def _physical(self, window: str) -> list[str]:
        return [key async for key in self._store.list_prefix(self._prefix(window))]

    def _from_document(self, window: str, raw: bytes | None) -> _Window | None:
        """The expansion of a committed window from its document alone; ``None`` when it is torn."""
        if raw is None:
            return None
        if MARKER not in raw:
            return _Window(_stamp(raw), True) if _looks_committed(raw) else None
        found = _committed_nodes(raw, self._doc_key(window))
        if found is None:
            return None
        doc, nodes = found
        replaced = replace_packs(nodes, window, strict=True)
        if replaced is None:
            return _Window(_stamp(raw), True)
        metadata, virtual, sources = replaced
        document = dict(doc)
        document["consolidated_metadata"] = {**doc["consolidated_metadata"], "metadata": metadata}
        return _finish(
            window,
            _Window(_stamp(raw), True, document=dumps(document), virtual=virtual, sources=sources, parsed=document),
        )

    async def _from_listing(self, window: str, raw: bytes | None, physical: list[str]) -> _Window:
        """The expansion of a torn window from its stored keys and its packs' own documents."""
        prefix = self._prefix(window)
        docs: list[tuple[str, str]] = []
        for key in physical:
            rel = key[len(prefix) :]
            match = PACK_DOC.match(rel) if rel.endswith("/zarr.json") else None
            if match is not None:
                docs.append((match.group(1), rel))
        packs_with_task = {pack for pack, rel in docs if rel in {f"{pack}/{name}/zarr.json" for name in TASK_ARRAYS}}
        docs = [(pack, rel) for pack, rel in docs if pack in packs_with_task]
        names = frozenset(rel for _, rel in docs)
        stamp = _stamp(raw)
        if not docs:
            return _Window(stamp, False)
        cached = self._cached(window)
        if cached is not None and not cached.final and cached.stamp == stamp and cached.pack_docs == names:
            return cached
        values = await asyncio.gather(
            *(self._store.get(f"{prefix}{rel}", default_buffer_prototype()) for _, rel in docs)
        )
        packs: dict[str, dict[str, dict[str, Any]]] = {pack: {} for pack in packs_with_task}
        for (pack, rel), value in zip(docs, values):
            if value is None:
                continue
            try:
                packs[pack][rel[: -len("/zarr.json")]] = parse_json(value.to_bytes(), f"{prefix}{rel}")
            except ValueError:
                continue  # cut short by the kill that tore the window: not part of it
        virtual, sources = expand_packs(window, packs, strict=False)
        if not virtual:
            return _Window(stamp, False, pack_docs=names)
        return _finish(window, _Window(stamp, False, virtual=virtual, sources=sources, pack_docs=names))

    async def _state(self, window: str, raw: bytes | None = None, physical: list[str] | None = None) -> _Window:
        """The window's expansion: cached, or built from its document (committed) or a listing (torn).

        Args:
            window: The window key.
            raw: Its stored document, just read (a changed document replaces a cached expansion).
            physical: Every stored key below it, just listed (a torn window is rebuilt from it).
        """
        cached = self._cached(window)
        if cached is not None and cached.final and (raw is None or _stamp(raw) == cached.stamp):
            return cached
        if cached is not None and raw is None and physical is None:
            return cached
        if raw is None:
            raw = await self._shared("doc", window, lambda: self._raw(window))
        if cached is not None and cached.final and _stamp(raw) == cached.stamp:
            return cached
        state = self._from_document(window, raw)
        if state is None:
            if physical is None:
                physical = await self._shared("list", window, lambda: self._physical(window))
            state = await self._from_listing(window, raw, physical)
        return self._keep(window, state)

    async def _window_state(self, window: str) -> _Window:
        cached = self._cached(window)
        if cached is not None:
            return cached
        return await self._shared("state", window, lambda: self._state(window))

    # ------------------------------------------------------------------ reads
    async def get(self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None) -> Buffer | None:
        window = self._window_of(key)
        if window is None:
            depth = self._index_depth(key)
            if depth is None:
                return await self._store.get(key, prototype, byte_range)
            value = await self._store.get(key, prototype)
            if value is None:
                return None
            raw = value.to_bytes()
            if MARKER not in raw:
                return value if byte_range is None else prototype.buffer.from_bytes(_slice(raw, byte_range))
            stamp = _stamp(raw)
            cached = self._index_docs.get(key)
            if cached is None or cached[0] != stamp:
                cached = self._index_docs[key] = (stamp, index_document(raw, key, depth))
                while len(self._index_docs) > _INDEX_DOCS:
                    self._index_docs.popitem(last=False)
            return prototype.buffer.from_bytes(_slice(cached[1], byte_range))
        rel = key[len(self._prefix(window)) :]
        if rel == "zarr.json":
            value = await self._store.get(key, prototype)
            if value is None:
                return None
            raw = value.to_bytes()
            cached = self._cached(window)
            if cached is not None and cached.stamp == _stamp(raw):
                state = cached
            else:
                state = await self._state(window, raw=raw)
            data = state.document if state.document is not None else raw
            return prototype.buffer.from_bytes(_slice(data, byte_range))
        state = await self._window_state(window)
        if state.packed:
            data = await self._virtual(window, state, rel, key)
            if data is not None:
                return prototype.buffer.from_bytes(_slice(data, byte_range))
            if rel in state.sources:
                return None
        return await self._store.get(key, prototype, byte_range)

    async def _virtual(self, window: str, state: _Window, rel: str, key: str) -> bytes | None:
        """A virtual key's bytes; ``None`` when it is not virtual or its shard is missing."""
        if rel.endswith("/zarr.json"):
            node = rel[: -len("/zarr.json")]
            if node not in state.virtual:
                return None
            encoded = state.encoded.get(node)
            if encoded is None:
                encoded = state.encoded[node] = self._node_document(state, node)
            return encoded
        source = state.sources.get(rel)
        if source is None:
            return None
        if isinstance(source, RangeSource):
            return range_chunk(source)
        return await self._inner_chunk(window, state, source, key)

    def _node_document(self, state: _Window, node: str) -> bytes:
        doc = state.virtual[node]
        if doc.get("node_type") != "group":
            return dumps(doc)
        cut = len(node) + 1
        members = {path[cut:]: state.virtual[path] for path in state.children.get(node, [])}
        return dumps(
            {
                "attributes": doc.get("attributes", {}),
                "zarr_format": 3,
                "consolidated_metadata": {
                    "kind": "inline",
                    "must_understand": False,
                    "metadata": {name: members[name] for name in sorted(members, key=consolidated_sort_key)},
                },
                "node_type": "group",
            }
        )

    async def _index(self, shard: str, count: int, key: str) -> tuple[list[tuple[int, int] | None], int | None] | None:
        """A shard's decoded index and its size (when the store tells it cheaply); ``None``: no shard."""
        cached = self._indexes.get(shard)
        if cached is not None and len(cached[0]) == count:
            self._indexes.move_to_end(shard)
            return cached

        async def read() -> tuple[list[tuple[int, int] | None], int | None] | None:
            value = await self._store.get(shard, default_buffer_prototype(), SuffixByteRequest(index_nbytes(count)))
            if value is None:
                return None
            try:
                entries = decode_index(value.to_bytes(), count, shard)
            except ValueError as error:
                raise _corrupt_index(shard, key, error) from None
            size = None
            if self._sized():
                try:
                    size = await self._store.getsize(shard)
                except (FileNotFoundError, NotImplementedError):
                    size = None
            found = (entries, size)
            self._indexes[shard] = found
            while len(self._indexes) > _INDEXES:
                self._indexes.popitem(last=False)
            return found

        return await self._shared("index", shard, read)

    async def _inner_chunk(self, window: str, state: _Window, source: ShardSource, key: str) -> bytes | None:
        shard = f"{self._prefix(window)}{source.shard}"
        found = await self._index(shard, source.count, key)
        if found is None:
            return None
        entries, size = found
        entry = _entry(shard, entries, size, source, key, state.final)
        if entry is None:
            return None
        offset, nbytes = entry
        value = await self._store.get(shard, default_buffer_prototype(), RangeByteRequest(offset, offset + nbytes))
        if value is None:
            return None
        data = value.to_bytes()
        if len(data) != nbytes:
            raise _short_read(shard, source, entry, len(data), key)
        return data

    def _sized(self) -> bool:
        """Whether the store tells a shard's size cheaply (a stat or a HEAD; the base class reads it all)."""
        return type(self._store).getsize is not Store.getsize

    def shard_chunks(self, window: str) -> dict[str, list[tuple[str, ShardSource]]]:
        """Where a window's packed record chunks are stored: shard key -> ``(virtual chunk key, source)`` of each
        of its inner chunks the view serves, keys relative to the view's root (``{}``: the window holds no pack).

        Args:
            window: The window key.
        """
        from zarr.core.sync import sync

        state = self._cached(window)
        if state is None:
            state = sync(self._window_state(window))
        prefix = self._prefix(window)
        found: dict[str, list[tuple[str, ShardSource]]] = defaultdict(list)
        for rel, source in state.sources.items() if state.packed else ():
            if isinstance(source, ShardSource):
                found[f"{prefix}{source.shard}"].append((f"{prefix}{rel}", source))
        return dict(found)

    def split_shard(
        self, window: str, chunks: list[tuple[str, ShardSource]], shard: str, raw: bytes | None
    ) -> list[tuple[str, bytes | DumpIntegrityError | None]]:
        """The virtual record chunks of one shard taken from its whole stored bytes (one read of it), each as a
        read of it through the view returns it (:meth:`shard_chunks` tells them): its bytes, ``None`` (no
        shard, or an absent inner chunk of a torn window), or the :class:`DumpIntegrityError` that read raises,
        with the same text (a damaged index, an index entry outside the shard, a row a committed window's
        shard does not hold).

        Args:
            window: The window key.
            chunks: ``(virtual chunk key, source)`` of the shard's inner chunks (:meth:`shard_chunks`).
            shard: The shard's key relative to the view's root.
            raw: The shard's stored bytes (``None``: absent).
        """
        from zarr.core.sync import sync

        if raw is None:
            return [(key, None) for key, _ in chunks]
        final = (self._cached(window) or sync(self._window_state(window))).final
        size = len(raw) if self._sized() else None
        split: list[tuple[str, bytes | DumpIntegrityError | None]] = []
        decoded: dict[int, list[tuple[int, int] | None] | ValueError] = {}
        for key, source in chunks:
            count = source.count
            if count not in decoded:
                try:  # the view's suffix read of the index, from the same bytes
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
            data = raw[offset : offset + nbytes]  # the view's ranged read
            split.append((key, data if len(data) == nbytes else _short_read(shard, source, entry, len(data), key)))
        return split

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        return list(await asyncio.gather(*(self.get(key, prototype, byte_range) for key, byte_range in key_ranges)))

    async def _get_many(
        self, requests: Iterable[tuple[str, BufferPrototype, ByteRequest | None]]
    ) -> AsyncGenerator[tuple[str, Buffer | None], None]:
        for key, prototype, byte_range in requests:
            yield key, await self.get(key, prototype, byte_range)

    async def exists(self, key: str) -> bool:
        window = self._window_of(key)
        if window is not None and key[len(self._prefix(window)) :] != "zarr.json":
            state = await self._window_state(window)
            rel = key[len(self._prefix(window)) :]
            if state.packed and (rel in state.sources or rel.endswith("/zarr.json") and rel[:-10] in state.virtual):
                try:
                    return await self.get(key, default_buffer_prototype()) is not None
                except DumpIntegrityError:
                    return False
        return await self._store.exists(key)

    def take_document(self, window: str, raw: bytes) -> dict[str, Any] | None:
        """The decoded virtual document of a committed packed window, once, when ``raw`` is it.

        The catalogue reads the window document it was just served (``raw``) and would decode what this
        view has just encoded: the view hands over the decoded document instead (once: the receiver
        owns it; the catalogue treats documents as read-only, and the view's node documents share it).

        Args:
            window: The window key.
            raw: The bytes the reader got for ``{window}/zarr.json``.
        """
        state = self._packed.get(window)
        if state is None or state.parsed is None or state.document is None or len(raw) != len(state.document):
            return None
        if raw != state.document:
            return None
        parsed, state.parsed = state.parsed, None
        return parsed

    def pack_rows(self, window: str) -> dict[str, tuple[str, int]]:
        """Where each packed record of a window is stored: record path -> ``(pack array path, row)``, both
        relative to the view's root (``{}``: the window holds no pack). The records table's ``pack_array`` and
        ``pack_row`` columns.

        Args:
            window: The window key.
        """
        from zarr.core.sync import sync

        state = self._cached(window)
        if state is None:
            state = sync(self._window_state(window))
        if not state.packed:
            return {}
        prefix = self._prefix(window)
        found: dict[str, tuple[str, int]] = {}
        for rel, source in state.sources.items():
            if isinstance(source, ShardSource):
                array, _, chunk = source.shard.rpartition("/")
                found[f"{prefix}{rel.rpartition('/')[0]}"] = (
                    f"{prefix}{array}",
                    int(chunk.split(".")[1]) * source.count + source.slot,
                )
        return found

    def stored_key(self, key: str) -> str | None:
        """Where the bytes of ``key`` are stored: the shard of a packed record chunk, ``None`` for a row
        coordinate chunk (computed) or a virtual document (built), else ``key`` itself.

        Args:
            key: A key of the view (relative to its root).
        """
        from zarr.core.sync import sync

        window = self._window_of(key)
        if window is None:
            return key
        rel = key[len(self._prefix(window)) :]
        if rel == "zarr.json":
            return key
        state = sync(self._window_state(window))
        if not state.packed:
            return key
        source = state.sources.get(rel)
        if isinstance(source, ShardSource):
            return f"{self._prefix(window)}{source.shard}"
        if source is not None or (rel.endswith("/zarr.json") and rel[: -len("/zarr.json")] in state.virtual):
            return None
        return key

    # ------------------------------------------------------------------ listings
    def _listed(self, window: str, state: _Window, physical: list[str]) -> list[str]:
        """A packed window's keys: stored keys outside its packs, then the virtual ones."""
        prefix = self._prefix(window)
        cut = len(prefix)
        keys = [key for key in physical if not PACK_PATH.match(key[cut:])]
        keys.extend(state.doc_keys)
        present = set(physical)
        keys.extend(chunk for chunk, shard in state.chunk_keys if shard is None or shard in present)
        return keys

    async def _keys(self, prefix: str) -> list[str]:
        inside = self._window_of(prefix)
        if inside is not None:
            physical = await self._physical(inside)
            groups = {inside: physical}
            others: list[str] = []
        else:
            groups = defaultdict(list)
            others = []
            async for key in self._store.list_prefix(prefix):
                window = self._window_of(key)
                (groups[window] if window is not None else others).append(key)
        keys = [key for key in others if key.startswith(prefix)]

        async def state(window: str, physical: list[str]) -> _Window:
            cached = self._cached(window)
            return cached if cached is not None and cached.final else await self._state(window, physical=physical)

        states = await asyncio.gather(*(state(window, physical) for window, physical in groups.items()))
        for (window, physical), found in zip(groups.items(), states):
            listed = self._listed(window, found, physical) if found.packed else physical
            keys.extend(key for key in listed if key.startswith(prefix))
        return keys

    def list(self) -> AsyncIterator[str]:
        return self.list_prefix("")

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        for key in await self._keys(prefix):
            yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        prefix = prefix.rstrip("/")
        probe = f"{prefix}/" if prefix else ""
        window = self._window_of(probe)
        if window is None or not (await self._window_state(window)).packed:
            async for name in self._store.list_dir(prefix):
                yield name
            return
        seen: set[str] = set()
        for key in await self._keys(probe):
            name = key[len(probe) :].split("/", 1)[0]
            if name and name not in seen:
                seen.add(name)
                yield name

    async def is_empty(self, prefix: str) -> bool:
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        async for _ in self.list_prefix(prefix):
            return False
        return True


def packed_view(store: Store, window: str | None = None) -> Store:
    """``store`` served through a :class:`PackedView`, unless a view already sits in its wrapper chain.

    Args:
        store: A dump's store.
        window: See :class:`PackedView`.
    """
    return store if find_view(store) is not None else PackedView(store, window)


def find_view(store: Store) -> PackedView | None:
    """The :class:`PackedView` in ``store``'s wrapper chain (``store`` itself, or below wrappers), if any.

    Args:
        store: A store.
    """
    inner: Any = store
    while isinstance(inner, WrapperStore):
        if isinstance(inner, PackedView):
            return inner
        inner = inner._store
    return None


def base_store(store: Store) -> Store:
    """The stored (physical) store below the :class:`PackedView` in ``store``'s wrapper chain (``store``
    itself when there is none).

    Args:
        store: A store, possibly a view or a wrapper over one.
    """
    view = find_view(store)
    return store if view is None else view._store
