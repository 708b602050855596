"""Turn one rank's completed invocations into the store's ``WindowWrite`` (groups, arrays, attributes)."""

from __future__ import annotations

from dataclasses import dataclass, field
import functools
import gc
import math
from typing import Any

import numpy as np

from megadump_zarr.layout.write_model import ArrayWrite, GroupWrite, InvocationWrite, WindowWrite
from megadump_zarr.dump.l0 import L0Tensor
from megadump_zarr.layout.names import NameTable, safe_name
from megadump_zarr.dump.snapshots import L0Snapshot, L1Snapshot
from megadump_zarr.dump.statistics_mode import STATISTICS_GROUP, statistics_table
from megadump_zarr.l1 import L1_ANY_WORKER
from megadump_zarr.layout.manifest import WindowManifest
from megadump_zarr.layout.paths import invocation_name, task_dir
from megadump_zarr.layout.schema import CAPTURE_PHASES, L0_STORAGE, PACK_STORAGE

__all__ = ["PACK_STORAGE", "DumpInvocation", "build_window"]

# An L1 window says PACK_STORAGE (the store may keep small task records in task-record packs); the store
# replaces it with TASK_STORAGE when it writes a group per task (the default). Both live in layout.schema.


@dataclass
class DumpInvocation:
    """A completed invocation kept until its window is finalised."""

    invocation_id: int
    step: int
    kernel_name: str
    direction: str
    rank: int
    device: str
    level: str
    snapshots: list[tuple[L0Tensor, L0Snapshot]] = field(default_factory=list)
    l1_snapshots: list[L1Snapshot] = field(default_factory=list)
    device_buffer_bytes: int = 0
    execution_mode: str = ""
    failed: bool = False
    pending_records: list[dict[str, Any]] = field(default_factory=list)
    plan_prefix: str = ""  # key of the launch's saved L1 plan group, removed once its window commits
    task_rows: dict[int, tuple[int | None, int | None]] = field(default_factory=dict)  # task id -> tile rows
    operator_source: dict[str, Any] | None = None  # the graph's diagnostic_source (for replay)
    statistics: list[Any] = field(default_factory=list)  # StatisticsRow per record (statistics-first modes)
    occurrence: int = 0  # earlier invocations of this kernel and direction in the same step (record identity)
    l0_statistics: Any = None  # L0StatisticsCapture while an L0 launch in a statistics-first mode runs
    statistics_attrs: dict[str, Any] = field(default_factory=dict)  # extra attributes of the statistics table

    @property
    def name(self) -> str:
        """The invocation's group name."""
        return invocation_name(self.invocation_id, self.direction)

    @property
    def payload_bytes(self) -> int:
        """Host bytes held by this invocation's snapshots."""
        return sum(s.data.nbytes for _, s in self.snapshots) + sum(s.data.nbytes for s in self.l1_snapshots)


class _DimTable:
    """Dimension names of one group: a name keeps one length and one coordinate, else it is renamed.

    Names are made path-safe (a coordinate is stored as an array named after its dimension), and one
    array never uses a name twice (a square ``(hidden, hidden)`` spec gets ``hidden`` and a renamed twin).
    """

    def __init__(self, reserved: tuple[str, ...] = ()) -> None:
        # keyed by casefold: "Token" and "token" must not become two coordinate arrays on a
        # case-insensitive file system; reserved names (the group's arrays) are never dimensions
        self._dims: dict[str, tuple[str, int, np.ndarray | None]] = {
            name.casefold(): (name, -1, None) for name in reserved
        }

    def claim_all(
        self, names: tuple[str, ...], lengths: tuple[int, ...], coords: dict[int, np.ndarray], suffix: str
    ) -> tuple[str, ...]:
        """Resolve every axis name of one array.

        Args:
            names: Wanted names, one per axis.
            lengths: Axis lengths.
            coords: Coordinate values by axis, where the array has one.
            suffix: Disambiguator used when a name must be renamed.
        """
        used: set[str] = set()
        resolved = []
        for axis, (name, length) in enumerate(zip(names, lengths)):
            resolved.append(self._claim(_safe(name), length, coords.get(axis), suffix, used))
            used.add(resolved[-1])
        return tuple(resolved)

    def _claim(self, name: str, length: int, coord: np.ndarray | None, suffix: str, used: set[str]) -> str:
        candidate, attempt = name, 0
        while True:
            known = self._dims.get(candidate.casefold())
            if candidate not in used:
                if known is None:
                    self._dims[candidate.casefold()] = (candidate, length, coord)
                    return candidate
                if known[0] == candidate and known[1] == length and _same(known[2], coord):
                    return candidate
            attempt += 1
            candidate = f"{name}_{suffix}" if attempt == 1 else f"{name}_{suffix}_{attempt}"

    def coordinate(self, name: str) -> np.ndarray | None:
        """The coordinate values first claimed with ``name`` (one object per group: the store then sees
        every record of a task share it)."""
        known = self._dims.get(name.casefold())
        return None if known is None else known[2]


@functools.lru_cache(maxsize=4096)
def _safe(name: str) -> str:
    """:func:`safe_name`, remembered: a window repeats a few tensor and dimension names thousands of times."""
    return safe_name(name)


def _same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if a is b:
        return True
    if a.shape != b.shape:
        return False
    if a.dtype == b.dtype and a.dtype.kind in "iub":  # row indices: equal values are equal bytes
        return a.tobytes() == b.tobytes()
    return bool(np.array_equal(a, b))


def _l0_array(tensor: L0Tensor, snapshot: L0Snapshot, component: str, dims: _DimTable) -> ArrayWrite:
    spec_dims = tensor.graph_tensor.spec.dim_names
    shape = snapshot.shape
    names = spec_dims if len(spec_dims) == len(shape) else tuple(f"{component}_dim_{i}" for i in range(len(shape)))
    resolved = dims.claim_all(tuple(names), tuple(shape), {}, component)
    graph_tensor = tensor.graph_tensor
    attrs = {
        "name": graph_tensor.name,
        "paramPosition": graph_tensor.param_position,
        "role": graph_tensor.role,
        "capturePhase": snapshot.phase,
        "producers": list(graph_tensor.producers),
        "consumers": list(graph_tensor.consumers),
        "ports": [dict(port) for port in tensor.ports],
        "declaredShape": list(graph_tensor.declared_shape),
        "actualShape": list(shape),
        "originalDtype": snapshot.original_dtype,
        "storedDtype": snapshot.original_dtype,
    }
    return ArrayWrite(component, snapshot.data, resolved, attrs)


def _l0_invocation(invocation: DumpInvocation) -> InvocationWrite:
    names = NameTable(f"invocation {invocation.name}")
    if invocation.statistics:
        names.add(STATISTICS_GROUP, STATISTICS_GROUP)  # the statistics table's group: no tensor may take it
    components = [names.add(t.name) for t, _ in invocation.snapshots]
    dims = _DimTable(tuple(components))
    arrays = [_l0_array(t, s, component, dims) for (t, s), component in zip(invocation.snapshots, components)]
    attrs = _invocation_attrs(invocation)
    attrs["tensorCount"] = len(arrays)
    for row in invocation.statistics:
        row.path = names.add(row.name)
    return InvocationWrite(invocation.name, attrs, [], arrays, statistics=_statistics(invocation))


def _statistics(invocation: DumpInvocation) -> Any:
    if not invocation.statistics:
        return None
    rows = invocation.statistics
    return statistics_table(
        rows, {"recordCount": len(rows), "payloadCount": sum(r.kept for r in rows), **invocation.statistics_attrs}
    )


def _row_coordinate(snapshot: L1Snapshot) -> np.ndarray | None:
    """Global indices along axis 0 when the record is a proper whole-row slice of its declared tensor (its
    task holds some rows: the operand is split there). A record holding every row of its tensor (an operand
    every task reads whole, such as a weight) gets none: its first dimension keeps the graph's name and
    lines up with the same dimension of the task's other operands."""
    plan = snapshot.record
    shape, declared = plan.actual_shape, plan.declared_shape
    if plan.truncated or not shape or len(shape) != len(declared) or shape[1:] != declared[1:]:
        return None
    if shape[0] == declared[0]:
        return None
    row_bytes = math.prod(int(d) for d in shape[1:]) * snapshot.data.dtype.itemsize
    if row_bytes == 0 or plan.source_offset_bytes % row_bytes:
        return None
    start = plan.source_offset_bytes // row_bytes
    return np.arange(start, start + shape[0], dtype=np.int64)


def _record_component(plan: Any) -> str:
    return f"{plan.io}_{plan.index:02d}_{_safe(plan.tensor_name)}"


def _l1_array(snapshot: L1Snapshot, dims: _DimTable, partial: bool = False) -> ArrayWrite:
    plan = snapshot.record
    component = _record_component(plan)
    suffix = f"{plan.io}{plan.index:02d}"
    coords: dict[str, np.ndarray] = {}
    if plan.truncated:
        names: tuple[str, ...] = dims.claim_all(
            (f"{plan.io}_{plan.index:02d}_element",), (snapshot.data.shape[0],), {}, suffix
        )
    else:
        coordinate = _row_coordinate(snapshot)
        axis_coords = {} if coordinate is None else {0: coordinate}
        names = dims.claim_all(tuple(plan.dims), tuple(snapshot.stored_shape), axis_coords, suffix)
        if coordinate is not None:
            shared = dims.coordinate(names[0])
            coords[names[0]] = coordinate if shared is None else shared
    attrs = {
        "name": plan.tensor_name,
        "paramPosition": plan.parameter_position,
        "io": plan.io,
        "index": plan.index,
        "capturePhase": plan.phase,
        "sourceOffsetBytes": plan.source_offset_bytes,
        "declaredShape": list(plan.declared_shape),
        "actualShape": list(plan.actual_shape),
        "storedShape": list(snapshot.stored_shape),
        "originalDtype": snapshot.original_dtype,
        "storedDtype": snapshot.stored_dtype,
        "fullBytes": plan.full_bytes,
        "storedBytes": plan.payload_bytes,
        "truncated": plan.truncated,
        "note": plan.note,
    }
    if plan.truncated:  # the stored array is a flat prefix: keep what readers need to rebuild the logical view
        attrs["logicalDims"] = [safe_name(d) for d in plan.dims]
    if partial:  # salvaged from a launch that failed (on_error="keep"): its task may not have finished
        attrs["partial"] = True
    return ArrayWrite(component, snapshot.data, names, attrs, coords)


def _l1_invocation(invocation: DumpInvocation) -> InvocationWrite:
    by_task: dict[tuple[int, str, int], list[L1Snapshot]] = {}
    for snapshot in invocation.l1_snapshots:
        plan = snapshot.record
        by_task.setdefault((plan.task_id, plan.core_type, plan.core_id), []).append(snapshot)
    stages = NameTable(f"invocation {invocation.name} stages")
    groups: list[GroupWrite] = []
    arrays: list[ArrayWrite] = []
    seen_stages: set[str] = set()
    for key in sorted(by_task):
        snapshots = by_task[key]
        first = snapshots[0].record
        stage_component = stages.add(first.stage)
        if stage_component not in seen_stages:
            seen_stages.add(stage_component)
            groups.append(GroupWrite(f"stages/{stage_component}", {"stage": first.stage}))
        task_component = task_dir(first.task_id)
        if first.worker_id != L1_ANY_WORKER:
            task_component += f"_worker_{first.core_id:03d}"
        path = f"stages/{stage_component}/{task_component}"
        dims = _DimTable(tuple(_record_component(snapshot.record) for snapshot in snapshots))
        task_arrays = [_l1_array(snapshot, dims, invocation.failed) for snapshot in snapshots]
        groups.append(
            GroupWrite(
                path,
                task=True,
                attrs={
                    "taskId": first.task_id,
                    "stageTaskIndex": first.task_index,
                    "stage": first.stage,
                    "owner": {"label": first.owner_label, "id": first.owner_id},
                    "coreType": first.core_type,
                    "coreId": first.core_id,
                    "workerId": None if first.worker_id == L1_ANY_WORKER else first.worker_id,
                    "tensorCount": len(task_arrays),
                    "tileRows": _tile_rows(invocation, first.task_id),
                },
            )
        )
        arrays.extend(ArrayWrite(f"{path}/{a.path}", a.data, a.dims, a.attrs, a.coords) for a in task_arrays)
    attrs = _invocation_attrs(invocation)
    attrs.update(
        deviceBufferBytes=invocation.device_buffer_bytes,
        taskCount=len(by_task),
        recordCount=len(invocation.l1_snapshots),
        executionMode=invocation.execution_mode,
    )
    if invocation.operator_source is not None:
        attrs["operatorSource"] = invocation.operator_source
    components: dict[tuple[str, int, str], str] = {}  # one safe_name per distinct port, not per record
    for row in invocation.statistics:
        plan = row.plan
        task_component = task_dir(plan.task_id)
        if plan.worker_id != L1_ANY_WORKER:
            task_component += f"_worker_{plan.core_id:03d}"
        port = (plan.io, plan.index, plan.tensor_name)
        component = components.get(port) or components.setdefault(port, _record_component(plan))
        row.path = f"stages/{stages.add(plan.stage)}/{task_component}/{component}"
    if invocation.statistics:
        attrs["statisticsCount"] = len(invocation.statistics)
    return InvocationWrite(invocation.name, attrs, groups, arrays, statistics=_statistics(invocation))


def _tile_rows(invocation: DumpInvocation, task_id: int) -> list[int] | None:
    """``[start, stop)`` of a row-split task's tile along its split axis (None: not row-split or unknown)."""
    start, stop = invocation.task_rows.get(task_id, (None, None))
    return None if start is None or stop is None else [int(start), int(stop)]


def _invocation_attrs(invocation: DumpInvocation) -> dict[str, Any]:
    return {
        "invocationId": invocation.invocation_id,
        "step": invocation.step,
        "direction": invocation.direction,
        "kernelName": invocation.kernel_name,
        "device": invocation.device,
        "level": invocation.level,
        "rank": invocation.rank,
        "launchFailed": invocation.failed,
        "pendingRecords": invocation.pending_records,
    }


def build_window(level: str, rank: int, window_index: int, invocations: list[DumpInvocation]) -> WindowWrite:
    """Describe one rank's window for the store.

    Args:
        level: ``L0`` or ``L1``.
        rank: The rank.
        window_index: The window's index.
        invocations: The rank's completed invocations in order.
    """
    is_l1 = level == "L1"
    paused = gc.isenabled()
    if paused:  # every description built here lives until the window is written: a collection frees none
        gc.disable()
    try:
        built = [_l1_invocation(i) if i.level == "L1" else _l0_invocation(i) for i in invocations]
    finally:
        if paused:
            gc.enable()
    manifest = WindowManifest(
        level=level,
        rank=rank,
        window_index=window_index,
        capture_phase=CAPTURE_PHASES[level],
        storage=PACK_STORAGE if is_l1 else L0_STORAGE,
        invocations=tuple(inv.name for inv in built),
        # launches that failed and whose CAPTURED records were kept (on_error="keep", decode-buffer)
        partial_launches=tuple(invocation.name for invocation in invocations if invocation.failed),
    )
    return WindowWrite(rank, window_index, manifest.to_attrs(), built)
