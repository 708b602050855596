"""Read and validate an L1 dump buffer on the host, without copying payloads.

:func:`read_l1_buffer` accepts the buffer as bytes-like, numpy or torch (any
device), brings it to the host at most once, validates header, table and every
record, and returns an :class:`~megadump_zarr.l1.format.L1Buffer` whose payloads
are views into one host array. Every malformed buffer raises ``ValueError``
naming the offending field and values; no other exception escapes for bad bytes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from megadump_zarr.l1.format import (
    HEADER_STRUCT,
    L1_DUMP_ALIGNMENT,
    L1_DUMP_HEADER_SIZE,
    L1_DUMP_MAGIC,
    L1_DUMP_MAX_RECORDS,
    L1_DUMP_RECORD_SIZE,
    L1_DUMP_RECORDS_OFFSET,
    L1_DUMP_VERSION_STATISTICS,
    L1_DUMP_VERSIONS,
    L1_DTYPE_CODES,
    L1_POOL_HEADER_OFFSET,
    L1_RECORD_KIND_STATISTICS_AND_TENSOR,
    L1_RECORD_KIND_STATISTICS_TENSOR_IF_CHANGED,
    L1_RECORD_KIND_STATISTICS_TENSOR_IF_NONFINITE,
    L1_RECORD_KIND_TENSOR,
    L1_STAT_HAS_FINITE,
    L1_STAT_INTEGER,
    L1_STAT_VALID,
    L1_STATISTICS_LAYOUT_VERSION,
    L1_STATISTICS_SLOT_SIZE,
    POOL_STRUCT,
    RECORD_DTYPE,
    RECORD_DTYPE_V3,
    L1Buffer,
    L1Header,
    L1Record,
    L1Statistics,
)

__all__ = [
    "read_l1_buffer",
    "read_l1_header",
    "read_l1_pool",
    "read_l1_statistics",
    "read_l1_statistics_many",
    "read_l1_table",
]


def _from_torch(obj: Any) -> np.ndarray:
    """Copy a torch tensor to the host at most once and view it as numpy.

    Args:
        obj: an object whose type comes from the torch package.
    """
    import torch  # only when the caller already uses torch

    if not isinstance(obj, torch.Tensor):
        raise TypeError(f"L1 dump buffer must be bytes-like, a numpy array or a torch tensor, got {type(obj).__name__}")
    if obj.dtype != torch.uint8:
        raise TypeError(f"L1 dump buffer tensor must have dtype torch.uint8, got {obj.dtype}")
    if obj.dim() != 1:
        raise ValueError(f"L1 dump buffer tensor must be 1-D, got shape {tuple(obj.shape)}")
    tensor = obj.detach()
    if tensor.device.type == "meta":
        raise TypeError("L1 dump buffer tensor is on the meta device and holds no data")
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()  # the one device-to-host copy (contiguous by construction)
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    return tensor.numpy()


def _from_memoryview(view: memoryview) -> np.ndarray:
    """View a one-byte-item memoryview as uint8 (copying only when it is not contiguous).

    Args:
        view: the caller's memoryview.
    """
    if view.itemsize != 1:
        raise TypeError(f"L1 dump buffer memoryview must have 1-byte items, got format {view.format!r}")
    if not view.c_contiguous:
        return np.frombuffer(view.tobytes(), dtype=np.uint8)
    return np.frombuffer(view, dtype=np.uint8)


def _as_host_array(buffer: Any) -> np.ndarray:
    """Turn any accepted buffer into a read-only 1-D uint8 host array, zero-copy where possible.

    Args:
        buffer: bytes, bytearray, memoryview, a 1-D numpy uint8 array or a 1-D torch uint8 tensor.
    """
    if isinstance(buffer, np.ndarray):
        if buffer.dtype != np.uint8:
            raise TypeError(f"L1 dump buffer array must have dtype uint8, got {buffer.dtype}")
        if buffer.ndim != 1:
            raise ValueError(f"L1 dump buffer array must be 1-D, got shape {buffer.shape}")
        array = buffer if buffer.flags.c_contiguous else np.ascontiguousarray(buffer)
    elif isinstance(buffer, (bytes, bytearray)):
        array = np.frombuffer(buffer, dtype=np.uint8)
    elif isinstance(buffer, memoryview):
        array = _from_memoryview(buffer)
    elif type(buffer).__module__.split(".", 1)[0] == "torch":
        array = _from_torch(buffer)
    else:
        raise TypeError(
            f"L1 dump buffer must be bytes, bytearray, memoryview, a numpy uint8 array or a torch uint8 tensor, "
            f"got {type(buffer).__module__}.{type(buffer).__qualname__}"
        )
    view = array.view()
    view.flags.writeable = False  # affects only this view, never the caller's array
    return view


def _validate_header(data: np.ndarray, partial: bool = False) -> L1Header:
    """Decode the header and check it and the table geometry against the buffer length.

    Args:
        data: the host buffer (1-D uint8).
        partial: the buffer may end before ``total_bytes`` (a host copy of its table and statistics
            slots only); the record checks then require every payload slot within the bytes given.
    """
    length = data.shape[0]
    if length < L1_DUMP_HEADER_SIZE:
        raise ValueError(f"L1 dump buffer shorter than its header: {length} < {L1_DUMP_HEADER_SIZE} bytes")
    header = L1Header(*HEADER_STRUCT.unpack(data[:L1_DUMP_HEADER_SIZE].tobytes()))
    magic, version = header.magic, header.version
    if magic != L1_DUMP_MAGIC or version not in L1_DUMP_VERSIONS:
        raise ValueError(f"invalid L1 dump buffer header: magic={magic:#x}, version={version}")
    if header.record_size != L1_DUMP_RECORD_SIZE:
        raise ValueError(f"L1 dump record_size must be {L1_DUMP_RECORD_SIZE}, got {header.record_size}")
    if header.records_offset != L1_DUMP_RECORDS_OFFSET:
        raise ValueError(f"L1 dump records_offset must be {L1_DUMP_RECORDS_OFFSET}, got {header.records_offset}")
    if header.record_count > L1_DUMP_MAX_RECORDS:
        raise ValueError(f"L1 dump record_count must be at most {L1_DUMP_MAX_RECORDS}, got {header.record_count}")
    table_end = header.records_offset + header.record_count * header.record_size
    if table_end > header.total_bytes:
        raise ValueError(
            f"L1 dump record table ends past total_bytes: record_count={header.record_count} ends at {table_end}"
            f" > total_bytes={header.total_bytes}"
        )
    if header.payload_offset > header.total_bytes:
        raise ValueError(
            f"L1 dump payload_offset past total_bytes: payload_offset={header.payload_offset}"
            f" > total_bytes={header.total_bytes}"
        )
    if table_end > header.payload_offset:
        raise ValueError(
            f"L1 dump record table runs into the payload area: record_count={header.record_count} ends at {table_end}"
            f" > payload_offset={header.payload_offset}"
        )
    if length < header.total_bytes and not (partial and length >= table_end):
        raise ValueError(f"L1 dump buffer shorter than total_bytes: {length} < {header.total_bytes} bytes")
    return header


def _first(mask: np.ndarray) -> int:
    """Index of the first True in ``mask``, or -1 when there is none.

    Args:
        mask: a 1-D boolean array.
    """
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else -1


def _validate_records(header: L1Header, table: np.ndarray, offsets: np.ndarray, ends: np.ndarray) -> None:
    """Check phase, status, slot bounds and slot overlap of every record (vectorised, O(n log n)).

    Args:
        header: the validated header.
        table: the record table as a RECORD_DTYPE array.
        offsets: payload offsets as int64.
        ends: payload ends (offset + bytes) as int64.
    """
    phase, status, task_id = table["phase"], table["status"], table["task_id"]
    bad = _first((phase != 1) & (phase != 2))
    if bad >= 0:
        raise ValueError(
            f"L1 dump record {bad} (task_id={int(task_id[bad])}) has invalid phase {int(phase[bad])};"
            " expected 1 (BEFORE) or 2 (AFTER)"
        )
    bad = _first(status > 1)
    if bad >= 0:
        raise ValueError(
            f"L1 dump record {bad} (task_id={int(task_id[bad])}) has invalid status {int(status[bad])};"
            " expected 0 (PENDING) or 1 (CAPTURED)"
        )
    bad = _first((offsets < header.payload_offset) | (ends > header.total_bytes))
    if bad >= 0:
        raise ValueError(
            f"L1 dump record {bad} (task_id={int(task_id[bad])}) payload slot outside the payload area:"
            f" payload_offset={int(offsets[bad])}, payload_bytes={int(ends[bad] - offsets[bad])} not within"
            f" [{header.payload_offset}, total_bytes={header.total_bytes})"
        )
    nonempty = np.flatnonzero(ends > offsets)
    if nonempty.size < 2:
        return
    order = nonempty[np.argsort(offsets[nonempty], kind="stable")]
    # Sorted by start, slots are disjoint iff each one starts at or after the previous one's end.
    clash = _first(offsets[order[1:]] < ends[order[:-1]])
    if clash >= 0:
        a, b = sorted((int(order[clash]), int(order[clash + 1])))
        raise ValueError(
            f"L1 dump records {a} and {b} have overlapping payload slots:"
            f" [{int(offsets[a])}, {int(ends[a])}) and [{int(offsets[b])}, {int(ends[b])})"
        )


def _validate_extension(
    header: L1Header, table: np.ndarray, offsets: np.ndarray, ends: np.ndarray, pool: tuple[int, int, int]
) -> None:
    """Version 3: check kinds, dtype codes, statistics slot sizes, kind-2 tensor slots and the tensor pool.

    Args:
        header: the validated header.
        table: the record table as a RECORD_DTYPE_V3 array.
        offsets: payload offsets as int64.
        ends: payload ends as int64.
        pool: the header's ``(pool_offset, pool_bytes, pool_used)``.
    """
    kind, task_id = table["kind"], table["task_id"]
    bad = _first(kind > L1_RECORD_KIND_STATISTICS_TENSOR_IF_CHANGED)
    if bad >= 0:
        raise ValueError(
            f"L1 dump record {bad} (task_id={int(task_id[bad])}) has invalid kind {int(kind[bad])};"
            " expected 0 (tensor), 1 (statistics), 2 (statistics and tensor), 3 (statistics, tensor if"
            " non-finite) or 4 (statistics, tensor if changed)"
        )
    _validate_pool(header, kind, table, ends, pool)
    stats = kind != L1_RECORD_KIND_TENSOR
    extension = ("dtype_code", "source_bytes_low", "source_bytes_high", "tensor_offset", "tensor_bytes")
    bad = _first(~stats & np.any([table[name] != 0 for name in extension], axis=0))
    if bad >= 0:
        raise ValueError(
            f"L1 dump record {bad} (task_id={int(task_id[bad])}) is a tensor record with non-zero statistics fields"
        )
    codes = np.array(sorted(L1_DTYPE_CODES), dtype=np.uint32)
    bad = _first(stats & ~np.isin(table["dtype_code"], codes))
    if bad >= 0:
        raise ValueError(
            f"L1 dump record {bad} (task_id={int(task_id[bad])}) has unknown dtype_code {int(table['dtype_code'][bad])}"
        )
    bad = _first(stats & (ends - offsets != L1_STATISTICS_SLOT_SIZE))
    if bad >= 0:
        raise ValueError(
            f"L1 dump record {bad} (task_id={int(task_id[bad])}) statistics slot payload_bytes="
            f"{int(ends[bad] - offsets[bad])} must be {L1_STATISTICS_SLOT_SIZE}"
        )
    with_tensor = kind == L1_RECORD_KIND_STATISTICS_AND_TENSOR
    from_pool = (kind == L1_RECORD_KIND_STATISTICS_TENSOR_IF_NONFINITE) | (
        kind == L1_RECORD_KIND_STATISTICS_TENSOR_IF_CHANGED
    )
    bad = _first(~with_tensor & ((table["tensor_offset"] != 0) | ((table["tensor_bytes"] != 0) & ~from_pool)))
    if bad >= 0:
        raise ValueError(
            f"L1 dump record {bad} (task_id={int(task_id[bad])}) has a tensor slot but kind {int(kind[bad])}"
        )
    source = (table["source_bytes_high"].astype(np.uint64) << np.uint64(32)) | table["source_bytes_low"]
    t_start = table["tensor_offset"].astype(np.int64)
    t_end = t_start + table["tensor_bytes"]
    bad = _first(from_pool & (table["tensor_bytes"].astype(np.uint64) > source))
    if bad >= 0:
        raise ValueError(
            f"L1 dump record {bad} (task_id={int(task_id[bad])}) tensor_bytes="
            f"{int(table['tensor_bytes'][bad])} exceeds source_bytes={int(source[bad])}"
        )
    bad = _first(
        with_tensor
        & (
            (t_start < header.payload_offset)
            | (t_end > header.total_bytes)
            | (t_start % L1_DUMP_ALIGNMENT != 0)
            | (table["tensor_bytes"].astype(np.uint64) > source)
        )
    )
    if bad >= 0:
        raise ValueError(
            f"L1 dump record {bad} (task_id={int(task_id[bad])}) tensor slot [{int(t_start[bad])}, {int(t_end[bad])})"
            f" is misplaced: not aligned, outside [{header.payload_offset}, total_bytes={header.total_bytes}),"
            f" or longer than source_bytes={int(source[bad])}"
        )
    # every slot, payload and tensor, must be disjoint from every other
    starts = np.concatenate([offsets, t_start[with_tensor]])
    stops = np.concatenate([ends, t_end[with_tensor]])
    owners = np.concatenate([np.arange(len(offsets)), np.flatnonzero(with_tensor)])
    nonempty = np.flatnonzero(stops > starts)
    order = nonempty[np.argsort(starts[nonempty], kind="stable")]
    clash = _first(starts[order[1:]] < stops[order[:-1]])
    if clash >= 0:
        a, b = int(order[clash]), int(order[clash + 1])
        first, second = sorted((int(owners[a]), int(owners[b])))
        raise ValueError(
            f"L1 dump records {first} and {second} have overlapping payload slots:"
            f" [{int(starts[a])}, {int(stops[a])}) and [{int(starts[b])}, {int(stops[b])})"
        )


def read_l1_statistics(slot: Any) -> L1Statistics:
    """Decode one 128-byte statistics slot (layout version 1).

    Args:
        slot: the slot's bytes (bytes-like or a uint8 numpy array of at least 128 bytes).

    Raises:
        ValueError: a short slot, an unknown layout version, or a slot the device never filled.
    """
    raw = np.frombuffer(bytes(slot), dtype=np.uint8) if not isinstance(slot, np.ndarray) else slot.reshape(-1)
    if raw.dtype != np.uint8:
        raw = raw.view(np.uint8)
    if raw.shape[0] < L1_STATISTICS_SLOT_SIZE:
        raise ValueError(f"L1 statistics slot holds {raw.shape[0]} bytes, expected {L1_STATISTICS_SLOT_SIZE}")
    return read_l1_statistics_many(raw[:L1_STATISTICS_SLOT_SIZE], np.zeros(1, dtype=np.int64))[0]


def _finite(value: float) -> float | None:
    return value if np.isfinite(value) else None


def read_l1_header(buffer: Any) -> L1Header:
    """Validate only the header and the record table's geometry, and return the header.

    For a device worker that must refuse a malformed buffer before touching it;
    record contents (phase, status, slots) are not checked — :func:`read_l1_buffer` does that.

    Args:
        buffer: bytes, bytearray, memoryview, a 1-D numpy uint8 array or a 1-D torch uint8 tensor (any device).

    Returns:
        The decoded :class:`L1Header`.

    Raises:
        TypeError: unsupported buffer type or dtype.
        ValueError: the header or table geometry is invalid (the message names the field and values).
    """
    return _validate_header(_as_host_array(buffer))


def _validate_pool(
    header: L1Header, kind: np.ndarray, table: np.ndarray, ends: np.ndarray, pool: tuple[int, int, int]
) -> None:
    """The tensor pool: present exactly when a record takes from it; aligned, after every slot, inside
    ``total_bytes``, and ``pool_used`` within it."""
    offset, size, used = pool
    users = bool(
        np.any(
            (kind == L1_RECORD_KIND_STATISTICS_TENSOR_IF_NONFINITE)
            | (kind == L1_RECORD_KIND_STATISTICS_TENSOR_IF_CHANGED)
        )
    )
    if not users:
        if offset or size or used:
            raise ValueError(
                f"L1 dump tensor pool (offset={offset}, bytes={size}, used={used}) without a record of kind 3 or 4"
            )
        return
    tensor_ends = table["tensor_offset"].astype(np.int64) + table["tensor_bytes"]
    last = int(
        max(ends.max(initial=0), np.where(kind == L1_RECORD_KIND_STATISTICS_AND_TENSOR, tensor_ends, 0).max(initial=0))
    )
    if size == 0 or offset % L1_DUMP_ALIGNMENT or offset < last or offset + size > header.total_bytes or used > size:
        raise ValueError(
            f"L1 dump tensor pool (offset={offset}, bytes={size}, used={used}) is misplaced: it must be"
            f" {L1_DUMP_ALIGNMENT}-byte aligned, after the last slot ({last}), within"
            f" total_bytes={header.total_bytes}, and used <= bytes"
        )


def read_l1_pool(buffer: Any) -> tuple[int, int, int]:
    """The tensor pool words ``(pool_offset, pool_bytes, pool_used)`` of a version-3 buffer ((0, 0, 0) for v2).

    Args:
        buffer: as for :func:`read_l1_buffer` (at least its first 64 bytes).
    """
    data = _as_host_array(buffer)
    header = _validate_header(data, partial=True)
    if header.version != L1_DUMP_VERSION_STATISTICS:
        return 0, 0, 0
    offset, size, used, _ = POOL_STRUCT.unpack(
        data[L1_POOL_HEADER_OFFSET : L1_POOL_HEADER_OFFSET + POOL_STRUCT.size].tobytes()
    )
    return offset, size, used


def read_l1_table(buffer: Any, *, partial: bool = False) -> tuple[L1Header, np.ndarray, np.ndarray]:
    """Validate a buffer exactly as :func:`read_l1_buffer` does, without building record objects.

    Args:
        buffer: as for :func:`read_l1_buffer`.
        partial: as for :func:`read_l1_buffer`.

    Returns:
        ``(header, table, data)``: the header, the record table as a structured array
        (:data:`~megadump_zarr.l1.format.RECORD_DTYPE_V3` for version 3, else ``RECORD_DTYPE``) and the
        read-only host bytes.
    """
    data = _as_host_array(buffer)
    header = _validate_header(data, partial)
    count = header.record_count
    v3 = header.version == L1_DUMP_VERSION_STATISTICS
    layout = RECORD_DTYPE_V3 if v3 else RECORD_DTYPE
    table = (
        np.frombuffer(data, dtype=layout, count=count, offset=header.records_offset) if count else np.empty(0, layout)
    )
    offsets = table["payload_offset"].astype(np.int64)
    ends = offsets + table["payload_bytes"]
    _validate_records(header, table, offsets, ends)
    if v3:
        if count and not np.any(table["kind"] != L1_RECORD_KIND_TENSOR):
            raise ValueError(
                f"invalid L1 dump buffer header: magic={header.magic:#x}, version={header.version}"
                " (a version-3 buffer must hold a statistics record)"
            )
        pool = POOL_STRUCT.unpack(data[L1_POOL_HEADER_OFFSET : L1_POOL_HEADER_OFFSET + POOL_STRUCT.size].tobytes())[:3]
        _validate_extension(header, table, offsets, ends, pool)
    if partial and count:
        bad = _first(ends > data.shape[0])
        if bad >= 0:
            raise ValueError(
                f"L1 dump record {bad} payload slot ends at {int(ends[bad])}, past the {data.shape[0]} bytes copied"
            )
    return header, table, data


STATISTICS_DTYPE = np.dtype(
    {
        "names": [
            "version",
            "flags",
            "element_count",
            "nan_count",
            "inf_count",
            "min_i",
            "max_i",
            "mean",
            "l2norm",
            "digest",
            "byte_count",
            "min_f",
            "max_f",
            "tensor_offset",
            "expected",
            "expected_present",
        ],
        "formats": [
            "<u4",
            "<u4",
            "<u8",
            "<u8",
            "<u8",
            "<i8",
            "<i8",
            "<f8",
            "<f8",
            "<u8",
            "<u8",
            "<f8",
            "<f8",
            "<u8",
            "<u8",
            "<u4",
        ],
        "offsets": [0, 4, 8, 16, 24, 32, 40, 48, 56, 64, 72, 32, 40, 80, 88, 96],
        "itemsize": L1_STATISTICS_SLOT_SIZE,
    }
)
"""The statistics slot as a numpy structured dtype (min/max readable as i64 and as f64)."""


def read_l1_statistics_many(data: np.ndarray, offsets: np.ndarray) -> list[L1Statistics]:
    """Decode many statistics slots of one host buffer at once (vectorised :func:`read_l1_statistics`).

    Args:
        data: The host bytes (1-D uint8).
        offsets: The slots' byte offsets.

    Raises:
        ValueError: A slot past the end, not written by the device, or of another layout version (naming it).
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    if offsets.size == 0:
        return []
    if int(offsets.max()) + L1_STATISTICS_SLOT_SIZE > data.shape[0]:
        raise ValueError(f"L1 statistics slot at {int(offsets.max())} runs past the {data.shape[0]} bytes given")
    raw = data[offsets[:, None] + np.arange(L1_STATISTICS_SLOT_SIZE)]
    slots = raw.view(STATISTICS_DTYPE).reshape(-1)
    bad = _first((slots["flags"] & L1_STAT_VALID) == 0)
    if bad >= 0:
        raise ValueError(f"L1 statistics slot at {int(offsets[bad])} was not written by the device (valid flag clear)")
    bad = _first(slots["version"] != L1_STATISTICS_LAYOUT_VERSION)
    if bad >= 0:
        raise ValueError(
            f"L1 statistics slot at {int(offsets[bad])} layout version {int(slots['version'][bad])}"
            f" is not {L1_STATISTICS_LAYOUT_VERSION}"
        )
    flags = slots["flags"]
    finite = (flags & L1_STAT_HAS_FINITE) != 0
    integer = (flags & L1_STAT_INTEGER) != 0

    def column(values: np.ndarray, keep: np.ndarray) -> list[Any]:
        return [v if k else None for v, k in zip(values.tolist(), keep.tolist())]

    lo_int, hi_int = column(slots["min_i"], finite & integer), column(slots["max_i"], finite & integer)
    lo_float, hi_float = column(slots["min_f"], finite & ~integer), column(slots["max_f"], finite & ~integer)
    lows = [a if i else b for a, b, i in zip(lo_int, lo_float, integer.tolist())]
    highs = [a if i else b for a, b, i in zip(hi_int, hi_float, integer.tolist())]
    means = column(slots["mean"], finite & np.isfinite(slots["mean"]))
    l2s = column(slots["l2norm"], finite & np.isfinite(slots["l2norm"]))
    return list(
        map(
            L1Statistics,
            flags.tolist(),
            slots["element_count"].tolist(),
            slots["nan_count"].tolist(),
            slots["inf_count"].tolist(),
            lows,
            highs,
            means,
            l2s,
            slots["digest"].tolist(),
            slots["byte_count"].tolist(),
            slots["tensor_offset"].tolist(),
        )
    )


def read_l1_buffer(buffer: Any, *, partial: bool = False) -> L1Buffer:
    """Decode and validate a whole L1 dump buffer; payloads are zero-copy views.

    A torch tensor on a device is copied to the host once; every other accepted
    input is viewed in place when contiguous. Bytes past ``total_bytes`` are ignored.

    Args:
        buffer: bytes, bytearray, memoryview, a 1-D numpy uint8 array or a 1-D torch uint8 tensor (any device).

    Returns:
        An :class:`L1Buffer` whose ``data`` is the read-only host array and whose
        records' ``payload`` arrays are views into it.

    Version-3 buffers (statistics records) are read too: each record then carries its extension
    fields, and a statistics record's ``payload`` is its 128-byte statistics slot
    (:func:`read_l1_statistics` decodes it). A kind-2 record's tensor slot is not viewed.

    Args:
        buffer: as above.
        partial: accept a buffer that ends before ``total_bytes`` (a host copy of the header, table and
            statistics slots only) as long as every record's payload slot lies within it.

    Raises:
        TypeError: unsupported buffer type or dtype.
        ValueError: any field of the header or of a record is invalid, or two slots overlap.
    """
    header, table, data = read_l1_table(buffer, partial=partial)
    start, v3 = header.records_offset, header.version == L1_DUMP_VERSION_STATISTICS
    offsets = table["payload_offset"].astype(np.int64)
    ends = offsets + table["payload_bytes"]
    source = (table["source_offset_high"].astype(np.uint64) << np.uint64(32)) | table["source_offset_low"]
    columns = zip(
        table["task_id"].tolist(),
        table["phase"].tolist(),
        table["parameter_position"].tolist(),
        source.tolist(),
        offsets.tolist(),
        table["payload_bytes"].tolist(),
        table["status"].tolist(),
        table["task_index"].tolist(),
        table["worker_id"].tolist(),
        ends.tolist(),
    )
    records = tuple(
        L1Record(tid, ph, pp, so, off, nb, st, ti, wid, i, start + i * L1_DUMP_RECORD_SIZE, data[off:end])
        for i, (tid, ph, pp, so, off, nb, st, ti, wid, end) in enumerate(columns)
    )
    if v3:
        source_bytes = (
            (table["source_bytes_high"].astype(np.uint64) << np.uint64(32)) | table["source_bytes_low"]
        ).tolist()
        extension = zip(
            table["kind"].tolist(),
            table["dtype_code"].tolist(),
            source_bytes,
            table["tensor_offset"].tolist(),
            table["tensor_bytes"].tolist(),
        )
        records = tuple(
            L1Record(
                r.task_id,
                r.phase,
                r.parameter_position,
                r.source_offset_bytes,
                r.payload_offset,
                r.payload_bytes,
                r.status,
                r.task_index,
                r.worker_id,
                r.index,
                r.record_offset,
                r.payload,
                kind=kind,
                dtype_code=code,
                source_bytes=nbytes,
                tensor_offset=t_off,
                tensor_bytes=t_bytes,
            )
            for r, (kind, code, nbytes, t_off, t_bytes) in zip(records, extension)
        )
    return L1Buffer(header=header, records=records, data=data)
