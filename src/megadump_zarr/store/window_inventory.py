"""The writer's side of the window inventory (:mod:`megadump_zarr.layout.inventory`): every chunk it stores is
digested as it is written, and a committing window lists every array it holds with those digests.

:class:`ChunkDigests` is the backend's ``observer`` (``store.backend.Backend.observer``): each ``put`` of a key that
is not a ``zarr.json`` records the chunk's digest (one crc32c pass over its bytes, :func:`chunk_digest`). Whatever
writes a window's arrays (records, coordinates, statistics tables, packs) writes through the backend, so every
array the window lists at commit is covered without the code that writes it knowing. :func:`inventory_bytes` turns
the window's nodes (path -> array document bytes) into the inventory file; the chunks of each array are the
recorded keys below it, in grid order.
"""

from __future__ import annotations

from collections.abc import Mapping
import re
import threading
from typing import Any

from megadump_zarr.layout.inventory import INVENTORY_FILE, chunk_digest, encode_inventory, metadata_digest

__all__ = ["ChunkDigests", "inventory_bytes"]

_COORDS = re.compile(r"(?:c[./])?([0-9]+(?:[./][0-9]+)*)\Z|c\Z")


class ChunkDigests:
    """Digests of the chunks written through a backend, by key (thread-safe; one dict item per chunk)."""

    def __init__(self) -> None:
        self._digests: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, key: str, data: Any) -> None:
        name = key.rpartition("/")[2]
        if name == "zarr.json" or name == INVENTORY_FILE or name.startswith("."):
            return
        digest, _ = chunk_digest(data)
        self._digests[key] = digest

    def take(self, window: str) -> dict[str, int]:
        """Remove and return the digests recorded below ``window`` (key relative to the window -> digest).

        Args:
            window: The window's key.
        """
        prefix = window + "/"
        with self._lock:
            mine = [k for k in self._digests if k.startswith(prefix)]
            return {k[len(prefix) :]: self._digests.pop(k) for k in mine}


def _grid_position(name: str) -> tuple[int, ...] | None:
    """The grid coordinates of chunk key ``name`` (relative to its array), or ``None`` when it is not one."""
    parts = name[2:].split(".") if name.startswith("c.") and name.isascii() else None
    if parts and all(p.isdigit() for p in parts):
        return tuple(int(p) for p in parts)
    match = _COORDS.match(name)
    if match is None:
        return None
    text = match.group(1)
    return () if text is None else tuple(int(p) for p in re.split(r"[./]", text))


def inventory_bytes(arrays: Mapping[str, bytes], digests: Mapping[str, int]) -> bytes:
    """The inventory file of a window: each array's metadata digest and its recorded chunks' digests.

    Args:
        arrays: Array path below the window -> its document bytes (compact JSON, as written).
        digests: Chunk key below the window -> digest (:meth:`ChunkDigests.take`).
    """
    by_array: dict[str, list[tuple[tuple[int, ...], int]]] = {path: [] for path in arrays}
    for key, digest in digests.items():
        path, _, name = key.rpartition("/")
        bucket = by_array.get(path)  # "."-separated chunk keys (the writer's): the array is the parent
        if bucket is not None:
            position = _grid_position(name)
            if position is not None:
                bucket.append((position, digest))
            continue
        cut = key.rfind("/")
        while cut > 0:  # the nearest enclosing array ("/"-separated chunk keys have several components)
            path = key[:cut]
            if path in by_array:
                position = _grid_position(key[cut + 1 :])
                if position is not None:
                    by_array[path].append((position, digest))
                break
            cut = key.rfind("/", 0, cut)
    entries: dict[str, tuple[str, list[int | None]]] = {}
    for path, document in arrays.items():
        chunks = by_array[path] if len(by_array[path]) < 2 else sorted(by_array[path])
        entries[path] = (metadata_digest(document), [digest for _, digest in chunks])
    return encode_inventory(entries)
