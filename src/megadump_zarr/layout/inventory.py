"""The window inventory: every array a committed window holds, its metadata digest and its chunks' digests.

A window writes, before the document that marks it committed, one JSON object :data:`INVENTORY_FILE` next to
its ``zarr.json``::

    {"inventoryVersion": 1,
     "arrays": {"<array path below the window>": ["<metadata digest>", "<chunk digests>"], ...}}

- the **metadata digest** (:func:`metadata_digest`): the first 128 bits (32 lower-case hex digits) of the
  SHA-256 of the array's ``zarr.json`` document as compact JSON (``separators=(",", ":")``, ASCII, keys in their
  stored order), the form the writer stores it in (so the writer hashes its bytes as they are, and a reader
  re-encodes the document it parsed). Any edit of the document (a ``data_type``, a shape, an attribute), made
  consistently in every copy (the array's own document, its group's and its window's consolidated metadata),
  changes it.
- the **chunk digests**: 8 lower-case hex digits per stored chunk (a whole shard, for a sharded array), in the
  grid's C order. A chunk's digest is a function of its stored bytes alone (:func:`chunk_digest`): the
  trailing crc32c when they end with the crc32c of what precedes (every chunk of an array whose codec chain
  ends with ``crc32c``; the crc32c over such bytes is the constant :data:`CRC32C_RESIDUE`, which is how one
  crc32c pass tells, and checks, it); otherwise the first 32 bits of the BLAKE2b of all of them (a sharded
  array's shard: a crc32c over parts that each end with their own crc32c depends on their lengths only).
  ``--------`` marks a chunk its writer did not store. A chunk moved from another task, window or dump carries
  its own digest, not the one recorded for this place.

The window document records the SHA-256 of the inventory's bytes (:data:`INVENTORY_DIGEST_ATTR`), so an inventory
replaced on its own is named too. Cost: about ``len(path) + 45 + 8 * chunks`` bytes per array.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
import hashlib
import json
import re
from typing import Any

__all__ = [
    "ABSENT_CHUNK",
    "INVENTORY_DIGEST_ATTR",
    "INVENTORY_FILE",
    "INVENTORY_VERSION",
    "InventoryEntry",
    "InventoryError",
    "WindowInventory",
    "CRC32C_RESIDUE",
    "chunk_digest",
    "encode_inventory",
    "inventory_digest",
    "metadata_digest",
    "parse_inventory",
]

INVENTORY_FILE = "inventory.json"
"""The inventory's file name, next to the window's ``zarr.json``."""
INVENTORY_VERSION = 1
"""The version of the inventory's vocabulary (``inventoryVersion``)."""
INVENTORY_DIGEST_ATTR = "inventorySha256"
"""The window attribute holding the SHA-256 (64 hex digits) of the inventory's bytes."""
VERSION_KEY = "inventoryVersion"
ARRAYS_KEY = "arrays"
ABSENT_CHUNK = "--------"
"""The chunk digest of a chunk its writer did not store."""

_META = re.compile(r"[0-9a-f]{32}\Z")
_CHUNKS = re.compile(r"(?:[0-9a-f]{8}|-{8})*\Z")
CRC32C_RESIDUE = 0x48674BC7
"""The crc32c of any bytes followed by their own little-endian crc32c."""
_ENCODER = json.JSONEncoder(allow_nan=True, separators=(",", ":"))


class InventoryError(ValueError):
    """An inventory that does not parse or does not follow this vocabulary; the message names the field."""


def metadata_digest(doc: Mapping[str, Any] | bytes) -> str:
    """The 32-hex-digit digest of an array document: its compact JSON bytes (as written), or a parsed document.

    Args:
        doc: The document's compact JSON bytes as the writer stores them, or the document parsed.
    """
    data = bytes(doc) if isinstance(doc, (bytes, bytearray, memoryview)) else _ENCODER.encode(doc).encode()
    return hashlib.sha256(data).hexdigest()[:32]


def chunk_digest(data: Any) -> tuple[int, bool]:
    """A stored chunk's digest, and whether the chunk ends with a valid crc32c of the rest of its bytes.

    Args:
        data: The stored bytes (any C-contiguous buffer, or a tuple of them written one after another).

    Returns:
        ``(digest, trailing)``: with ``trailing``, the digest is the chunk's trailing crc32c; otherwise the
        first 32 bits of the BLAKE2b of all its bytes.
    """
    import google_crc32c
    import numpy as np

    parts = data if isinstance(data, tuple) else (data,)
    crc = 0
    views = [np.frombuffer(part, dtype=np.uint8) for part in parts]
    for view in views:
        if view.size:
            crc = google_crc32c.extend(crc, view)
    if crc != CRC32C_RESIDUE:  # a hash, not the crc: a crc over self-checksummed parts depends on their lengths only
        digest = hashlib.blake2b(digest_size=4)
        for view in views:
            digest.update(view)
        return int.from_bytes(digest.digest(), "big"), False
    tail = b"".join(bytes(v) for v in views[-2:])[-4:] if len(views) > 1 else bytes(views[0][-4:])
    return int.from_bytes(tail, "little"), True


@dataclass(frozen=True)
class InventoryEntry:
    """One array of an inventory.

    Args:
        metadata: The document's digest (:func:`metadata_digest`).
        chunks: One digest per stored chunk in grid C order (``None``: its writer stored none there).
    """

    metadata: str
    chunks: tuple[int | None, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.metadata, str) or not _META.match(self.metadata):
            raise InventoryError(f"InventoryEntry.metadata {self.metadata!r} is not 32 lower-case hex digits")


@dataclass(frozen=True)
class WindowInventory:
    """A window's inventory: array path below the window -> :class:`InventoryEntry`.

    Args:
        arrays: The entries.
    """

    arrays: Mapping[str, InventoryEntry]


def inventory_digest(data: bytes) -> str:
    """The SHA-256 (64 hex digits) of an inventory's bytes, as the window attribute records it.

    Args:
        data: The inventory file's bytes.
    """
    return hashlib.sha256(data).hexdigest()


def encode_inventory(arrays: Mapping[str, tuple[str, list[int | None]]]) -> bytes:
    """The inventory file bytes for ``path -> (metadata digest, chunk digests)`` (no validation: the writer's own).

    Args:
        arrays: Array path below the window -> metadata digest and chunk digests in grid order.
    """
    body = {
        path: [meta, "".join(ABSENT_CHUNK if c is None else f"{c:08x}" for c in chunks)]
        for path, (meta, chunks) in sorted(arrays.items())
    }
    return json.dumps({VERSION_KEY: INVENTORY_VERSION, ARRAYS_KEY: body}, separators=(",", ":")).encode()


def parse_inventory(data: bytes, where: str = INVENTORY_FILE) -> WindowInventory:
    """Parse and validate an inventory file.

    Args:
        data: Its bytes.
        where: Its key, for messages.

    Raises:
        InventoryError: It does not parse, its version is not :data:`INVENTORY_VERSION`, or an entry is malformed
            (the message names the field and the bad value).
    """
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as error:
        raise InventoryError(f"{where} does not parse as JSON: {error}") from None
    if not isinstance(doc, dict):
        raise InventoryError(f"{where} is not a JSON object")
    version = doc.get(VERSION_KEY)
    if version != INVENTORY_VERSION or isinstance(version, bool):
        raise InventoryError(f"{where}: {VERSION_KEY} {version!r} is not {INVENTORY_VERSION}")
    arrays = doc.get(ARRAYS_KEY)
    if not isinstance(arrays, dict):
        raise InventoryError(f"{where}: {ARRAYS_KEY} {type(arrays).__name__} is not a JSON object")
    entries: dict[str, InventoryEntry] = {}
    for path, value in arrays.items():
        if (
            not isinstance(value, list)
            or len(value) != 2
            or not all(isinstance(v, str) for v in value)
            or not _META.match(value[0])
            or not _CHUNKS.match(value[1])
        ):
            shown = json.dumps(value)[:80]
            raise InventoryError(
                f"{where}: {ARRAYS_KEY}[{path!r}] {shown} is not [32 hex digits, 8 hex digits per chunk]"
            )
        text = value[1]
        chunks = tuple(
            None if text[i : i + 8] == ABSENT_CHUNK else int(text[i : i + 8], 16) for i in range(0, len(text), 8)
        )
        entries[path] = InventoryEntry(value[0], chunks)
    return WindowInventory(entries)
