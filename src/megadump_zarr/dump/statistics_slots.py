"""L1 statistics records: where their slots go in the Device buffer, and decoding what the device wrote.

Layout (ABI version 3; a plan of tensor records only keeps the seed's version-2 layout untouched):
the 128-byte statistics slots of every statistics record come first, packed from
``L1_DUMP_PAYLOAD_BASE``, then the tensor slots (tensor records' payloads and kind-2 records' tensor
slots) in record order, each 64-byte aligned. So the host copies one prefix — header, table and every
statistics slot — and then only the tensor slots it decides to keep.

Budget: the Device buffer's end must stay within ``device_memory_budget_mb``. With
``on_budget="statistics"`` the records whose tensor slot does not fit (in record order) become
statistics-only records; with ``"error"`` the seed's ``MemoryError`` follows in ``prepare_l1_dump``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np
import torch

from megadump_zarr.l1 import L1_DUMP_PAYLOAD_BASE, L1_DUMP_STATUS_CAPTURED, L1RecordEntry, align_up
from megadump_zarr.l1.format import (
    L1_RECORD_KIND_STATISTICS,
    L1_DUMP_ALIGNMENT,
    L1_POOL_KINDS,
    L1_RECORD_KIND_STATISTICS_AND_TENSOR,
    L1_RECORD_KIND_STATISTICS_TENSOR_IF_CHANGED,
    L1_RECORD_KIND_STATISTICS_TENSOR_IF_NONFINITE,
    L1_RECORD_KIND_TENSOR,
    L1_STATISTICS_SLOT_SIZE,
    L1Statistics,
)
from megadump_zarr.l1.reader import read_l1_pool, read_l1_statistics_many, read_l1_table
from megadump_zarr.runtime.reductions import dtype_code

__all__ = [
    "L1StatisticsRecord",
    "buffer_end",
    "decode_statistics_dump",
    "has_statistics",
    "layout_records",
    "statistics_entry",
]

_WANTS_TENSOR = {
    "tensor": L1_RECORD_KIND_TENSOR,
    "statistics": L1_RECORD_KIND_STATISTICS,
    "nonfinite": L1_RECORD_KIND_STATISTICS_TENSOR_IF_NONFINITE,
    "diff": L1_RECORD_KIND_STATISTICS_TENSOR_IF_CHANGED,
}


class L1StatisticsRecord(NamedTuple):
    """One record's device statistics, and whether its payload was kept.

    Args:
        record: The record's plan (kind 1 or 2).
        statistics: What the device wrote into its slot.
        kept: Whether its tensor was copied to the host and stored.
    """

    record: Any
    statistics: L1Statistics
    kept: bool


def statistics_entry(plan: Any) -> L1RecordEntry:
    """The ABI entry of a statistics record plan (kind 1 or 2).

    Args:
        plan: An ``L1RecordPlan`` with ``kind`` 1 or 2.
    """
    return L1RecordEntry(
        task_id=plan.task_id,
        phase=1 if plan.phase == "before" else 2,
        parameter_position=plan.parameter_position,
        source_offset_bytes=plan.source_offset_bytes,
        payload_offset=plan.payload_offset,
        payload_bytes=plan.payload_bytes,
        status=0,
        task_index=plan.task_index,
        worker_id=plan.worker_id,
        kind=plan.kind,
        dtype_code=dtype_code(plan.dtype),
        source_bytes=plan.full_bytes,
        tensor_offset=plan.tensor_offset,
        tensor_bytes=plan.tensor_bytes,
    )


def _slot_ends(plan: Any) -> tuple[int, ...]:
    ends = (plan.payload_offset + plan.payload_bytes,)
    if plan.kind == L1_RECORD_KIND_STATISTICS_AND_TENSOR:
        ends += (plan.tensor_offset + plan.tensor_bytes,)
    return ends


def buffer_end(records: Sequence[Any]) -> int:
    """The aligned end of a plan's last slot (its tensor pool, if any, follows: :func:`pool_for`).

    Args:
        records: The launch's record plans.
    """
    return align_up(max(end for plan in records for end in _slot_ends(plan)))


def has_statistics(records: Sequence[Any]) -> bool:
    """Whether any record of a plan is a statistics record.

    Args:
        records: The launch's record plans.
    """
    return any(plan.kind != L1_RECORD_KIND_TENSOR for plan in records)


def layout_records(records: tuple[Any, ...], config: Any) -> tuple[Any, ...]:
    """Give each record its kind and slots for the config's ``mode`` and ``on_budget``.

    ``mode="tensor"`` within the budget (or with ``on_budget="error"``) returns ``records`` unchanged:
    the seed's layout, byte for byte.

    Args:
        records: Plans from ``build_record_plans`` (seed layout, payloads capped by max_bytes_per_tensor).
        config: The dump config.
    """
    budget = config.device_memory_budget_mb * 1024 * 1024
    recording = getattr(config, "recorder", None) is not None  # the flight recorder: statistics and tensor
    wanted = L1_RECORD_KIND_STATISTICS_AND_TENSOR if recording else _WANTS_TENSOR[config.mode]
    fallback = config.on_budget == "statistics"
    if wanted == L1_RECORD_KIND_TENSOR and (not fallback or buffer_end(records) <= budget):
        return records
    # Decide kinds greedily in record order against a statistics area reserved for every record.
    cursor = L1_DUMP_PAYLOAD_BASE + len(records) * L1_STATISTICS_SLOT_SIZE
    kinds = []
    for plan in records:
        kind = wanted
        if kind in (L1_RECORD_KIND_TENSOR, L1_RECORD_KIND_STATISTICS_AND_TENSOR):  # a slot of its own
            end = align_up(cursor) + plan.payload_bytes
            if fallback and align_up(end) > budget:
                kind = L1_RECORD_KIND_STATISTICS
            else:
                cursor = end
        kinds.append(kind)
    # Then place them: statistics slots first, tensor slots after them.
    stats_cursor = L1_DUMP_PAYLOAD_BASE
    placed = []
    for plan, kind in zip(records, kinds):
        if kind == L1_RECORD_KIND_TENSOR:
            placed.append(plan)
            continue
        placed.append(
            replace(
                plan,
                kind=kind,
                payload_offset=stats_cursor,
                payload_bytes=L1_STATISTICS_SLOT_SIZE,
                tensor_offset=0,
                tensor_bytes=0 if kind == L1_RECORD_KIND_STATISTICS else plan.payload_bytes,
            )
        )
        stats_cursor += L1_STATISTICS_SLOT_SIZE
    tensor_cursor = align_up(stats_cursor)
    final = []
    for plan in placed:
        if plan.kind == L1_RECORD_KIND_TENSOR:
            plan = replace(plan, payload_offset=tensor_cursor)
            tensor_cursor = align_up(tensor_cursor + plan.payload_bytes)
        elif plan.kind == L1_RECORD_KIND_STATISTICS_AND_TENSOR:
            plan = replace(plan, tensor_offset=tensor_cursor)
            tensor_cursor = align_up(tensor_cursor + plan.tensor_bytes)
        final.append(plan)
    return tuple(final)


def pool_for(records: Sequence[Any], config: Any) -> tuple[int, int]:
    """The tensor pool of a plan whose records copy conditionally (kinds 3, 4): right after the last slot,
    as large as all their tensors together, but never past the Device memory budget; ``(0, 0)`` without
    such records. Tensors that do not fit when the condition holds are not copied (their slot says so).

    Args:
        records: Plans from :func:`layout_records`.
        config: The dump config.
    """
    users = [plan for plan in records if plan.kind in L1_POOL_KINDS]
    if not users:
        return 0, 0
    offset = buffer_end(records)
    wanted = sum(align_up(plan.tensor_bytes) for plan in users)
    room = config.device_memory_budget_mb * 1024 * 1024 - offset
    return offset, max(L1_DUMP_ALIGNMENT, min(wanted, room))


def _host_slice(buffer: torch.Tensor, start: int, stop: int, *, copy: bool = True) -> torch.Tensor:
    """``buffer[start:stop]`` on the host: one narrow Device-to-Host copy (on CPU a view unless ``copy``)."""
    piece = buffer.detach()[start:stop]
    if piece.device.type == "cpu":
        return piece.clone() if copy else piece
    return piece.cpu()


_CHECKED = (
    "task_id",
    "phase",
    "parameter_position",
    "payload_offset",
    "payload_bytes",
    "task_index",
    "worker_id",
    "kind",
    "tensor_offset",
    "tensor_bytes",
)


def _planned(plan: Any) -> tuple[int, ...]:
    return (
        plan.task_id,
        1 if plan.phase == "before" else 2,
        plan.parameter_position,
        plan.payload_offset,
        plan.payload_bytes,
        plan.task_index,
        plan.worker_id,
        plan.kind,
        plan.tensor_offset,
        plan.tensor_bytes,
    )


def _check_plan(table: np.ndarray, records: Sequence[Any]) -> None:
    """The record table the device left must be the one planned (vectorised field comparison)."""
    if len(table) != len(records):
        raise ValueError(f"L1 dump buffer holds {len(table)} records, the plan {len(records)}")
    expected = np.array([_planned(plan) for plan in records], dtype=np.int64).reshape(len(records), len(_CHECKED))
    for column, name in enumerate(_CHECKED):
        found = table[name].astype(np.int64)
        bad = np.flatnonzero(found != expected[:, column])
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"L1 dump record {i} {name} changed during the launch: planned "
                f"{int(expected[i, column])}, found {int(found[i])}"
            )
    source = (table["source_offset_high"].astype(np.uint64) << np.uint64(32)) | table["source_offset_low"]
    planned = np.array([plan.source_offset_bytes for plan in records], dtype=np.uint64)
    bad = np.flatnonzero(source != planned)
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"L1 dump record {i} source_offset_bytes changed during the launch: planned {int(planned[i])}, "
            f"found {int(source[i])}"
        )


def decode_statistics_dump(
    prepared: Any,
    keep: Callable[[Any, L1Statistics], bool],
    snapshot: Callable[[Any, np.ndarray], Any],
) -> tuple[list[Any], list[L1StatisticsRecord], tuple[int, int, int]]:
    """Decode a completed buffer holding statistics records, copying to the host only what is kept.

    The header, table and statistics slots come over in one prefix copy (none on CPU, where the buffer
    is read in place); a tensor record's payload is in that prefix too; a kind-2 record's tensor slot
    is copied only when ``keep(plan, statistics)``.

    Args:
        prepared: The launch's ``PreparedL1Dump``.
        keep: Decides, from a record's device statistics, whether its tensor is kept.
        snapshot: ``payload_snapshot(plan, bytes)``: wraps kept bytes as the dump's L1 snapshot.

    Returns:
        ``(snapshots, statistics, pool)``: snapshots of the stored payloads, every record's statistics,
        and the tensor pool's ``(offset, bytes, used)`` ((0, 0, 0) without one).

    Raises:
        RuntimeError: A record was not captured (the seed's message).
        ValueError: The buffer does not match its plan.
    """
    records = prepared.records
    prefix = align_up(max(plan.payload_offset + plan.payload_bytes for plan in records))
    _, table, data = read_l1_table(_host_slice(prepared.buffer, 0, prefix, copy=False), partial=True)
    _check_plan(table, records)
    pool = read_l1_pool(data)
    pending = np.flatnonzero(table["status"] != L1_DUMP_STATUS_CAPTURED)
    if pending.size:
        i = int(pending[0])
        plan = records[i]
        raise RuntimeError(
            f"L1 dump record was not captured: task_id={plan.task_id}, stage={plan.stage!r}, "
            f"io={plan.io}, index={plan.index}, status={int(table['status'][i])}, header_enabled=1"
        )
    kinds = table["kind"]
    with_stats = np.flatnonzero(kinds != L1_RECORD_KIND_TENSOR)
    decoded = iter(read_l1_statistics_many(data, table["payload_offset"][with_stats]))
    snapshots, statistics = [], []
    for plan in records:
        if plan.kind == L1_RECORD_KIND_TENSOR:
            start = plan.payload_offset
            snapshots.append(snapshot(plan, np.array(data[start : start + plan.payload_bytes])))
            continue
        stats = next(decoded)
        kept = plan.kind != L1_RECORD_KIND_STATISTICS and stats.tensor_copied and keep(plan, stats)
        if kept:
            snapshots.append(_tensor_snapshot(prepared.buffer, plan, stats, pool, snapshot))
        statistics.append(L1StatisticsRecord(plan, stats, kept))
    return snapshots, statistics, pool


def _tensor_offset(plan: Any, stats: L1Statistics, pool: tuple[int, int, int]) -> int:
    """Where a copied tensor lies: its own slot (kind 2) or the pool offset the device wrote (kinds 3, 4)."""
    if plan.kind == L1_RECORD_KIND_STATISTICS_AND_TENSOR:
        return plan.tensor_offset
    offset, _, used = pool
    start = stats.tensor_offset
    if not (
        offset <= start and start + plan.tensor_bytes <= offset + used and (start - offset) % L1_DUMP_ALIGNMENT == 0
    ):
        raise ValueError(
            f"L1 dump record (task_id={plan.task_id}, {plan.io} {plan.index}) says its tensor is at "
            f"{start}, outside the used tensor pool [{offset}, {offset + used})"
        )
    return start


def _tensor_snapshot(
    buffer: torch.Tensor,
    plan: Any,
    stats: L1Statistics,
    pool: tuple[int, int, int],
    snapshot: Callable[[Any, np.ndarray], Any],
) -> Any:
    """Copy one kept tensor to the host (one narrow copy) and wrap it as the dump's L1 snapshot."""
    start = _tensor_offset(plan, stats, pool)
    tensor_plan = replace(
        plan, kind=0, payload_offset=start, payload_bytes=plan.tensor_bytes, tensor_offset=0, tensor_bytes=0
    )
    return snapshot(tensor_plan, _host_slice(buffer, start, start + plan.tensor_bytes).numpy())


def salvage_statistics_dump(
    prepared: Any,
    snapshot: Callable[[Any, np.ndarray], Any],
) -> tuple[list[Any], list[L1StatisticsRecord], list[dict[str, Any]]]:
    """What a failed or hung launch's statistics buffer still holds: the CAPTURED records' statistics
    (and the tensors a kind-2 record had copied: evidence is kept), and a description of the rest.

    Args:
        prepared: The launch's ``PreparedL1Dump`` (its buffer on any device, or a host copy).
        snapshot: ``payload_snapshot(plan, bytes)``.

    Returns:
        ``(snapshots, statistics, pending)``; on a buffer that does not match its plan, nothing and one
        ``{"error": ...}`` entry.
    """
    records = prepared.records
    try:
        prefix = align_up(max(plan.payload_offset + plan.payload_bytes for plan in records))
        _, table, data = read_l1_table(_host_slice(prepared.buffer, 0, prefix, copy=False), partial=True)
        _check_plan(table, records)
    except (ValueError, RuntimeError) as error:
        return [], [], [{"error": str(error)}]
    captured = table["status"] == L1_DUMP_STATUS_CAPTURED
    snapshots, statistics, pending = [], [], []
    for i, plan in enumerate(records):
        if not captured[i]:
            pending.append(
                {
                    "record": i,
                    "taskId": plan.task_id,
                    "stage": plan.stage,
                    "io": plan.io,
                    "index": plan.index,
                    "name": plan.tensor_name,
                    "status": int(table["status"][i]),
                }
            )
            continue
        if plan.kind == L1_RECORD_KIND_TENSOR:
            start = plan.payload_offset
            snapshots.append(snapshot(plan, np.array(data[start : start + plan.payload_bytes])))
            continue
        try:
            (stats,) = read_l1_statistics_many(data, np.array([plan.payload_offset]))
        except ValueError as error:
            pending.append(
                {
                    "record": i,
                    "taskId": plan.task_id,
                    "stage": plan.stage,
                    "io": plan.io,
                    "index": plan.index,
                    "name": plan.tensor_name,
                    "error": str(error),
                }
            )
            continue
        kept = plan.kind != L1_RECORD_KIND_STATISTICS and stats.tensor_copied
        if kept:
            try:
                snapshots.append(_tensor_snapshot(prepared.buffer, plan, stats, read_l1_pool(data), snapshot))
            except ValueError:
                kept = False
        statistics.append(L1StatisticsRecord(plan, stats, kept))
    return snapshots, statistics, pending
