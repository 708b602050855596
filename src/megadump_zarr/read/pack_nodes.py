"""A packed window's task groups, record arrays and row coordinates, from its documents alone (no data is read).

A task-record pack (:mod:`megadump_zarr.store.packs`) stands for the task groups, record arrays and row
coordinates schema 6 stored for its rows. :func:`replace_packs` turns a window's nodes (its consolidated
metadata, or a torn window's listed documents) into those schema-6 nodes, with the source of every virtual
chunk (an inner chunk of a shard, or a row range), and checks each row against what schema 6 kept in
directory names and checksummed coordinate chunks (:func:`check_rows`). The catalogue describes a packed
window's records with the result, and :mod:`megadump_zarr.read.pack_rows` reads each where it is stored.
"""

from __future__ import annotations

from collections.abc import Callable
import math
import re
from typing import Any

from megadump_zarr.layout.paths import TASK_DIR
from megadump_zarr.layout.schema import PACK_STORAGE, STORAGE_ATTR
from megadump_zarr.read.errors import DumpIntegrityError
from megadump_zarr.store.metadata import consolidated_sort_key
from megadump_zarr.store.pack_fields import (
    FIELDS_ARRAY,
    FieldsChunkError,
    fields_chunk_key,
    hydrate_pack,
    is_fields_pack,
)
from megadump_zarr.store.packs import (
    INDEX_ARRAYS,
    PACK_ATTR,
    PACK_PREFIX,
    PACK_VERSIONS,
    RECORDS_ATTR,
    TASK_ARRAY,
    TASK_ARRAYS,
    TASKS_ATTR,
    RangeSource,
    ShardSource,
    expand_pack,
    row_coordinate_names,
    task_array_name,
)

__all__ = [
    "Fetch",
    "is_packed",
    "PACK",
    "PACK_DOC",
    "PACK_PATH",
    "PACK_TASK",
    "check_rows",
    "expand_packs",
    "fields_keys",
    "window_fields_keys",
    "flat_group",
    "replace_packs",
    "stored_pack_nodes",
]

PACK = re.compile(rf"^[^/]+/stages/[^/]+/{re.escape(PACK_PREFIX)}\d+")
"""A path (relative to a window) at or below a pack."""
PACK_PATH = re.compile(rf"^([^/]+/stages/[^/]+/{re.escape(PACK_PREFIX)}\d+)(?:/|$)")
"""The pack a path (relative to a window) is at or below (group 1)."""
PACK_TASK = re.compile(
    rf"^([^/]+/stages/[^/]+/{re.escape(PACK_PREFIX)}\d+)/(?:{'|'.join(map(re.escape, TASK_ARRAYS))})$"
)
"""A pack's task id array (group 1: the pack)."""
PACK_DOC = re.compile(rf"^([^/]+/stages/[^/]+/{re.escape(PACK_PREFIX)}\d+)/[^/]+/zarr\.json$")
"""The document of an array of a pack (group 1: the pack)."""
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


def check_rows(window: str, pack: str, nodes: dict[str, dict[str, Any]]) -> None:
    """What schema 6 kept in directory names and checksummed coordinate chunks, checked in a pack's documents
    (no data read): each row's group name agrees with its ``taskId``/``workerId``, and each row coordinate
    ``[start, stop)`` with the records along that dimension — their length, and the rows the writer derives
    from a whole-row slice's ``sourceOffsetBytes`` (``dump.window``'s rule; a swapped row fails it too).

    Raises:
        ValueError: Naming the task document, the row and the field (``expand_pack`` has checked the shapes).
    """
    from megadump_zarr.read.catalog import itemsize

    prefix = f"{pack}/"
    task_name = task_array_name(nodes, pack) or TASK_ARRAY
    where = f"{window}/{pack}/{task_name}/zarr.json" if window else f"{pack}/{task_name}/zarr.json"
    tasks = nodes[prefix + task_name]["attributes"][TASKS_ATTR]
    skipped = {*INDEX_ARRAYS, *row_coordinate_names(pack, nodes, tasks)}
    records = [
        (path, doc)
        for path, doc in nodes.items()
        if path.startswith(prefix)
        and "/" not in path[len(prefix) :]
        and doc.get("node_type") == "array"
        and path[len(prefix) :] not in skipped
    ]
    for row, entry in enumerate(tasks):
        match = TASK_DIR.match(entry["group"])
        if match is None:
            raise ValueError(
                f"{where}: attributes.tasks[{row}].group {entry['group']!r} is not a task group name "
                "(task_NNNNNN or task_NNNNNN_worker_NNN)"
            )
        stored = entry["attrs"].get("taskId")  # the catalogue reads the id from the name when taskId is absent
        if stored is not None and stored != int(match.group(1)):
            raise ValueError(
                f"{where}: attributes.tasks[{row}].attrs.taskId {stored!r} disagrees with its group {entry['group']!r}"
            )
        for dim, (start, stop) in (entry.get("coords") or {}).items():
            if not any(
                len(doc.get("dimension_names") or []) > 1 and doc["dimension_names"][1] == dim for _, doc in records
            ):
                raise ValueError(  # a coordinate of no record: its length is bounded by nothing stored
                    f"{where}: attributes.tasks[{row}].coords.{dim} is the first dimension of none of its records"
                )
            for path, doc in records:
                dims = doc.get("dimension_names") or []
                record = doc["attributes"][RECORDS_ATTR][row]
                name = path[len(prefix) :]
                if dim in dims[2:]:
                    raise ValueError(
                        f"{where}: attributes.tasks[{row}].coords.{dim} names a dimension of its record "
                        f"{name} that is not its first: only row coordinates are stored"
                    )
                if len(dims) < 2 or dims[1] != dim:
                    continue
                if stop - start != doc["shape"][1]:  # every record along it, truncated ones too: the bound
                    raise ValueError(
                        f"{where}: attributes.tasks[{row}].coords.{dim} {[start, stop]!r} holds "
                        f"{stop - start} rows, its record {name} {doc['shape'][1]}"
                    )
                if not isinstance(record, dict) or record.get("truncated"):
                    continue
                first = _first_row(record, doc["shape"][1:], itemsize(doc.get("data_type")))
                if first is not None and first != start:
                    raise ValueError(
                        f"{where}: attributes.tasks[{row}].coords.{dim} {[start, stop]!r} disagrees with "
                        f"its record {name}, which starts at row {first} (sourceOffsetBytes)"
                    )


def _first_row(attrs: dict[str, Any], shape: list[int], size: int) -> int | None:
    """The first global row of a whole-row slice of its declared tensor (``None``: not one)."""
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
"""Reads keys (relative to the root) concurrently, ``None`` for an absent one: a format-4 pack's ``row_fields``
chunk is the one datum a pack's expansion reads (:mod:`megadump_zarr.store.pack_fields`)."""


def fields_keys(window: str, packs: dict[str, dict[str, dict[str, Any]]]) -> dict[str, str]:
    """The ``row_fields`` chunk key (relative to the root) of each format-4 pack among ``packs``."""
    root = f"{window}/" if window else ""
    return {pack: root + fields_chunk_key(pack) for pack in sorted(packs) if is_fields_pack(pack, packs[pack])}


def window_fields_keys(window: str, doc: Any) -> list[str]:
    """The ``row_fields`` chunk keys (relative to the root) a committed window document's packs need
    (``[]`` when it holds no consolidated metadata: the catalogue names that).

    Args:
        window: The window key.
        doc: The window document, parsed (the catalogue parses it once, for this and for ``window_info``).
    """
    try:
        nodes = doc["consolidated_metadata"]["metadata"]
        packs = {
            path.rpartition("/")[0]: nodes for path in nodes if path.endswith(f"/{FIELDS_ARRAY}") and PACK.match(path)
        }
        return list(fields_keys(window, packs).values())
    except (TypeError, KeyError, AttributeError):
        return []


def _hydrated(
    window: str, pack: str, docs: dict[str, dict[str, Any]], raw: bytes | None, fields: bool
) -> dict[str, dict[str, Any]]:
    """A pack's documents with format 4's rows put back as format 3's lists (``docs`` for older formats).

    Raises:
        DumpIntegrityError: ``row_fields`` is malformed, missing from a format-4 pack, or its chunk is absent,
            damaged or another pack's (the key names its document or chunk).
    """
    label = f"{window}/{pack}" if window else pack
    key = f"{label}/{FIELDS_ARRAY}/zarr.json"
    try:
        if not fields:
            version = ((docs.get(pack) or {}).get("attributes") or {}).get(PACK_ATTR)
            if (
                type(version) is int and version in PACK_VERSIONS and version >= 4
            ):  # an unknown one: expand_pack names it
                raise ValueError(f"{key}: a format-{version} pack keeps each row's attributes there; it is missing")
            return docs
        return hydrate_pack(pack, docs, raw, task_array_name(docs, pack) or TASK_ARRAY, label)
    except FieldsChunkError as error:
        raise DumpIntegrityError(f"malformed task-record pack: {error}", key=fields_chunk_key(label)) from None
    except ValueError as error:
        raise DumpIntegrityError(f"malformed task-record pack: {error}", key=key) from None


def expand_packs(
    window: str, packs: dict[str, dict[str, dict[str, Any]]], strict: bool, fetch: Fetch
) -> tuple[dict[str, dict[str, Any]], dict[str, ShardSource | RangeSource], dict[str, dict[str, Any]]]:
    """The schema-6 nodes, chunk sources and format-3 documents of some packs (pack path -> its nodes).

    Returns:
        ``(virtual nodes, chunk sources, rows)``: ``rows`` holds each expanded pack's documents with its rows'
        attributes as format 3's lists (``attributes.tasks``, ``attributes.records``; a format-4 pack's rebuilt
        from ``row_fields``), for the checks that compare rows.

    Args:
        window: The window key.
        packs: Each pack's nodes (paths relative to the window).
        strict: A malformed pack raises (a committed window); else it is left out (a torn window's pack cut short).
        fetch: Reads the format-4 packs' ``row_fields`` chunks (one batch).
    """
    virtual: dict[str, dict[str, Any]] = {}
    sources: dict[str, ShardSource | RangeSource] = {}
    rows: dict[str, dict[str, Any]] = {}
    keys = fields_keys(window, packs)
    chunks = dict(zip(keys, fetch(list(keys.values())))) if keys else {}
    for pack in sorted(packs):
        try:
            docs = _hydrated(window, pack, packs[pack], chunks.get(pack), pack in keys)
        except DumpIntegrityError:
            if not strict:
                continue
            raise
        try:
            nodes, chunks_of = expand_pack(pack, docs, window)
            check_rows(window, pack, docs)
        except ValueError as error:
            if not strict:
                continue  # a torn window's pack cut short: not part of the window yet
            task_name = task_array_name(docs, pack) or TASK_ARRAY
            key = f"{window}/{pack}/{task_name}/zarr.json" if window else f"{pack}/{task_name}/zarr.json"
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
        rows.update(docs)
    return virtual, sources, rows


def replace_packs(
    nodes: dict[str, Any], window: str, strict: bool, fetch: Fetch
) -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[str, ShardSource | RangeSource], dict[str, Any]] | None:
    """``nodes`` (relative to a window) with every node at or below a pack replaced by the packs' schema-6
    nodes (task groups as flat consolidated entries); ``None`` when it holds no pack.

    Returns:
        ``(nodes in zarr's order, virtual nodes, chunk sources, the packs' format-3 documents)``.
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
    virtual, sources, rows = expand_packs(window, packs, strict, fetch)
    clash = next((path for path in virtual if path in kept), None)
    if clash is not None:
        where = f"{window}/{clash}" if window else clash
        raise DumpIntegrityError(f"{where} is both stored and in a task-record pack", key=where)
    for path, node in virtual.items():
        kept[path] = flat_group(node) if node.get("node_type") == "group" else node
    return {path: kept[path] for path in sorted(kept, key=consolidated_sort_key)}, virtual, sources, rows


def stored_pack_nodes(nodes: dict[str, Any]) -> dict[str, Any]:
    """The nodes at or below a pack among a stored window document's consolidated nodes (what the expansion
    replaces; verify compares their own documents with them).

    Args:
        nodes: Consolidated nodes, paths relative to the window.
    """
    return {path: node for path, node in nodes.items() if PACK.match(path) and PACK_PATH.match(path)}
