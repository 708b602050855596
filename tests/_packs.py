"""A stored pack's rows as format 3 spelled them, and edits of them written back in its own format.

Format 4 (``store.pack_fields``) keeps each row's task and record attributes in the ``row_fields`` array;
formats 1-3 keep them as ``attributes.tasks`` / ``attributes.records`` lists in three documents. Tests that
read or damage rows use these two helpers, so each test says what it changes, not how a format stores it.
"""

from __future__ import annotations

from collections.abc import Callable
import json
from pathlib import Path
from typing import Any

from megadump_zarr.store.pack_fields import (
    FIELDS_ARRAY,
    FIELDS_ATTR,
    column_names,
    encode_rows,
    encode_table,
    fields_attributes,
    hydrate_pack,
)
from megadump_zarr.store.packs import RECORDS_ATTR, TASK_ARRAYS, TASKS_ATTR

Rows = tuple[list[Any], dict[str, list[Any]]]


def _nodes(window: Path, pack: str) -> dict[str, dict[str, Any]]:
    base = window / pack
    nodes = {pack: json.loads((base / "zarr.json").read_text())} if (base / "zarr.json").is_file() else {}
    for doc in sorted(base.glob("*/zarr.json")):
        nodes[f"{pack}/{doc.parent.name}"] = json.loads(doc.read_text())
    return nodes


def _task_name(nodes: dict[str, Any], pack: str) -> str:
    return next(name for name in TASK_ARRAYS if f"{pack}/{name}" in nodes)


def readable_nodes(window: Path, pack: str) -> dict[str, dict[str, Any]]:
    """A stored pack's documents (path relative to the window), a format-4 pack's rows put back as format 3's
    lists: what ``store.packs.expand_pack`` takes.

    Args:
        window: The window directory.
        pack: The pack's path relative to it.
    """
    nodes = _nodes(window, pack)
    if f"{pack}/{FIELDS_ARRAY}" in nodes:
        chunk = window / pack / FIELDS_ARRAY / "c.0.0"
        nodes = hydrate_pack(
            pack, nodes, chunk.read_bytes() if chunk.is_file() else None, _task_name(nodes, pack), pack
        )
    return nodes


def stored_rows(window: Path, pack: str) -> Rows:
    """``(tasks, {record: rows})`` of a stored pack, as format 3's ``attributes.tasks``/``attributes.records``.

    Args:
        window: The window directory.
        pack: The pack's path relative to it (``invocation_000000_forward/stages/s/pack_0000``).
    """
    nodes = readable_nodes(window, pack)
    tasks = nodes[f"{pack}/{_task_name(nodes, pack)}"]["attributes"][TASKS_ATTR]
    records = {
        path.rpartition("/")[2]: doc["attributes"][RECORDS_ATTR]
        for path, doc in nodes.items()
        if path != pack and RECORDS_ATTR in (doc.get("attributes") or {})
    }
    return tasks, records


def edit_document(window: Path, pack: str, component: str, edit: Callable[[dict[str, Any]], None]) -> None:
    """Apply ``edit`` to a pack array's document in all three copies: its own, the pack group's consolidated
    metadata and the window's."""
    copies = [
        (window / pack / component / "zarr.json", ()),
        (window / pack / "zarr.json", ("consolidated_metadata", "metadata", component)),
        (window / "zarr.json", ("consolidated_metadata", "metadata", f"{pack}/{component}")),
    ]
    for file, inside in copies:
        if not file.is_file():
            continue
        doc = json.loads(file.read_text())
        node = doc
        for part in inside:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            edit(node)
            file.write_text(json.dumps(doc))


def edit_rows(window: Path, pack: str, edit: Callable[[list[Any], dict[str, list[Any]]], None]) -> None:
    """Edit a stored pack's rows consistently (every copy of every document, and format 4's chunk).

    Args:
        window: The window directory.
        pack: The pack's path relative to it.
        edit: Changes ``(tasks, {record: rows})`` in place.
    """
    tasks, records = stored_rows(window, pack)
    edit(tasks, records)
    nodes = _nodes(window, pack)
    if f"{pack}/{FIELDS_ARRAY}" not in nodes:  # formats 1-3: the lists themselves
        edit_document(window, pack, _task_name(nodes, pack), lambda n: n["attributes"].__setitem__(TASKS_ATTR, tasks))
        for name, rows in records.items():
            edit_document(window, pack, name, lambda n, rows=rows: n["attributes"].__setitem__(RECORDS_ATTR, rows))
        return
    columns: list[list[float]] = []
    specs = {"tasks": encode_rows(tasks, columns), "records": {}}
    for name, rows in records.items():
        specs["records"][name] = encode_rows(rows, columns)
    chunk = encode_table(columns, len(tasks))
    (window / pack / FIELDS_ARRAY / "c.0.0").write_bytes(chunk)
    attributes = fields_attributes(specs, column_names(specs), chunk)

    def rewrite(node: dict[str, Any]) -> None:
        node["attributes"] = attributes
        node["shape"] = [len(tasks), len(columns)]
        node["chunk_grid"]["configuration"]["chunk_shape"] = [max(1, len(tasks)), max(1, len(columns))]

    edit_document(window, pack, FIELDS_ARRAY, rewrite)
    assert FIELDS_ATTR in attributes
