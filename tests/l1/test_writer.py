"""Packing L1 dump buffers: slot planning, exact bytes, validation and pack -> read round trips."""

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from megadump_zarr.l1 import (
    L1_ANY_WORKER,
    L1_DUMP_MAGIC,
    L1_DUMP_PAYLOAD_BASE,
    L1_DUMP_STATUS_BYTE,
    L1_DUMP_STATUS_CAPTURED,
    L1_DUMP_STATUS_PENDING,
    L1RecordEntry,
    pack_l1_buffer,
    plan_slots,
    read_l1_buffer,
)


def _entry(**overrides):
    fields = dict(
        task_id=1,
        phase=1,
        parameter_position=0,
        source_offset_bytes=0,
        payload_offset=L1_DUMP_PAYLOAD_BASE,
        payload_bytes=16,
        status=L1_DUMP_STATUS_PENDING,
        task_index=0,
        worker_id=L1_ANY_WORKER,
    )
    fields.update(overrides)
    return L1RecordEntry(**fields)


# --- plan_slots -------------------------------------------------------------------------------------------------


def test_plan_slots_aligned_and_consecutive():
    base = L1_DUMP_PAYLOAD_BASE
    assert plan_slots([1, 64, 65, 0, 3]) == [base, base + 64, base + 128, base + 256, base + 256]
    assert plan_slots([]) == []


def test_plan_slots_zero_bytes_take_the_next_aligned_position():
    assert plan_slots([0, 0, 10, 0], payload_base=128) == [128, 128, 128, 192]


def test_plan_slots_aligns_an_unaligned_base():
    assert plan_slots([5], payload_base=130) == [192]


def test_plan_slots_rejects_negatives():
    with pytest.raises(ValueError, match="size 1 must not be negative, got -5"):
        plan_slots([1, -5])
    with pytest.raises(ValueError, match="payload_base must not be negative, got -64"):
        plan_slots([1], payload_base=-64)


# --- exact bytes ------------------------------------------------------------------------------------------------


def test_header_bytes_match_hand_packed_struct():
    sizes = [10, 100, 0]
    offsets = plan_slots(sizes)
    entries = [_entry(task_id=i, payload_offset=o, payload_bytes=s) for i, (o, s) in enumerate(zip(offsets, sizes))]
    buffer = pack_l1_buffer(entries)
    total = L1_DUMP_PAYLOAD_BASE + 64 + 128  # 10 -> 64, 100 -> 128, the empty one at the end occupies nothing
    assert len(buffer) == total
    assert bytes(buffer[:32]) == struct.pack("<8I", 0x4C314450, 2, 1, 3, 64, 64, L1_DUMP_PAYLOAD_BASE, total)
    assert bytes(buffer[32:64]) == bytes(32)


def test_record_bytes_match_hand_packed_struct():
    source = 0x0123456789ABCDEF
    entry = L1RecordEntry(
        task_id=77,
        phase=2,
        parameter_position=5,
        source_offset_bytes=source,
        payload_offset=L1_DUMP_PAYLOAD_BASE + 64,
        payload_bytes=1000,
        status=L1_DUMP_STATUS_PENDING,
        task_index=12,
        worker_id=3,
    )
    first = _entry(task_id=1, payload_offset=L1_DUMP_PAYLOAD_BASE, payload_bytes=64)
    buffer = pack_l1_buffer([first, entry])
    expected = struct.pack("<10I24x", 77, 2, 5, 0x89ABCDEF, 0x01234567, L1_DUMP_PAYLOAD_BASE + 64, 1000, 0, 12, 3)
    assert bytes(buffer[128:192]) == expected
    assert bytes(buffer[64:128]) == struct.pack("<10I24x", 1, 1, 0, 0, 0, L1_DUMP_PAYLOAD_BASE, 64, 0, 0, 0xFFFFFFFF)
    # the unused part of the reserved table and every payload byte are zero
    assert not any(buffer[192:])


def test_status_is_written_pending_at_byte_28_whatever_the_entry_says():
    buffer = pack_l1_buffer([_entry(status=L1_DUMP_STATUS_CAPTURED), _entry(payload_offset=L1_DUMP_PAYLOAD_BASE + 64)])
    for index in range(2):
        at = 64 + 64 * index + L1_DUMP_STATUS_BYTE
        assert struct.unpack_from("<I", buffer, at)[0] == L1_DUMP_STATUS_PENDING
    struct.pack_into("<I", buffer, 64 + L1_DUMP_STATUS_BYTE, L1_DUMP_STATUS_CAPTURED)
    assert [r.status for r in read_l1_buffer(buffer).records] == [L1_DUMP_STATUS_CAPTURED, L1_DUMP_STATUS_PENDING]


def test_header_payload_offset_is_the_lowest_slot_and_total_is_aligned():
    entries = [_entry(payload_offset=1024, payload_bytes=1), _entry(payload_offset=512, payload_bytes=3)]
    buffer = pack_l1_buffer(entries, payload_base=512)
    header = struct.unpack_from("<8I", buffer)
    assert header[6] == 512 and header[7] == 1088 == len(buffer)


def test_small_payload_base_right_after_the_table():
    buffer = pack_l1_buffer([_entry(payload_offset=128, payload_bytes=5)], payload_base=128)
    assert len(buffer) == 192
    assert read_l1_buffer(buffer).header.payload_offset == 128


def test_numpy_integer_fields_are_accepted():
    entry = _entry(task_id=np.uint32(5), payload_bytes=np.int64(8), source_offset_bytes=np.uint64(2**63))
    record = read_l1_buffer(pack_l1_buffer([entry])).records[0]
    assert (record.task_id, record.payload_bytes, record.source_offset_bytes) == (5, 8, 2**63)
    assert type(record.task_id) is int


def test_decoded_records_pack_again():
    entries = [_entry(task_id=i, payload_offset=o, payload_bytes=9) for i, o in enumerate(plan_slots([9] * 4))]
    buffer = pack_l1_buffer(entries)
    struct.pack_into("<I", buffer, 64 + L1_DUMP_STATUS_BYTE, L1_DUMP_STATUS_CAPTURED)
    again = pack_l1_buffer(read_l1_buffer(buffer).records)
    assert len(again) == len(buffer) and again[:64] == buffer[:64]
    assert all(r.status == L1_DUMP_STATUS_PENDING for r in read_l1_buffer(again).records)


# --- validation -------------------------------------------------------------------------------------------------


def test_rejects_no_entries():
    with pytest.raises(ValueError, match="at least one entry, got 0"):
        pack_l1_buffer([])


def test_rejects_too_many_entries():
    entries = [_entry(payload_offset=o, payload_bytes=0) for o in plan_slots([0] * 4097)]
    with pytest.raises(ValueError, match="at most 4096 entries, got 4097"):
        pack_l1_buffer(entries)


def test_accepts_exactly_4096_entries():
    entries = [_entry(task_id=i, payload_offset=o, payload_bytes=1) for i, o in enumerate(plan_slots([1] * 4096))]
    assert read_l1_buffer(pack_l1_buffer(entries)).header.record_count == 4096


def test_rejects_slot_below_payload_base():
    with pytest.raises(ValueError, match=r"entry 1 \(task_id=4\) payload_offset=262144 is below payload_base=262208"):
        pack_l1_buffer([_entry(), _entry(task_id=4, payload_offset=L1_DUMP_PAYLOAD_BASE - 64)])


def test_rejects_unaligned_slot():
    with pytest.raises(ValueError, match=r"entry 0 \(task_id=1\) payload_offset=262209 is not 64-byte aligned"):
        pack_l1_buffer([_entry(payload_offset=L1_DUMP_PAYLOAD_BASE + 1)])


def test_rejects_unaligned_zero_byte_slot():
    with pytest.raises(ValueError, match="payload_offset=262240 is not 64-byte aligned"):
        pack_l1_buffer([_entry(payload_offset=L1_DUMP_PAYLOAD_BASE + 32, payload_bytes=0)])


def test_rejects_payload_base_inside_the_table():
    with pytest.raises(ValueError, match=r"payload_base=64 is inside the record table of 1 entries \(ends at 128\)"):
        pack_l1_buffer([_entry(payload_offset=64)], payload_base=64)


def test_rejects_overlapping_slots():
    base = L1_DUMP_PAYLOAD_BASE
    entries = [
        _entry(payload_offset=base, payload_bytes=64),
        _entry(payload_offset=base + 128, payload_bytes=65),
        _entry(payload_offset=base + 64, payload_bytes=64),
        _entry(payload_offset=base + 192, payload_bytes=1),
    ]
    with pytest.raises(ValueError, match=r"entries 1 and 3 have overlapping payload slots: \[262336, 262401\)"):
        pack_l1_buffer(entries)


def test_identical_slots_overlap():
    with pytest.raises(ValueError, match="entries 0 and 1 have overlapping"):
        pack_l1_buffer([_entry(), _entry()])


def test_zero_byte_slots_overlap_nothing():
    base = L1_DUMP_PAYLOAD_BASE
    entries = [_entry(payload_offset=base, payload_bytes=128), _entry(payload_offset=base + 64, payload_bytes=0)]
    records = read_l1_buffer(pack_l1_buffer(entries)).records
    assert records[1].payload.size == 0


def test_rejects_total_of_2_pow_32():
    entry = _entry(payload_offset=2**32 - 64, payload_bytes=63)  # ends at 2**32 - 1, aligned up to 2**32
    with pytest.raises(ValueError, match=r"total_bytes=4294967296 must be below 2\*\*32"):
        pack_l1_buffer([entry])


@pytest.mark.parametrize(
    "field", ["task_id", "phase", "parameter_position", "payload_offset", "payload_bytes", "task_index", "worker_id"]
)
@pytest.mark.parametrize("value", [-1, 2**32])
def test_rejects_u32_fields_out_of_range(field, value):
    with pytest.raises(ValueError, match=rf"entry 0 .*field {field}={value} is not a u32"):
        pack_l1_buffer([_entry(**{field: value})])


def test_rejects_non_integer_field():
    with pytest.raises(ValueError, match=r"field payload_bytes=1.5 is not a u32"):
        pack_l1_buffer([_entry(payload_bytes=1.5)])


@pytest.mark.parametrize("value", [-1, 2**64])
def test_rejects_source_offset_out_of_range(value):
    with pytest.raises(ValueError, match=rf"source_offset_bytes={value} is not a u64"):
        pack_l1_buffer([_entry(source_offset_bytes=value)])


def test_accepts_largest_source_offset():
    record = read_l1_buffer(pack_l1_buffer([_entry(source_offset_bytes=2**64 - 1)])).records[0]
    assert record.source_offset_bytes == 2**64 - 1


def test_rejects_invalid_phase():
    with pytest.raises(ValueError, match=r"entry 0 \(task_id=1\) has invalid phase 3"):
        pack_l1_buffer([_entry(phase=3)])


# --- round trips ------------------------------------------------------------------------------------------------


@st.composite
def plans(draw):
    sizes = draw(st.lists(st.integers(0, 300), min_size=1, max_size=40))
    count = len(sizes)
    base = draw(st.sampled_from([64 + 64 * count, 64 + 64 * count + 1, 64 + 64 * count + 64, L1_DUMP_PAYLOAD_BASE]))
    u32 = st.integers(0, 2**32 - 1)
    entries = [
        L1RecordEntry(
            task_id=draw(u32),
            phase=draw(st.sampled_from([1, 2])),
            parameter_position=draw(u32),
            source_offset_bytes=draw(st.integers(0, 2**64 - 1)),
            payload_offset=offset,
            payload_bytes=size,
            status=L1_DUMP_STATUS_PENDING,
            task_index=draw(u32),
            worker_id=draw(st.one_of(st.just(L1_ANY_WORKER), u32)),
        )
        for offset, size in zip(plan_slots(sizes, payload_base=base), sizes)
    ]
    order = draw(st.permutations(range(count)))  # table order need not follow slot order
    return [entries[i] for i in order], base


@settings(max_examples=150, deadline=None, database=None)
@given(plans())
def test_pack_read_round_trip(plan):
    entries, base = plan
    buffer = pack_l1_buffer(entries, payload_base=base)
    decoded = read_l1_buffer(buffer)
    header = decoded.header
    assert header.magic == L1_DUMP_MAGIC and header.enabled == 1 and header.record_count == len(entries)
    assert header.payload_offset == min(e.payload_offset for e in entries)
    assert header.total_bytes == len(buffer) and header.total_bytes % 64 == 0
    assert header.total_bytes - max(e.payload_end for e in entries) < 64
    assert [r.entry for r in decoded.records] == entries
    for i, record in enumerate(decoded.records):
        assert record.index == i and record.record_offset == 64 + 64 * i
        assert record.payload.size == record.payload_bytes
