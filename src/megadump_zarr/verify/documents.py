"""Checks of a committed window's documents: the manifest, every node's own document, record attributes.

- the manifest agrees with itself (``windowIndex``/``rank`` with the path, ``invocations`` with the
  invocation groups present, ``invocationCount``, ``level``);
- every node's own ``zarr.json`` exists, parses and equals its consolidated entry (a group's own
  consolidated metadata too); every array document is a valid Zarr v3 array document;
- record attributes agree with the array (``storedShape`` and ``storedBytes`` with ``shape`` × itemsize,
  ``fullBytes`` with ``actualShape``, a truncated record stores a flat prefix no longer than its logical
  size and lies inside its ``declaredShape``);
- the records-table fields parse (types, int64 ranges).
"""

from __future__ import annotations

from collections.abc import Mapping
import json
import math
from typing import Any

from megadump_zarr.layout.paths import WINDOW_PATH
from megadump_zarr.verify.report import CheckState, short

__all__ = [
    "check_manifest",
    "check_node_documents",
    "check_records_table",
    "group_consolidated_agrees",
    "stored_agrees",
    "strip_consolidated",
]


def check_manifest(state: CheckState, window: str, attrs: dict[str, Any], nodes: dict[str, Any]) -> None:
    """The window's attributes agree with its path and with the invocation groups it holds.

    Args:
        state: The window's check state.
        window: The window key.
        attrs: The window document's attributes.
        nodes: Its consolidated metadata (path -> document).
    """
    doc_key = f"{window}/zarr.json"
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


def check_node_documents(
    state: CheckState, store: Any, window: str, nodes: dict[str, Any], packed: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Each node's own document exists, parses and equals its consolidated entry; returns the good paths, each
    with its zarr array metadata (``None`` for a group): zarr parses each form of array document once (the same
    document but for its attributes, which zarr reads as any JSON object, is the same form).

    Args:
        state: The window's check state.
        store: The dump's store.
        window: The window key.
        nodes: Its nodes (path relative to the window -> consolidated entry).
        packed: The nodes a task-record pack stands for (no document of their own: their pack's are checked,
            :mod:`megadump_zarr.verify.packs`).
    """
    from megadump_zarr.read.documents import open_array_checked
    from megadump_zarr.read.location import get_many

    packed = packed or {}
    good: dict[str, Any] = {}
    forms: dict[str, Any] = {}  # an array document without its attributes -> its parsed metadata
    paths = sorted(nodes)
    for start in range(0, len(paths), 256):
        batch = paths[start : start + 256]
        stored = [p for p in batch if p not in packed]
        raws = dict(zip(stored, get_many(store, [f"{window}/{p}/zarr.json" for p in stored])))
        for path in batch:
            key = f"{window}/{path}/zarr.json"
            entry = nodes[path]
            if not isinstance(entry, dict) or entry.get("node_type") not in ("group", "array"):
                state.add(f"{window}/zarr.json", f"consolidated entry {path!r} is not a group or array document")
                continue
            if path not in packed:
                own = stored_agrees(state, key, raws[path], entry, "node")
                if own is None:
                    continue
                if entry["node_type"] == "group" and not group_consolidated_agrees(state, key, path, own, nodes):
                    continue
            metadata = None
            if entry["node_type"] == "array":
                attrs = entry.get("attributes", {})
                form = json.dumps({k: v for k, v in entry.items() if k != "attributes"}, sort_keys=True)
                try:
                    metadata = forms.get(form) if isinstance(attrs, dict) else None
                    metadata = metadata or open_array_checked(store, f"{window}/{path}", entry).metadata
                except ValueError as error:
                    state.add(key, str(error).removeprefix(key).lstrip(": ") or str(error))
                    continue
                forms[form] = metadata
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
    from megadump_zarr.read.catalog import itemsize

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
    state: CheckState, window: str, status: str, attrs: dict[str, Any], nodes: dict[str, Any]
) -> None:
    """The fields the records table reads parse (types, int64 ranges)."""
    from megadump_zarr.read.catalog import WindowInfo, records_frame

    match = WINDOW_PATH.fullmatch(window)
    rank, index = (int(match.group(1)), int(match.group(2))) if match else (0, 0)
    try:
        records_frame([(WindowInfo(rank, index, window, status, attrs, nodes), nodes)])
    except ValueError as error:
        text = str(error)
        key, _, what = text.partition(": ")
        state.add(key if what else f"{window}/zarr.json", what or text)
    except (TypeError, OverflowError) as error:  # a field no check above anticipated: still one named problem
        state.add(f"{window}/zarr.json", f"the records table cannot be built: {type(error).__name__}: {error}")
