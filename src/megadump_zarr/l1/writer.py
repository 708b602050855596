"""Pack an L1 dump buffer on the host: plan 64-byte-aligned payload slots, then write header and records.

The packer validates every entry before writing a single byte, so a buffer it
returns always reads back with :func:`megadump_zarr.l1.reader.read_l1_buffer`.
Records are always written with status PENDING: the device worker sets
CAPTURED, so an entry's own ``status`` field is ignored (this lets the records
decoded from a filled buffer be packed again into a fresh one).

A buffer of tensor records only is packed as ABI version 2, byte for byte the
seed's layout; any statistics record (kind 1 or 2) makes the buffer version 3
and fills the record's extension words (see :mod:`megadump_zarr.l1.format`).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

from megadump_zarr.l1.format import (
    HEADER_STRUCT,
    L1_DUMP_ALIGNMENT,
    L1_DUMP_MAGIC,
    L1_DUMP_MAX_RECORDS,
    L1_DUMP_PAYLOAD_BASE,
    L1_DUMP_PHASES,
    L1_DUMP_RECORD_SIZE,
    L1_DUMP_RECORDS_OFFSET,
    L1_DUMP_STATUS_PENDING,
    L1_DUMP_VERSION,
    L1_DUMP_VERSION_STATISTICS,
    L1_DTYPE_CODES,
    L1_RECORD_EXTENSION_OFFSET,
    L1_POOL_HEADER_OFFSET,
    L1_POOL_KINDS,
    L1_RECORD_KIND_STATISTICS_AND_TENSOR,
    L1_RECORD_KIND_TENSOR,
    L1_RECORD_KINDS,
    L1_STATISTICS_SLOT_SIZE,
    POOL_STRUCT,
    RECORD_EXTENSION_STRUCT,
    RECORD_STRUCT,
    TOTAL_BYTES_LIMIT,
    U32_MAX,
    U64_LIMIT,
    L1RecordEntry,
    align_up,
)

__all__ = ["pack_l1_buffer", "plan_slots"]

_U32_FIELDS = ("task_id", "phase", "parameter_position", "payload_offset", "payload_bytes", "task_index", "worker_id")


def plan_slots(sizes: Sequence[int], payload_base: int = L1_DUMP_PAYLOAD_BASE) -> list[int]:
    """Give each payload a 64-byte-aligned offset, one after another from ``payload_base``.

    Slot ``i`` starts at ``align_up(end of slot i-1)`` (the first at ``align_up(payload_base)``).
    A zero-byte payload still gets an offset — the next aligned position — and occupies no bytes.

    Args:
        sizes: payload sizes in bytes, in record order.
        payload_base: first byte of the payload area.

    Returns:
        One offset per size.

    Raises:
        ValueError: a size or ``payload_base`` is negative.
    """
    if payload_base < 0:
        raise ValueError(f"L1 dump payload_base must not be negative, got {payload_base}")
    offsets = []
    cursor = payload_base
    for i, size in enumerate(sizes):
        if size < 0:
            raise ValueError(f"L1 dump payload size {i} must not be negative, got {size}")
        offset = align_up(cursor, L1_DUMP_ALIGNMENT)
        offsets.append(offset)
        cursor = offset + size
    return offsets


def _as_int(value: object) -> int | None:
    """``value`` as a Python int when it is an integer (int, bool excluded, or numpy integer), else None.

    Args:
        value: a field value.
    """
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _validated_entry(index: int, entry: L1RecordEntry, payload_base: int) -> L1RecordEntry:
    """Check one entry's field ranges, phase and slot placement; return it with plain-int fields.

    Args:
        index: the entry's position (its record number).
        entry: the entry to check (numpy integers are accepted and converted).
        payload_base: first byte of the payload area.
    """
    values = {}
    for name in _U32_FIELDS:
        value = getattr(entry, name)
        number = _as_int(value)
        if number is None or not 0 <= number <= U32_MAX:
            raise ValueError(f"L1 dump entry {index} (task_id={entry.task_id}) field {name}={value!r} is not a u32")
        values[name] = number
    source = entry.source_offset_bytes
    number = _as_int(source)
    if number is None or not 0 <= number < U64_LIMIT:
        raise ValueError(f"L1 dump entry {index} (task_id={entry.task_id}) source_offset_bytes={source!r} is not a u64")
    values["source_offset_bytes"] = number
    values.update(_extension(index, entry))
    clean = L1RecordEntry(status=L1_DUMP_STATUS_PENDING, **values)
    if clean.phase not in L1_DUMP_PHASES:
        raise ValueError(
            f"L1 dump entry {index} (task_id={clean.task_id}) has invalid phase {clean.phase};"
            " expected 1 (BEFORE) or 2 (AFTER)"
        )
    if clean.payload_offset < payload_base:
        raise ValueError(
            f"L1 dump entry {index} (task_id={clean.task_id}) payload_offset={clean.payload_offset}"
            f" is below payload_base={payload_base}"
        )
    if clean.payload_offset % L1_DUMP_ALIGNMENT:
        raise ValueError(
            f"L1 dump entry {index} (task_id={clean.task_id}) payload_offset={clean.payload_offset}"
            f" is not {L1_DUMP_ALIGNMENT}-byte aligned"
        )
    return clean


def _extension(index: int, entry: L1RecordEntry) -> dict[str, int]:
    """Check a record's version-3 extension (kind, dtype code, source bytes, tensor slot).

    Args:
        index: the entry's position.
        entry: the entry.
    """
    where = f"L1 dump entry {index} (task_id={entry.task_id})"
    values = {}
    for name, limit in (
        ("kind", U32_MAX),
        ("dtype_code", U32_MAX),
        ("source_bytes", U64_LIMIT - 1),
        ("tensor_offset", U32_MAX),
        ("tensor_bytes", U32_MAX),
    ):
        value = getattr(entry, name)
        number = _as_int(value)
        if number is None or not 0 <= number <= limit:
            raise ValueError(f"{where} field {name}={value!r} is out of range")
        values[name] = number
    kind = values["kind"]
    if kind not in L1_RECORD_KINDS:
        raise ValueError(
            f"{where} has invalid kind {kind}; expected 0 (tensor), 1 (statistics) or 2 (statistics and tensor)"
        )
    if kind == L1_RECORD_KIND_TENSOR:
        extra = {k: v for k, v in values.items() if k != "kind" and v}
        if extra:
            raise ValueError(f"{where} is a tensor record but sets statistics fields {sorted(extra)}")
        return values
    if values["dtype_code"] not in L1_DTYPE_CODES:
        raise ValueError(f"{where} has unknown dtype_code {values['dtype_code']}")
    if _as_int(entry.payload_bytes) != L1_STATISTICS_SLOT_SIZE:
        raise ValueError(
            f"{where} statistics slot payload_bytes={entry.payload_bytes!r} must be {L1_STATISTICS_SLOT_SIZE}"
        )
    if kind == L1_RECORD_KIND_STATISTICS_AND_TENSOR:
        if values["tensor_offset"] % L1_DUMP_ALIGNMENT:
            raise ValueError(f"{where} tensor_offset={values['tensor_offset']} is not {L1_DUMP_ALIGNMENT}-byte aligned")
        if values["tensor_bytes"] > values["source_bytes"]:
            raise ValueError(
                f"{where} tensor_bytes={values['tensor_bytes']} exceeds source_bytes={values['source_bytes']}"
            )
    elif kind in L1_POOL_KINDS:
        if values["tensor_offset"]:
            raise ValueError(f"{where} takes its tensor from the pool but sets tensor_offset={values['tensor_offset']}")
        if values["tensor_bytes"] > values["source_bytes"]:
            raise ValueError(
                f"{where} tensor_bytes={values['tensor_bytes']} exceeds source_bytes={values['source_bytes']}"
            )
    elif values["tensor_offset"] or values["tensor_bytes"]:
        raise ValueError(f"{where} is a statistics record without a tensor slot but sets tensor_offset/tensor_bytes")
    return values


def _slots(entries: Sequence[L1RecordEntry]) -> list[tuple[int, int, int]]:
    """Every non-empty slot as ``(offset, end, entry index)``: payload slots and kind-2 tensor slots."""
    slots = [(e.payload_offset, e.payload_end, i) for i, e in enumerate(entries) if e.payload_bytes > 0]
    slots += [
        (e.tensor_offset, e.tensor_offset + e.tensor_bytes, i)
        for i, e in enumerate(entries)
        if e.kind == L1_RECORD_KIND_STATISTICS_AND_TENSOR and e.tensor_bytes > 0
    ]
    return slots


def _check_overlap(entries: Sequence[L1RecordEntry]) -> None:
    """Refuse two non-empty slots that share a byte (sort by start, compare neighbours).

    Args:
        entries: entries whose fields are already validated.
    """
    nonempty = sorted(_slots(entries))
    for (a_start, a_end, i), (b_start, b_end, j) in zip(nonempty, nonempty[1:]):
        if b_start < a_end:
            (first, fa, fe), (second, sa, se) = sorted(((i, a_start, a_end), (j, b_start, b_end)))
            raise ValueError(
                f"L1 dump entries {first} and {second} have overlapping payload slots: [{fa}, {fe}) and [{sa}, {se})"
            )


def pack_l1_buffer(
    entries: Sequence[L1RecordEntry], *, payload_base: int = L1_DUMP_PAYLOAD_BASE, pool: tuple[int, int] | None = None
) -> bytearray:
    """Build a zero-filled L1 dump buffer holding ``entries`` as PENDING records.

    The header gets ``enabled=1``, ``payload_offset`` = the lowest entry payload
    offset and ``total_bytes`` = ``align_up`` of the highest slot end. Each
    entry's ``status`` is ignored: records are always written PENDING.

    Args:
        entries: one entry per record, in table order (1 to 4096 of them); slots
            from :func:`plan_slots` or placed by the caller (64-byte aligned, at or
            after ``payload_base``, not overlapping).
        payload_base: first byte the payload area may use; at least the end of the
            record table (default: after a table reserved for 4096 records).
        pool: ``(pool_offset, pool_bytes)`` of the tensor pool, required when an entry has kind 3
            or 4 (and refused otherwise): 64-byte aligned, after every slot.

    Returns:
        The packed buffer, exactly ``total_bytes`` long.

    Raises:
        ValueError: no entries, too many, a field out of range, a misplaced or
            overlapping slot, or a buffer of 2**32 bytes or more (the message names
            the field and values).
    """
    count = len(entries)
    if count == 0:
        raise ValueError("L1 dump needs at least one entry, got 0")
    if count > L1_DUMP_MAX_RECORDS:
        raise ValueError(f"L1 dump holds at most {L1_DUMP_MAX_RECORDS} entries, got {count}")
    table_end = L1_DUMP_RECORDS_OFFSET + count * L1_DUMP_RECORD_SIZE
    if payload_base < table_end:
        raise ValueError(
            f"L1 dump payload_base={payload_base} is inside the record table of {count} entries (ends at {table_end})"
        )
    entries = [_validated_entry(index, entry, payload_base) for index, entry in enumerate(entries)]
    _check_overlap(entries)
    for index, e in enumerate(entries):
        if e.kind == L1_RECORD_KIND_STATISTICS_AND_TENSOR and e.tensor_offset < payload_base:
            raise ValueError(
                f"L1 dump entry {index} (task_id={e.task_id}) tensor_offset={e.tensor_offset}"
                f" is below payload_base={payload_base}"
            )
    payload_offset = min(e.payload_offset for e in entries)
    total_bytes = align_up(max(end for _, end, _ in _slots(entries) or [(0, 0, 0)]), L1_DUMP_ALIGNMENT)
    total_bytes = max(total_bytes, align_up(max(e.payload_end for e in entries), L1_DUMP_ALIGNMENT))
    statistics = any(e.kind != L1_RECORD_KIND_TENSOR for e in entries)
    pool_offset, pool_bytes = _check_pool(entries, pool, total_bytes)
    total_bytes = max(total_bytes, align_up(pool_offset + pool_bytes, L1_DUMP_ALIGNMENT))
    if total_bytes >= TOTAL_BYTES_LIMIT:
        raise ValueError(f"L1 dump total_bytes={total_bytes} must be below 2**32={TOTAL_BYTES_LIMIT}")

    buffer = bytearray(total_bytes)
    HEADER_STRUCT.pack_into(
        buffer,
        0,
        L1_DUMP_MAGIC,
        L1_DUMP_VERSION_STATISTICS if statistics else L1_DUMP_VERSION,
        1,
        count,
        L1_DUMP_RECORD_SIZE,
        L1_DUMP_RECORDS_OFFSET,
        payload_offset,
        total_bytes,
    )
    for index, e in enumerate(entries):
        RECORD_STRUCT.pack_into(
            buffer,
            L1_DUMP_RECORDS_OFFSET + index * L1_DUMP_RECORD_SIZE,
            e.task_id,
            e.phase,
            e.parameter_position,
            e.source_offset_bytes & U32_MAX,
            e.source_offset_bytes >> 32,
            e.payload_offset,
            e.payload_bytes,
            e.status,  # always PENDING after validation
            e.task_index,
            e.worker_id,
        )
        if e.kind != L1_RECORD_KIND_TENSOR:
            RECORD_EXTENSION_STRUCT.pack_into(
                buffer,
                L1_DUMP_RECORDS_OFFSET + index * L1_DUMP_RECORD_SIZE + L1_RECORD_EXTENSION_OFFSET,
                e.kind,
                e.dtype_code,
                e.source_bytes & U32_MAX,
                e.source_bytes >> 32,
                e.tensor_offset,
                e.tensor_bytes,
            )
    if pool_bytes:
        POOL_STRUCT.pack_into(buffer, L1_POOL_HEADER_OFFSET, pool_offset, pool_bytes, 0, 0)
    return buffer


def _check_pool(entries: Sequence[L1RecordEntry], pool: tuple[int, int] | None, slots_end: int) -> tuple[int, int]:
    """Validate the tensor pool against the entries that use it; ``(0, 0)`` when there is none.

    Args:
        entries: validated entries.
        pool: ``(pool_offset, pool_bytes)`` or None.
        slots_end: the aligned end of every slot.
    """
    users = any(e.kind in L1_POOL_KINDS for e in entries)
    if pool is None or tuple(pool) == (0, 0):
        if users:
            raise ValueError("L1 dump entries of kind 3 or 4 need a tensor pool (pool=(offset, bytes))")
        return 0, 0
    if not users:
        raise ValueError(f"L1 dump tensor pool {tuple(pool)} given but no entry has kind 3 or 4")
    offset, size = (_as_int(v) for v in pool)
    if offset is None or size is None or not 0 <= offset <= U32_MAX or not 0 < size <= U32_MAX:
        raise ValueError(f"L1 dump tensor pool {pool!r} must be (u32 offset, positive u32 bytes)")
    if offset % L1_DUMP_ALIGNMENT or offset < slots_end:
        raise ValueError(
            f"L1 dump tensor pool offset={offset} must be {L1_DUMP_ALIGNMENT}-byte aligned and at or"
            f" after the last slot's end ({slots_end})"
        )
    return offset, size
