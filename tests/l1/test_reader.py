"""Reading L1 dump buffers: exact decoding, accepted inputs, zero copy, every validation error, robustness."""

import struct

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from megadump_zarr.l1 import (
    L1_ANY_WORKER,
    L1_DUMP_MAGIC,
    L1_DUMP_PAYLOAD_BASE,
    L1_DUMP_STATUS_BYTE,
    L1_DUMP_STATUS_CAPTURED,
    L1_DUMP_STATUS_PENDING,
    L1Buffer,
    L1Header,
    L1RecordEntry,
    pack_l1_buffer,
    plan_slots,
    read_l1_buffer,
    read_l1_header,
)

MAGIC = 0x4C314450


def build(
    records,
    *,
    payload_offset=None,
    total_bytes=None,
    count=None,
    magic=MAGIC,
    version=2,
    enabled=1,
    record_size=64,
    records_offset=64,
    length=None,
):
    """Hand-build a buffer with struct.pack, independent of the packer.

    records: tuples (task_id, phase, pos, src_lo, src_hi, payload_offset, payload_bytes, status, task_index, worker).
    """
    count = len(records) if count is None else count
    table_end = 64 + 64 * len(records)
    payload_offset = table_end if payload_offset is None else payload_offset
    if total_bytes is None:
        total_bytes = max([payload_offset] + [r[5] + r[6] for r in records])
    size = max(total_bytes, table_end, 32) if length is None else length
    buffer = bytearray(max(size, table_end))
    struct.pack_into(
        "<8I", buffer, 0, magic, version, enabled, count, record_size, records_offset, payload_offset, total_bytes
    )
    for i, record in enumerate(records):
        buffer[64 + 64 * i : 128 + 64 * i] = struct.pack("<10I24x", *record)
    return buffer[:size]


def rec(task_id=1, phase=1, offset=128, nbytes=16, status=0, pos=0, src=0, task_index=0, worker=L1_ANY_WORKER):
    return (task_id, phase, pos, src & 0xFFFFFFFF, src >> 32, offset, nbytes, status, task_index, worker)


def sample_buffer():
    """Three records packed at the planner's base, payloads filled with a pattern, one captured."""
    sizes = [100, 0, 300]
    offsets = plan_slots(sizes)
    entries = [
        L1RecordEntry(
            task_id=10 + i,
            phase=1 + i % 2,
            parameter_position=i,
            source_offset_bytes=(i << 40) + 3 * i,
            payload_offset=o,
            payload_bytes=s,
            status=0,
            task_index=i,
            worker_id=L1_ANY_WORKER if i else 7,
        )
        for i, (o, s) in enumerate(zip(offsets, sizes))
    ]
    buffer = pack_l1_buffer(entries)
    for entry in entries:
        buffer[entry.payload_offset : entry.payload_end] = bytes(
            (entry.task_id + k) % 256 for k in range(entry.payload_bytes)
        )
    struct.pack_into("<I", buffer, 64 + 64 * 2 + L1_DUMP_STATUS_BYTE, L1_DUMP_STATUS_CAPTURED)
    return buffer, entries


def summary(decoded: L1Buffer):
    return decoded.header, decoded.records, [r.payload.tobytes() for r in decoded.records]


# --- exact decoding ---------------------------------------------------------------------------------------------


def test_round_trip_exact_fields():
    buffer, entries = sample_buffer()
    decoded = read_l1_buffer(buffer)
    assert decoded.header == L1Header(
        magic=L1_DUMP_MAGIC,
        version=2,
        enabled=1,
        record_count=3,
        record_size=64,
        records_offset=64,
        payload_offset=L1_DUMP_PAYLOAD_BASE,
        total_bytes=L1_DUMP_PAYLOAD_BASE + 128 + 320,
    )
    first, empty, last = decoded.records
    assert (first.task_id, first.phase, first.parameter_position, first.source_offset_bytes) == (10, 1, 0, 0)
    assert (first.payload_offset, first.payload_bytes, first.status, first.task_index, first.worker_id) == (
        L1_DUMP_PAYLOAD_BASE,
        100,
        L1_DUMP_STATUS_PENDING,
        0,
        7,
    )
    assert (first.index, first.record_offset) == (0, 64)
    assert (empty.payload_offset, empty.payload_bytes, empty.payload.size) == (L1_DUMP_PAYLOAD_BASE + 128, 0, 0)
    assert (last.source_offset_bytes, last.status, last.worker_id) == (
        (2 << 40) + 6,
        L1_DUMP_STATUS_CAPTURED,
        L1_ANY_WORKER,
    )
    assert (last.index, last.record_offset) == (2, 192)
    assert first.payload.tobytes() == bytes((10 + k) % 256 for k in range(100))
    assert last.payload.tobytes() == bytes((12 + k) % 256 for k in range(300))
    assert [r.entry for r in decoded.records] == [
        entries[0],
        entries[1],
        L1RecordEntry(**{**entries[2].__dict__, "status": L1_DUMP_STATUS_CAPTURED}),
    ]
    assert all(type(v) is int for v in first.entry.__dict__.values())
    assert decoded.data.dtype == np.uint8 and decoded.data.shape == (len(buffer),)


def test_hand_built_buffer_with_unaligned_slots_and_tight_payload_offset():
    # the table of 2 ends at 192 = payload_offset; slots need not be 64-byte aligned for the reader
    buffer = build([rec(offset=193, nbytes=3), rec(task_id=2, offset=196, nbytes=5, phase=2)])
    decoded = read_l1_buffer(buffer)
    assert decoded.header.payload_offset == 192 and decoded.header.total_bytes == 201
    assert [(r.payload_offset, r.payload_bytes) for r in decoded.records] == [(193, 3), (196, 5)]


def test_zero_records_is_valid():
    decoded = read_l1_buffer(build([], payload_offset=64, total_bytes=64))
    assert decoded.records == () and decoded.header.record_count == 0


def test_zero_byte_records_anywhere_in_the_payload_area():
    # inside another slot, at its start, and at total_bytes itself
    records = [
        rec(offset=320, nbytes=64),
        rec(offset=330, nbytes=0),
        rec(offset=384, nbytes=0),
        rec(offset=320, nbytes=0),
    ]
    decoded = read_l1_buffer(build(records, total_bytes=384))
    assert decoded.header.payload_offset == 320
    assert [r.payload.size for r in decoded.records] == [64, 0, 0, 0]


def test_trailing_bytes_are_ignored():
    buffer, _ = sample_buffer()
    extended = buffer + b"\xff" * 1000
    assert summary(read_l1_buffer(extended)) == summary(read_l1_buffer(buffer))
    assert read_l1_buffer(extended).data.size == len(extended)


def test_status_byte_28_read_back():
    buffer = build([rec(offset=192), rec(offset=256)])
    assert [r.status for r in read_l1_buffer(buffer).records] == [0, 0]
    buffer[64 + 64 + L1_DUMP_STATUS_BYTE] = 1
    assert [r.status for r in read_l1_buffer(buffer).records] == [0, 1]


def test_read_l1_header_checks_only_header_and_table():
    buffer = build([rec(offset=128, phase=9)])
    assert read_l1_header(buffer).record_count == 1
    with pytest.raises(ValueError, match="invalid phase 9"):
        read_l1_buffer(buffer)
    with pytest.raises(ValueError, match="invalid L1 dump buffer header: magic=0x0, version=2"):
        read_l1_header(build([rec(offset=128)], magic=0))


# --- accepted inputs, zero copy ---------------------------------------------------------------------------------


def _inputs(buffer):
    raw = bytes(buffer)
    array = np.frombuffer(raw, np.uint8).copy()
    interleaved = np.zeros(2 * len(raw), np.uint8)
    interleaved[::2] = array
    tensor_pair = torch.zeros((len(raw), 2), dtype=torch.uint8)
    tensor_pair[:, 1] = torch.from_numpy(array)
    strided_bytes = bytearray(2 * len(raw))
    strided_bytes[::2] = raw
    return {
        "bytes": raw,
        "bytearray": bytearray(raw),
        "memoryview": memoryview(raw),
        "memoryview-noncontiguous": memoryview(strided_bytes)[::2],
        "numpy": array,
        "numpy-noncontiguous": interleaved[::2],
        "torch": torch.from_numpy(array.copy()),
        "torch-noncontiguous": tensor_pair[:, 1],
    }


def test_every_input_type_gives_equal_results():
    buffer, _ = sample_buffer()
    expected = summary(read_l1_buffer(buffer))
    inputs = _inputs(buffer)
    assert not inputs["torch-noncontiguous"].is_contiguous()
    for name, data in inputs.items():
        assert summary(read_l1_buffer(data)) == expected, name
        assert read_l1_header(data) == expected[0], name


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensor_is_copied_to_host():
    buffer, _ = sample_buffer()
    tensor = torch.frombuffer(bytearray(buffer), dtype=torch.uint8).cuda()
    assert summary(read_l1_buffer(tensor)) == summary(read_l1_buffer(buffer))


def test_payloads_share_memory_with_data():
    buffer, _ = sample_buffer()
    decoded = read_l1_buffer(buffer)
    for record in decoded.records:
        if record.payload_bytes:
            assert np.shares_memory(record.payload, decoded.data)
        assert not record.payload.flags.writeable
    assert not decoded.data.flags.writeable


def test_numpy_input_is_not_copied():
    buffer, _ = sample_buffer()
    array = np.frombuffer(bytes(buffer), np.uint8).copy()
    decoded = read_l1_buffer(array)
    assert np.shares_memory(decoded.data, array)
    assert all(np.shares_memory(r.payload, array) for r in decoded.records if r.payload_bytes)
    assert array.flags.writeable  # the caller's array is untouched
    array[L1_DUMP_PAYLOAD_BASE] ^= 0xFF  # a later device write shows through the views
    assert decoded.records[0].payload[0] == array[L1_DUMP_PAYLOAD_BASE]


def test_cpu_tensor_and_bytearray_inputs_are_not_copied():
    buffer, _ = sample_buffer()
    tensor = torch.frombuffer(bytearray(buffer), dtype=torch.uint8)
    assert np.shares_memory(read_l1_buffer(tensor).data, tensor.numpy())
    raw = bytearray(buffer)
    assert np.shares_memory(read_l1_buffer(raw).data, np.frombuffer(raw, np.uint8))


@pytest.mark.parametrize("bad", [[1, 2, 3], "abc", 12, None, (b"x",)])
def test_rejects_other_types(bad):
    with pytest.raises(TypeError, match=type(bad).__name__):
        read_l1_buffer(bad)


def test_rejects_wrong_dtypes():
    with pytest.raises(TypeError, match="dtype uint8, got int8"):
        read_l1_buffer(np.zeros(64, np.int8))
    with pytest.raises(TypeError, match="dtype torch.uint8, got torch.float32"):
        read_l1_buffer(torch.zeros(64))
    with pytest.raises(TypeError, match="format 'i'"):
        read_l1_buffer(memoryview(np.zeros(64, np.int32)))


def test_rejects_meta_tensor():
    with pytest.raises(TypeError, match="meta device"):
        read_l1_buffer(torch.empty(64, dtype=torch.uint8, device="meta"))


def test_rejects_multidimensional_arrays():
    with pytest.raises(ValueError, match=r"must be 1-D, got shape \(2, 32\)"):
        read_l1_buffer(np.zeros((2, 32), np.uint8))
    with pytest.raises(ValueError, match=r"must be 1-D, got shape \(2, 32\)"):
        read_l1_buffer(torch.zeros((2, 32), dtype=torch.uint8))


# --- validation errors ------------------------------------------------------------------------------------------


def test_shorter_than_header():
    with pytest.raises(ValueError, match="L1 dump buffer shorter than its header: 20 < 32 bytes"):
        read_l1_buffer(bytes(20))
    with pytest.raises(ValueError, match="shorter than its header: 0 < 32 bytes"):
        read_l1_buffer(b"")


def test_shorter_than_total_bytes():
    buffer = build([rec(offset=128, nbytes=64)])
    with pytest.raises(ValueError, match="L1 dump buffer shorter than total_bytes: 191 < 192 bytes"):
        read_l1_buffer(buffer[:-1])


def test_bad_magic_and_version():
    with pytest.raises(ValueError, match=r"^invalid L1 dump buffer header: magic=0x12345678, version=2$"):
        read_l1_buffer(build([], magic=0x12345678, total_bytes=64))
    with pytest.raises(ValueError, match=r"^invalid L1 dump buffer header: magic=0x4c314450, version=1$"):
        read_l1_buffer(build([], version=1, total_bytes=64))


def test_bad_record_size():
    with pytest.raises(ValueError, match="L1 dump record_size must be 64, got 32"):
        read_l1_buffer(build([rec()], record_size=32))


def test_bad_records_offset():
    with pytest.raises(ValueError, match="L1 dump records_offset must be 64, got 32"):
        read_l1_buffer(build([rec()], records_offset=32))


def test_too_many_records():
    with pytest.raises(ValueError, match="record_count must be at most 4096, got 4097"):
        read_l1_buffer(build([], count=4097, payload_offset=2**20, total_bytes=2**20))


def test_table_past_total_bytes():
    message = "record table ends past total_bytes: record_count=3 ends at 256 > total_bytes=200"
    with pytest.raises(ValueError, match=message):
        read_l1_buffer(build([], count=3, payload_offset=64, total_bytes=200))


def test_payload_offset_past_total_bytes():
    with pytest.raises(ValueError, match="payload_offset past total_bytes: payload_offset=300 > total_bytes=256"):
        read_l1_buffer(build([], count=1, payload_offset=300, total_bytes=256))


def test_table_runs_into_payload_area():
    with pytest.raises(ValueError, match="runs into the payload area: record_count=2 ends at 192 > payload_offset=128"):
        read_l1_buffer(build([rec(offset=192), rec(offset=256)], payload_offset=128))


def test_slot_before_payload_area():
    with pytest.raises(
        ValueError,
        match=r"record 1 \(task_id=5\) payload slot outside the payload area: "
        r"payload_offset=100, payload_bytes=4 not within \[192, total_bytes=256\)",
    ):
        read_l1_buffer(build([rec(offset=192), rec(task_id=5, offset=100, nbytes=4)], total_bytes=256))


def test_slot_past_total_bytes():
    with pytest.raises(
        ValueError,
        match=r"record 0 \(task_id=3\) payload slot outside the payload area: "
        r"payload_offset=200, payload_bytes=100 not within \[128, total_bytes=256\)",
    ):
        read_l1_buffer(build([rec(task_id=3, offset=200, nbytes=100)], total_bytes=256))


def test_slot_offset_plus_bytes_beyond_u32():
    with pytest.raises(ValueError, match=r"payload_offset=4294967295, payload_bytes=4294967295"):
        read_l1_buffer(build([rec(offset=0xFFFFFFFF, nbytes=0xFFFFFFFF)], total_bytes=256))


def test_zero_byte_slot_at_total_bytes_is_fine_but_not_past_it():
    assert read_l1_buffer(build([rec(offset=256, nbytes=0)], total_bytes=256)).records[0].payload.size == 0
    with pytest.raises(ValueError, match="payload_offset=257, payload_bytes=0"):
        read_l1_buffer(build([rec(offset=257, nbytes=0)], total_bytes=256, length=300))


def test_overlapping_slots_name_both_records():
    records = [
        rec(offset=320, nbytes=64),
        rec(offset=448, nbytes=10),
        rec(offset=384, nbytes=65),
        rec(offset=400, nbytes=0),
    ]
    message = r"records 1 and 2 have overlapping payload slots: \[448, 458\) and \[384, 449\)"
    with pytest.raises(ValueError, match=message):
        read_l1_buffer(build(records))


def test_invalid_phase():
    with pytest.raises(ValueError, match=r"record 1 \(task_id=8\) has invalid phase 0"):
        read_l1_buffer(build([rec(offset=192), rec(task_id=8, phase=0, offset=256)]))


def test_invalid_status():
    with pytest.raises(ValueError, match=r"record 0 \(task_id=1\) has invalid status 2"):
        read_l1_buffer(build([rec(status=2)]))


# --- performance ------------------------------------------------------------------------------------------------


def test_4096_records_decode():
    """4096 records decode to their own slots (its speed is part of ``benchmarks.export``'s P2, not asserted here)."""
    sizes = [(i * 37) % 1000 for i in range(4096)]
    entries = [
        L1RecordEntry(i, 1 + i % 2, i % 5, i << 33, o, s, 0, i, L1_ANY_WORKER)
        for i, (o, s) in enumerate(zip(plan_slots(sizes), sizes))
    ]
    buffer = bytes(pack_l1_buffer(entries))
    decoded = read_l1_buffer(buffer)
    assert len(decoded.records) == 4096
    assert [r.payload_offset for r in decoded.records] == [e.payload_offset for e in entries]


# --- robustness -------------------------------------------------------------------------------------------------


def _check_never_crashes(data):
    try:
        decoded = read_l1_buffer(data)
    except ValueError:
        return
    total = decoded.header.total_bytes
    assert total <= len(data)
    for record in decoded.records:
        assert decoded.header.payload_offset <= record.payload_offset <= total
        assert record.payload_offset + record.payload_bytes <= total
        assert record.payload.size == record.payload_bytes


@settings(max_examples=300, deadline=None, database=None)
@given(st.binary(max_size=512))
def test_arbitrary_bytes_only_raise_value_error(data):
    _check_never_crashes(data)


@settings(max_examples=300, deadline=None, database=None)
@given(st.binary(min_size=32, max_size=512))
def test_arbitrary_bytes_behind_a_valid_magic_only_raise_value_error(data):
    _check_never_crashes(struct.pack("<2I", MAGIC, 2) + data[8:])


@settings(max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.integers(0, 200), min_size=1, max_size=6),
    st.lists(st.tuples(st.integers(0, 64 + 64 * 6 - 1), st.integers(0, 255)), min_size=1, max_size=6),
    st.lists(st.tuples(st.integers(0, 15), st.sampled_from([0, 1, 63, 64, 191, 2**31, 2**32 - 1])), max_size=3),
    st.integers(0, 2000),
)
def test_mutated_valid_buffers_only_raise_value_error(sizes, flips, words, cut):
    entries = [
        L1RecordEntry(i, 1, 0, 0, o, s, 0, i, L1_ANY_WORKER)
        for i, (o, s) in enumerate(zip(plan_slots(sizes, payload_base=64 + 64 * len(sizes)), sizes))
    ]
    buffer = pack_l1_buffer(entries, payload_base=64 + 64 * len(sizes))
    table_end = 64 + 64 * len(sizes)
    for at, value in flips:  # flip bytes of header and table
        buffer[at % table_end] ^= value
    for word, value in words:  # set header fields (0..7) or record 0 fields (8..15) to interesting values
        struct.pack_into("<I", buffer, 4 * word if word < 8 else 64 + 4 * (word - 8), value)
    _check_never_crashes(bytes(buffer[: max(cut, 0)] if cut < len(buffer) else buffer))
