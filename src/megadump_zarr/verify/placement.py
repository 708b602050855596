"""Chunks bound to their place: a checksum-valid chunk must be the one its array recorded for that grid position.

See :mod:`megadump_zarr.store.chunk_digests` for what the writer records (``chunkCrc32c``). Used by
:func:`megadump_zarr.verify.chunks.check_chunks`, which already holds every chunk's bytes.
"""

from __future__ import annotations

from typing import Any

__all__ = ["check_place", "placement"]


def placement(state: Any, array_key: str, doc: dict[str, Any], keys: list[str]) -> dict[str, int] | None:
    """The crc32c each chunk key must carry (``store.chunk_digests``), or ``None`` when the array is not bound.

    Args:
        state: The window's check state (a malformed attribute is a problem, a missing one a note).
        array_key: The array's key.
        doc: Its document.
        keys: Its chunk keys in grid order.
    """
    from megadump_zarr.read.integrity import has_crc32c
    from megadump_zarr.store.chunk_digests import digests_of

    digests = digests_of(doc.get("attributes"), len(keys))
    if isinstance(digests, str):
        state.add(f"{array_key}/zarr.json", digests)
        return None
    if digests is None:
        state.unbound += 1 if has_crc32c(doc) and keys else 0
        return None
    return dict(zip(keys, digests))


def check_place(state: Any, key: str, raw: Any, place: dict[str, int] | None) -> bool:
    """A checksum-valid chunk is the one its array recorded for this place; returns whether it is not."""
    if place is None or key not in place or len(raw) < 4:
        return False
    stored = int.from_bytes(bytes(raw[-4:]), "little")
    if stored == place[key]:
        return False
    state.add(
        key,
        f"chunk holds crc32c {stored:#010x} but attributes.chunkCrc32c records {place[key]:#010x} for this "
        f"place: a chunk valid elsewhere (copied from another window, step or array, or swapped with another)",
    )
    return True
