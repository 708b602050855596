"""A conversion that is refused part-way leaves no output: what it wrote is removed again.

Converters validate every document before the first write, but a tensor file is only known to be a plain
tensor once it is loaded (a malicious pickle, a corrupt archive), and loading every file twice would
double the conversion's reads. So a converter writes through :class:`UndoableWrites`: on an error the
windows it began are deleted, with the rank and root group documents it created; a root that held
windows before gets its index of committed windows back.
"""

from __future__ import annotations

import os
from typing import Any

from megadump_zarr.layout.paths import rank_dir

__all__ = ["UndoableWrites"]


class UndoableWrites:
    """Begin windows through a ``WindowWriter`` and remove them all again with :meth:`undo`.

    Args:
        writer: The open ``megadump_zarr.store.writer.WindowWriter``.
    """

    def __init__(self, writer: Any) -> None:
        self.writer = writer
        backend = writer.backend
        self._root_doc_existed = backend.exists("zarr.json")
        self._local_root = getattr(backend, "_root", None)
        self._local_root_existed = self._local_root is not None and os.path.exists(self._local_root)
        self._windows: list[str] = []
        self._ranks: list[int] = []

    def begin(self, rank: int, window_index: int, attrs: dict[str, Any]) -> Any:
        """``writer.begin`` that remembers the window (and its rank group, when this creates it).

        Args:
            rank: Rank of the window.
            window_index: Window index.
            attrs: Window attributes.
        """
        from megadump_zarr.store.writer import window_key

        created_rank = rank not in self._ranks and not self.writer.backend.exists(f"{rank_dir(int(rank))}/zarr.json")
        session = self.writer.begin(rank, window_index, attrs)
        self._windows.append(window_key(rank, window_index))
        if created_rank:
            self._ranks.append(int(rank))
        return session

    def undo(self) -> None:
        """Delete every window begun, the rank/root documents created, and empty directories made."""
        backend = self.writer.backend
        self.writer.close()  # ends its writing session: its marker goes before the root is tidied
        for key in self._windows:
            backend.delete_prefix(key)
        for rank in self._ranks:
            backend.delete_prefix(f"{rank_dir(rank)}/zarr.json")
            self._remove_empty_dir(rank_dir(rank))
        if not self._root_doc_existed:
            backend.delete_prefix("zarr.json")
            if not self._local_root_existed:
                self._remove_empty_dir("")
        elif self._windows:
            self.writer.index_root()  # begin() dropped the root's index of committed windows: rebuild it

    def _remove_empty_dir(self, key: str) -> None:
        if self._local_root is None:
            return  # object stores have no directories
        path = os.path.join(self._local_root, key) if key else self._local_root
        try:
            os.rmdir(path)
        except OSError:
            pass  # not empty (it held something before), or gone
