"""The records table of a many-window dump built on a dask cluster: one task per window.

``Dump.records()`` parses every window's consolidated metadata and builds one table per window, in one
process: for hundreds of ranks with thousands of records each, that is the cost of ``stats``,
``first_nonfinite`` and the matching step of ``compare``. :func:`prefetch_records` hands the per-window
tables to the workers of the active ``distributed.Client`` (each worker opens the dump from its URL and
reads only the windows it is given) and puts the results in the dump's own per-window cache, so the next
``dump.records()`` returns, from the cache, exactly the table the local run would have built (the same
function on the same documents). Without an active client, or for a dump opened from a ``Store`` object,
it does nothing and ``records()`` works as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from megadump_zarr.analyse.parallel import active_client, map_ordered

__all__ = ["WindowUnit", "prefetch_records", "window_frame"]


@dataclass(frozen=True)
class WindowUnit:
    """One window's records table to build on a worker.

    Args:
        source: The dump (:class:`~megadump_zarr.read.source.DumpSource`: URL + storage options).
        key: The window's key (``rank_3/window_0001``).
    """

    source: Any
    key: str

    @property
    def label(self) -> str:
        return f"{self.source.url}/{self.key}"


def window_frame(unit: WindowUnit) -> Any:
    """The records table of one committed window (runs on a worker).

    Args:
        unit: Where the window is.

    Raises:
        ValueError: The window is missing or not committed (the message names it).
    """
    return unit.source.open().window_records(unit.key)


def prefetch_records(dump: Any) -> Any:
    """Build ``dump``'s per-window records tables on the active dask cluster; return ``dump``.

    Only committed windows whose table is not cached yet are sent (a committed window never changes); a
    torn window's table is built locally by ``records(include_incomplete=True)`` as always.

    Args:
        dump: An opened :class:`~megadump_zarr.read.dump.Dump` (anything else is returned unchanged).
    """
    if active_client() is None or not hasattr(dump, "unbuilt_windows"):
        return dump
    from megadump_zarr.read.source import DumpSource

    source = DumpSource.of(dump)
    if source is None:
        return dump
    infos = dump.unbuilt_windows()
    if len(infos) < 2:
        return dump
    frames = map_ordered(window_frame, [WindowUnit(source, info.key) for info in infos])
    dump.keep_records({info.key: frame for info, frame in zip(infos, frames)})
    return dump
