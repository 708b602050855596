"""Checks against the window inventory (:mod:`megadump_zarr.layout.inventory`): every stored array is listed, every
listed array is stored, each array's document has its recorded digest, each chunk has its recorded digest.

:func:`load_inventory` reads and validates the inventory (and its SHA-256, which the window document records);
:func:`check_listed_arrays` compares the window's arrays and their documents with it; the chunk check
(:mod:`~megadump_zarr.verify.chunks`) compares each chunk it reads with its entry (:func:`check_chunk_digest`), the
chunks of a pack's stored arrays (which the readers describe as the records they hold) too.
"""

from __future__ import annotations

from typing import Any

from megadump_zarr.layout.inventory import (
    INVENTORY_DIGEST_ATTR,
    INVENTORY_FILE,
    InventoryEntry,
    InventoryError,
    inventory_digest,
    metadata_digest,
    parse_inventory,
)
from megadump_zarr.verify.report import CheckState, short

__all__ = [
    "check_chunk_digest",
    "check_listed_arrays",
    "load_inventory",
]


def load_inventory(state: CheckState, store: Any, window: str, attrs: dict[str, Any]) -> dict[str, InventoryEntry]:
    """The window's inventory, or ``{}`` with the problem added (absent, replaced, malformed).

    Args:
        state: The window's check state (``state.inventory`` is set).
        store: The dump store.
        window: The window key.
        attrs: The window document's attributes.
    """
    from megadump_zarr.read.location import get_bytes

    key = f"{window}/{INVENTORY_FILE}"
    recorded = attrs.get(INVENTORY_DIGEST_ATTR)
    raw = get_bytes(store, key)
    state.inventory = {}
    if raw is None:
        state.add(key, "the window inventory is missing: a committed window lists every array it holds there")
        return state.inventory
    if not isinstance(recorded, str) or inventory_digest(raw) != recorded:
        state.add(
            key,
            f"the inventory's SHA-256 {inventory_digest(raw)[:16]}... is not the one the window document records "
            f"(attributes.{INVENTORY_DIGEST_ATTR} {short(recorded)}): the inventory was replaced or edited",
        )
    try:
        state.inventory = dict(parse_inventory(raw, key).arrays)
    except InventoryError as error:
        state.add(key, str(error).removeprefix(f"{key}: "))
    return state.inventory


def check_listed_arrays(state: CheckState, window: str, stored: dict[str, Any]) -> None:
    """Every stored array is in the inventory with its document's digest, and every inventoried array is stored.

    Args:
        state: The window's check state (its ``inventory`` loaded).
        window: The window key.
        stored: The window's consolidated metadata as stored (path -> document).
    """
    inventory = state.inventory or {}
    arrays = {p: d for p, d in stored.items() if isinstance(d, dict) and d.get("node_type") == "array"}
    for path in sorted(set(arrays) - set(inventory)):
        state.add(
            f"{window}/{path}",
            "array is not in the window inventory: its writer did not write it there (added or moved in)",
        )
    for path in sorted(set(inventory) - set(arrays)):
        state.add(f"{window}/{path}", "array is in the window inventory but the window does not hold it")
    for path in sorted(set(arrays) & set(inventory)):
        digest = metadata_digest(arrays[path])
        if digest != inventory[path].metadata:
            state.add(
                f"{window}/{path}/zarr.json",
                f"the array's document has digest {digest} but the window inventory records "
                f"{inventory[path].metadata}: the document was edited (in every copy)",
            )


def check_chunk_digest(state: CheckState, window: str, path: str, index: int, key: str, digest: int) -> bool:
    """Chunk ``index`` (grid C order) of the array at ``path`` has its inventory digest; returns whether it has not.

    Args:
        state: The window's check state.
        window: The window key.
        path: The array's path below the window (arrays not in the inventory are named by
            :func:`check_listed_arrays`).
        index: The chunk's position in grid C order.
        key: The chunk's key (for the message).
        digest: Its digest (:func:`~megadump_zarr.layout.inventory.chunk_digest`).
    """
    entry = (state.inventory or {}).get(path)
    if entry is None:
        return False
    if index >= len(entry.chunks):
        state.add(key, f"chunk is not in the window inventory ({len(entry.chunks)} chunk(s) listed for its array)")
        return True
    recorded = entry.chunks[index]
    if recorded is None or recorded == digest:
        return False
    state.add(
        key,
        f"chunk has digest {digest:08x} but the window inventory records {recorded:08x} for this place: a chunk "
        f"from elsewhere (another task, window or dump, or swapped with another)",
    )
    return True
