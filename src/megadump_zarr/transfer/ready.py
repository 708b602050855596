"""``UploadOnReady``: an ``on_dump_ready`` callback that uploads each committed window in the background."""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
import os
from pathlib import Path
import threading
from typing import Any

from megadump_zarr.store.object_backend import ObjectStoreBackend, RetryPolicy, redact_options
from megadump_zarr.store.root_index import index_root
from megadump_zarr.transfer.upload import UploadError, UploadReport, upload_windows

__all__ = ["UploadOnReady"]


class UploadOnReady:
    """Upload the windows of a local dump as they are committed.

    Use as ``tensor_dump(config, on_dump_ready=UploadOnReady("s3://bucket/run", storage_options=...))``.
    Each call (the dumper calls it after each finalisation, with ``dumper.last_window_paths`` naming the
    committed windows) queues those windows; one background thread uploads them in order with
    :func:`~megadump_zarr.transfer.upload_windows` (parallel, verified, window document last) and, with
    ``delete_local``, removes each local window once verified. The training step never waits for the
    network.

    Failures never raise inside the dumper's callback; they are collected and raised, as one
    :class:`~megadump_zarr.transfer.UploadError`, by :meth:`wait` and :meth:`close` (also on leaving a
    ``with`` block). ``reports`` holds one :class:`UploadReport` per finished upload. The remote root's
    consolidated index is rebuilt once, by :meth:`close`, from what is remote.

    Args:
        url: Destination dump root (``s3://bucket/prefix``).
        storage_options: fsspec-style options; never stored or shown.
        delete_local: Remove each local window directory once its upload is verified.
        workers: Objects uploaded concurrently per window.
        retry: Retry policy (default: the object backend's default).
    """

    def __init__(
        self,
        url: str,
        storage_options: Mapping[str, Any] | None = None,
        *,
        delete_local: bool = False,
        workers: int = 16,
        retry: RetryPolicy | None = None,
    ) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be a positive integer, got {workers!r}")
        self.url = str(url).rstrip("/")
        self.delete_local = bool(delete_local)
        self.workers = workers
        self._options = dict(storage_options or {})
        self._retry = retry
        self._backend: ObjectStoreBackend | None = None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="megadump-upload-on-ready")
        self._pending: list[Future[UploadReport]] = []
        self._lock = threading.Lock()
        self._closed = False
        self.reports: list[UploadReport] = []
        self.errors: list[str] = []

    def __repr__(self) -> str:
        return (
            f"UploadOnReady({self.url!r}, storage_options={redact_options(self._options)!r}, "
            f"delete_local={self.delete_local})"
        )

    def __call__(self, dumper: Any) -> None:
        """Queue the windows the dumper just committed (``dumper.last_window_paths``).

        Args:
            dumper: The ``TensorDumper`` (its ``config.output_dir`` must be a local directory).
        """
        if self._closed:
            raise RuntimeError("UploadOnReady is closed")
        config = getattr(dumper, "config", None)
        if config is not None and getattr(config, "is_remote", False):
            raise ValueError(f"UploadOnReady uploads local dumps; this dump is written to {config.output_dir} already")
        paths = [Path(p) for p in getattr(dumper, "last_window_paths", ())]
        if not paths:
            return
        root = Path(config.output_dir) if config is not None else paths[0].parent.parent
        keys = [Path(os.path.relpath(p, root)).as_posix() for p in paths]
        future = self._executor.submit(self._upload, str(root), keys)
        with self._lock:
            self._pending.append(future)

    def _upload(self, root: str, keys: list[str]) -> UploadReport:
        if self._backend is None:
            self._backend = ObjectStoreBackend(self.url, self._options, retry=self._retry, max_concurrency=self.workers)
        report = upload_windows(
            root,
            self.url,
            keys,
            threads=self.workers,
            delete_local=self.delete_local,
            backend=self._backend,
            index=False,
        )
        with self._lock:
            self.reports.append(report)
            self.errors.extend(f"{k}: {v}" for k, v in sorted(report.failed.items()))
        return report

    def wait(self) -> list[UploadReport]:
        """Wait for every queued upload; raise :class:`UploadError` if any window failed.

        Returns:
            The reports of the uploads finished so far.
        """
        with self._lock:
            pending, self._pending = self._pending, []
        for future in pending:
            error = future.exception()
            if error is not None:
                with self._lock:
                    self.errors.append(f"{type(error).__name__}: {error}")
        with self._lock:
            errors, reports = list(self.errors), list(self.reports)
            self.errors.clear()
        if errors:
            combined = UploadReport(self.url)
            for report in reports:
                combined._merge(report)
            raise UploadError(f"background upload to {self.url} failed: " + "; ".join(errors), combined)
        return reports

    def close(self) -> list[UploadReport]:
        """Wait for every queued upload, stop the thread; raise :class:`UploadError` on any failure."""
        self._closed = True
        try:
            reports = self.wait()
            if self._backend is not None and any(r.uploaded_objects for r in reports):
                index_root(self._backend, self.url, self._options)  # once, not per window (store.root_index)
            return reports
        finally:
            self._executor.shutdown(wait=True)
            if self._backend is not None:
                self._backend.close()

    def __enter__(self) -> UploadOnReady:
        return self

    def __exit__(self, exc_type: Any, *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:  # do not mask the original error
            try:
                self.close()
            except UploadError:
                pass
