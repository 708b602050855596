"""The L1 (task-boundary) dump buffer ABI: constants, byte layouts and value types.

The buffer is shared bit-exactly between the host (which packs it) and the
device worker (which fills it). Everything is little-endian:

* a 32-byte header ``struct "<8I"`` at offset 0: magic, version, enabled,
  record_count, record_size, records_offset, payload_offset, total_bytes;
* ``record_count`` 64-byte records ``struct "<10I24x"`` from offset 64:
  task_id, phase, parameter_position, source_offset_low, source_offset_high,
  payload_offset, payload_bytes, status, task_index, worker_id;
* payload slots (64-byte aligned when packed) in ``[payload_offset, total_bytes)``.

Version 3 (statistics records) is version 2 plus a meaning for the 24 padding bytes of a record.
A buffer whose records are all tensor records is packed as version 2, byte for byte the seed's;
any statistics record makes it version 3 (a version-2-only device worker then refuses it instead of
copying 128 bytes of the tensor into a statistics slot). At record byte 40, ``struct "<6I"``:

* ``kind``: 0 tensor (the seed's record; the five other words are 0), 1 statistics,
  2 statistics and tensor, 3 statistics and the tensor if it holds NaN/Inf, 4 statistics and the
  tensor if its digest differs from the expected one;
* ``dtype_code``: the element type the device reduces over (:data:`L1_DTYPE_CODES`);
* ``source_bytes_low``, ``source_bytes_high``: bytes of the source range the statistics cover (u64);
* ``tensor_offset``, ``tensor_bytes``: kind 2: a second 64-byte-aligned slot into which the
  device also copies the first ``tensor_bytes`` bytes of the source (a prefix when capped); kinds 3
  and 4: ``tensor_offset`` is 0 and ``tensor_bytes`` is what the device copies, when the condition
  holds, into space it takes from the buffer's tensor pool.

Tensor pool (version 3, header bytes 32..47, ``struct "<4I"``; zero when no record has kind 3 or 4):
``pool_offset`` (64-byte aligned, after every other slot), ``pool_bytes``, ``pool_used`` (the device
bumps it by the aligned size of each tensor it copies; a tensor that does not fit is not copied and
its slot says so), reserved. The pool is what bounds the Device memory of the conditional modes: it
holds only the tensors actually copied.

For kinds 1 to 4, ``payload_offset``/``payload_bytes`` name a 128-byte statistics slot that the
device fills at the task boundary (statistics layout version 2, little-endian,
``struct "<IIQQQ8s8sddQQQQI28x"``):

====== ====== ===============================================================================
offset  type  field
====== ====== ===============================================================================
0       u32   layout version (1)
4       u32   flags: 1 valid, 2 integer (min/max are i64, else f64), 4 has a finite element,
              8 tensor copied (kinds 2-4), 16 tensor not copied: the pool was full (kinds 3, 4)
8       u64   element count
16      u64   NaN count
24      u64   Inf count (+Inf and -Inf)
32      8 B   min over finite elements (i64 or f64 by flag 2; 0 when flag 4 is clear)
40      8 B   max over finite elements
48      f64   mean over finite elements
56      f64   L2 norm over finite elements, ``sqrt(sum(x*x))``
64      u64   digest of the source bytes, dtype and element count (:mod:`megadump_zarr.layout.digest`:
              a position-sensitive 64-bit hash)
72      u64   byte count covered (equals the record's source bytes)
80      u64   kinds 3/4: offset of the copied tensor in the pool (device-written; 0 when not copied)
88      u64   kind 4: the expected digest (host-written before the launch)
96      u32   kind 4: 1 when an expected digest is given (host-written; 0: copy unconditionally)
100     28 B  reserved, zero
====== ====== ===============================================================================

The device writes bytes 0..87 of a slot and never the host-written bytes 88..103.

This module holds no logic beyond :func:`align_up`; reading lives in
:mod:`megadump_zarr.l1.reader` and packing in :mod:`megadump_zarr.l1.writer`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import NamedTuple

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
RECORD_DTYPE_V3 = np.dtype(
    {
        "names": [
            *RECORD_FIELDS,
            "kind",
            "dtype_code",
            "source_bytes_low",
            "source_bytes_high",
            "tensor_offset",
            "tensor_bytes",
        ],
        "formats": ["<u4"] * (len(RECORD_FIELDS) + 6),
        "offsets": [4 * i for i in range(len(RECORD_FIELDS))] + [40 + 4 * i for i in range(6)],
        "itemsize": L1_DUMP_RECORD_SIZE,
    }
)
"""The version-3 record layout (the seed's fields, then the extension words at byte 40)."""

L1_DUMP_VERSION_STATISTICS = 3
"""ABI version of a buffer holding at least one statistics record (kind 1 or 2)."""
L1_DUMP_VERSIONS = frozenset({L1_DUMP_VERSION, L1_DUMP_VERSION_STATISTICS})

L1_RECORD_KIND_TENSOR = 0
"""Record kind: copy ``payload_bytes`` of the source into the payload slot (the seed's record)."""
L1_RECORD_KIND_STATISTICS = 1
"""Record kind: reduce the source range on the device into a 128-byte statistics slot; copy nothing."""
L1_RECORD_KIND_STATISTICS_AND_TENSOR = 2
"""Record kind: statistics slot as kind 1, and the source (prefix) copied into the tensor slot."""
L1_RECORD_KIND_STATISTICS_TENSOR_IF_NONFINITE = 3
"""Record kind: statistics slot; the tensor (prefix) copied into the pool only when it holds NaN or Inf."""
L1_RECORD_KIND_STATISTICS_TENSOR_IF_CHANGED = 4
"""Record kind: statistics slot; the tensor copied into the pool only when its digest differs from the
expected one the host wrote into the slot (or when none was given)."""
L1_RECORD_KINDS = frozenset(
    {
        L1_RECORD_KIND_TENSOR,
        L1_RECORD_KIND_STATISTICS,
        L1_RECORD_KIND_STATISTICS_AND_TENSOR,
        L1_RECORD_KIND_STATISTICS_TENSOR_IF_NONFINITE,
        L1_RECORD_KIND_STATISTICS_TENSOR_IF_CHANGED,
    }
)
L1_POOL_KINDS = frozenset({L1_RECORD_KIND_STATISTICS_TENSOR_IF_NONFINITE, L1_RECORD_KIND_STATISTICS_TENSOR_IF_CHANGED})
"""Kinds whose tensor, when copied, goes into the buffer's tensor pool."""
L1_POOL_HEADER_OFFSET = 32
"""Byte offset of the tensor pool words (version 3) in the first 64 bytes."""
POOL_STRUCT = struct.Struct("<4I")
"""Pool layout: pool_offset, pool_bytes, pool_used, reserved."""
L1_STAT_TENSOR_OFFSET_BYTE = 80
L1_STAT_EXPECTED_BYTE = 88
L1_STAT_EXPECTED_PRESENT_BYTE = 96
L1_STAT_DEVICE_BYTES = 88
"""The device writes the first 88 bytes of a slot; the rest is the host's."""
L1_RECORD_EXTENSION_OFFSET = 40
"""Byte offset, inside a record, of the version-3 extension words (the seed's padding)."""
RECORD_EXTENSION_STRUCT = struct.Struct("<6I")
"""Extension layout: kind, dtype_code, source_bytes_low, source_bytes_high, tensor_offset, tensor_bytes."""
RECORD_EXTENSION_FIELDS = (
    "kind",
    "dtype_code",
    "source_bytes_low",
    "source_bytes_high",
    "tensor_offset",
    "tensor_bytes",
)

L1_STATISTICS_LAYOUT_VERSION = 2
"""Version of the statistics slot layout (word 0 of the slot); readers refuse any other."""
L1_STATISTICS_SLOT_SIZE = 128
"""Bytes of one statistics slot (``payload_bytes`` of a kind 1 or 2 record)."""
STATISTICS_STRUCT = struct.Struct("<IIQQQ8s8sddQQQQI28x")
"""Statistics slot layout: version, flags, element_count, nan_count, inf_count, min, max, mean, l2norm,
digest, byte_count, tensor_offset, expected_digest, expected_present, 28 reserved bytes."""
L1_STAT_VALID = 1
L1_STAT_INTEGER = 2
L1_STAT_HAS_FINITE = 4
L1_STAT_TENSOR_COPIED = 8
L1_STAT_POOL_FULL = 16

L1_DTYPE_CODES = {
    1: "bool",
    2: "int8",
    3: "uint8",
    4: "int16",
    5: "uint16",
    6: "int32",
    7: "uint32",
    8: "int64",
    9: "uint64",
    10: "float16",
    11: "bfloat16",
    12: "float32",
    13: "float64",
    14: "float8_e4m3fn",
    15: "float8_e5m2",
}
"""Element type codes of the extension's ``dtype_code`` (names as torch and ml_dtypes spell them)."""
L1_DTYPE_CODE_OF = {name: code for code, name in L1_DTYPE_CODES.items()}

assert HEADER_STRUCT.size == L1_DUMP_HEADER_SIZE
assert STATISTICS_STRUCT.size == L1_STATISTICS_SLOT_SIZE
assert L1_RECORD_EXTENSION_OFFSET + RECORD_EXTENSION_STRUCT.size == L1_DUMP_RECORD_SIZE
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
        kind: :data:`L1_RECORD_KIND_TENSOR` (0, the seed's), ``_STATISTICS`` (1) or
            ``_STATISTICS_AND_TENSOR`` (2); keyword-only, like the four fields after it.
        dtype_code: element type of the source for kinds 1 and 2 (:data:`L1_DTYPE_CODES`).
        source_bytes: bytes of the source the statistics cover (kinds 1 and 2).
        tensor_offset: kind 2: absolute offset of the tensor slot.
        tensor_bytes: kind 2: bytes copied into the tensor slot.
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
    kind: int = field(default=0, kw_only=True)
    dtype_code: int = field(default=0, kw_only=True)
    source_bytes: int = field(default=0, kw_only=True)
    tensor_offset: int = field(default=0, kw_only=True)
    tensor_bytes: int = field(default=0, kw_only=True)

    @property
    def payload_end(self) -> int:
        """One past the last byte of the payload slot."""
        return self.payload_offset + self.payload_bytes

    @property
    def copy_bytes(self) -> int:
        """Bytes the device worker reads from the source: ``payload_bytes`` for a tensor record,
        ``source_bytes`` for a statistics record."""
        return self.payload_bytes if self.kind == L1_RECORD_KIND_TENSOR else self.source_bytes


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
            kind=self.kind,
            dtype_code=self.dtype_code,
            source_bytes=self.source_bytes,
            tensor_offset=self.tensor_offset,
            tensor_bytes=self.tensor_bytes,
        )


class L1Statistics(NamedTuple):
    """A decoded statistics slot (layout version 2; see the module docstring). A named tuple: one is
    made per record of every statistics launch, so it must be cheap to build.

    Args:
        flags: the slot's flag word.
        element_count: elements covered.
        nan_count: NaN elements.
        inf_count: +/-Inf elements.
        min: minimum over finite elements (int for integer and bool sources), None when there is none.
        max: maximum over finite elements, None when there is none.
        mean: mean over finite elements, None when there is none.
        l2norm: L2 norm over finite elements, None when there is none.
        digest: the record digest (u64, :mod:`megadump_zarr.layout.digest`).
        byte_count: bytes covered.
        tensor_offset: kinds 3/4: where the device copied the tensor in the pool (0 when it did not).
    """

    flags: int
    element_count: int
    nan_count: int
    inf_count: int
    min: int | float | None
    max: int | float | None
    mean: float | None
    l2norm: float | None
    digest: int
    byte_count: int
    tensor_offset: int = 0

    @property
    def pool_full(self) -> bool:
        """Whether the condition held but the tensor pool had no room for the tensor."""
        return bool(self.flags & L1_STAT_POOL_FULL)

    @property
    def tensor_copied(self) -> bool:
        """Whether the device also copied the tensor into the record's tensor slot."""
        return bool(self.flags & L1_STAT_TENSOR_COPIED)

    @property
    def nonfinite(self) -> bool:
        """Whether any element is NaN or Inf."""
        return self.nan_count + self.inf_count > 0


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
