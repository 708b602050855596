"""Format 9 to format 10, in place: the copies of the chunk digests each document recorded are dropped.

A format-9 window differs from a format-10 one in metadata only: each array document also recorded its chunks'
crc32c (attribute ``chunkCrc32c``) and each pack record array its shards' digests (``shardCrc32c``), copies of what
the window inventory lists (:mod:`megadump_zarr.layout.inventory`). :func:`migrate_dump` first checks every window
(nothing is written when one is refused), then rewrites each committed format-9 window:

1. the check: the inventory is the one the window document records (``inventorySha256``) and lists every array of
   the window with its document's digest; each array's own document is the window's copy; every chunk is read and
   is the one the inventory lists; every digest the documents record agrees with the inventory and the chunk. A
   window that fails is refused (:class:`MigrationError`, naming it): damage is never migrated into a dump that
   would then look clean.
2. the rewrite: each document holding an array document (its own, a pack group's consolidated copies) without the
   two attributes, then the inventory with the new documents' digests, then, last and durably, the window document
   (``schemaVersion`` 10, its consolidated copies stripped, the new inventory's digest).

Chunks are never written. A kill leaves a window whose document is still format 9: a re-run checks it again (a
document or an inventory this migration already rewrote is recognised as such) and finishes it. A format-10 window
is skipped; a window not committed (``status`` writing, or no document yet) is skipped with a note. The consolidated
metadata of the root and rank groups (plain xarray's index, never read by this package's readers) is patched last.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
import json
import math
import os
from typing import Any

import google_crc32c

from megadump_zarr.layout.inventory import (
    INVENTORY_DIGEST_ATTR,
    INVENTORY_FILE,
    InventoryEntry,
    InventoryError,
    chunk_digest,
    encode_inventory,
    inventory_digest,
    metadata_digest,
    parse_inventory,
)
from megadump_zarr.layout.schema import FORMAT_ATTR, FORMAT_VERSION, MIGRATABLE_VERSION
from megadump_zarr.read.catalog import check_root
from megadump_zarr.read.location import get_bytes, get_many, open_location, parse_json
from megadump_zarr.read.windows import window_dirs
from megadump_zarr.store.packs import decode_index, index_nbytes
from megadump_zarr.store.roots import open_backend

__all__ = [
    "CHUNK_DIGEST_ATTR",
    "DIGEST_ATTRS",
    "OUTCOMES",
    "SHARD_DIGEST_ATTR",
    "MigrationError",
    "MigrationReport",
    "WindowMigration",
    "format9_shard_digest",
    "migrate_dump",
    "stripped",
]

CHUNK_DIGEST_ATTR = "chunkCrc32c"
"""Format 9: an array document's crc32c of each of its chunks, 8 hex digits each, in grid order."""
SHARD_DIGEST_ATTR = "shardCrc32c"
"""Format 9: a pack record array's digest of each shard (:func:`format9_shard_digest`), 8 hex digits each, in grid order."""
DIGEST_ATTRS = (CHUNK_DIGEST_ATTR, SHARD_DIGEST_ATTR)
"""The attributes format 9 writes and format 10 does not."""
OUTCOMES = ("migrated", "current", "skipped")
"""What :func:`migrate_dump` did with a window: rewrote it, found it already current, left it (not committed)."""
_BATCH = 256  # chunks read concurrently


class MigrationError(ValueError):
    """A window that cannot be migrated (damaged, or of another format); the message names it and what is wrong."""


@dataclass(frozen=True)
class WindowMigration:
    """What :func:`migrate_dump` did with one window.

    Args:
        window: The window key (``rank_0/window_0000``).
        outcome: One of :data:`OUTCOMES`.
        documents: Documents rewritten (the inventory and the window document included).
        note: Why a skipped window was left as it is.
    """

    window: str
    outcome: str
    documents: int = 0
    note: str = ""

    def __post_init__(self) -> None:
        if self.outcome not in OUTCOMES:
            raise ValueError(f"WindowMigration.outcome {self.outcome!r} of {self.window} is not one of {OUTCOMES}")
        if type(self.documents) is not int or self.documents < 0:
            raise ValueError(f"WindowMigration.documents {self.documents!r} of {self.window} is not a count")


@dataclass(frozen=True)
class MigrationReport:
    """Every window of a migrated dump, in (rank, window) order.

    Args:
        root: The dump root as given.
        windows: One entry per window.
    """

    root: str
    windows: tuple[WindowMigration, ...] = field(default_factory=tuple)

    @property
    def migrated(self) -> int:
        """Windows rewritten by this run."""
        return sum(w.outcome == "migrated" for w in self.windows)

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready values."""
        return {
            "root": self.root,
            "format": FORMAT_VERSION,
            "migrated": self.migrated,
            "windows": [
                {"window": w.window, "outcome": w.outcome, "documents": w.documents, "note": w.note}
                for w in self.windows
            ],
        }


@dataclass
class _Plan:
    """A checked window's rewrite: documents in write order, the window document last."""

    window: str
    writes: list[tuple[str, bytes]]
    attrs: dict[str, Any]


def migrate_dump(url: str | os.PathLike[str], storage_options: dict[str, Any] | None = None) -> MigrationReport:
    """Rewrite a format-9 dump as format 10, in place (metadata only; see the module docstring).

    Args:
        url: The dump root: a local directory or a URL the store layer writes (``s3://...``).
        storage_options: fsspec options for a URL root.

    Returns:
        What was done with each window.

    Raises:
        MigrationError: A window that is damaged (its inventory, a document or a chunk is not what the inventory
            lists) or of a format other than 9 and 10; nothing is written then.
        ValueError: ``url`` is not a dump root.
    """
    text = os.fspath(url)
    store = open_location(text, storage_options).store
    check_root(store, text)
    done: list[WindowMigration | _Plan] = []
    current: dict[str, dict[str, Any]] = {}
    for _, _, key in window_dirs(store):
        found = _check_window(store, key)
        done.append(found)
        if isinstance(found, _Plan):
            current[key] = found.attrs
        elif found.outcome == "current":
            current[key] = _window_attrs(store, key)
    backend = open_backend(text, storage_options)
    windows = []
    for item in done:
        if isinstance(item, WindowMigration):
            windows.append(item)
            continue
        *documents, (window_key, window_doc) = item.writes
        for key, data in documents:
            backend.put(key, data, atomic=True)
        backend.barrier(item.window)  # everything before the window document is durable first
        backend.put_durable(window_key, window_doc)
        windows.append(WindowMigration(item.window, "migrated", len(item.writes)))
    _patch_index(store, backend, current)
    return MigrationReport(text, tuple(windows))


def _window_attrs(store: Any, key: str) -> dict[str, Any]:
    """A window document's attributes (``{}``: none)."""
    raw = get_bytes(store, f"{key}/zarr.json")
    attrs = None if raw is None else parse_json(raw, f"{key}/zarr.json").get("attributes")
    return attrs if isinstance(attrs, dict) else {}


def _refuse(window: str, what: str) -> MigrationError:
    return MigrationError(f"{window}: {what}; not migrated, nothing was written (only a whole window is migrated)")


def stripped(node: Any) -> Any:
    """A document (an array's, or a group's with its consolidated copies) without the format-9 digest attributes.

    Args:
        node: The parsed document.
    """
    if not isinstance(node, dict):
        return node
    if node.get("node_type") == "array":
        attrs = node.get("attributes")
        if not isinstance(attrs, dict) or not any(name in attrs for name in DIGEST_ATTRS):
            return node
        return {**node, "attributes": {k: v for k, v in attrs.items() if k not in DIGEST_ATTRS}}
    consolidated = node.get("consolidated_metadata")
    if not isinstance(consolidated, dict) or not isinstance(consolidated.get("metadata"), dict):
        return node
    metadata = {path: stripped(child) for path, child in consolidated["metadata"].items()}
    return {**node, "consolidated_metadata": {**consolidated, "metadata": metadata}}


def _encoded(doc: Mapping[str, Any]) -> bytes:
    """A document as the writer stores it: compact JSON (its :func:`metadata_digest` is that of these bytes)."""
    return json.dumps(doc, separators=(",", ":"), allow_nan=True).encode()


def _check_window(store: Any, key: str) -> WindowMigration | _Plan:
    """A window's outcome when nothing is to be done, else its checked rewrite."""
    where = f"{key}/zarr.json"
    raw = get_bytes(store, where)
    if raw is None:
        return WindowMigration(key, "skipped", note="no window document yet (being written): left as it is")
    doc = parse_json(raw, where)
    attrs = doc.get("attributes")
    if not isinstance(attrs, dict):
        raise _refuse(key, f"{where} has no attributes object")
    version = attrs.get(FORMAT_ATTR)
    if version == FORMAT_VERSION:
        return WindowMigration(key, "current")
    if attrs.get("status") not in ("complete", "aborted"):
        note = (
            f"not committed (status {str(attrs.get('status'))[:20]!r}): left as it is; this version reads format "
            f"{FORMAT_VERSION} only, so remove the window (or re-dump) to open the dump"
        )
        return WindowMigration(key, "skipped", note=note)
    if version != MIGRATABLE_VERSION:
        raise MigrationError(
            f"{key}: format {str(version)[:20]}: megadump migrate converts format {MIGRATABLE_VERSION} to "
            f"{FORMAT_VERSION} only (re-dump it)"
        )
    consolidated = doc.get("consolidated_metadata")
    nodes = consolidated.get("metadata") if isinstance(consolidated, dict) else None
    if not isinstance(nodes, dict) or not all(isinstance(node, dict) for node in nodes.values()):
        raise _refuse(key, f"{where} holds no consolidated metadata of its nodes")
    entries, inventory_raw = _checked_inventory(store, key, attrs, nodes)
    owns = _own_documents(store, key, nodes)
    arrays = {path: node for path, node in nodes.items() if node.get("node_type") == "array"}
    for path, node in arrays.items():
        _check_chunks(store, key, path, node, entries[path])
    writes = []
    for path in sorted(nodes):
        own = owns[path]
        if own is not None and stripped(own) != own:
            writes.append((f"{key}/{path}/zarr.json", _encoded(stripped(own))))
    inventory = encode_inventory(
        {path: (metadata_digest(stripped(node)), list(entries[path].chunks)) for path, node in arrays.items()}
    )
    if inventory != inventory_raw:
        writes.append((f"{key}/{INVENTORY_FILE}", inventory))
    new = stripped(doc)
    new["attributes"] = {**attrs, FORMAT_ATTR: FORMAT_VERSION, INVENTORY_DIGEST_ATTR: inventory_digest(inventory)}
    writes.append((where, _encoded(new)))
    return _Plan(key, writes, new["attributes"])


def _checked_inventory(
    store: Any, key: str, attrs: Mapping[str, Any], nodes: Mapping[str, dict[str, Any]]
) -> tuple[dict[str, InventoryEntry], bytes]:
    """The window's inventory entries as its writer recorded them, and the stored inventory's bytes.

    The stored inventory is the one the window document records, or (a re-run after a kill) this migration's
    rewrite of it: the same entries with the stripped documents' digests.
    """
    inventory_key = f"{key}/{INVENTORY_FILE}"
    raw = get_bytes(store, inventory_key)
    if raw is None:
        raise _refuse(key, f"the window inventory {inventory_key} is missing")
    try:
        entries = dict(parse_inventory(raw, inventory_key).arrays)
    except InventoryError as error:
        raise _refuse(key, str(error)) from None
    arrays = {path: node for path, node in nodes.items() if node.get("node_type") == "array"}
    if set(entries) != set(arrays):
        path = sorted(set(entries) ^ set(arrays))[0]
        what = "lists an array the window does not hold" if path in entries else "does not list the window's array"
        raise _refuse(key, f"the window inventory {what} {path}")
    recorded = attrs.get(INVENTORY_DIGEST_ATTR)
    if inventory_digest(raw) != recorded:
        entries = {path: InventoryEntry(metadata_digest(arrays[path]), e.chunks) for path, e in entries.items()}
        again = encode_inventory({path: (e.metadata, list(e.chunks)) for path, e in entries.items()})
        if inventory_digest(again) != recorded:
            raise _refuse(key, f"the window inventory {inventory_key} is not the one the window document records")
    for path, entry in sorted(entries.items()):
        if metadata_digest(arrays[path]) != entry.metadata:
            raise _refuse(key, f"the document of {key}/{path} is not the one the window inventory lists")
    return entries, raw


def _own_documents(store: Any, key: str, nodes: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any] | None]:
    """Each node's own document (``None``: absent); an array's must be the window's copy (or its stripped form)."""
    paths = sorted(nodes)
    owns: dict[str, dict[str, Any] | None] = {}
    for path, raw in zip(paths, get_many(store, [f"{key}/{path}/zarr.json" for path in paths])):
        where = f"{key}/{path}/zarr.json"
        owns[path] = None if raw is None else parse_json(raw, where)
        node = nodes[path]
        if node.get("node_type") == "array" and owns[path] not in (node, stripped(node)):
            raise _refuse(key, f"{where} is not the window's copy of the array's document")
    return owns


def _grid(node: Mapping[str, Any], where: str, window: str) -> tuple[list[int], list[int], str]:
    """An array's shape, chunk shape and chunk key separator."""
    shape = node.get("shape")
    grid = node.get("chunk_grid") if isinstance(node.get("chunk_grid"), dict) else {}
    chunks = (grid.get("configuration") or {}).get("chunk_shape") if isinstance(grid, dict) else None
    encoding = node.get("chunk_key_encoding") if isinstance(node.get("chunk_key_encoding"), dict) else {}
    separator = (encoding.get("configuration") or {}).get("separator", "/") if isinstance(encoding, dict) else "/"
    if (
        not isinstance(shape, list)
        or not isinstance(chunks, list)
        or len(shape) != len(chunks)
        or not all(type(n) is int and n >= 0 for n in shape)
        or not all(type(n) is int and n > 0 for n in chunks)
        or encoding.get("name") != "default"
        or separator not in (".", "/")
    ):
        raise _refuse(window, f"{where}: not a regular chunk grid with default chunk keys")
    return shape, chunks, separator


def _chunk_keys(array: str, shape: list[int], chunks: list[int], separator: str) -> list[str]:
    """Every chunk key of a regular grid, in C order."""
    counts = [-(-s // c) for s, c in zip(shape, chunks)]
    keys = []
    for index in range(math.prod(counts)):
        coords = []
        for count in reversed(counts):
            index, coord = divmod(index, count)
            coords.append(coord)
        keys.append(f"{array}/c" + "".join(separator + str(c) for c in reversed(coords)))
    return keys


def _recorded(node: Mapping[str, Any], name: str, count: int, where: str, window: str) -> list[int] | None:
    """The digests a format-9 attribute records, one per chunk (``None``: the document records none)."""
    text = (node.get("attributes") or {}).get(name)
    if text is None:
        return None
    if not isinstance(text, str) or len(text) != 8 * count:
        raise _refuse(window, f"{where}: attributes.{name} is not {count} digest(s) of 8 hex digits")
    try:
        return [int(text[i : i + 8], 16) for i in range(0, len(text), 8)]
    except ValueError:
        raise _refuse(window, f"{where}: attributes.{name} is not hexadecimal") from None


def _check_chunks(store: Any, window: str, path: str, node: Mapping[str, Any], entry: InventoryEntry) -> None:
    """Every chunk of an array is the one the inventory lists, and so are the digests its document records."""
    array, where = f"{window}/{path}", f"{window}/{path}/zarr.json"
    shape, chunk_shape, separator = _grid(node, where, window)
    keys = _chunk_keys(array, shape, chunk_shape, separator)
    if len(keys) != len(entry.chunks):
        raise _refuse(window, f"{where} gives {len(keys)} chunk(s), the window inventory lists {len(entry.chunks)}")
    crcs = _recorded(node, CHUNK_DIGEST_ATTR, len(keys), where, window)
    shards = _recorded(node, SHARD_DIGEST_ATTR, len(keys), where, window)
    inner = _inner_count(node, chunk_shape) if shards is not None else 0
    for start in range(0, len(keys), _BATCH):
        batch = keys[start : start + _BATCH]
        for index, (key, raw) in enumerate(zip(batch, get_many(store, batch)), start):
            listed = entry.chunks[index]
            if raw is None or listed is None:
                if raw is not listed:
                    what = "is missing" if raw is None else "was not written by the window's writer"
                    raise _refuse(window, f"chunk {key} {what} (the window inventory says otherwise)")
                continue
            digest, _ = chunk_digest(raw)
            if digest != listed:
                raise _refuse(window, f"chunk {key} is not the chunk the window inventory lists for this place")
            if crcs is not None and crcs[index] != digest:
                raise _refuse(window, f"{where}: attributes.{CHUNK_DIGEST_ATTR} does not match chunk {key}")
            if shards is not None and shards[index] != format9_shard_digest(raw, inner, key):
                raise _refuse(window, f"{where}: attributes.{SHARD_DIGEST_ATTR} does not match shard {key}")


def _inner_count(node: Mapping[str, Any], shard_shape: list[int]) -> int:
    """Inner chunks per shard of a sharded array (its ``sharding_indexed`` codec's chunk shape)."""
    codecs = node.get("codecs")
    config = codecs[0].get("configuration") if isinstance(codecs, list) and codecs else None
    inner = config.get("chunk_shape") if isinstance(config, dict) else None
    if (
        not isinstance(inner, list)
        or len(inner) != len(shard_shape)
        or not all(type(n) is int and n > 0 for n in inner)
    ):
        return 0
    return math.prod(s // i for s, i in zip(shard_shape, inner))


def format9_shard_digest(raw: bytes, count: int, key: str) -> int:
    """Format 9's digest of a shard: the crc32c of its inner chunks' trailing crc32c (in index order) followed by
    its index without the index's own crc32c (``-1``: not a shard of ``count`` inner chunks)."""
    size = index_nbytes(count)
    if count <= 0 or len(raw) < size:
        return -1
    index = raw[len(raw) - size :]
    try:
        entries = decode_index(index, count, key)
    except ValueError:
        return -1
    crcs = b"".join(raw[offset + nbytes - 4 : offset + nbytes] for offset, nbytes in filter(None, entries))
    return google_crc32c.value(crcs + index[:-4])


def _patch_index(store: Any, backend: Any, current: Mapping[str, dict[str, Any]]) -> None:
    """The root's and the ranks' consolidated metadata (plain xarray's index) without the format-9 attributes, each
    format-10 window's attributes as its document now holds them."""
    ranks = sorted({key.split("/")[0] for key in current})
    for prefix in ["", *ranks]:
        where = f"{prefix}/zarr.json" if prefix else "zarr.json"
        raw = get_bytes(store, where)
        doc = None if raw is None else json.loads(raw)
        nodes = (doc.get("consolidated_metadata") or {}).get("metadata") if isinstance(doc, dict) else None
        if not isinstance(nodes, dict):
            continue
        new = stripped(json.loads(raw))  # (a copy: its window nodes are edited below)
        for path, node in new["consolidated_metadata"]["metadata"].items():
            window = f"{prefix}/{path}" if prefix else path
            if window in current and isinstance(node, dict) and node.get("attributes") != current[window]:
                node["attributes"] = current[window]
        if new != doc:
            backend.put(where, _encoded(new), atomic=True)
