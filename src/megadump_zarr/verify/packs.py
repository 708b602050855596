"""Checks of a window's task-record packs: the stored pack documents and each record shard.

The readers describe a packed window's records as task groups, record arrays and row coordinates built from
the window document and each pack's arrays along ``task`` (:mod:`megadump_zarr.read.pack_nodes`, which checks
those arrays' chunks and their ``chunkCrc32c``); these compare the packs' own documents (what plain zarr reads)
with the window document. Each record shard is read once, whole: its inventory digest and each record's chunk
(its row's inner chunk, for the chunk check: ``CheckState.read_chunks``) are taken from those same bytes.
"""

from __future__ import annotations

from typing import Any

from megadump_zarr.verify.chunks import ChunkRead
from megadump_zarr.verify.documents import group_consolidated_agrees, stored_agrees
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
    _check_shards(state, packs, base, window)


_BATCH = 16  # shards (up to PACK_SHARD_BYTES each, uncompressed) fetched at once


def _check_shards(state: CheckState, packs: Any, base: Any, window: str) -> None:
    """Read each record shard of each pack once, whole: its window-inventory digest is taken from those bytes
    (``state.digested``, compared by :func:`~megadump_zarr.verify.chunks.check_chunks`), and so are the
    record chunks it holds (:meth:`~megadump_zarr.read.pack_rows.PackedWindow.split_shard`: the readers' own
    index checks and messages), kept for the chunk check as what it needs of each (``state.read_chunks``,
    :class:`~megadump_zarr.verify.chunks.ChunkRead`). A row coordinate's chunk is computed
    (:func:`~megadump_zarr.store.packs.range_chunk`), as the readers compute it.
    """
    from megadump_zarr.layout.inventory import chunk_digest
    from megadump_zarr.read.location import get_many
    from megadump_zarr.read.pack_rows import sized_store
    from megadump_zarr.store.packs import RangeSource, range_chunk

    for rel, source in packs.sources.items():
        if isinstance(source, RangeSource):
            state.read_chunks[f"{window}/{rel}"] = ChunkRead.of(f"{window}/{rel}", range_chunk(source))
    held = packs.shard_chunks()  # shard -> the record chunks it holds
    shards, sized = sorted(held), sized_store(base) is not None
    for start in range(0, len(shards), _BATCH):
        batch = shards[start : start + _BATCH]
        for shard, raw in zip(batch, get_many(base, batch)):
            if raw is not None:
                state.digested[shard] = chunk_digest(raw)[0]
            for key, chunk in packs.split_shard(held[shard], shard, raw, sized):
                summary = ChunkRead.of(key, chunk) if isinstance(chunk, bytes) else chunk
                state.read_chunks[key] = summary
                if not isinstance(summary, ChunkRead) or summary.error is not None:
                    state.damaged.add(shard)  # named by its rows, as the readers name it: not also as moved
