"""The vocabulary of a task-record pack: its group, its arrays along ``task`` and their attributes.

A pack (``stages/{stage}/pack_{pppp}/``, in a window whose ``stageViewStorage`` is ``task_record_packs``) stores
the tasks of one stage that share a signature. Every value a task group holds for its task is an ordinary array
along ``task`` (plain ``xr.open_zarr(pack)`` shows the per-task ones as coordinates); what every task of the pack
holds alike is stored once, in an attribute. See ``docs/reference/format.md``.
"""

from __future__ import annotations

__all__ = [
    "CORE_TYPE_ARRAY",
    "COORDINATES_ATTR",
    "NONE",
    "PACK_PREFIX",
    "RECORD_ATTRIBUTES_ATTR",
    "STATISTICS",
    "STATISTIC_ARRAY",
    "STATISTIC_DIM",
    "TASK_ARRAY",
    "TASK_ATTRIBUTES_ATTR",
    "TASK_COLUMNS",
    "TASK_COUNT_ATTR",
    "TASK_DIM",
    "TILE_ROWS",
    "offset_array",
    "pack_name",
    "row_bound_arrays",
    "stats_array",
]

PACK_PREFIX = "pack_"
"""A pack group's name is ``pack_{pppp}`` (:func:`pack_name`)."""
TASK_DIM = "task"
"""The dimension along a pack's rows (one row per task)."""
TASK_COUNT_ATTR = "taskCount"
"""The pack group's attribute: its rows."""
TASK_ATTRIBUTES_ATTR = "taskAttributes"
"""The pack group's attribute: the task group attributes every task of the pack holds alike (``stage``,
``owner.label``, ``tensorCount``, ...), without those stored per task in :data:`TASK_COLUMNS`."""
RECORD_ATTRIBUTES_ATTR = "recordAttributes"
"""A record array's attribute: the record attributes every row holds alike (``name``, ``paramPosition``,
``actualShape``, ...), without ``sourceOffsetBytes`` (:func:`offset_array`) and ``stats`` (:func:`stats_array`)."""
COORDINATES_ATTR = "coordinates"
"""A record array's CF ``coordinates`` attribute: the per-task arrays xarray shows as coordinates along ``task``."""

NONE = -1
"""What an integer array along ``task`` stores for a task attribute that is ``null`` (ids are >= 0)."""
TASK_ARRAY = "task_id"
"""The task id of each row (int64 along ``task``); a pack's defining array."""
TASK_COLUMNS = (
    (TASK_ARRAY, ("taskId",)),
    ("stage_task_index", ("stageTaskIndex",)),
    ("owner_id", ("owner", "id")),
    ("core_id", ("coreId",)),
    ("worker_id", ("workerId",)),
)
"""``(array, attribute path)`` of each integer task attribute stored per task (int64 along ``task``, :data:`NONE`
for ``null``)."""
TILE_ROWS = ("tileRows", "tile_row_start", "tile_row_stop")
"""The task attribute ``tileRows`` (``[start, stop]`` or ``null``) and its two int64 arrays along ``task``."""
CORE_TYPE_ARRAY = "core_type"
"""The task attribute ``coreType`` of each row (``fixed_length_utf32`` along ``task``)."""
STATISTIC_DIM = "statistic"
"""The second dimension of a record's statistics array."""
STATISTIC_ARRAY = "statistic"
"""The coordinate naming each statistic (``fixed_length_utf32`` along ``statistic``): :data:`STATISTICS`."""
STATISTICS = ("min", "max", "mean", "l2norm", "nanCount", "infCount")
"""The keys of a record's ``stats`` attribute, in the order of its statistics array's columns (float64; ``null``
is NaN; the counts are integers, exact in float64)."""


def pack_name(index: int) -> str:
    """The group name of a stage's ``index``-th pack (``pack_0000``)."""
    return f"{PACK_PREFIX}{int(index):04d}"


def row_bound_arrays(dim: str) -> tuple[str, str]:
    """The int64 arrays along ``task`` holding each row's ``[start, stop)`` along the row coordinate ``dim``
    (``token_start``, ``token_stop``): where the task's rows sit in the stitched tensor."""
    return f"{dim}_start", f"{dim}_stop"


def offset_array(record: str) -> str:
    """The int64 array along ``task`` holding each row's ``sourceOffsetBytes`` of ``record``."""
    return f"{record}_offset"


def stats_array(record: str) -> str:
    """The float64 ``(task, statistic)`` array holding each row's ``stats`` of ``record``."""
    return f"{record}_stats"
