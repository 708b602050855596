"""Shared benchmark helpers: timing medians, peak RSS sampling, tables, JSON output."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
import json
import os
import platform
import statistics
import threading
import time
from typing import Any

import psutil

__all__ = ["PeakRss", "machine", "median_time", "print_table", "sync_disk", "write_json"]


def sync_disk() -> None:
    """Flush dirty pages so every contender pays for its own disk writes (counted the same for all)."""
    os.sync()


class PeakRss:
    """Samples this process's RSS every 5 ms while active; ``extra`` is the peak above the start."""

    def __init__(self) -> None:
        self._process = psutil.Process()
        self.start = 0
        self.peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> PeakRss:
        self.start = self.peak = self._process.memory_info().rss
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self._process.memory_info().rss)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.peak = max(self.peak, self._process.memory_info().rss)

    @property
    def extra(self) -> int:
        """Peak RSS above the value at entry."""
        return max(self.peak - self.start, 0)


def median_time(run: Callable[[], Any], repeats: int) -> tuple[float, list[float]]:
    """Median wall time of ``repeats`` runs (each followed by a disk sync, included in its time).

    Args:
        run: The work.
        repeats: How many runs.
    """
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        sync_disk()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


def machine() -> str:
    """One line describing this machine."""
    return f"{platform.machine()} {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB, Python {platform.python_version()}"


def print_table(rows: list[dict[str, Any]], columns: list[tuple[str, str]]) -> None:
    """Print rows as a fixed-width table.

    Args:
        rows: Dicts.
        columns: (key, header) pairs.
    """
    cells = [[h for _, h in columns]] + [[_fmt(row.get(k)) for k, _ in columns] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    for n, r in enumerate(cells):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
        if n == 0:
            print("  ".join("-" * w for w in widths))


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}"
    return "" if value is None else str(value)


def write_json(path: str | None, entries: list[dict[str, Any]]) -> None:
    """Write the entries as JSON when a path was given.

    Args:
        path: Output file or None.
        entries: One dict per workload.
    """
    if path:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"machine": machine(), "entries": entries}, handle, indent=2)


@contextmanager
def scratch_dir(base: str | None = None) -> Iterator[str]:
    """A temporary directory on the benchmark disk, removed afterwards.

    Args:
        base: Parent directory (default: the system temp dir).
    """
    import shutil
    import tempfile

    path = tempfile.mkdtemp(prefix="megadump-bench-", dir=base)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
