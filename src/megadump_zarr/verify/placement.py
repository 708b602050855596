"""Chunks bound to their place: a checksum-valid chunk must be the one its array recorded for that grid position.

See :mod:`megadump_zarr.store.chunk_digests` for what the writer records (``chunkCrc32c``). Used by
:func:`megadump_zarr.verify.chunks.check_chunks`, which holds every chunk's bytes (a pack's as read with its whole
shard). A pack's record arrays bind whole shards instead (``shardCrc32c``, ``store.packs``; :func:`check_shard`, used by
``verify.packs``): the packed record arrays they hold are then bound, not counted as unbound.
"""

from __future__ import annotations

from typing import Any

__all__ = ["check_place", "check_shard", "placement", "shard_digests"]


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
    if digests is None:  # bound by the window inventory when there is one (``verify.inventory``)
        bound = state.inventory is not None or array_key in state.shard_bound
        state.unbound += 1 if has_crc32c(doc) and keys and not bound else 0
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


def shard_digests(state: Any, array_key: str, doc: dict[str, Any], count: int) -> list[int] | None:
    """The crc32c recorded for each of a pack record array's ``count`` shards (``shardCrc32c``), or ``None``.

    Args:
        state: The window's check state (a malformed attribute is a problem).
        array_key: The stored pack record array's key.
        doc: Its stored document.
        count: The shards its grid implies.
    """
    from megadump_zarr.store.packs import SHARD_DIGEST_ATTR

    attrs = doc.get("attributes")
    if not isinstance(attrs, dict) or SHARD_DIGEST_ATTR not in attrs:
        return None  # written before packs recorded it: its packed record arrays count as not bound
    text = attrs[SHARD_DIGEST_ATTR]
    try:
        if not isinstance(text, str) or len(text) != 8 * count:
            raise ValueError
        return [int(text[8 * i : 8 * i + 8], 16) for i in range(count)]
    except ValueError:
        shown = repr(text) if len(repr(text)) <= 40 else repr(text)[:37] + "..."
        state.add(
            f"{array_key}/zarr.json",
            f"attributes.{SHARD_DIGEST_ATTR} {shown} is not {count} crc32c value(s) of 8 hex digits (one per shard)",
        )
        return None


def check_shard(state: Any, key: str, raw: Any, count: int, recorded: int) -> None:
    """A pack shard has the digest its array recorded for this place (``store.packs.shard_digest``).

    Args:
        state: The window's check state.
        key: The shard's key.
        raw: Its stored bytes.
        count: Inner chunks per shard.
        recorded: The digest ``shardCrc32c`` records for it.
    """
    from megadump_zarr.store.packs import shard_digest_of

    try:
        actual = shard_digest_of(bytes(raw), count, key)
    except ValueError:
        return  # a damaged index is named by the chunk check (each of its rows' chunks)
    if actual != recorded:
        state.add(
            key,
            f"shard has digest {actual:#010x} but attributes.shardCrc32c records {recorded:#010x} for this place: "
            f"a shard valid elsewhere (copied from another window or step, or swapped with another)",
        )
