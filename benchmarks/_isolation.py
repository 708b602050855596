"""Isolated timed runs for file-system benchmarks: a fresh process per run, on a settled disk.

A contender that runs after another must not pay for it: not for its dirty pages (written back while the
later one runs), not for its deletions (on a disk mounted with ``discard`` the freed blocks are discarded
when the journal commits, which stalls the next writer's file creation), not for the heap, caches and
garbage the earlier one left in the process. So each timed run:

1. runs in a fresh Python process (:func:`run_isolated` starts it; the process builds its inputs untimed);
2. writes into a fresh directory nobody has written before;
3. starts only once the disk has settled: ``gc.collect()``, ``os.sync()``, then :func:`settle_disk` waits
   until the block device holding the directory has no request in flight, has issued no discard and has
   written less than :data:`QUIET_SECTORS` sectors over :data:`QUIET_S` seconds (up to :data:`SETTLE_TIMEOUT_S`;
   the seconds waited and whether it settled are in the run's result);
4. ends with ``os.sync()`` inside the timed region, so every contender pays for its own writes;
5. reports wall seconds, its own CPU seconds (``resource.getrusage(RUSAGE_SELF)`` of that process, every
   thread, over the timed region only) and its peak RSS above the start.

Outputs are kept (:class:`Retained`) until all timing is done, and removed at the end; only when keeping
them would exceed the byte budget are they removed earlier, then synced and settled before the next run.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
import gc
import json
import os
from pathlib import Path
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Iterator

from benchmarks._common import PeakRss

__all__ = [
    "QUIET_S",
    "QUIET_SECTORS",
    "SETTLE_TIMEOUT_S",
    "Retained",
    "retained",
    "run_isolated",
    "settle_disk",
    "timed_run",
]

QUIET_S = 0.5
QUIET_SECTORS = 8192  # 4 MiB: other processes' small writes do not count as unsettled
SETTLE_TIMEOUT_S = 15.0


def _block_device(path: Path) -> str | None:
    """The ``/proc/diskstats`` name of the block device holding ``path`` (its whole disk), or None."""
    dev = os.stat(path).st_dev
    link = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    try:
        resolved = link.resolve(strict=True)
    except OSError:
        return None
    if (resolved / "partition").exists():
        resolved = resolved.parent
    return resolved.name


def _disk_counters(device: str) -> tuple[int, int, int] | None:
    """``(in_flight, sectors_written, discards)`` of ``device`` from ``/proc/diskstats``."""
    try:
        lines = Path("/proc/diskstats").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) > 3 and fields[2] == device:
            discards = int(fields[14]) if len(fields) > 14 else 0
            return int(fields[11]), int(fields[9]), discards
    return None


def settle_disk(path: Path, timeout: float = SETTLE_TIMEOUT_S) -> tuple[float, bool]:
    """``os.sync()``, then wait until the disk holding ``path`` is quiet (see the module docstring).

    Args:
        path: A path on the benchmark disk.
        timeout: Most seconds to wait.

    Returns:
        ``(seconds waited, settled)``; ``settled`` is False when the timeout ran out (other processes'
        writes) or the device's counters cannot be read.
    """
    start = time.perf_counter()
    os.sync()
    device = _block_device(path)
    if device is None or _disk_counters(device) is None:
        return time.perf_counter() - start, False
    before = _disk_counters(device)
    while time.perf_counter() - start < timeout:
        time.sleep(QUIET_S)
        now = _disk_counters(device)
        assert before is not None and now is not None
        if now[0] == 0 and now[2] == before[2] and now[1] - before[1] < QUIET_SECTORS:
            return time.perf_counter() - start, True
        before = now
    return time.perf_counter() - start, False


def timed_run(run: Callable[[Path], Any], root: Path, settle_timeout: float = SETTLE_TIMEOUT_S) -> dict[str, Any]:
    """One timed run of ``run(root)`` in this process, on a settled disk, its own ``os.sync()`` included.

    Args:
        run: The contender.
        root: Its fresh output directory (must not exist).
        settle_timeout: Most seconds :func:`settle_disk` waits first.

    Returns:
        ``wall_s``, ``cpu_s`` (this process, user + system, every thread), ``peak_extra_rss``,
        ``settle_s``, ``settled`` and ``pid``.
    """
    if root.exists():
        raise FileExistsError(f"timed run: output {root} exists; every run writes a fresh directory")
    gc.collect()
    settle_s, settled = settle_disk(root.parent, settle_timeout)
    with PeakRss() as rss:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu_start = usage.ru_utime + usage.ru_stime
        start = time.perf_counter()
        run(root)
        os.sync()
        wall = time.perf_counter() - start
        usage = resource.getrusage(resource.RUSAGE_SELF)
        cpu = usage.ru_utime + usage.ru_stime - cpu_start
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "peak_extra_rss": rss.extra,
        "settle_s": settle_s,
        "settled": settled,
        "pid": os.getpid(),
    }


def run_isolated(module: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Run ``python -m module --worker SPEC`` in a fresh process and return the result it writes.

    Args:
        module: The benchmark module (its ``--worker`` mode calls :func:`timed_run` and writes the result to
            ``spec["result"]`` as JSON).
        spec: JSON-able description of the run; ``result`` is added here.
    """
    with tempfile.NamedTemporaryFile(prefix="megadump-bench-result-", suffix=".json", delete=False) as handle:
        result = Path(handle.name)
    try:
        command = [sys.executable, "-m", module, "--worker", json.dumps({**spec, "result": str(result)})]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"isolated run {spec} failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
        return json.loads(result.read_text())
    finally:
        result.unlink(missing_ok=True)


class Retained:
    """Output directories kept until all timing is done, below one scratch directory.

    Args:
        scratch: The scratch directory (removed by :meth:`clear`'s caller, see :func:`retained`).
        budget: Bytes of kept output past which :meth:`make_room` removes everything kept, then syncs and
            settles the disk.
        settle_timeout: Most seconds that settling waits.
    """

    def __init__(self, scratch: Path, budget: int, settle_timeout: float = SETTLE_TIMEOUT_S) -> None:
        self.scratch = scratch
        self.budget = budget
        self.settle_timeout = settle_timeout
        self.kept: list[tuple[Path, int]] = []
        self.early_clears = 0

    def fresh(self, name: str) -> Path:
        """A path below the scratch directory that does not exist yet (a numbered suffix when taken)."""
        path, n = self.scratch / name, 0
        while path.exists():
            n += 1
            path = self.scratch / f"{name}.{n}"
        return path

    def keep(self, path: Path, nbytes: int) -> None:
        """Remember an output to remove after timing."""
        self.kept.append((path, nbytes))

    def make_room(self, nbytes: int, protect: tuple[Path, ...] = ()) -> None:
        """Before a run writing about ``nbytes``: when the kept outputs plus it would pass the budget, remove
        the kept outputs (except ``protect``), ``os.sync()`` and settle the disk."""
        if sum(n for _, n in self.kept) + nbytes <= self.budget:
            return
        remaining = []
        for path, n in self.kept:
            if path in protect:
                remaining.append((path, n))
            else:
                shutil.rmtree(path, ignore_errors=True)
        self.kept = remaining
        self.early_clears += 1
        settle_disk(self.scratch, self.settle_timeout)

    def clear(self) -> None:
        """Remove every kept output (after all timing)."""
        for path, _ in self.kept:
            shutil.rmtree(path, ignore_errors=True)
        self.kept = []


@contextmanager
def retained(base: str | None, budget: int) -> Iterator[Retained]:
    """A :class:`Retained` over a fresh scratch directory, all removed at exit.

    Args:
        base: Parent directory (default: the system temp dir).
        budget: See :class:`Retained`.
    """
    scratch = Path(tempfile.mkdtemp(prefix="megadump-bench-", dir=base))
    keeper = Retained(scratch, budget)
    try:
        yield keeper
    finally:
        keeper.clear()
        shutil.rmtree(scratch, ignore_errors=True)
