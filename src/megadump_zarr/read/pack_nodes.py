"""A packed window described as per-task nodes: task groups, record arrays and row coordinates, from its checked
packs' arrays along ``task`` (what ``verify`` still checks a packed window by; readers find each packed record
from its pack instead, :mod:`megadump_zarr.read.pack_record`).

:func:`replace_packs` turns a window's consolidated nodes into those nodes, with the source of every virtual chunk
(an inner chunk of a shard, or a row range) (:func:`~megadump_zarr.read.pack_rows.expand_window`).
:func:`first_row` is :func:`megadump_zarr.read.pack_checks.first_row`, named here for ``verify``.
"""

from __future__ import annotations

from typing import Any

from megadump_zarr.read.pack_columns import pack_rows
from megadump_zarr.read.pack_checks import PACK, PACK_PATH, Fetch, PackTable, first_row, pack_tables, window_packs
from megadump_zarr.store.metadata import consolidated_sort_key
from megadump_zarr.store.packs import RangeSource, ShardSource, expand_pack

__all__ = [
    "expand_packs",
    "first_row",
    "flat_group",
    "replace_packs",
    "stored_pack_nodes",
]

_EMPTY_CONSOLIDATED = {"kind": "inline", "must_understand": False, "metadata": {}}


def flat_group(node: dict[str, Any]) -> dict[str, Any]:
    """A task group's entry in its window's consolidated metadata (``store.metadata.flat_group_bytes``)."""
    return {
        "attributes": node.get("attributes", {}),
        "zarr_format": 3,
        "consolidated_metadata": dict(_EMPTY_CONSOLIDATED, metadata={}),
        "node_type": "group",
    }


def expand_packs(
    window: str,
    packs: dict[str, dict[str, dict[str, Any]]],
    strict: bool,
    fetch: Fetch,
    tables: list[PackTable] | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, ShardSource | RangeSource]]:
    """The task groups, record arrays and row coordinates and the chunk sources of some packs (pack path -> its
    nodes).

    Returns:
        ``(virtual nodes, chunk sources)``.

    Args:
        window: The window key.
        packs: Each pack's nodes (paths relative to the window), the pack group's own document among them.
        strict: A malformed pack raises (a committed window); else it is left out (a torn window's pack cut short).
        fetch: Reads the packs' arrays along ``task`` (one batch).
        tables: The packs already read and checked (:func:`~megadump_zarr.read.pack_checks.pack_tables`).
    """
    virtual: dict[str, dict[str, Any]] = {}
    sources: dict[str, ShardSource | RangeSource] = {}
    for table in pack_tables(window, packs, fetch, strict) if tables is None else tables:
        rows = pack_rows(table.count, table.shared, table.columns, table.records)
        nodes, chunks_of = expand_pack(table.pack, packs[table.pack], rows.tasks, rows.records)
        virtual.update(nodes)
        sources.update(chunks_of)
    return virtual, sources


def replace_packs(
    nodes: dict[str, Any], window: str, strict: bool, fetch: Fetch, tables: list[PackTable] | None = None
) -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[str, ShardSource | RangeSource]] | None:
    """``nodes`` (relative to a window) with every node at or below a pack replaced by the task groups,
    record arrays and row coordinates their rows stand for (task groups as flat consolidated entries); ``None`` when it holds no pack.

    Returns:
        ``(nodes in zarr's order, virtual nodes, chunk sources)``.

    Raises:
        DumpIntegrityError: A malformed pack, a task group in two packs, or both stored and packed.
    """
    packs, kept = window_packs(nodes)
    if not packs:
        return None
    if tables is None:
        tables = pack_tables(window, packs, fetch, strict, stored=kept)
    virtual, sources = expand_packs(window, packs, strict, fetch, tables)
    for path, node in virtual.items():
        kept[path] = flat_group(node) if node.get("node_type") == "group" else node
    return {path: kept[path] for path in sorted(kept, key=consolidated_sort_key)}, virtual, sources


def stored_pack_nodes(nodes: dict[str, Any]) -> dict[str, Any]:
    """The nodes at or below a pack among a stored window document's consolidated nodes (what the expansion
    replaces; verify compares their own documents with them).

    Args:
        nodes: Consolidated nodes, paths relative to the window.
    """
    return {path: node for path, node in nodes.items() if PACK.match(path) and PACK_PATH.match(path)}
