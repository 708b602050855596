"""Schema checks of a committed window's documents that readers rely on.

Each document's kind (``node_type``), ``zarr_format``, the window's format version and layout
(:func:`~megadump_zarr.layout.schema.format_problem`), the invocations' ``level``/``rank`` (the window's), ``direction``
(``forward``/``backward``, as the group name says) and ``taskCount`` (the task records below it), every
consolidated node's parent being a listed group, and the rank group document. Each finding is a problem
naming the document and field.
"""

from __future__ import annotations

import json
from typing import Any

from megadump_zarr.layout.paths import INVOCATION_DIR, PACK_DIR, TASK_DIR
from megadump_zarr.layout.schema import format_problem

__all__ = ["check_schema"]


_DIRECTIONS = ("forward", "backward")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_schema(state: Any, store: Any, window: str, doc: dict[str, Any], nodes: dict[str, Any]) -> None:
    """Add a problem for every schema field of ``window`` that readers would misread.

    Args:
        state: The window's verify state (``state.add(key, what)``).
        store: The dump store.
        window: The window key ``rank_{r}/window_{wwww}``.
        doc: The parsed window document.
        nodes: Its consolidated metadata (path -> document).
    """
    key = f"{window}/zarr.json"
    attrs = doc.get("attributes") or {}
    _check_kind(state, key, doc, "group")
    problem = format_problem(attrs, "attributes")
    if problem is not None:
        state.add(key, problem)
    for path, entry in nodes.items():
        if not isinstance(entry, dict):
            continue  # named by the node check
        node_key = f"{window}/{path}/zarr.json"
        if entry.get("zarr_format") != 3:
            state.add(node_key, f"zarr_format {_short(entry.get('zarr_format'))} is not 3")
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
        state.add(key, f"node_type {_short(doc.get('node_type'))} is not {kind!r}")
    if doc.get("zarr_format") != 3:
        state.add(key, f"zarr_format {_short(doc.get('zarr_format'))} is not 3")


def _check_invocation(
    state: Any, key: str, path: str, entry: dict[str, Any], window_attrs: dict[str, Any], nodes: dict[str, Any]
) -> None:
    if entry.get("node_type") != "group":
        state.add(key, f"node_type {_short(entry.get('node_type'))} is not 'group'")
        return
    attrs = entry.get("attributes")
    if not isinstance(attrs, dict):
        return
    named = INVOCATION_DIR.match(path).group(2)
    direction = attrs.get("direction")
    if direction is not None and direction not in _DIRECTIONS:
        state.add(key, f"attributes.direction {_short(direction)} is not one of {list(_DIRECTIONS)}")
    elif direction is not None and named in _DIRECTIONS and named != direction:
        state.add(key, f"attributes.direction {direction!r} disagrees with the group name {path!r}")
    for field in ("level", "rank"):
        if field in attrs and field in window_attrs and attrs[field] != window_attrs[field]:
            state.add(
                key,
                f"attributes.{field} {_short(attrs[field])} disagrees with the window's {_short(window_attrs[field])}",
            )
    count = attrs.get("taskCount")
    if count is not None and window_attrs.get("level") == "L1":
        found = _task_records(path, nodes)
        if count != found:
            state.add(key, f"attributes.taskCount {_short(count)} disagrees with the {found} task records below it")


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
    from megadump_zarr.read.location import get_bytes

    rank = window.split("/")[0]
    key = f"{rank}/zarr.json"
    try:
        raw = get_bytes(store, key)
    except Exception as error:  # noqa: BLE001 - any failure to read it is the finding
        state.add(key, f"the rank document cannot be read: {error}")
        return
    if raw is None:
        state.add(key, "the rank group document is missing")
        return
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as error:
        state.add(key, f"the rank document does not parse: {error}")
        return
    if not isinstance(doc, dict):
        state.add(key, f"the rank document is a {type(doc).__name__}, not a JSON object")
        return
    _check_kind(state, key, doc, "group")
