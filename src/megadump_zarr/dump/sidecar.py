"""Small files beside the dump (L1 plans), written before a launch and removed after its window commits."""

from __future__ import annotations

from collections.abc import Mapping
import os
from pathlib import Path
import shutil
from typing import Any

__all__ = ["Sidecars"]


class Sidecars:
    """Put and remove small files below a dump root (local directory or fsspec URL).

    Args:
        root: The dump root.
        storage_options: fsspec options for URLs.
    """

    def __init__(self, root: str | Path, storage_options: Mapping[str, Any] | None = None) -> None:
        self._local = Path(root) if isinstance(root, Path) else None
        self._url = None if self._local is not None else str(root).rstrip("/")
        self._fs: Any = None
        self._storage_options = dict(storage_options or {})

    def _filesystem(self) -> Any:
        if self._fs is None:
            import fsspec

            self._fs, _ = fsspec.core.url_to_fs(self._url, **self._storage_options)
        return self._fs

    def put(self, key: str, data: bytes) -> str:
        """Write ``data`` at ``key`` (atomically for local roots); return its path or URL.

        Args:
            key: Relative key.
            data: File content.
        """
        if self._local is not None:
            path = self._local / key
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            temporary.write_bytes(data)
            os.replace(temporary, path)
            return str(path)
        url = f"{self._url}/{key}"
        self._filesystem().pipe_file(url, data)
        return url

    def probe(self) -> None:
        """Create the root if needed and write and delete a probe file; raise OSError when it cannot be
        written (read-only file system, a file in the way, no permission, an unreachable bucket)."""
        key = f".megadump-probe-{os.getpid()}-{id(self):x}"
        if self._local is not None:
            self._local.mkdir(parents=True, exist_ok=True)
            path = self._local / key
            path.write_bytes(b"")
            path.unlink()
            return
        url = f"{self._url}/{key}"
        fs = self._filesystem()
        try:
            fs.pipe_file(url, b"")
            fs.rm(url)
        except OSError:
            raise
        except Exception as error:  # object-store clients raise their own types; name the root plainly
            raise OSError(f"cannot write to the dump root {self._url}: {error}") from error

    def remove(self, prefix: str) -> None:
        """Remove everything below ``prefix`` (missing is fine).

        Args:
            prefix: Relative key prefix (a directory).
        """
        if self._local is not None:
            shutil.rmtree(self._local / prefix, ignore_errors=True)
            return
        fs = self._filesystem()
        try:
            fs.rm(f"{self._url}/{prefix}", recursive=True)
        except FileNotFoundError:
            pass
