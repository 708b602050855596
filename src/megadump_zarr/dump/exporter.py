"""The background exporter: windows leave the step thread through a bounded, memory-budgeted queue."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
import threading
from typing import Any

__all__ = ["BackgroundExporter", "ExportError"]


class ExportError(RuntimeError):
    """One or more windows failed to export in the background; raised on the step thread at the next
    step, ``flush`` or exit. The message names every failed window.

    Args:
        failures: ``(label, error)`` per failed window, in the order they failed.

    Attributes:
        windows: The failed windows' labels (paths or URLs).
        errors: The underlying exceptions, one per window (the first is also ``__cause__``).
    """

    def __init__(self, failures: list[tuple[str, BaseException]]) -> None:
        if not failures:
            raise ValueError("ExportError needs at least one failure")
        self.windows = tuple(label for label, _ in failures)
        self.errors = tuple(error for _, error in failures)
        if len(failures) == 1:
            message = f"background export of {failures[0][0]} failed: {failures[0][1]!r}"
        else:
            message = f"background export of {len(failures)} windows failed: " + "; ".join(
                f"{label}: {error!r}" for label, error in failures
            )
        super().__init__(message)


class BackgroundExporter:
    """Runs export jobs on one background thread, in submission order.

    The step thread only waits when the bytes already queued plus the new job's would exceed the
    budget (back-pressure; a single job larger than the budget still runs, alone). Nothing is ever
    dropped. Every job's exception is kept (later jobs still run) and reported, all failures in one
    ``ExportError``, by the next ``raise_if_failed`` or ``flush`` on the caller's thread, or taken with
    ``take_failures``. ``submit`` never raises an earlier job's failure: a submitted job always runs.

    Args:
        budget_bytes: Most host bytes held by queued and running jobs.
    """

    def __init__(self, budget_bytes: int) -> None:
        if budget_bytes <= 0:
            raise ValueError(f"budget_bytes must be positive, got {budget_bytes}")
        self.budget_bytes = budget_bytes
        self._jobs: deque[tuple[Callable[[], Any], int, str, Any]] = deque()
        self._held = 0
        self._running = False
        self._failures: list[tuple[str, BaseException]] = []
        self._finished: list[tuple[Any, Any]] = []
        self._closed = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._loop, name="megadump-exporter", daemon=True)
        self._thread.start()
        self.waited_seconds = 0.0

    @property
    def held_bytes(self) -> int:
        """Bytes of queued and running jobs."""
        with self._cond:
            return self._held

    def submit(self, job: Callable[[], Any], nbytes: int, label: str, tag: Any = None) -> None:
        """Queue ``job``; block while the memory budget is exhausted.

        Args:
            job: The export work; its return value is reported by ``take_finished``.
            nbytes: Host bytes the job keeps alive until it finishes.
            label: Name for messages (the window's path).
            tag: Reported with the result by ``take_finished``.
        """
        import time

        start = time.perf_counter()
        with self._cond:
            if self._closed:
                raise RuntimeError("the background exporter is closed")
            while self._held and self._held + nbytes > self.budget_bytes:
                self._cond.wait()
            self._jobs.append((job, nbytes, label, tag))
            self._held += nbytes
            self._cond.notify_all()
        self.waited_seconds += time.perf_counter() - start

    def raise_if_failed(self) -> None:
        """Raise one ``ExportError`` naming every failure not yet reported (each is reported once)."""
        failures = self.take_failures()
        if failures:
            raise ExportError(failures) from failures[0][1]

    def take_failures(self) -> list[tuple[str, BaseException]]:
        """``(label, error)`` of the jobs that failed since the last call, in failing order."""
        with self._cond:
            failures, self._failures = self._failures, []
        return failures

    def wait(self) -> None:
        """Wait until every queued job has finished (failures stay kept)."""
        with self._cond:
            while self._jobs or self._running:
                self._cond.wait()

    def flush(self) -> None:
        """Wait until every queued job has finished; raise the failures (see ``raise_if_failed``)."""
        self.wait()
        self.raise_if_failed()

    def take_finished(self) -> list[tuple[Any, Any]]:
        """(tag, result) of jobs finished since the last call, in finishing order."""
        with self._cond:
            finished, self._finished = self._finished, []
        return finished

    def close(self) -> None:
        """Finish queued work and stop the thread (failures are kept; call ``raise_if_failed``)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._jobs and not self._closed:
                    self._cond.wait()
                if not self._jobs:
                    return
                job, nbytes, label, tag = self._jobs.popleft()
                self._running = True
            try:
                result = job()
            except BaseException as error:  # kept for the step thread; later jobs still run
                with self._cond:
                    self._failures.append((label, error))
            else:
                with self._cond:
                    self._finished.append((tag, result))
            finally:
                with self._cond:
                    self._held -= nbytes
                    self._running = False
                    self._cond.notify_all()
