"""The format constants of a dump: the format version, storage kinds, capture phases, the producer.

One place for the values every writer stamps and every reader checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from megadump_zarr._version import __version__

__all__ = [
    "CAPTURE_PHASES",
    "FORMAT_ATTR",
    "FORMAT_VERSION",
    "MIGRATABLE_VERSION",
    "L0_STORAGE",
    "LEVELS",
    "MSPROBE_STORAGE",
    "PACK_STORAGE",
    "PRODUCER",
    "STORAGE_ATTR",
    "STORAGE_KINDS",
    "TASK_STORAGE",
    "TENSOR_SERIALIZATION",
    "format_problem",
]

FORMAT_VERSION = 10
"""The one on-disk format every writer stamps on a window and every reader reads (attribute :data:`FORMAT_ATTR`).
A window of any other version is refused when the dump is opened (:func:`format_problem`)."""

MIGRATABLE_VERSION = 9
"""The one older format ``megadump migrate ROOT`` rewrites in place to :data:`FORMAT_VERSION` (its windows differ in
metadata only: each array document also records its chunks' crc32c, ``chunkCrc32c``, and each pack record array its
shards' digests, ``shardCrc32c``, both also in the window inventory)."""

FORMAT_ATTR = "schemaVersion"
"""The window manifest attribute holding the format version."""

STORAGE_ATTR = "stageViewStorage"
"""The window manifest attribute naming the layout (one of :data:`STORAGE_KINDS`): what readers dispatch on."""

LEVELS = ("L0", "L1")
"""A window's ``level``: the kernel boundary (L0) or the task boundary (L1)."""

PACK_STORAGE = "task_record_packs"
"""``stageViewStorage`` of an L1 window whose small task records are stored in task-record packs."""
TASK_STORAGE = "array_per_task_record"
"""``stageViewStorage`` of an L1 window with a Zarr group per task (the default layout)."""
L0_STORAGE = "array_per_tensor_with_ports"
"""``stageViewStorage`` of an L0 window: one array per logical tensor, with its stage ports."""
MSPROBE_STORAGE = "array_per_tensor"
"""``stageViewStorage`` of a window converted from (or read in place as) an msprobe dump."""
STORAGE_KINDS = frozenset({PACK_STORAGE, TASK_STORAGE, L0_STORAGE, MSPROBE_STORAGE})
"""Every ``stageViewStorage`` a writer of this package stamps."""

TENSOR_SERIALIZATION = "zarr-v3"
"""A window's ``tensorSerialization``."""

CAPTURE_PHASES = {"L0": "mega_kernel_boundary", "L1": "task_boundary"}
"""The ``capturePhaseSemantics`` the dumper stamps per level (msprobe's windows say ``"api_boundary"``)."""

PRODUCER = f"megadump_zarr {__version__}"
"""A window's ``producer``: this package and its version."""


def format_problem(attrs: Mapping[str, Any], where: str) -> str | None:
    """Why a window of these attributes cannot be read by this version (``None``: it can).

    Args:
        attrs: The window group's attributes.
        where: The window, for the message (``rank_0/window_0000``).
    """
    version = attrs.get(FORMAT_ATTR)
    if version is None and attrs.get("status") == "writing":
        return None  # a claim not written over yet (an object store's placeholder): a torn window, nothing to read
    if type(version) is not int:
        shown = "no" if version is None else f"the {FORMAT_ATTR} {str(version)[:40]!r}, not a"
        return f"{where}: the window has {shown} format version; this version reads format {FORMAT_VERSION} only"
    if version == FORMAT_VERSION:
        storage = attrs.get(STORAGE_ATTR)
        if storage not in STORAGE_KINDS:
            return (
                f"{where}: {STORAGE_ATTR} {str(storage)[:60]!r} is not a layout of format {FORMAT_VERSION} "
                f"{sorted(STORAGE_KINDS)}"
            )
        return None
    if version == MIGRATABLE_VERSION:
        return (
            f"{where}: format {version} was written by an earlier megadump_zarr; this version reads format "
            f"{FORMAT_VERSION} only (convert the dump in place: megadump migrate ROOT)"
        )
    if version < FORMAT_VERSION:
        return (
            f"{where}: format {version} was written by a pre-release of megadump_zarr; this version reads format "
            f"{FORMAT_VERSION} only (re-dump it)"
        )
    return (
        f"{where}: format {version} was written by a newer megadump_zarr; this version reads format "
        f"{FORMAT_VERSION} only (upgrade megadump_zarr)"
    )
