"""The L1 (task-boundary) dump buffer ABI: constants, byte layouts and value types.

The buffer is shared bit-exactly between the host (which packs it) and the
device worker (which fills it). Everything is little-endian:

* a 32-byte header ``struct "<8I"`` at offset 0: magic, version, enabled,
  record_count, record_size, records_offset, payload_offset, total_bytes;
* ``record_count`` 64-byte records ``struct "<10I24x"`` from offset 64:
  task_id, phase, parameter_position, source_offset_low, source_offset_high,
  payload_offset, payload_bytes, status, task_index, worker_id;
* payload slots (64-byte aligned when packed) in ``[payload_offset, total_bytes)``.

This module holds no logic beyond :func:`align_up`; reading lives in
:mod:`megadump_zarr.l1.reader` and packing in :mod:`megadump_zarr.l1.packer`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

L1_DUMP_MAGIC = 0x4C314450
"""Header magic (the bytes ``b"PD1L"`` read as a little-endian u32)."""
L1_DUMP_VERSION = 2
"""The only ABI version this package reads and writes."""
L1_DIAGNOSTIC_MODE = 2
"""The MegaKernel diagnostic mode number that selects L1 (task-boundary) dumps."""

L1_DUMP_PHASE_BEFORE = 1
"""Record phase: capture the tensor before the task runs."""
L1_DUMP_PHASE_AFTER = 2
"""Record phase: capture the tensor after the task ran."""
L1_DUMP_PHASES = frozenset({L1_DUMP_PHASE_BEFORE, L1_DUMP_PHASE_AFTER})

L1_DUMP_STATUS_PENDING = 0
"""Record status written by the host: the slot has not been filled yet."""
L1_DUMP_STATUS_CAPTURED = 1
"""Record status written by the device worker once the slot holds the payload."""
L1_DUMP_STATUSES = frozenset({L1_DUMP_STATUS_PENDING, L1_DUMP_STATUS_CAPTURED})

L1_ANY_WORKER = 0xFFFFFFFF
"""``worker_id`` meaning "whichever worker runs the task"."""

L1_DUMP_ALIGNMENT = 64
"""Alignment of every payload slot the packer produces."""
L1_DUMP_HEADER_SIZE = 32
"""Bytes of the header struct (the rest of the first 64 bytes is zero padding)."""
L1_DUMP_RECORDS_OFFSET = 64
"""Byte offset of record 0."""
L1_DUMP_RECORD_SIZE = 64
"""Bytes per record."""
L1_DUMP_MAX_RECORDS = 4096
"""Most records one buffer may hold."""
L1_DUMP_STATUS_BYTE = 28
"""Byte offset of the u32 ``status`` field inside a record."""
L1_DUMP_PAYLOAD_BASE = L1_DUMP_RECORDS_OFFSET + L1_DUMP_MAX_RECORDS * L1_DUMP_RECORD_SIZE
"""Where the planner's payload area starts: after a table reserved for the maximum record count (262208)."""

U32_MAX = 0xFFFFFFFF
U64_LIMIT = 1 << 64
TOTAL_BYTES_LIMIT = 1 << 32
"""``total_bytes`` is a u32, so a buffer must be strictly smaller than this."""

HEADER_STRUCT = struct.Struct("<8I")
"""Header layout: magic, version, enabled, record_count, record_size, records_offset, payload_offset, total_bytes."""
RECORD_STRUCT = struct.Struct("<10I24x")
"""Record layout: task_id, phase, parameter_position, source_offset_low, source_offset_high,
payload_offset, payload_bytes, status, task_index, worker_id, then 24 bytes of padding."""

RECORD_FIELDS = (
    "task_id",
    "phase",
    "parameter_position",
    "source_offset_low",
    "source_offset_high",
    "payload_offset",
    "payload_bytes",
    "status",
    "task_index",
    "worker_id",
)
RECORD_DTYPE = np.dtype(
    {
        "names": list(RECORD_FIELDS),
        "formats": ["<u4"] * len(RECORD_FIELDS),
        "offsets": [4 * i for i in range(len(RECORD_FIELDS))],
        "itemsize": L1_DUMP_RECORD_SIZE,
    }
)
"""The record layout as a numpy structured dtype, for decoding the whole table at once."""

assert HEADER_STRUCT.size == L1_DUMP_HEADER_SIZE
assert RECORD_STRUCT.size == RECORD_DTYPE.itemsize == L1_DUMP_RECORD_SIZE
assert RECORD_DTYPE.fields["status"][1] == L1_DUMP_STATUS_BYTE


def align_up(value: int, alignment: int = L1_DUMP_ALIGNMENT) -> int:
    """Round ``value`` up to the next multiple of ``alignment``.

    Args:
        value: a non-negative byte count or offset.
        alignment: a positive alignment in bytes (64 unless told).

    Returns:
        The smallest multiple of ``alignment`` that is ``>= value``.

    Raises:
        ValueError: ``value`` is negative or ``alignment`` is not positive.
    """
    if alignment <= 0:
        raise ValueError(f"alignment must be positive, got {alignment}")
    if value < 0:
        raise ValueError(f"cannot align a negative value: {value}")
    return -(-value // alignment) * alignment


@dataclass(frozen=True)
class L1Header:
    """The decoded 32-byte header of an L1 dump buffer.

    Args:
        magic: must equal :data:`L1_DUMP_MAGIC`.
        version: must equal :data:`L1_DUMP_VERSION`.
        enabled: 1 when the device should capture (the packer always writes 1).
        record_count: number of records in the table.
        record_size: bytes per record (must be 64).
        records_offset: byte offset of record 0 (must be 64).
        payload_offset: start of the payload area; at or after the end of the table.
        total_bytes: bytes of the buffer that the ABI covers (payload area ends here).
    """

    magic: int
    version: int
    enabled: int
    record_count: int
    record_size: int
    records_offset: int
    payload_offset: int
    total_bytes: int


@dataclass(frozen=True)
class L1RecordEntry:
    """One record as the ABI stores it, with the 64-bit source offset joined.

    Args:
        task_id: the MegaKernel task whose parameter is captured.
        phase: :data:`L1_DUMP_PHASE_BEFORE` or :data:`L1_DUMP_PHASE_AFTER`.
        parameter_position: the ABI parameter of the task the bytes come from.
        source_offset_bytes: byte offset from that parameter's base (u64, split low/high in the buffer).
        payload_offset: absolute byte offset of the payload slot in the buffer.
        payload_bytes: bytes to capture into the slot (0 is allowed).
        status: :data:`L1_DUMP_STATUS_PENDING` or :data:`L1_DUMP_STATUS_CAPTURED`.
        task_index: the stage-local task index.
        worker_id: the worker expected to run the task, or :data:`L1_ANY_WORKER`.
    """

    task_id: int
    phase: int
    parameter_position: int
    source_offset_bytes: int
    payload_offset: int
    payload_bytes: int
    status: int
    task_index: int
    worker_id: int

    @property
    def payload_end(self) -> int:
        """One past the last byte of the payload slot."""
        return self.payload_offset + self.payload_bytes


@dataclass(frozen=True)
class L1Record(L1RecordEntry):
    """A record decoded from a buffer: the ABI entry plus where it lies and its payload.

    Compares (and hashes) by its fields, not by payload contents.

    Args:
        index: record number in the table (0-based).
        record_offset: byte offset of this record in the buffer.
        payload: zero-copy read-only ``uint8`` view of the slot in :attr:`L1Buffer.data`.
    """

    index: int
    record_offset: int
    payload: np.ndarray = field(repr=False, compare=False)

    @property
    def entry(self) -> L1RecordEntry:
        """The plain ABI entry (drops index, record_offset and payload); packable as is."""
        return L1RecordEntry(
            task_id=self.task_id,
            phase=self.phase,
            parameter_position=self.parameter_position,
            source_offset_bytes=self.source_offset_bytes,
            payload_offset=self.payload_offset,
            payload_bytes=self.payload_bytes,
            status=self.status,
            task_index=self.task_index,
            worker_id=self.worker_id,
        )


@dataclass(frozen=True, eq=False)
class L1Buffer:
    """A validated L1 dump buffer on the host.

    Args:
        header: the decoded header.
        records: the decoded records, in table order.
        data: the whole buffer as a read-only 1-D ``uint8`` array; every payload is a view into it.
    """

    header: L1Header
    records: tuple[L1Record, ...]
    data: np.ndarray = field(repr=False)
