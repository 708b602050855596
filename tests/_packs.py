"""A stored pack's arrays along ``task`` and its rows, and edits of them written back as the writer writes them.

A pack (``store.packs``) keeps what each task group holds for its task as plain arrays along ``task`` (ids, row
bounds, offsets, statistics), each one raw chunk whose digest the window inventory lists. Tests
that read or damage rows use these helpers, so each test says what it changes, not how the format stores it.
"""

from __future__ import annotations

from collections.abc import Callable
import json
from pathlib import Path
import struct
from typing import Any

import google_crc32c
import numpy as np

from megadump_zarr.read.pack_columns import column_keys, decode_pack
from tests._layout import document_in_inventory, record_in_inventory

Rows = tuple[list[Any], dict[str, list[Any]]]


def _nodes(window: Path, pack: str) -> dict[str, dict[str, Any]]:
    base = window / pack
    nodes = {pack: json.loads((base / "zarr.json").read_text())} if (base / "zarr.json").is_file() else {}
    for doc in sorted(base.glob("*/zarr.json")):
        nodes[f"{pack}/{doc.parent.name}"] = json.loads(doc.read_text())
    return nodes


def _chunks(window: Path, pack: str, nodes: dict[str, Any]) -> dict[str, bytes | None]:
    found = {}
    for name, key in column_keys(pack, nodes).items():
        file = window / key
        found[name] = file.read_bytes() if file.is_file() else None
    return found


def stored_columns(window: Path, pack: str) -> dict[str, np.ndarray]:
    """Every array of a stored pack that is not a record, decoded (component -> values).

    Args:
        window: The window directory.
        pack: The pack's path relative to it (``invocation_000000_forward/stages/s/pack_0000``).
    """
    nodes = _nodes(window, pack)
    return {
        name: np.array(values)
        for name, values in decode_pack(pack, nodes, _chunks(window, pack, nodes), pack)[1].items()
    }


def stored_rows(window: Path, pack: str) -> Rows:
    """``(tasks, {record: rows})`` of a stored pack: each row's ``{"group", "attrs", "coords"}`` and each record's
    attributes per row, as the readers decode them.

    Args:
        window: The window directory.
        pack: The pack's path relative to it.
    """
    nodes = _nodes(window, pack)
    rows, _ = decode_pack(pack, nodes, _chunks(window, pack, nodes), pack)
    return rows.tasks, rows.records


def edit_document(window: Path, pack: str, component: str, edit: Callable[[dict[str, Any]], None]) -> None:
    """Apply ``edit`` to a pack array's document in all three copies: its own, the pack group's consolidated
    metadata and the window's (``component`` ``""``: the pack group's own document and the window's copy)."""
    if component:
        copies = [
            (window / pack / component / "zarr.json", ()),
            (window / pack / "zarr.json", ("consolidated_metadata", "metadata", component)),
            (window / "zarr.json", ("consolidated_metadata", "metadata", f"{pack}/{component}")),
        ]
    else:
        copies = [
            (window / pack / "zarr.json", ()),
            (window / "zarr.json", ("consolidated_metadata", "metadata", pack)),
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


def write_column(window: Path, pack: str, name: str, values: Any) -> None:
    """Overwrite one per-task array of a stored pack consistently, as the writer would have written it: its raw
    chunk with a valid crc32c, its shape in every copy of its document, and the chunk's and the document's digests
    in the window inventory (and the inventory's digest in the window document).

    Args:
        window: The window directory.
        pack: The pack's path relative to it.
        name: The array (``task_id``, ``token_start``, ``input_00_x_offset``, ...).
        values: Its new values (the array's dtype).
    """
    doc = json.loads((window / pack / name / "zarr.json").read_text())
    dtype = {"int64": "<i8", "float64": "<f8"}.get(doc["data_type"]) if isinstance(doc["data_type"], str) else None
    data = np.ascontiguousarray(
        np.asarray(values, dtype=dtype or f"<U{doc['data_type']['configuration']['length_bytes'] // 4}")
    )
    raw = data.tobytes()
    crc = google_crc32c.value(raw)
    key = "c" + ".0" * data.ndim
    (window / pack / name / key).write_bytes(raw + struct.pack("<I", crc))

    def rewrite(node: dict[str, Any]) -> None:
        node["shape"] = list(data.shape)
        node["chunk_grid"]["configuration"]["chunk_shape"] = [max(1, d) for d in data.shape]

    edit_document(window, pack, name, rewrite)
    root, array = window.parent.parent, f"{window.parent.name}/{window.name}/{pack}/{name}"
    record_in_inventory(root, f"{array}/{key}", raw + struct.pack("<I", crc))
    document_in_inventory(root, array)


def packed_tasks(window: Path, packs: list[str] | None = None, strict: bool = True) -> Any:
    """The task groups a window's stored packs stand for, as the readers find them
    (:class:`~megadump_zarr.read.pack_record.PackedTasks` of the packs read and checked by
    ``read.pack_checks.pack_tables``).

    Args:
        window: The window directory.
        packs: The packs' paths relative to it (default: every ``pack_*`` group below it).
        strict: A malformed pack raises (a committed window); else it is left out (a torn window's pack cut short).
    """
    from megadump_zarr.read.pack_checks import pack_tables
    from megadump_zarr.read.pack_record import PackedTasks

    if packs is None:
        packs = sorted(d.parent.relative_to(window).as_posix() for d in window.rglob("pack_*/zarr.json"))

    def fetch(keys: list[str]) -> list[bytes | None]:
        return [(window / key).read_bytes() if (window / key).is_file() else None for key in keys]

    return PackedTasks(pack_tables("", {pack: _nodes(window, pack) for pack in packs}, fetch, strict))
