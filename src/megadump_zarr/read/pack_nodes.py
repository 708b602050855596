"""A packed window's task groups, record arrays and row coordinates, from its documents and its packs' arrays
along ``task`` (never its records' data).

A task-record pack (:mod:`megadump_zarr.store.packs`) stands for the task groups, record arrays and row
coordinates its rows are. :func:`replace_packs` turns a window's nodes (its consolidated metadata, or a torn
window's listed documents) into those nodes, with the source of every virtual chunk (an inner chunk of a shard,
or a row range), from each pack's per-task arrays (:mod:`megadump_zarr.read.pack_columns`, read in one batch),
and checks each row coordinate against its records (:func:`check_rows`). The catalogue describes a packed
window's records with the result, and :mod:`megadump_zarr.read.pack_rows` reads each where it is stored.
"""

from __future__ import annotations

from collections.abc import Callable
import math
import re
from typing import Any

from megadump_zarr.layout.packs import PACK_PREFIX, TASK_ARRAY
from megadump_zarr.layout.schema import PACK_STORAGE, STORAGE_ATTR
from megadump_zarr.read.documents import itemsize
from megadump_zarr.read.errors import DumpIntegrityError
from megadump_zarr.read.pack_columns import ColumnChunkError, PackRows, column_keys, decode_pack
from megadump_zarr.store.metadata import consolidated_sort_key
from megadump_zarr.store.packs import RangeSource, ShardSource, expand_pack

__all__ = [
    "Fetch",
    "PACK",
    "PACK_PATH",
    "PACK_TASK",
    "check_rows",
    "expand_packs",
    "flat_group",
    "is_packed",
    "replace_packs",
    "stored_pack_nodes",
    "window_column_keys",
]

PACK = re.compile(rf"^[^/]+/stages/[^/]+/{re.escape(PACK_PREFIX)}\d+")
"""A path (relative to a window) at or below a pack."""
PACK_PATH = re.compile(rf"^([^/]+/stages/[^/]+/{re.escape(PACK_PREFIX)}\d+)(?:/|$)")
"""The pack a path (relative to a window) is at or below (group 1)."""
PACK_TASK = re.compile(rf"^([^/]+/stages/[^/]+/{re.escape(PACK_PREFIX)}\d+)/{re.escape(TASK_ARRAY)}$")
"""A pack's task id array (group 1: the pack)."""
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


def check_rows(label: str, pack: str, nodes: dict[str, dict[str, Any]], rows: PackRows) -> None:
    """Each row coordinate ``[start, stop)`` of a pack's rows against the records along that dimension: their
    length (every record, truncated ones too: the bound that keeps a hostile ``[0, 10**12]`` from any reader),
    and the first row the writer derives from a whole-row slice's ``sourceOffsetBytes`` (``dump.window``'s rule;
    a swapped row fails it too). No data is read.

    Args:
        label: The pack as messages name it (window key included).
        pack: The pack's path relative to the window.
        nodes: The window's nodes (the pack's record array documents).
        rows: The pack's decoded rows.

    Raises:
        ValueError: Naming the array, the row and the field.
    """
    from megadump_zarr.layout.packs import offset_array, row_bound_arrays

    records = [(name, nodes[f"{pack}/{name}"], attrs) for name, attrs in rows.records.items()]
    for row, entry in enumerate(rows.tasks):
        for dim, (start, stop) in entry["coords"].items():
            where = f"{label}/{row_bound_arrays(dim)[0]}"
            if not any(
                len(doc.get("dimension_names") or []) > 1 and doc["dimension_names"][1] == dim for _, doc, _ in records
            ):
                raise ValueError(  # a coordinate of no record: its length is bounded by nothing stored
                    f"{where}: the row coordinate {dim!r} is the first dimension of none of the pack's records"
                )
            for name, doc, attrs in records:
                dims = doc.get("dimension_names") or []
                if dim in dims[2:]:
                    raise ValueError(
                        f"{where}: the row coordinate {dim!r} names a dimension of the record {name} that is not "
                        "its first: only row coordinates are stored"
                    )
                if len(dims) < 2 or dims[1] != dim:
                    continue
                if stop - start != doc["shape"][1]:
                    raise ValueError(
                        f"{where}: row {row} holds {dim} [{start}, {stop}), {stop - start} rows; its record {name} "
                        f"holds {doc['shape'][1]}"
                    )
                record = attrs[row]
                if record.get("truncated"):
                    continue
                first = first_row(record, doc["shape"][1:], itemsize(doc.get("data_type")))
                if first is not None and first != start:
                    raise ValueError(
                        f"{where}: row {row} holds {dim} [{start}, {stop}) but its record {name} starts at row "
                        f"{first} ({offset_array(name)})"
                    )


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


Fetch = Callable[[list[str]], list["bytes | None"]]
"""Reads keys (relative to the root) concurrently, ``None`` for an absent one: a pack's arrays along ``task`` are
the data a pack's expansion reads."""


def _column_keys(window: str, packs: dict[str, dict[str, dict[str, Any]]]) -> dict[tuple[str, str], str]:
    """``(pack, component) -> chunk key`` (relative to the root) of every pack array that is not a record."""
    root = f"{window}/" if window else ""
    return {(pack, name): root + key for pack in sorted(packs) for name, key in column_keys(pack, packs[pack]).items()}


def window_column_keys(window: str, doc: Any) -> list[str]:
    """The chunk keys (relative to the root) of the per-task arrays of a committed window document's packs
    (``[]`` when it holds no consolidated metadata: the catalogue names that).

    Args:
        window: The window key.
        doc: The window document, parsed (the catalogue parses it once, for this and for ``window_info``).
    """
    try:
        nodes = doc["consolidated_metadata"]["metadata"]
        packs: dict[str, dict[str, dict[str, Any]]] = {}
        for path in nodes:
            match = PACK_PATH.match(path) if PACK.match(path) else None
            if match is not None:
                packs.setdefault(match.group(1), {})[path] = nodes[path]
        return list(_column_keys(window, packs).values())
    except (TypeError, KeyError, AttributeError):
        return []


def _decoded(window: str, pack: str, docs: dict[str, dict[str, Any]], chunks: dict[str, bytes | None]) -> PackRows:
    """A pack's rows decoded from its arrays along ``task``.

    Raises:
        DumpIntegrityError: A malformed pack, or an array's chunk absent, damaged or another array's (the key
            names its document or chunk).
    """
    label = f"{window}/{pack}" if window else pack
    try:
        rows, _ = decode_pack(pack, docs, chunks, label)
        check_rows(label, pack, docs, rows)
        return rows
    except ColumnChunkError as error:
        raise DumpIntegrityError(f"malformed task-record pack: {error}", key=str(error).partition(":")[0]) from None
    except ValueError as error:
        raise DumpIntegrityError(f"malformed task-record pack: {error}", key=str(error).partition(":")[0]) from None


def expand_packs(
    window: str, packs: dict[str, dict[str, dict[str, Any]]], strict: bool, fetch: Fetch
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
    """
    virtual: dict[str, dict[str, Any]] = {}
    sources: dict[str, ShardSource | RangeSource] = {}
    keys = _column_keys(window, packs)
    fetched = dict(zip(keys, fetch(list(keys.values())))) if keys else {}
    for pack in sorted(packs):
        chunks = {name: raw for (owner, name), raw in fetched.items() if owner == pack}
        try:
            rows = _decoded(window, pack, packs[pack], chunks)
            nodes, chunks_of = expand_pack(pack, packs[pack], rows.tasks, rows.records, window)
        except DumpIntegrityError:
            if not strict:
                continue  # a torn window's pack cut short: not part of the window yet
            raise
        except ValueError as error:
            if not strict:
                continue
            key = f"{window}/{pack}/{TASK_ARRAY}" if window else f"{pack}/{TASK_ARRAY}"
            raise DumpIntegrityError(f"malformed task-record pack: {error}", key=key) from None
        clash = next((path for path in nodes if path in virtual), None)
        if clash is not None:
            if not strict:
                continue
            raise DumpIntegrityError(
                f"{window}/{pack}: task group {clash} is also in another pack", key=f"{window}/{clash}"
            )
        virtual.update(nodes)
        sources.update(chunks_of)
    return virtual, sources


def replace_packs(
    nodes: dict[str, Any], window: str, strict: bool, fetch: Fetch
) -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[str, ShardSource | RangeSource]] | None:
    """``nodes`` (relative to a window) with every node at or below a pack replaced by the task groups,
    record arrays and row coordinates their rows stand for (task groups as flat consolidated entries); ``None`` when it holds no pack.

    Returns:
        ``(nodes in zarr's order, virtual nodes, chunk sources)``.
    """
    packs: dict[str, dict[str, dict[str, Any]]] = {}
    for path, node in nodes.items():
        match = PACK_TASK.match(path)
        if match and isinstance(node, dict) and node.get("node_type") == "array":
            packs[match.group(1)] = {}
    if not packs:
        return None
    kept: dict[str, Any] = {}
    for path, node in nodes.items():
        match = PACK_PATH.match(path) if PACK.match(path) else None
        if match is None:
            kept[path] = node
        elif match.group(1) in packs and isinstance(node, dict):
            packs[match.group(1)][path] = node
    virtual, sources = expand_packs(window, packs, strict, fetch)
    clash = next((path for path in virtual if path in kept), None)
    if clash is not None:
        where = f"{window}/{clash}" if window else clash
        raise DumpIntegrityError(f"{where} is both stored and in a task-record pack", key=where)
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
