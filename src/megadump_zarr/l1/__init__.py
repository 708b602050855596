"""L1 (task-boundary) dump buffer: the ABI, a validating zero-copy reader and its writer.

The bottom layer of megadump_zarr; it imports nothing else from the package.
"""

from megadump_zarr.l1.format import (
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
    L1Buffer,
    L1Header,
    L1Record,
    L1RecordEntry,
    align_up,
)
from megadump_zarr.l1.writer import pack_l1_buffer, plan_slots
from megadump_zarr.l1.reader import read_l1_buffer, read_l1_header

__all__ = [
    "L1_ANY_WORKER",
    "L1_DIAGNOSTIC_MODE",
    "L1_DUMP_ALIGNMENT",
    "L1_DUMP_HEADER_SIZE",
    "L1_DUMP_MAGIC",
    "L1_DUMP_MAX_RECORDS",
    "L1_DUMP_PAYLOAD_BASE",
    "L1_DUMP_PHASE_AFTER",
    "L1_DUMP_PHASE_BEFORE",
    "L1_DUMP_RECORD_SIZE",
    "L1_DUMP_RECORDS_OFFSET",
    "L1_DUMP_STATUS_BYTE",
    "L1_DUMP_STATUS_CAPTURED",
    "L1_DUMP_STATUS_PENDING",
    "L1_DUMP_VERSION",
    "L1Buffer",
    "L1Header",
    "L1Record",
    "L1RecordEntry",
    "align_up",
    "pack_l1_buffer",
    "plan_slots",
    "read_l1_buffer",
    "read_l1_header",
]
