"""Which backend stores a dump root: local paths, object stores (with retries), or any other fsspec URL."""

from __future__ import annotations

import os
from typing import Any

from megadump_zarr.store.backend import Backend, FsspecBackend, LocalBackend
from megadump_zarr.store.object_backend import OBJECT_STORE_SCHEMES, ObjectStoreBackend
from megadump_zarr.store.option_keys import check_storage_options

__all__ = ["open_backend"]


def open_backend(root: str | os.PathLike[str], storage_options: dict[str, Any] | None = None) -> Backend:
    """The backend for a dump root (object stores get :class:`ObjectStoreBackend`: retries, bounded concurrency).

    Args:
        root: Local path, ``file://`` URL (both local), or any other fsspec URL.
        storage_options: fsspec options (ignored for local roots).

    Raises:
        ValueError: A storage option the root's file system does not take (named, with the closest one).
    """
    text = os.fspath(root)
    check_storage_options(text, storage_options)
    if "://" not in text:
        return LocalBackend(text)
    if text.startswith("file://"):
        return LocalBackend(text[len("file://") :])
    if text.partition("://")[0].lower() in OBJECT_STORE_SCHEMES:
        return ObjectStoreBackend(text, storage_options)
    return FsspecBackend(text, storage_options)
