"""Verify a dump: every committed window whole, or each problem named (``megadump verify``, ``verify_dump(dump)``).

:func:`verify_dump` lists the windows of a root and runs :func:`~megadump_zarr.verify.window.verify_window`
on each (see that module for what is checked). With an active ``distributed.Client`` the windows run as
dask tasks through ``megadump_zarr._parallel.map_ordered`` (each task opens the dump itself from its
URL and storage options); otherwise in this process, one after another, with a progress callback per chunk.

A raw msprobe directory (read in place, ``megadump_zarr.read.msprobe``) stores no checksums: the report says so
(:data:`MSPROBE_NOTE`, ``source="msprobe"``), and a tensor file the in-place reader refuses (missing, a size
or header that disagrees with ``dump.json``, an unsafe file) is a problem of the dump, not bad input.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
import functools
import os
from typing import Any

from megadump_zarr.verify.window import Problem, WindowCheck, verify_window

__all__ = ["MSPROBE_NOTE", "SOURCES", "Problem", "VerifyReport", "WindowCheck", "verify_dump", "verify_window"]

SOURCES = ("zarr", "msprobe")
"""What a verified root is: a megadump_zarr Zarr dump, or a raw msprobe directory read in place."""

MSPROBE_NOTE = (
    "an msprobe dump stores no checksums: verify checked that every tensor file its dump.json names is present "
    "and safe to read, that its size and header match the shape and dtype dump.json declares, and that every "
    "tensor decodes; a changed byte inside a tensor file cannot be found (--deep compares the data with "
    "msprobe's own statistics; megadump convert writes a dump with checksums)"
)
"""The note of every verification of a raw msprobe directory (what could and could not be checked)."""


@dataclass(frozen=True)
class VerifyReport:
    """The verification of a dump.

    Args:
        root: The dump root as given.
        windows: One check per window, ordered by (rank, window); torn windows have ``checked=False``.
        deep: Whether statistics were recomputed.
        source: One of :data:`SOURCES` (``msprobe``: a raw msprobe directory, which stores no checksums).
        notes: What the whole verification could not check and why (:data:`MSPROBE_NOTE`); never a problem.
        dump_problems: Problems of the dump as a whole, before any window (an msprobe tensor file refused);
            their ``window`` is ``""``.
    """

    root: str
    windows: tuple[WindowCheck, ...]
    deep: bool = False
    source: str = "zarr"
    notes: tuple[str, ...] = ()
    dump_problems: tuple[Problem, ...] = ()

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"VerifyReport.source {self.source!r} is not one of {list(SOURCES)}")
        if not all(isinstance(note, str) for note in self.notes):
            raise ValueError(f"VerifyReport.notes {self.notes!r} is not a tuple of strings")

    @property
    def problems(self) -> list[Problem]:
        """Every problem: the dump's own, then window by window."""
        return [*self.dump_problems, *(p for w in self.windows for p in w.problems)]

    @property
    def ok(self) -> bool:
        """No problem in any window."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (``megadump verify --json``)."""
        checked = [w for w in self.windows if w.checked]
        return {
            "root": self.root,
            "ok": self.ok,
            "deep": self.deep,
            "source": self.source,
            "checksums": self.source != "msprobe",
            "notes": list(self.notes),
            "windows_checked": len(checked),
            "windows_skipped": len(self.windows) - len(checked),
            "arrays": sum(w.arrays for w in checked),
            "chunks": sum(w.chunks for w in checked),
            "stored_bytes": sum(w.stored_bytes for w in checked),
            "problems": len(self.problems),
            "partial_windows": [w.window for w in self.windows if w.partial_launches or w.partial_records],
            "dump_problems": [{"key": p.key, "what": p.what} for p in self.dump_problems],
            "windows": [w.to_dict() for w in self.windows],
        }


def verify_dump(
    url: str | os.PathLike[str] | Any,
    storage_options: Mapping[str, Any] | None = None,
    *,
    deep: bool = False,
    windows: list[str] | None = None,
    progress: Callable[[str, int, int, int], None] | None = None,
) -> VerifyReport:
    """Verify every window of a dump root.

    Args:
        url: The dump root (local path, fsspec URL, or a zarr ``Store`` rooted at it), or an open
            ``megadump_zarr.read.dump.Dump`` (its store is checked, its root named in the report).
        storage_options: fsspec options for a URL root.
        deep: Also recompute each record's stored statistics from its data.
        windows: Only these window keys (``rank_0/window_0000``); default: every window.
        progress: Called as ``progress(window, windows_done, windows_total, chunk_bytes)`` while it runs
            (``chunk_bytes``: bytes just checked, 0 when a window finishes).

    Raises:
        ValueError: ``url`` is not a dump root (the message names it).
    """
    from megadump_zarr._parallel import active_client, map_ordered
    from megadump_zarr.read.catalog import check_root
    from megadump_zarr.read.dump import Dump
    from megadump_zarr.read.integrity import IntegrityStore
    from megadump_zarr.read.location import open_location
    from megadump_zarr.read.windows import window_dirs

    from zarr.abc.store import Store

    if isinstance(url, Dump):
        store = url.store.wrapped if isinstance(url.store, IntegrityStore) else url.store
        report = verify_dump(store, deep=deep, windows=windows, progress=progress)
        return VerifyReport(url.root, report.windows, report.deep, report.source, report.notes, report.dump_problems)
    text: Any = url if isinstance(url, Store) else os.fspath(url)
    from megadump_zarr.read.msprobe import msprobe_location

    try:
        msprobe = None if isinstance(text, Store) else msprobe_location(text)  # read in place: its store, once
    except ValueError as error:  # an msprobe directory whose files the reader refuses: what verify is for
        return VerifyReport(text, (), deep, "msprobe", (MSPROBE_NOTE,), (Problem("", text, str(error)),))
    if msprobe is not None:
        text = msprobe.store
    from megadump_zarr.read.msprobe.store import MsprobeStore

    in_place = isinstance(text, MsprobeStore)  # read in place (also an open Dump's)
    source, notes = ("msprobe", (MSPROBE_NOTE,)) if in_place else ("zarr", ())
    location = open_location(text, dict(storage_options or {}))
    check_root(location.store, location.url)
    keys = [key for _, _, key in window_dirs(location.store)] if windows is None else list(windows)
    total = len(keys)
    if active_client() is not None and total > 1:

        def report(done: int, count: int) -> None:
            if progress is not None:
                progress("", done, count, 0)

        # workers resolve a local path themselves: send it absolute (a remote cluster sees the same mount)
        where = text if not isinstance(text, str) or "://" in text else os.path.abspath(os.path.expanduser(text))
        one = functools.partial(verify_window, where, dict(storage_options or {}), deep=deep, msprobe=in_place)
        results = map_ordered(one, keys, progress=report)  # a partial of a module function: picklable for dask
        return VerifyReport(location.url, tuple(results), deep, source, notes)
    results = []
    for done, key in enumerate(keys):
        tick = (lambda n, _k=key, _d=done: progress(_k, _d, total, n)) if progress is not None else None
        results.append(verify_window(text, storage_options, key, deep=deep, tick=tick, msprobe=in_place))
        if progress is not None:
            progress(key, done + 1, total, 0)
    return VerifyReport(location.url, tuple(results), deep, source, notes)
