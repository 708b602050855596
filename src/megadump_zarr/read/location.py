"""Where a dump lives: turn a path or URL into a read-only zarr store, and read keys from it.

Every read of the read layer goes through the zarr ``Store`` made here (``LocalStore`` for plain paths
and ``file://`` URLs, ``FsspecStore`` for ``s3://``, ``memory://``, ... URLs), so a wrapper store (for
example one that counts chunk reads) sees every byte the reader asks for. JSON documents are fetched
with one ``get`` each, concurrently when there are several.

The store is the stored one: a window's task-record packs are read where they are, row by row
(:mod:`megadump_zarr.read.pack_rows`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
import gc
import json
import os
from typing import Any

from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import FsspecStore, LocalStore, StorePath

__all__ = [
    "DumpLocation",
    "get_bytes",
    "get_json",
    "get_many",
    "list_dir",
    "list_dirs",
    "list_prefix",
    "open_location",
    "parse_json",
    "store_path",
]

_GC_PAUSE_BYTES = 1 << 20  # documents larger than this are parsed with the cyclic GC paused


@dataclass(frozen=True)
class DumpLocation:
    """A dump root opened for reading.

    Args:
        store: Read-only zarr store whose root is the dump root.
        url: The root as the user gave it (path or URL), for messages and ``repr``.
        storage_options: The options it was opened with (kept so that workers can re-open the same root;
            never shown in ``repr``).
    """

    store: Store
    url: str
    storage_options: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


def open_location(url: str | os.PathLike[str] | Store, storage_options: dict[str, Any] | None = None) -> DumpLocation:
    """Open a dump root as a read-only zarr store.

    Args:
        url: A local directory, a ``file://`` URL, any fsspec URL (``s3://bucket/prefix``,
            ``memory://name``, ...), or an already opened zarr ``Store`` whose root is the dump root.
        storage_options: fsspec options for URL roots (for example ``{"endpoint_url": ...}``); ignored
            for local paths and ``Store`` objects.

    Raises:
        ValueError: A local path that does not exist or is not a directory; for ``s3://``, an AWS configuration
            that cannot work (unknown profile, no credentials, malformed endpoint, plain HTTP refused).
    """
    if isinstance(url, Store):
        return DumpLocation(url, str(url))
    text = os.fspath(url)
    if text.startswith("file://"):
        text = text[len("file://") :]
    if "://" not in text:
        path = os.path.abspath(os.path.expanduser(text))
        if not os.path.isdir(path):
            what = "does not exist" if not os.path.exists(path) else "is not a directory"
            raise ValueError(f"{text} is not a megadump_zarr dump root: the path {what}")
        return DumpLocation(LocalStore(path, read_only=True), text)
    from megadump_zarr.store.object_clients import S3_SCHEMES, s3_config

    options = dict(storage_options or {})
    fs_options = dict(options)
    if text.split("://", 1)[0].lower() in S3_SCHEMES:
        # an AWS configuration that cannot work fails here, in one line, resolved as writes and uploads resolve it
        s3_config(options)
        # s3fs otherwise sends a HEAD before every whole-object GET (to split big objects into concurrent
        # ranges): two requests per document and chunk, for chunks far below its 50 MiB block size
        fs_options.setdefault("max_concurrency", 1)
    store = FsspecStore.from_url(text.rstrip("/"), storage_options=fs_options, read_only=True)
    return DumpLocation(store, text, options)


def store_path(store: Store, key: str) -> StorePath:
    """A ``StorePath`` for a group or array below the root (what xarray and zarr open).

    Args:
        store: The dump store.
        key: Path relative to the root.
    """
    return StorePath(store, key)


async def _get(store: Store, key: str) -> bytes | None:
    buffer = await store.get(key, prototype=default_buffer_prototype())
    return None if buffer is None else buffer.to_bytes()


def get_bytes(store: Store, key: str) -> bytes | None:
    """The bytes stored at ``key``, or ``None`` when absent.

    Args:
        store: The dump store.
        key: Key relative to the root.
    """
    return sync(_get(store, key))


def get_many(store: Store, keys: Sequence[str]) -> list[bytes | None]:
    """Fetch several keys concurrently (one ``get`` each); ``None`` for absent ones.

    Args:
        store: The dump store.
        keys: Keys relative to the root.
    """
    if not keys:
        return []

    async def run() -> list[bytes | None]:
        return list(await asyncio.gather(*(_get(store, key) for key in keys)))

    return sync(run())


def get_json(store: Store, key: str) -> dict[str, Any] | None:
    """Parse the JSON document at ``key`` (``None`` when absent).

    Args:
        store: The dump store.
        key: Key relative to the root, e.g. ``rank_0/window_0000/zarr.json``.

    Raises:
        ValueError: The document is not valid JSON (names the key).
    """
    raw = get_bytes(store, key)
    return None if raw is None else parse_json(raw, key)


def parse_json(raw: bytes, key: str) -> dict[str, Any]:
    """Decode one ``zarr.json`` document.

    Args:
        raw: The bytes.
        key: Its key, for messages.

    Raises:
        ValueError: Not JSON, or not a JSON object.
    """
    collect = gc.isenabled() and len(raw) > _GC_PAUSE_BYTES
    if collect:  # a window document holds ~10^5 small objects: the cyclic GC would rescan them repeatedly
        gc.disable()
    try:
        doc = json.loads(raw)
    except ValueError as error:
        raise ValueError(f"{key} is not valid JSON: {error}") from None
    except RecursionError:
        raise ValueError(f"{key} is not a usable JSON document: nested too deeply") from None
    finally:
        if collect:
            gc.enable()
    if not isinstance(doc, dict):
        raise ValueError(f"{key} is not a JSON object")
    return doc


async def _collect(iterator: AsyncIterator[str]) -> list[str]:
    return [item async for item in iterator]


def list_dir(store: Store, prefix: str) -> list[str]:
    """Names directly below ``prefix`` (files and sub-directories), sorted.

    Args:
        store: The dump store.
        prefix: Key prefix without trailing slash (``""`` = the root).
    """
    names = sync(_collect(store.list_dir(prefix)))
    return sorted({name.strip("/") for name in names if name.strip("/")})


def list_dirs(store: Store, prefixes: Sequence[str]) -> list[list[str]]:
    """:func:`list_dir` of several prefixes, listed concurrently (one request each on an object store).

    Args:
        store: The dump store.
        prefixes: Key prefixes without trailing slash.
    """
    if not prefixes:
        return []

    async def run() -> list[list[str]]:
        found = await asyncio.gather(*(_collect(store.list_dir(prefix)) for prefix in prefixes))
        return [sorted({name.strip("/") for name in names if name.strip("/")}) for names in found]

    return sync(run())


def list_prefix(store: Store, prefix: str) -> list[str]:
    """Every key below ``prefix`` (recursively), sorted.

    Args:
        store: The dump store.
        prefix: Key prefix ending with ``/``.
    """
    return sorted(sync(_collect(store.list_prefix(prefix))))
