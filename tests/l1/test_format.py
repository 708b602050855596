"""The L1 dump ABI constants, byte layouts and value types."""

import dataclasses
import struct

import numpy as np
import pytest

import megadump_zarr.l1 as l1
from megadump_zarr.l1 import (
    L1_ANY_WORKER,
    L1_DIAGNOSTIC_MODE,
    L1_DUMP_ALIGNMENT,
    L1_DUMP_HEADER_SIZE,
    L1_DUMP_MAGIC,
    L1_DUMP_MAX_RECORDS,
    L1_DUMP_PAYLOAD_BASE,
    L1_DUMP_PHASE_AFTER,
    L1_DUMP_PHASE_BEFORE,
    L1_DUMP_RECORD_SIZE,
    L1_DUMP_RECORDS_OFFSET,
    L1_DUMP_STATUS_BYTE,
    L1_DUMP_STATUS_CAPTURED,
    L1_DUMP_STATUS_PENDING,
    L1_DUMP_VERSION,
    L1Header,
    L1Record,
    L1RecordEntry,
    align_up,
)
from megadump_zarr.l1.format import HEADER_STRUCT, RECORD_DTYPE, RECORD_FIELDS, RECORD_STRUCT


def test_constant_values():
    assert L1_DUMP_MAGIC == 0x4C314450
    assert struct.pack("<I", L1_DUMP_MAGIC) == b"PD1L"
    assert L1_DUMP_VERSION == 2
    assert (L1_DUMP_PHASE_BEFORE, L1_DUMP_PHASE_AFTER) == (1, 2)
    assert L1_DIAGNOSTIC_MODE == 2
    assert (L1_DUMP_STATUS_PENDING, L1_DUMP_STATUS_CAPTURED) == (0, 1)
    assert L1_DUMP_ALIGNMENT == 64
    assert L1_DUMP_RECORDS_OFFSET == 64
    assert L1_DUMP_MAX_RECORDS == 4096
    assert L1_DUMP_RECORD_SIZE == 64
    assert L1_DUMP_HEADER_SIZE == 32
    assert L1_DUMP_STATUS_BYTE == 28
    assert L1_ANY_WORKER == 0xFFFFFFFF
    assert L1_DUMP_PAYLOAD_BASE == 64 + 4096 * 64 == 262208


def test_structs_match_the_abi():
    assert HEADER_STRUCT.format == "<8I" and HEADER_STRUCT.size == 32
    assert RECORD_STRUCT.format == "<10I24x" and RECORD_STRUCT.size == 64


def test_record_dtype_decodes_struct_packed_bytes():
    values = (7, 2, 3, 0x89ABCDEF, 0x01234567, 262208, 100, 1, 42, L1_ANY_WORKER)
    raw = struct.pack("<10I24x", *values)
    row = np.frombuffer(raw, dtype=RECORD_DTYPE)[0]
    assert tuple(int(row[name]) for name in RECORD_FIELDS) == values
    assert RECORD_DTYPE.itemsize == 64
    assert RECORD_DTYPE.fields["status"][1] == L1_DUMP_STATUS_BYTE
    assert raw[L1_DUMP_STATUS_BYTE : L1_DUMP_STATUS_BYTE + 4] == struct.pack("<I", 1)


@pytest.mark.parametrize(
    ("value", "alignment", "expected"),
    [(0, 64, 0), (1, 64, 64), (63, 64, 64), (64, 64, 64), (65, 64, 128), (262208, 64, 262208), (5, 4, 8), (7, 1, 7)],
)
def test_align_up(value, alignment, expected):
    assert align_up(value, alignment) == expected


def test_align_up_defaults_to_64():
    assert align_up(100) == 128


def test_align_up_rejects_bad_arguments():
    with pytest.raises(ValueError, match="negative value: -1"):
        align_up(-1)
    with pytest.raises(ValueError, match="alignment must be positive, got 0"):
        align_up(5, 0)


def _entry(**overrides):
    fields = dict(
        task_id=1,
        phase=1,
        parameter_position=0,
        source_offset_bytes=0,
        payload_offset=L1_DUMP_PAYLOAD_BASE,
        payload_bytes=16,
        status=0,
        task_index=0,
        worker_id=L1_ANY_WORKER,
    )
    fields.update(overrides)
    return L1RecordEntry(**fields)


def test_dataclasses_are_frozen():
    header = L1Header(L1_DUMP_MAGIC, 2, 1, 0, 64, 64, 64, 64)
    with pytest.raises(dataclasses.FrozenInstanceError):
        header.magic = 0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        _entry().task_id = 3  # type: ignore[misc]


def test_entry_payload_end():
    assert _entry(payload_offset=128, payload_bytes=10).payload_end == 138


def test_record_is_an_entry_and_compares_without_payload():
    entry = _entry(task_id=9, status=1)
    fields = dataclasses.asdict(entry)
    a = L1Record(**fields, index=0, record_offset=64, payload=np.zeros(16, np.uint8))
    b = L1Record(**fields, index=0, record_offset=64, payload=np.ones(16, np.uint8))
    assert isinstance(a, L1RecordEntry)
    assert a == b and hash(a) == hash(b)
    assert a.entry == entry and type(a.entry) is L1RecordEntry
    assert "payload=" not in repr(a)


def test_public_names():
    expected = {
        "read_l1_buffer",
        "read_l1_header",
        "pack_l1_buffer",
        "plan_slots",
        "L1Buffer",
        "L1Header",
        "L1Record",
        "L1RecordEntry",
        "align_up",
        "L1_DUMP_MAGIC",
        "L1_DUMP_VERSION",
        "L1_DUMP_PHASE_BEFORE",
        "L1_DUMP_PHASE_AFTER",
        "L1_DIAGNOSTIC_MODE",
        "L1_DUMP_STATUS_PENDING",
        "L1_DUMP_STATUS_CAPTURED",
        "L1_DUMP_ALIGNMENT",
        "L1_DUMP_RECORDS_OFFSET",
        "L1_DUMP_MAX_RECORDS",
        "L1_DUMP_RECORD_SIZE",
        "L1_DUMP_HEADER_SIZE",
        "L1_DUMP_STATUS_BYTE",
        "L1_ANY_WORKER",
        "L1_DUMP_PAYLOAD_BASE",
    }
    assert set(l1.__all__) == expected
    assert all(hasattr(l1, name) for name in l1.__all__)
