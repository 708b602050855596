"""Shared benchmark helpers: timing medians, peak RSS sampling, tables, JSON output.

Every benchmark's JSON (:func:`write_json`) carries a ``run`` record (:func:`run_info`): the date, the
cores this process may use, the load average when the run started (:func:`start_run`, called by each
benchmark's ``main``; import time otherwise) and when it ended, and the wall and CPU seconds in between
(CPU: ``resource.getrusage`` of this process and its waited-for children, user + system). On a shared
machine the wall times move with the other processes; the CPU seconds and the load average say how much.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
import json
import os
import platform
import resource
import statistics
import threading
import time
from typing import Any

import psutil

__all__ = [
    "PeakRss",
    "cpu_seconds",
    "machine",
    "median_time",
    "nproc",
    "print_table",
    "run_info",
    "start_run",
    "sync_disk",
    "write_json",
]

_RUN: dict[str, Any] = {}


def cpu_seconds() -> tuple[float, float]:
    """``(self, children)``: user + system CPU seconds of this process (all threads) and of its children
    that have been waited for, from ``resource.getrusage``."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def nproc() -> int:
    """The cores this process may run on (what ``nproc`` prints)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def start_run() -> None:
    """Mark the start of a benchmark run: the date, load average, wall and CPU clocks :func:`run_info` reports
    against. Each benchmark's ``main`` calls it first; importing this module calls it once too."""
    _RUN.update(date=datetime.now(timezone.utc), wall=time.perf_counter(), cpu=cpu_seconds(), load=os.getloadavg())


def run_info() -> dict[str, Any]:
    """The ``run`` record of a benchmark's JSON: since :func:`start_run`, what ran where and how loaded.

    Returns:
        ``date`` (start, ISO 8601 UTC), ``nproc``, ``cpu_count``, ``load_average_before`` /
        ``load_average_after`` (1, 5, 15 min), ``wall_s``, ``cpu_s`` (self + children), ``cpu_self_s``,
        ``cpu_children_s`` and ``max_rss_mib`` (peak resident set of this process so far).
    """
    own, children = cpu_seconds()
    own0, children0 = _RUN["cpu"]
    return {
        "date": _RUN["date"].isoformat(timespec="seconds"),
        "nproc": nproc(),
        "cpu_count": os.cpu_count(),
        "load_average_before": [round(x, 2) for x in _RUN["load"]],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "wall_s": time.perf_counter() - _RUN["wall"],
        "cpu_s": (own - own0) + (children - children0),
        "cpu_self_s": own - own0,
        "cpu_children_s": children - children0,
        "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


start_run()


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
    """Write ``{"machine", "run", "entries"}`` as JSON when a path was given (``run``: :func:`run_info`).

    Args:
        path: Output file or None.
        entries: One dict per workload.
    """
    if path:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump({"machine": machine(), "run": run_info(), "entries": entries}, handle, indent=2)


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
