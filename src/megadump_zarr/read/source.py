"""A dump root as a picklable recipe (URL + storage options) that workers open where they run.

A dask worker cannot receive an open :class:`~megadump_zarr.read.dump.Dump` (it holds an event loop's
clients and caches); it receives a :class:`DumpSource` and calls :meth:`DumpSource.open`, which opens the
root once per worker process and reuses it for every later task.

Credentials stay out of sight: ``repr``/``str`` show the options with every secret value replaced by
``***`` (:func:`megadump_zarr.store.redact.redact_options`), and dask's ``tokenize`` sees only the URL
and the redacted options, so no secret is hashed into a task key. Pickling keeps the real options: a
worker needs them to read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import json
import os
import threading
from typing import TYPE_CHECKING, Any

from megadump_zarr.store.redact import redact_options

if TYPE_CHECKING:
    from megadump_zarr.read.dump import Dump

__all__ = ["DumpSource"]

_OPEN: dict[tuple[int, str, str], Any] = {}
_OPEN_LOCK = threading.Lock()
_OPEN_LIMIT = 64


@dataclass(frozen=True, eq=False)
class DumpSource:
    """Where a dump lives, in a form that can be pickled to dask workers.

    Args:
        url: The dump root: a local path (absolute, so that workers resolve it the same way) or an
            fsspec URL (``s3://bucket/prefix``, ``file://...``).
        storage_options: fsspec options for URL roots (endpoint, credentials, ...).
    """

    url: str
    storage_options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url:
            raise ValueError(f"DumpSource.url must be a non-empty path or URL string, got {type(self.url).__name__}")
        if not isinstance(self.storage_options, dict):
            raise ValueError(f"DumpSource.storage_options must be a dict, got {type(self.storage_options).__name__}")
        if "://" not in self.url:
            object.__setattr__(self, "url", os.path.abspath(os.path.expanduser(self.url)))
        object.__setattr__(self, "storage_options", dict(self.storage_options))

    @classmethod
    def of(cls, dump: Dump) -> DumpSource | None:
        """The source an opened dump came from, or ``None`` when it was opened from a ``Store`` object.

        Args:
            dump: An opened dump.
        """
        from zarr.storage import FsspecStore, LocalStore

        location = dump.location
        store = location.store
        if isinstance(store, LocalStore):
            return cls(str(store.root))
        if isinstance(store, FsspecStore) and "://" in location.url:
            return cls(location.url, dict(location.storage_options or {}))
        from megadump_zarr.read.msprobe.store import MsprobeStore

        if isinstance(store, MsprobeStore):  # a worker opens the msprobe directory in place, as open_dump did
            return cls(str(store.root))
        return None

    @property
    def label(self) -> str:
        """The URL (used by :func:`megadump_zarr.analyse.parallel.map_ordered` to name a failing item)."""
        return self.url

    def _cache_key(self) -> tuple[int, str, str]:
        return (os.getpid(), self.url, json.dumps(self.storage_options, sort_keys=True, default=repr))

    def open(self) -> Dump:
        """The opened dump, shared by every task of this process that opens the same source."""
        from megadump_zarr.read.dump import open_dump

        key = self._cache_key()
        with _OPEN_LOCK:
            dump = _OPEN.get(key)
        if dump is None:
            dump = open_dump(self.url, self.storage_options or None)
            with _OPEN_LOCK:
                if len(_OPEN) >= _OPEN_LIMIT:
                    _OPEN.pop(next(iter(_OPEN)))
                dump = _OPEN.setdefault(key, dump)
        return dump

    def __repr__(self) -> str:
        if not self.storage_options:
            return f"DumpSource({self.url!r})"
        return f"DumpSource({self.url!r}, storage_options={redact_options(self.storage_options)!r})"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DumpSource) and self._cache_key()[1:] == other._cache_key()[1:]

    def __hash__(self) -> int:
        return hash(self._cache_key()[1:])

    def __dask_tokenize__(self) -> tuple[str, str, str]:
        return ("DumpSource", self.url, json.dumps(redact_options(self.storage_options), sort_keys=True, default=repr))
