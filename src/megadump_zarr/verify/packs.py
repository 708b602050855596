"""A packed window's packs as stored: their arrays along ``task`` read once and checked with the readers' rule,
every packed record found at its (pack array, row), every record shard read once, whole.

- :func:`load_packs`: the packs' arrays along ``task`` read in one batch and checked by
  :func:`~megadump_zarr.read.pack_checks.pack_tables` (ids against rows, row bounds against records, task counts,
  group names), each chunk's inventory digest kept (``state.digested``: the chunk check reads none again);
- :func:`packed_records`: each packed record as the readers open it
  (:class:`~megadump_zarr.read.pack_record.PackedRecord`, from :class:`~megadump_zarr.read.pack_record.PackedTasks`),
  by its path ``{stage}/{task group}/{record}``;
- :func:`read_shards`: each record shard read once, whole: its inventory digest taken from those bytes, and each
  row's inner chunk split from them with the readers' own index checks and messages
  (:func:`~megadump_zarr.read.pack_rows.split_shard`), kept for the chunk check (``state.read_chunks``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from megadump_zarr.layout.inventory import INVENTORY_FILE, chunk_digest
from megadump_zarr.read.pack_checks import PackTable
from megadump_zarr.read.pack_record import PackedRecord
from megadump_zarr.verify.chunks import ChunkRead
from megadump_zarr.verify.report import CheckState

__all__ = ["load_packs", "packed_records", "read_shards"]

_SHARDS = 16  # pack shards (up to PACK_SHARD_BYTES each, uncompressed) fetched at once


def load_packs(
    state: CheckState, store: Any, window: str, nodes: dict[str, Any], kept: dict[str, Any]
) -> tuple[list[PackTable], dict[str, Any]] | None:
    """A packed window's packs read and checked, and its nodes that are not at or below a pack; ``None``: it holds
    no pack.

    Args:
        state: The window's check state (``state.digested`` gets each chunk read).
        store: The dump's store.
        window: The window key.
        nodes: Its consolidated nodes as stored (path relative to the window -> document).
        kept: Gets the window inventory's bytes, read in the packs' batch (key -> bytes), so it is read once.

    Raises:
        DumpIntegrityError: A malformed pack (naming its document or chunk), a task group in two packs, or one
            both stored and packed.
    """
    from megadump_zarr.read.integrity import below_checks
    from megadump_zarr.read.location import get_many
    from megadump_zarr.read.pack_checks import pack_tables, rest_nodes, window_packs

    packs, rest = window_packs(nodes)
    if not packs:
        return None
    inner = below_checks(store)
    tables = pack_tables(window, packs, _digesting(lambda keys: get_many(inner, keys), state, kept), stored=rest)
    return tables, rest_nodes(nodes)


def _digesting(
    fetch: Callable[[list[str]], list[Any]], state: CheckState, kept: dict[str, Any]
) -> Callable[[list[str]], list[Any]]:
    """``fetch`` that also keeps each chunk's inventory digest (``state.digested``) and the window inventory's bytes
    (``kept``): what the pack checks read (a pack's arrays along ``task``, the inventory) is not read again by
    :func:`~megadump_zarr.verify.chunks.check_chunks` or the inventory check."""

    def fetched(keys: list[str]) -> list[Any]:
        values = fetch(keys)
        for key, value in zip(keys, values):
            if key.rpartition("/")[2] == INVENTORY_FILE:
                kept[key] = value
            elif value is not None:
                state.digested[key] = chunk_digest(value)[0]
        return values

    return fetched


def packed_records(tables: list[PackTable]) -> dict[str, PackedRecord]:
    """Each packed record of some checked packs as the readers open it, by its path relative to the window.

    Args:
        tables: The window's packs (:func:`load_packs`).
    """
    from megadump_zarr.read.pack_record import PackedTasks

    tasks = PackedTasks(tables)
    found: dict[str, PackedRecord] = {}
    for table in tables:
        stage = table.pack.rpartition("/")[0]
        for component in table.records:
            for group in table.groups:
                record = tasks.find(f"{stage}/{group}/{component}")
                if isinstance(record, PackedRecord):
                    found[record.path] = record
    return found


def read_shards(state: CheckState, store: Any, window: str, records: Mapping[str, PackedRecord]) -> None:
    """Read each record shard of each pack once, whole: its window-inventory digest is taken from those bytes
    (``state.digested``, compared by :func:`~megadump_zarr.verify.chunks.check_chunks`), and so are the record
    chunks it holds (:func:`~megadump_zarr.read.pack_rows.split_shard`: the readers' own index checks and
    messages), kept for the chunk check as what it needs of each (``state.read_chunks``,
    :class:`~megadump_zarr.verify.chunks.ChunkRead`).

    Args:
        state: The window's check state.
        store: The dump's store.
        window: The window key.
        records: Its packed records (:func:`packed_records`).
    """
    from megadump_zarr.read.location import get_many
    from megadump_zarr.read.pack_rows import sized_store, split_shard

    held: dict[str, list[tuple[str, Any]]] = {}  # shard -> (record chunk key, source) of each inner chunk it holds
    for rel, record in records.items():
        source = record.source()
        held.setdefault(f"{window}/{source.shard}", []).append((f"{window}/{record.chunk}", source))
    shards, sized = sorted(held), sized_store(store) is not None
    for start in range(0, len(shards), _SHARDS):
        batch = shards[start : start + _SHARDS]
        for shard, raw in zip(batch, get_many(store, batch)):
            if raw is not None:
                state.digested[shard] = chunk_digest(raw)[0]
            for key, chunk in split_shard(held[shard], shard, raw, sized):
                summary = ChunkRead.of(key, chunk) if isinstance(chunk, bytes) else chunk
                state.read_chunks[key] = summary
                if not isinstance(summary, ChunkRead) or summary.error is not None:
                    state.damaged.add(shard)  # named by its rows, as the readers name it: not also as moved
