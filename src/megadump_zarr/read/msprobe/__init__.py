"""msprobe (PyPI ``mindstudio-probe``) dumps read in place: the parser of ``dump.json`` (:mod:`.dump_json`), the
safe loader of its tensor files (:mod:`.load`), the attributes a converted dump carries (:mod:`.attrs`,
:mod:`.statistics_table`) and a read-only zarr store presenting the dump as its conversion would look (:mod:`.store`).

:mod:`megadump_zarr.interop.msprobe` writes the same plan as a Zarr dump (``megadump convert``).
"""

from __future__ import annotations

import os
from typing import Any

from megadump_zarr.read.msprobe.dump_json import is_msprobe_dump

__all__ = ["is_msprobe_dump", "msprobe_location"]


def msprobe_location(url: Any) -> Any:
    """The dump location of an msprobe directory read in place, or ``None`` when ``url`` is not one.

    Only local directories (a path or ``file://`` URL) holding ``step{N}/rank{R}|proc{PID}/dump.json`` (or
    being one such step or rank directory) are msprobe dumps; anything else is left to the Zarr reader.

    Args:
        url: What :func:`megadump_zarr.read.dump.open_dump` was given.

    Raises:
        ValueError: An msprobe directory whose ``dump.json`` is invalid or unsafe (naming the file).
    """
    if not isinstance(url, str | os.PathLike):
        return None
    text = os.fspath(url)
    if not isinstance(text, str):
        return None
    path = text[len("file://") :] if text.startswith("file://") else text
    if "://" in path:
        return None
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isdir(path) or os.path.exists(os.path.join(path, "zarr.json")) or not is_msprobe_dump(path):
        return None
    from megadump_zarr.read.location import DumpLocation
    from megadump_zarr.read.msprobe.store import MsprobeStore

    return DumpLocation(MsprobeStore(path), text)
