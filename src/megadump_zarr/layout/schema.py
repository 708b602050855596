"""The schema constants of a dump: window layout versions, storage kinds, capture phases, the producer.

One place for the values every writer stamps and every reader checks (issue 25: ``PACK_STORAGE`` was
defined twice, the storage kinds were string literals in three writers).
"""

from __future__ import annotations

from megadump_zarr._version import __version__

__all__ = [
    "CAPTURE_PHASES",
    "KNOWN_SCHEMA_VERSIONS",
    "L0_STORAGE",
    "LEVELS",
    "MSPROBE_STORAGE",
    "PACK_STORAGE",
    "PRODUCER",
    "SCHEMA_VERSION",
    "STORAGE_KINDS",
    "TASK_STORAGE",
    "TENSOR_SERIALIZATION",
]

SCHEMA_VERSION = 8
"""The window layout every writer stamps on a window (``schemaVersion``): 6 has a crc32c on every chunk and
consolidated metadata only in the window and data groups; 7 adds task-record packs for small L1 records
(``stageViewStorage`` ``"task_record_packs"``, see ``store/packs.py``); 8 makes a Zarr group per L1 task the
default again (``"array_per_task_record"``, what plain ``xr.open_zarr`` opens), packs opt-in
(``TensorDumpConfig(layout="packs")``); readers read 5, 6, 7 and 8."""

KNOWN_SCHEMA_VERSIONS = frozenset({5, 6, 7, 8})
"""Window ``schemaVersion`` values the readers and the verifier know (the one constant to extend)."""

LEVELS = ("L0", "L1")
"""A window's ``level``: the kernel boundary (L0) or the task boundary (L1)."""

PACK_STORAGE = "task_record_packs"
"""``stageViewStorage`` of an L1 window whose small task records are stored in task-record packs (schema 7)."""
TASK_STORAGE = "array_per_task_record"
"""``stageViewStorage`` of an L1 window with a Zarr group per task (schema 6's layout, schema 8's default)."""
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
