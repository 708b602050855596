"""Follow a dump while it is written: :func:`watch` polls the root (local or object store), across ranks, and
yields events for each window as soon as it is committed; windows still being written are never read.

::

    from megadump_zarr import watch

    for event in watch("s3://bucket/run", interval=2.0, storage_options={...}):
        if event.__class__.__name__ == "AnomalyEvent":
            print(event.describe())
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
import json
import time
from typing import Any

import pandas as pd

from megadump_zarr.analyse.replicas import ReplicaTracker
from megadump_zarr.analyse.watch_events import (
    SOURCE_REPLICA,
    AnomalyEvent,
    StepEvent,
    WatchEvent,
    WindowEvent,
    window_events,
)
from megadump_zarr.layout.recorder import RECORDER_REPLICAS

__all__ = ["AnomalyEvent", "StepEvent", "WatchEvent", "WindowEvent", "watch"]

_COMMITTED = ("complete", "aborted")


def _check(interval: Any, timeout: Any) -> None:
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not interval > 0:
        raise ValueError(f"watch interval must be a positive number of seconds, got {interval!r}")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0):
        raise ValueError(f"watch timeout must be None or a number of seconds >= 0, got {timeout!r}")


def watch(
    root: Any,
    *,
    storage_options: dict[str, Any] | None = None,
    interval: float = 1.0,
    once: bool = False,
    timeout: float | None = None,
    replicas: str | Iterable[str] | None = None,
    stop: Callable[[], bool] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    on_records: Callable[[pd.DataFrame], None] | None = None,
) -> Iterator[WatchEvent]:
    """Yield the events of a dump's committed windows as they appear (frozen dataclasses).

    Windows are taken in (rank, window) order within one poll; each window once. For each: a
    :class:`WindowEvent`, its :class:`StepEvent` rows (newest statistics per step × stage × owner or core),
    then an :class:`AnomalyEvent` when the window names one (a flight recorder's trigger, or NaN/Inf in its
    stored statistics), and replica divergences across ranks (kind ``replica``).

    Args:
        root: The dump root (path or URL).
        storage_options: Object-store options.
        interval: Seconds between polls.
        once: Read what is committed now and stop (the root must exist; a local directory with nothing
            committed yet gives no event).
        timeout: Stop after this many seconds (None: never; a local root that does not exist yet is waited for
            where its parent directory exists).
        replicas: Shell-style tensor name patterns of records that should be identical on every rank (windows
            written by a flight recorder with ``replicas`` add theirs).
        stop: Called between polls; true stops the watch.
        sleep: How to wait between polls.
        on_records: Called with each committed window's rows of ``Dump.records()`` before its events
            (e.g. to write them as TensorBoard scalars).

    Raises:
        ValueError: A bad interval or timeout; a local root whose parent directory does not exist; with ``once``,
            a root that is not a dump.
    """
    _check(interval, timeout)
    _check_parent(str(root))
    patterns = () if replicas is None else ((replicas,) if isinstance(replicas, str) else tuple(replicas))
    tracker = ReplicaTracker(patterns)
    deadline = None if timeout is None else time.monotonic() + float(timeout)
    dump = None
    seen: set[tuple[int, int]] = set()
    while True:
        if dump is None:
            dump = _open(root, storage_options, once)
        if dump is not None:
            yield from _poll(dump, seen, tracker, on_records)
        if once or (stop is not None and stop()):
            return
        if deadline is not None and time.monotonic() >= deadline:
            if dump is None:
                raise ValueError(f"{root} did not become a dump within {timeout:g} s")
            return
        sleep(interval)


def _open(root: Any, storage_options: dict[str, Any] | None, once: bool) -> Any:
    from megadump_zarr.read import open_dump

    text = str(root)
    if "://" in text and not text.startswith("file://"):
        # fsspec caches directory listings for the life of the file system: new windows would never appear
        storage_options = {"use_listings_cache": False, **(storage_options or {})}
    try:
        return open_dump(root, storage_options=storage_options)
    except (ValueError, OSError):
        if once and not _unwritten(text):
            raise
        return None  # not written yet: the root's document comes with the first committed window


def _check_parent(text: str) -> None:
    """A local root is waited for only where its parent directory exists (the job that writes it creates the
    root itself): a root whose parent is missing too is a mistyped path, refused at once."""
    import os

    path = text[len("file://") :] if text.startswith("file://") else text
    if "://" in path or os.path.exists(path):
        return
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ValueError(f"{text}: no such dump, and its parent directory {parent} does not exist either")


def _unwritten(text: str) -> bool:
    """Whether a local root is a directory a dumper made and has not committed a window into yet (a flight
    recorder that never fired): empty, or only hidden entries (sidecars)."""
    import os

    path = text[len("file://") :] if text.startswith("file://") else text
    if "://" in path or not os.path.isdir(path):
        return False
    return all(name.startswith(".") for name in os.listdir(path))


def _poll(
    dump: Any, seen: set[tuple[int, int]], tracker: ReplicaTracker, on_records: Callable[[pd.DataFrame], None] | None
) -> Iterator[WatchEvent]:
    windows = dump.windows()
    fresh = windows[windows["status"].isin(_COMMITTED)]
    fresh = fresh[[(int(r), int(w)) not in seen for r, w in zip(fresh["rank"], fresh["window"])]]
    if fresh.empty:
        return
    records = dump.records(include_incomplete=True)
    for _, window in fresh.iterrows():
        rank, index = int(window["rank"]), int(window["window"])
        seen.add((rank, index))
        attrs = window_attrs(dump, str(window["path"]))
        mine = records[(records["rank"] == rank) & (records["window"] == index)] if len(records) else records
        if on_records is not None and len(mine):
            on_records(mine)
        yield from window_events(rank, index, str(window["status"]), attrs, mine)
        more = attrs.get(RECORDER_REPLICAS)
        if isinstance(more, list) and more:
            tracker.patterns = tuple(dict.fromkeys((*tracker.patterns, *(str(p) for p in more))))
        for divergence in tracker.add(mine):
            yield _replica_event(divergence)


def window_attrs(dump: Any, path: str) -> dict[str, Any]:
    """A committed window's attributes (its ``zarr.json``), read through the dump's store.

    Args:
        dump: The opened dump.
        path: The window's path relative to the root (``Dump.windows()["path"]``).
    """
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    raw = sync(dump.store.get(f"{path}/zarr.json", prototype=default_buffer_prototype()))
    if raw is None:
        return {}
    try:
        document = json.loads(raw.to_bytes())
    except ValueError:
        return {}
    attrs = document.get("attributes") if isinstance(document, dict) else None
    return attrs if isinstance(attrs, dict) else {}


def _replica_event(divergence: Any) -> AnomalyEvent:
    row = divergence.row

    def get(key: str) -> Any:
        value = row.get(key)
        return None if value is None or (isinstance(value, float) and pd.isna(value)) else value

    return AnomalyEvent(
        "replica",
        SOURCE_REPLICA,
        divergence.rank,
        divergence.window,
        divergence.step,
        get("kernel"),
        get("direction"),
        get("stage"),
        None if get("task_id") is None else int(get("task_id")),
        None,
        None,
        get("name"),
        get("io"),
        None if get("index") is None else int(get("index")),
        None,
        None,
        divergence.describe(),
    )
