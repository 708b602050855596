"""Checks of a window's task-record packs: the stored pack documents and each record shard.

The readers describe a packed window's records as task groups, record arrays and row coordinates built from
the window document and each pack's arrays along ``task`` (:mod:`megadump_zarr.read.pack_nodes`, which checks
those arrays' chunks and their ``chunkCrc32c``); these compare the packs' own documents (what plain zarr reads)
with the window document, and each record shard's bytes with the crc32c its array records for that place
(``shardCrc32c``, ``store.packs``). Each record shard is read once, whole: the chunk check takes each record's
chunk (its row's inner chunk) from those same bytes (``CheckState.read_chunks``).
"""

from __future__ import annotations

import math
import re
from typing import Any

from megadump_zarr.verify.chunks import ChunkRead, expected_chunks, open_array
from megadump_zarr.verify.documents import group_consolidated_agrees, stored_agrees
from megadump_zarr.verify.placement import check_shard, shard_digests
from megadump_zarr.verify.report import CheckState

__all__ = ["check_pack_documents"]


def check_pack_documents(state: CheckState, base: Any, window: str, stored: dict[str, Any], packs: Any) -> None:
    """The stored documents of a window's task-record packs (what plain zarr reads) equal the window document's
    entries the readers are built from; each shard, read once.

    Args:
        state: The window's check state.
        base: The dump's store.
        window: The window key.
        stored: The window document's consolidated nodes, as stored.
        packs: The window's :class:`~megadump_zarr.read.pack_rows.PackedWindow`.
    """
    from megadump_zarr.read.location import get_many
    from megadump_zarr.read.pack_nodes import stored_pack_nodes

    nodes = stored_pack_nodes(stored)
    paths = sorted(nodes)
    for path, raw in zip(paths, get_many(base, [f"{window}/{p}/zarr.json" for p in paths])):
        key = f"{window}/{path}/zarr.json"
        entry = nodes[path]
        own = stored_agrees(state, key, raw, entry, "pack")
        if own is not None and own.get("node_type") == "group":
            group_consolidated_agrees(state, key, path, own, nodes)
    _check_shards(state, packs, base, window, nodes)


_PACK_LEAF = re.compile(r"^pack_\d+$")
_BATCH = 16  # shards (up to PACK_SHARD_BYTES each, uncompressed) fetched at once


def _check_shards(state: CheckState, packs: Any, base: Any, window: str, nodes: dict[str, Any]) -> None:
    """Each record shard of each pack is the one its array recorded for that place (``shardCrc32c``): a shard
    with valid inner checksums copied from another window, or swapped with a same-shaped one, is named. The
    record arrays of a pack that records digests are then bound (``state.shard_bound``).

    Each shard is read once, whole: its digest is checked from those bytes, and the record chunks it holds are
    taken from them too (:meth:`~megadump_zarr.read.pack_rows.PackedWindow.split_shard`: the readers' own
    index checks and messages) and kept for the chunk check as what it needs of each (``state.read_chunks``,
    :class:`~megadump_zarr.verify.chunks.ChunkRead`), so it reads no shard again. A row coordinate's chunk is
    computed (:func:`~megadump_zarr.store.packs.range_chunk`), as the readers compute it.
    """
    from megadump_zarr.layout.inventory import chunk_digest
    from megadump_zarr.read.location import get_many
    from megadump_zarr.read.pack_rows import sized_store
    from megadump_zarr.read.pack_columns import is_record
    from megadump_zarr.store.packs import RangeSource, ShardSource, range_chunk

    held = packs.shard_chunks()  # shard -> the record chunks it holds
    rows: dict[str, list[str]] = {}  # stored pack record array -> the records it holds (relative to the window)
    for rel, source in packs.sources.items():
        if isinstance(source, ShardSource):
            rows.setdefault(source.shard.rpartition("/")[0], []).append(rel.rpartition("/")[0])
    sized = sized_store(base) is not None
    for rel, source in packs.sources.items():
        if isinstance(source, RangeSource):
            key = f"{window}/{rel}"
            state.read_chunks[key] = ChunkRead.of(key, range_chunk(source))
            state.shard_bound.add(key.rpartition("/")[0])  # computed from its row's bounds: no chunk to misplace

    def read(shards: list[str], recorded: list[int] | None = None, per_shard: int = 0) -> None:
        """Read each shard once: check its digest, keep what the chunk check needs of its chunks."""
        for start in range(0, len(shards), _BATCH):
            batch = shards[start : start + _BATCH]
            for i, (shard, raw) in enumerate(zip(batch, get_many(base, batch))):
                if raw is not None:  # its window-inventory digest, from the same bytes (``verify.inventory``)
                    state.digested[shard] = chunk_digest(raw)[0]
                if raw is not None and recorded is not None and state.inventory is None:  # else: the inventory binds it
                    check_shard(state, shard, raw, per_shard, recorded[start + i])
                if shard not in held:
                    continue
                for key, chunk in packs.split_shard(held.pop(shard), shard, raw, sized):
                    summary = ChunkRead.of(key, chunk) if isinstance(chunk, bytes) else chunk
                    state.read_chunks[key] = summary
                    if not isinstance(summary, ChunkRead) or summary.error is not None:
                        state.damaged.add(shard)  # named by its rows, as the readers name it: not also as moved

    for path, doc in sorted(nodes.items()):
        pack, _, name = path.rpartition("/")
        if not _PACK_LEAF.match(pack.rpartition("/")[2]) or not is_record(doc):
            continue
        expected = expected_chunks(doc) if doc.get("node_type") == "array" else None
        if expected is None:
            continue  # a group, or a grid the chunk check names
        key = f"{window}/{path}"
        digests = shard_digests(state, key, doc, len(expected))
        if digests is None:
            continue
        try:
            zarray = open_array(base, key, doc)
        except Exception:  # a malformed document is named by the document checks
            continue
        keys = [f"{key}/{zarray.metadata.encode_chunk_key(c)}" for c in expected]
        read(keys, digests, math.prod(zarray.shards) // math.prod(zarray.chunks))  # inner chunks per shard
        for record in rows.get(path, []):
            state.shard_bound.add(f"{window}/{record}")
    read(sorted(held))  # shards of packs that record no digest (written before shardCrc32c)
