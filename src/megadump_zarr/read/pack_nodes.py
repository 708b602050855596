"""A packed window's task groups, record arrays and row coordinates, from its documents and its packs' arrays
along ``task`` (never its records' data).

A task-record pack (:mod:`megadump_zarr.store.packs`) stands for the task groups, record arrays and row
coordinates its rows are. :func:`replace_packs` turns a window's nodes (its consolidated metadata, or a torn
window's listed documents) into those nodes, with the source of every virtual chunk (an inner chunk of a shard,
or a row range), from each pack's per-task arrays, read and checked in one batch (`read.pack_checks`). Readers
that open a packed record by its task-group path use the result, and :mod:`megadump_zarr.read.pack_rows` reads
each where it is stored.
"""

from __future__ import annotations

import math
from typing import Any

from megadump_zarr.layout.schema import PACK_STORAGE, STORAGE_ATTR
from megadump_zarr.read.pack_columns import pack_rows
from megadump_zarr.read.pack_checks import (
    PACK,
    PACK_PATH,
    PACK_TASK,
    Fetch,
    PackTable,
    batch_keys,
    pack_tables,
    window_packs,
)
from megadump_zarr.store.metadata import consolidated_sort_key
from megadump_zarr.store.packs import RangeSource, ShardSource, expand_pack

__all__ = [
    "Fetch",
    "PACK",
    "PACK_PATH",
    "PACK_TASK",
    "expand_packs",
    "first_row",
    "flat_group",
    "is_packed",
    "replace_packs",
    "stored_pack_nodes",
    "window_column_keys",
]

_EMPTY_CONSOLIDATED = {"kind": "inline", "must_understand": False, "metadata": {}}


def is_packed(doc: Any) -> bool:
    """Whether a parsed window document's manifest names the packs layout (what readers dispatch on).

    Args:
        doc: The window document, parsed (``None``: it did not parse).
    """
    attrs = doc.get("attributes") if isinstance(doc, dict) else None
    return isinstance(attrs, dict) and attrs.get(STORAGE_ATTR) == PACK_STORAGE


def flat_group(node: dict[str, Any]) -> dict[str, Any]:
    """A task group's entry in its window's consolidated metadata (``store.metadata.flat_group_bytes``)."""
    return {
        "attributes": node.get("attributes", {}),
        "zarr_format": 3,
        "consolidated_metadata": dict(_EMPTY_CONSOLIDATED, metadata={}),
        "node_type": "group",
    }


def first_row(attrs: dict[str, Any], shape: list[int], size: int) -> int | None:
    """The first global row of a whole-row slice of its declared tensor (``None``: not one).

    Args:
        attrs: The record's attributes (``actualShape``, ``declaredShape``, ``sourceOffsetBytes``).
        shape: Its stored shape.
        size: Bytes per element of its stored ``data_type``.
    """
    actual, declared, offset = attrs.get("actualShape"), attrs.get("declaredShape"), attrs.get("sourceOffsetBytes")
    if (
        not isinstance(actual, list)
        or not isinstance(declared, list)
        or not actual
        or len(actual) != len(declared)
        or list(actual[1:]) != list(declared[1:])
        or list(actual) != list(shape)
        or type(offset) is not int
    ):
        return None
    row_bytes = math.prod(int(d) for d in actual[1:]) * size
    if row_bytes <= 0 or offset % row_bytes:
        return None
    return offset // row_bytes


def window_column_keys(window: str, doc: Any) -> list[str]:
    """The keys (relative to the root) a committed window document's packs are read from: the chunks of their
    per-task arrays and the window's inventory (``[]`` when it holds no pack or no consolidated metadata: the
    catalogue names that).

    Args:
        window: The window key.
        doc: The window document, parsed (the catalogue parses it once, for this and for ``window_info``).
    """
    try:
        packs, _ = window_packs(doc["consolidated_metadata"]["metadata"])
    except (TypeError, KeyError, AttributeError):
        return []
    return batch_keys(window, packs) if packs else []


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
