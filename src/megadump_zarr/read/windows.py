"""The windows of a dump root: ``rank_{r}/window_{wwww}`` directories, listed once for the readers and ``verify``."""

from __future__ import annotations

from typing import Any

from megadump_zarr.layout.paths import RANK_DIR, WINDOW_DIR
from megadump_zarr.read.location import list_dir, list_dirs

__all__ = ["window_dirs"]


def window_dirs(store: Any) -> list[tuple[int, int, str]]:
    """``(rank, window, key)`` of every window directory of a root, ordered by (rank, window); nothing is read.

    Args:
        store: The dump store.
    """
    keys = []
    ranks = [(name, match) for name in list_dir(store, "") if (match := RANK_DIR.match(name))]
    for (rank_name, rank), window_names in zip(ranks, list_dirs(store, [name for name, _ in ranks])):
        for window_name in window_names:  # the ranks are listed concurrently: one round trip, not one per rank
            if window := WINDOW_DIR.match(window_name):
                keys.append((int(rank.group(1)), int(window.group(1)), f"{rank_name}/{window_name}"))
    return sorted(keys)
