"""Checks of a committed window's documents: the manifest, the schema, every node's own document, record attributes.

- the manifest agrees with itself (``windowIndex``/``rank`` with the path, ``invocations`` with the
  invocation groups present, ``invocationCount``, ``level``);
- the schema readers rely on: each document's kind (``node_type``) and ``zarr_format``, the window's format version
  and layout (:func:`~megadump_zarr.layout.schema.format_problem`), the invocations' ``level``/``rank`` (the
  window's), ``direction`` (as the group name says) and ``taskCount`` (the task records below it), every
  consolidated node's parent a listed group, and the rank group document;
- every node's own ``zarr.json`` exists, parses and equals its consolidated entry (a group's own
  consolidated metadata too); every array document is a valid Zarr v3 array document; a task-record pack's stored
  documents (what plain zarr reads) equal the window document's entries the readers are built from;
- record attributes agree with the array (``storedShape`` and ``storedBytes`` with ``shape`` × itemsize,
  ``fullBytes`` with ``actualShape``, a truncated record stores a flat prefix no longer than its logical
  size and lies inside its ``declaredShape``);
- the records-table fields parse (types, int64 ranges).
"""

from __future__ import annotations

from collections.abc import Mapping
import math
from typing import Any

from megadump_zarr.layout.paths import INVOCATION_DIR, PACK_DIR, TASK_DIR, WINDOW_PATH
from megadump_zarr.verify.report import CheckState, short

__all__ = [
    "check_manifest",
    "check_node_documents",
    "check_pack_documents",
    "check_packed_records",
    "check_records_table",
    "strip_consolidated",
]


def check_manifest(state: CheckState, store: Any, window: str, doc: dict[str, Any], nodes: dict[str, Any]) -> None:
    """The window's attributes agree with its path and with the invocation groups it holds; every schema field
    readers would misread is a problem (:func:`_check_schema`).

    Args:
        state: The window's check state.
        store: The dump store.
        window: The window key.
        doc: The parsed window document.
        nodes: Its consolidated metadata (path -> document).
    """
    doc_key, attrs = f"{window}/zarr.json", doc["attributes"]
    _check_schema(state, store, window, doc, nodes)
    match = WINDOW_PATH.fullmatch(window)
    if match:
        rank, index = int(match.group(1)), int(match.group(2))
        if "windowIndex" in attrs and attrs["windowIndex"] != index:
            state.add(
                doc_key, f"attributes.windowIndex {short(attrs['windowIndex'])} disagrees with the path ({index})"
            )
        if "rank" in attrs and attrs["rank"] != rank:
            state.add(doc_key, f"attributes.rank {short(attrs['rank'])} disagrees with the path ({rank})")
    if attrs.get("level") not in (None, "L0", "L1"):
        state.add(doc_key, f"attributes.level {short(attrs.get('level'))} is not L0 or L1")
    listed = attrs.get("invocations")
    if listed is not None:
        if not isinstance(listed, list) or not all(isinstance(n, str) for n in listed):
            state.add(doc_key, f"attributes.invocations {short(listed)} is not a list of group names")
        else:
            present = {p.split("/")[0] for p in nodes if p.startswith("invocation_")}
            for name in sorted(set(listed) - present):
                state.add(doc_key, f"attributes.invocations lists {name}, which the window does not hold")
            for name in sorted(present - set(listed)):
                state.add(doc_key, f"invocation group {name} is not listed in attributes.invocations")
            count = attrs.get("invocationCount")
            if count is not None and count != len(listed):
                state.add(
                    doc_key,
                    f"attributes.invocationCount {short(count)} disagrees with the {len(listed)} listed invocations",
                )


def strip_consolidated(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` without its ``consolidated_metadata`` (what a consolidated entry holds of it)."""
    return {k: v for k, v in doc.items() if k != "consolidated_metadata"}


def check_node_documents(state: CheckState, store: Any, window: str, nodes: dict[str, Any]) -> dict[str, Any]:
    """Each node's own document exists, parses and equals its consolidated entry; returns the good paths, each
    with its zarr array metadata (``None`` for a group), parsed as the readers parse it
    (:func:`~megadump_zarr.read.documents.open_array_checked`: each form of array document once).

    Args:
        state: The window's check state.
        store: The dump's store.
        window: The window key.
        nodes: Its nodes (path relative to the window -> consolidated entry), but a task-record pack's
            (:func:`check_pack_documents`).
    """
    from megadump_zarr.read.documents import open_array_checked
    from megadump_zarr.read.location import get_many

    good: dict[str, Any] = {}
    paths = sorted(nodes)
    for start in range(0, len(paths), 256):
        batch = paths[start : start + 256]
        raws = dict(zip(batch, get_many(store, [f"{window}/{p}/zarr.json" for p in batch])))
        for path in batch:
            key = f"{window}/{path}/zarr.json"
            entry = nodes[path]
            if not isinstance(entry, dict) or entry.get("node_type") not in ("group", "array"):
                state.add(f"{window}/zarr.json", f"consolidated entry {path!r} is not a group or array document")
                continue
            own = stored_agrees(state, key, raws[path], entry, "node")
            if own is None:
                continue
            if entry["node_type"] == "group" and not group_consolidated_agrees(state, key, path, own, nodes):
                continue
            metadata = None
            if entry["node_type"] == "array":
                try:
                    metadata = open_array_checked(store, f"{window}/{path}", entry).metadata
                except ValueError as error:
                    state.add(key, str(error).removeprefix(key).lstrip(": ") or str(error))
                    continue
                _check_record_attributes(state, key, entry)
            good[path] = metadata
    return good


def stored_agrees(state: CheckState, key: str, raw: bytes | None, entry: Any, what: str) -> dict[str, Any] | None:
    """A stored ``zarr.json`` parsed, when it equals its window consolidated entry (else the problem is added).

    Args:
        state: The window's check state.
        key: The document's key.
        raw: Its stored bytes (``None``: missing).
        entry: Its entry in the window document's consolidated metadata.
        what: ``"node"`` or ``"pack"``, for the missing-document message.
    """
    from megadump_zarr.read.location import parse_json

    if raw is None:
        state.add(key, f"the {what}'s document is missing (the window's consolidated metadata lists it)")
        return None
    try:
        own = parse_json(raw, key)
    except ValueError as error:
        state.add(key, f"does not parse: {error}")
        return None
    if not isinstance(entry, dict) or strip_consolidated(own) != strip_consolidated(entry):
        theirs = entry if isinstance(entry, dict) else {}
        fields = sorted(
            k for k in set(strip_consolidated(own)) | set(strip_consolidated(theirs)) if own.get(k) != theirs.get(k)
        )
        state.add(key, f"differs from the window's consolidated metadata in {', '.join(fields) or 'its type'}")
        return None
    return own


def group_consolidated_agrees(
    state: CheckState, key: str, path: str, own: dict[str, Any], nodes: dict[str, Any]
) -> bool:
    """A group's own consolidated metadata (what ``xr.open_zarr(group)`` reads) agrees with the window's."""
    consolidated = own.get("consolidated_metadata")
    inner = consolidated.get("metadata") if isinstance(consolidated, dict) else None
    if not isinstance(inner, dict):
        return True
    for sub, entry in inner.items():
        theirs = nodes.get(f"{path}/{sub}")
        if (
            not isinstance(entry, dict)
            or not isinstance(theirs, dict)
            or strip_consolidated(entry) != strip_consolidated(theirs)
        ):
            state.add(key, f"its consolidated entry {sub!r} differs from the window's consolidated metadata")
            return False
    return True


def _check_record_attributes(state: CheckState, key: str, doc: dict[str, Any]) -> None:
    from megadump_zarr.layout.dtypes import itemsize

    attrs = doc.get("attributes")
    if not isinstance(attrs, dict) or "name" not in attrs:
        return
    shape = list(doc["shape"])
    size = itemsize(doc.get("data_type"))
    stored_shape = attrs.get("storedShape")
    if stored_shape is not None and stored_shape != shape:
        state.add(key, f"attributes.storedShape {short(stored_shape)} disagrees with shape {shape}")
    stored = attrs.get("storedBytes")
    if stored is not None and size and stored != math.prod(shape) * size:
        state.add(
            key,
            f"attributes.storedBytes {short(stored)} disagrees with shape {shape} x {size} bytes "
            f"({math.prod(shape) * size})",
        )
    stored_dtype = attrs.get("storedDtype")
    if stored_dtype is not None and stored_dtype != doc.get("data_type"):
        state.add(
            key, f"attributes.storedDtype {short(stored_dtype)} disagrees with data_type {doc.get('data_type')!r}"
        )
    actual = attrs.get("actualShape")
    if actual is None:
        return
    if not isinstance(actual, list) or not all(type(d) is int and d >= 0 for d in actual):
        state.add(key, f"attributes.actualShape {short(actual)} is not a list of non-negative integers")
        return
    full = attrs.get("fullBytes")
    original = itemsize(attrs.get("originalDtype")) or size
    if full is not None and original and full != math.prod(actual) * original:
        state.add(key, f"attributes.fullBytes {short(full)} disagrees with actualShape {actual} x {original} bytes")
    if attrs.get("truncated"):
        if len(shape) != 1 or shape[0] > math.prod(actual):
            state.add(key, f"a truncated record stores a flat prefix of its actualShape {actual}, not shape {shape}")
        _check_truncated_rows(state, key, attrs, actual, size)
    elif actual != shape:
        state.add(key, f"attributes.actualShape {actual} disagrees with shape {shape} (the record is not truncated)")


def _check_truncated_rows(state: CheckState, key: str, attrs: dict[str, Any], actual: list[int], size: int) -> None:
    """A truncated whole-row slice lies inside its declared tensor: ``sourceOffsetBytes`` / row bytes +
    ``actualShape[0]`` <= ``declaredShape[0]`` (the rows a reader derives for it; ``actualShape`` and
    ``fullBytes`` edited together pass the checks above, and would describe rows the tensor never had)."""
    declared, offset = attrs.get("declaredShape"), attrs.get("sourceOffsetBytes")
    if not (
        isinstance(declared, list)
        and actual
        and len(declared) == len(actual)
        and declared[1:] == actual[1:]
        and all(type(d) is int for d in declared)
        and type(offset) is int
        and offset >= 0
    ):
        return
    row_bytes = math.prod(actual[1:]) * size
    if row_bytes <= 0 or offset % row_bytes:
        return
    start = offset // row_bytes
    if start + actual[0] > declared[0]:
        state.add(
            key,
            f"attributes.actualShape {actual} at attributes.sourceOffsetBytes {offset} (row {start}) reaches "
            f"past attributes.declaredShape {declared}: the record describes rows its tensor does not have",
        )


def check_records_table(
    state: CheckState,
    window: str,
    status: str,
    attrs: dict[str, Any],
    nodes: dict[str, Any],
    tables: list[Any] | None = None,
) -> None:
    """The fields the records table reads parse (types, int64 ranges), a packed window's packs' as the readers read
    them (:func:`~megadump_zarr.read.pack_records.pack_columns`).

    Args:
        state: The window's check state.
        window: The window key.
        status: Its status.
        attrs: Its attributes.
        nodes: Its good nodes, but a task-record pack's (path relative to the window -> document).
        tables: Its packs, read and checked (:func:`~megadump_zarr.read.pack_checks.pack_tables`; ``None``: none).
    """
    from megadump_zarr.read.catalog import WindowInfo
    from megadump_zarr.read.records_table import records_frame

    match = WINDOW_PATH.fullmatch(window)
    rank, index = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
    try:
        info = WindowInfo(rank, index, window, status, attrs, nodes)
        records_frame([(info, nodes)])
        if tables:
            _check_pack_fields(info, nodes, tables)
    except ValueError as error:
        text = str(error)
        key, _, what = text.partition(": ")
        state.add(key if what else f"{window}/zarr.json", what or text)
    except (TypeError, OverflowError) as error:  # a field no check above anticipated: still one named problem
        state.add(f"{window}/zarr.json", f"the records table cannot be built: {type(error).__name__}: {error}")


_NO_INVOCATION = dict.fromkeys(("invocation", "step", "direction", "kernel", "level"))


def _check_pack_fields(info: Any, nodes: dict[str, Any], tables: list[Any]) -> None:
    """The records-table fields of a window's packs: each invocation's and stage's attributes that hold a pack, and
    each pack's columns (raises the readers' ``ValueError`` naming the field)."""
    from megadump_zarr.read.catalog import data_groups
    from megadump_zarr.read.documents import check_attributes
    from megadump_zarr.read.pack_records import pack_columns

    invocations = sorted({table.pack.split("/")[0] for table in tables})
    data_groups(info, {name: nodes[name] for name in invocations if name in nodes})  # its fields, as records() reads
    for table in tables:
        stage = table.pack.rpartition("/")[0]
        stage_attrs = check_attributes(nodes.get(stage) or {}, f"{info.key}/{stage}/zarr.json")
        pack_columns((info.rank, info.window, info.key), table, _NO_INVOCATION, info.level, info.status, stage_attrs)


def check_packed_records(state: CheckState, window: str, records: Mapping[str, Any]) -> None:
    """Each packed record's attributes (its row's) agree with its array, as a stored record's do.

    Args:
        state: The window's check state.
        window: The window key.
        records: Its packed records by path (:class:`~megadump_zarr.read.pack_record.PackedRecord`).
    """
    for path in sorted(records):
        _check_record_attributes(state, f"{window}/{path}/zarr.json", records[path].doc)


def check_pack_documents(state: CheckState, base: Any, window: str, stored: dict[str, Any]) -> None:
    """The stored documents of a window's task-record packs (what plain zarr reads) equal the window document's
    entries the readers are built from.

    Args:
        state: The window's check state.
        base: The dump's store.
        window: The window key.
        stored: The window document's consolidated nodes, as stored.
    """
    from megadump_zarr.read.documents import open_array_checked
    from megadump_zarr.read.location import get_many
    from megadump_zarr.read.pack_checks import rest_nodes

    rest = rest_nodes(stored)
    nodes = {path: node for path, node in stored.items() if path not in rest}
    paths = sorted(nodes)
    for path, raw in zip(paths, get_many(base, [f"{window}/{p}/zarr.json" for p in paths])):
        key = f"{window}/{path}/zarr.json"
        entry = nodes[path]
        own = stored_agrees(state, key, raw, entry, "pack")
        if own is not None and own.get("node_type") == "group":
            group_consolidated_agrees(state, key, path, own, nodes)
        elif own is not None and own.get("node_type") == "array":
            try:  # what plain zarr and the readers' row reads open
                open_array_checked(base, f"{window}/{path}", entry)
            except ValueError as error:
                state.add(key, str(error).removeprefix(key).lstrip(": ") or str(error))


_DIRECTIONS = ("forward", "backward")


def _check_schema(state: CheckState, store: Any, window: str, doc: dict[str, Any], nodes: dict[str, Any]) -> None:
    """Kinds, ``zarr_format``, parents, invocations and the rank document (the format version is checked before
    any check, :func:`~megadump_zarr.verify.window.verify_window`)."""
    key = f"{window}/zarr.json"
    attrs = doc["attributes"]
    _check_kind(state, key, doc, "group")
    for path, entry in nodes.items():
        if not isinstance(entry, dict):
            continue  # named by the node check
        node_key = f"{window}/{path}/zarr.json"
        if entry.get("zarr_format") != 3:
            state.add(node_key, f"zarr_format {short(entry.get('zarr_format'))} is not 3")
        parent = path.rpartition("/")[0]
        if parent and not (isinstance(nodes.get(parent), dict) and nodes[parent].get("node_type") == "group"):
            state.add(
                f"{window}/{parent}/zarr.json",
                f"group {parent!r} holding {path!r} is missing from the "
                "window's consolidated metadata (a deleted document)",
            )
        if "/" not in path and INVOCATION_DIR.match(path):
            _check_invocation(state, node_key, path, entry, attrs, nodes)
    _check_rank_document(state, store, window)


def _check_kind(state: Any, key: str, doc: dict[str, Any], kind: str) -> None:
    if doc.get("node_type") != kind:
        state.add(key, f"node_type {short(doc.get('node_type'))} is not {kind!r}")
    if doc.get("zarr_format") != 3:
        state.add(key, f"zarr_format {short(doc.get('zarr_format'))} is not 3")


def _check_invocation(
    state: Any, key: str, path: str, entry: dict[str, Any], window_attrs: dict[str, Any], nodes: dict[str, Any]
) -> None:
    if entry.get("node_type") != "group":
        state.add(key, f"node_type {short(entry.get('node_type'))} is not 'group'")
        return
    attrs = entry.get("attributes")
    if not isinstance(attrs, dict):
        return
    named = INVOCATION_DIR.match(path).group(2)
    direction = attrs.get("direction")
    if direction is not None and direction not in _DIRECTIONS:
        state.add(key, f"attributes.direction {short(direction)} is not one of {list(_DIRECTIONS)}")
    elif direction is not None and named in _DIRECTIONS and named != direction:
        state.add(key, f"attributes.direction {direction!r} disagrees with the group name {path!r}")
    for field in ("level", "rank"):
        if field in attrs and field in window_attrs and attrs[field] != window_attrs[field]:
            state.add(
                key,
                f"attributes.{field} {short(attrs[field])} disagrees with the window's {short(window_attrs[field])}",
            )
    count = attrs.get("taskCount")
    if count is not None and window_attrs.get("level") == "L1":
        found = _task_records(path, nodes)
        if count != found:
            state.add(key, f"attributes.taskCount {short(count)} disagrees with the {found} task records below it")


def _task_records(invocation: str, nodes: dict[str, Any]) -> int:
    """Task groups (``stages/S/task_*``) plus the tasks of task-record packs (``stages/S/pack_*`` taskCount)."""
    count = 0
    for path, entry in nodes.items():
        parts = path.split("/")
        if len(parts) != 4 or parts[0] != invocation or parts[1] != "stages" or not isinstance(entry, dict):
            continue
        if TASK_DIR.match(parts[3]):
            count += 1
        elif PACK_DIR.match(parts[3]):
            tasks = (entry.get("attributes") or {}).get("taskCount")
            count += tasks if type(tasks) is int else 0
    return count


def _check_rank_document(state: Any, store: Any, window: str) -> None:
    from megadump_zarr.read.location import get_bytes, parse_json

    key = f"{window.split('/')[0]}/zarr.json"
    try:
        raw = get_bytes(store, key)
    except Exception as error:  # noqa: BLE001 - any failure to read it is the finding
        state.add(key, f"the rank document cannot be read: {error}")
        return
    if raw is None:
        state.add(key, "the rank group document is missing")
        return
    try:
        _check_kind(state, key, parse_json(raw, key), "group")
    except ValueError as error:  # not JSON, or not a JSON object
        state.add(key, f"the rank document does not parse: {error}")
