"""Writing task-record packs: the pack's arrays along ``task``, then one backend put per record shard.

A pack's per-task arrays (ids, row bounds, offsets, the ``statistic`` coordinate; see
:mod:`megadump_zarr.store.packs`) are written first, each one raw chunk (its bytes, then their crc32c) and its
``zarr.json``. Each shard of a pack's record array then holds ``shard_rows`` records: every
inner chunk is exactly the chunk the tasks layout would have stored for that record (the record's bytes,
encoded with the writer's codec, or raw under 256 bytes, then its crc32c), followed by the shard index. A shard
is one job on the writer's pool and one ``put`` (the local backend writes its parts with ``writev``); the job
that finishes a record array's last shard writes its statistics array (``{record}_stats``), then its document.
What binds each chunk and shard to its place is the window inventory (:mod:`megadump_zarr.layout.inventory`),
which the backend's observer fills as they are written.

Statistics are computed for all rows of a shard at once (:func:`row_stats`), along axis 1, with the
exact arithmetic of :class:`~megadump_zarr.store.tensor_stats.StatsAccumulator` (same casts, same reductions
over the same contiguous rows), so they equal the accumulator's per-record results bit for bit; rows
the vectorised path cannot reproduce exactly (a NaN or Inf, rows longer than one accumulator slice)
use the accumulator itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
import math
import struct
import threading
from typing import Any

import google_crc32c
import numpy as np

from megadump_zarr.store.backend import LocalBackend
from megadump_zarr.store.encoding import NO_COMPRESSION
from megadump_zarr.store.metadata import array_document_bytes, dumps, pack_array_document_bytes, plain_group_bytes
from megadump_zarr.layout.packs import (
    COORDINATES_ATTR,
    RECORD_ATTRIBUTES_ATTR,
    STATISTIC_ARRAY,
    STATISTIC_DIM,
    STATISTICS,
    TASK_DIM,
    stats_array,
)
from megadump_zarr.store.pack_groups import PackColumn, PackGroup, PackRecord
from megadump_zarr.store.packs import encode_index, shard_rows
from megadump_zarr.store.tensor_stats import SLICE_ELEMENTS, StatsAccumulator

__all__ = ["row_stats", "submit_pack"]

_CRC = struct.Struct("<I")
_NATIVE_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_MAX_PARTS = 1000  # below IOV_MAX (1024): os.writev refuses more buffers


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def row_stats(rows: Sequence[np.ndarray]) -> list[dict[str, Any]]:
    """``StatsAccumulator(dtype).update(row).result()`` of every row, computed block-wise.

    Args:
        rows: Non-empty arrays of one dtype and one size (C-contiguous).
    """
    dtype = rows[0].dtype
    size = rows[0].size
    if size > SLICE_ELEMENTS:  # the accumulator sums such rows slice by slice: let it
        return [StatsAccumulator(dtype).update(row).result() for row in rows]
    kind = StatsAccumulator(dtype).kind
    step = max(1, SLICE_ELEMENTS // size)
    out: list[dict[str, Any]] = []
    for first in range(0, len(rows), step):
        part = rows[first : first + step]
        out.extend(_block_stats(np.stack([row.reshape(-1) for row in part]), kind, part))
    return out


def _block_stats(x: np.ndarray, kind: str, rows: Sequence[np.ndarray]) -> list[dict[str, Any]]:
    """Statistics of each row of the 2-D block ``x`` (see :meth:`StatsAccumulator._update_flat`)."""
    count = x.shape[1]
    bad: list[bool] | None = None
    if kind == "bool":
        x = x.view(np.uint8)
    if kind == "float":
        if x.dtype not in _NATIVE_FLOATS:
            x = x.astype(np.float32)
        lo, hi = x.min(axis=1), x.max(axis=1)
        finite = np.isfinite(lo) & np.isfinite(hi)
        if not finite.all():
            bad = (~finite).tolist()
    else:
        lo, hi = x.min(axis=1), x.max(axis=1)
    with np.errstate(invalid="ignore", over="ignore"):  # rows with NaN/Inf are redone below; overflow gives None
        if x.dtype == np.float64:
            total = x.sum(axis=1)
            sumsq = np.einsum("ij,ij->i", x, x)
        else:
            x64 = x.astype(np.float64)
            total = x64.sum(axis=1)
            sumsq = np.multiply(x64, x64, out=x64).sum(axis=1)
    out = []
    for i, (low, high, t, s) in enumerate(zip(lo.tolist(), hi.tolist(), total.tolist(), sumsq.tolist())):
        if bad is not None and bad[i]:
            with np.errstate(over="ignore"):
                out.append(StatsAccumulator(rows[i].dtype).update(rows[i]).result())
            continue
        t, s = 0.0 + t, 0.0 + s  # the accumulator starts from 0.0 (so a -0.0 sum becomes 0.0)
        out.append(
            {
                "min": low,
                "max": high,
                "mean": _finite_or_none(t / count),
                "l2norm": _finite_or_none(math.sqrt(s)),
                "nanCount": 0,
                "infCount": 0,
            }
        )
    return out


class _Parts:
    """A shard's bytes as the backend takes them: the encoded chunks themselves (one ``writev``, no copy)
    while they are few enough for one ``writev`` on the local backend, else runs of about 1 MiB copied as
    they come (so a shard is never held twice), joined into one buffer for other backends.

    Args:
        count: Parts that will be added.
        local: The local backend (takes a tuple of buffers).
    """

    _RUN = 1 << 20

    def __init__(self, count: int, local: bool) -> None:
        self.local = local
        self.direct = local and count <= _MAX_PARTS
        self.parts: list[Any] = []
        self._run = bytearray()

    def add(self, part: Any) -> None:
        if self.direct:
            self.parts.append(part)
            return
        self._run += memoryview(part)  # (a raw chunk is a numpy array: no ndarray arithmetic)
        if len(self._run) >= self._RUN:
            self.parts.append(self._run)
            self._run = bytearray()

    def buffers(self) -> Any:
        """What to ``put``."""
        if self._run:
            self.parts.append(self._run)
        return tuple(self.parts) if self.local else b"".join(self.parts)


def _record_attributes(pack: PackGroup, record: PackRecord) -> bytes:
    """``{"coordinates": "task_id ...", "recordAttributes": {...}}``: the pack's per-task arrays (so plain xarray
    shows them along ``task``), then what every row holds alike."""
    return (
        b"{"
        + dumps(COORDINATES_ATTR)
        + b":"
        + dumps(pack.coordinates)
        + b","
        + dumps(RECORD_ATTRIBUTES_ATTR)
        + b":"
        + dumps(record.shared)
        + b"}"
    )


def _column_chunk(data: np.ndarray, checksum: bool) -> bytes:
    """The stored chunk of a pack array that is not a record: its raw bytes, then their crc32c (with checksums)."""
    raw = np.ascontiguousarray(data).tobytes()
    return raw + _CRC.pack(google_crc32c.value(raw)) if checksum else raw


def _text_document(column: PackColumn, attrs_json: bytes, checksum: bool) -> bytes:
    """The ``zarr.json`` of a text array along one dimension (Zarr's ``fixed_length_utf32``), one raw chunk."""
    shape = list(column.data.shape)
    codecs: list[dict[str, Any]] = [{"name": "bytes", "configuration": {"endian": "little"}}]
    if checksum:
        codecs.append({"name": "crc32c"})
    head = {
        "shape": shape,
        "data_type": {"name": "fixed_length_utf32", "configuration": {"length_bytes": column.data.dtype.itemsize}},
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [max(1, d) for d in shape]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "."}},
        "fill_value": "",
        "codecs": codecs,
    }
    tail = {
        "dimension_names": list(column.dims),
        "zarr_format": 3,
        "node_type": "array",
        "storage_transformers": [],
    }
    return dumps(head)[:-1] + b',"attributes":' + attrs_json + b"," + dumps(tail)[1:]


def _column_items(column: PackColumn, prefix: str, checksum: bool) -> list[tuple[str, Any]]:
    """The backend items of one pack array that is not a record: its chunk, then its document."""
    chunk, attrs_json = _column_chunk(column.data, checksum), b"{}"
    if column.data.dtype.kind == "U":
        column.document = _text_document(column, attrs_json, checksum)
    else:
        shape = tuple(int(d) for d in column.data.shape)
        column.document = array_document_bytes(
            shape, column.data.dtype, tuple(max(1, d) for d in shape), NO_COMPRESSION, attrs_json, column.dims, checksum
        )
    key = "c" + "".join(".0" for _ in column.data.shape)
    return [(f"{prefix}/{column.name}/{key}", chunk), (f"{prefix}/{column.name}/zarr.json", column.document)]


def _stats_column(record: PackRecord, stats: list[dict[str, Any]]) -> PackColumn:
    """``{record}_stats``: each row's statistics as float64 ``(task, statistic)`` (``null``: NaN)."""
    table = np.array(
        [[math.nan if row[key] is None else row[key] for key in STATISTICS] for row in stats], dtype="<f8"
    ).reshape(len(stats), len(STATISTICS))
    return PackColumn(stats_array(record.name), table, (TASK_DIM, STATISTIC_DIM))


def submit_pack(writer: Any, pack: PackGroup, base: str) -> list[Future[Any]]:
    """Write a pack's arrays along ``task`` now, and submit its record shards.

    Args:
        writer: The :class:`~megadump_zarr.store.writer.WindowWriter`.
        pack: The pack.
        base: Key of the invocation group.

    Returns:
        The shard jobs; the job finishing a record array's last shard writes its statistics array and its
        document, and marks it written.
    """
    prefix = f"{base}/{pack.path}"
    if writer.stats and pack.records and not any(c.name == STATISTIC_ARRAY for c in pack.columns):
        pack.columns.append(PackColumn(STATISTIC_ARRAY, np.asarray(STATISTICS), (STATISTIC_DIM,)))
    # the group's attributes first (what the rows share: a torn window's pack reads with them), its arrays along
    # task next; the commit rewrites the group's document with its consolidated metadata
    items = [(f"{prefix}/zarr.json", plain_group_bytes(pack.attrs_json))]
    items += [item for column in pack.columns for item in _column_items(column, prefix, writer.checksum)]
    writer.backend.put_many(items)
    for column in pack.columns:
        column.written = True
    futures: list[Future[Any]] = []
    for record in pack.records:
        futures.extend(_submit_record(writer, pack, record, f"{prefix}/{record.name}", prefix))
    return futures


def _submit_record(writer: Any, pack: PackGroup, record: PackRecord, key: str, prefix: str) -> list[Future[Any]]:
    count = len(pack.tasks)
    per_shard = shard_rows(record.nbytes, count)
    shards = -(-count // per_shard)
    zeros = ".0" * len(record.shape)
    local = isinstance(writer.backend, LocalBackend)
    lock = threading.Lock()
    state: dict[str, Any] = {"left": shards, "stats": [None] * shards}

    def run(index: int) -> None:
        start = index * per_shard
        rows = record.rows[start : start + per_shard]
        stats = row_stats(rows) if writer.stats else None
        encode, itemsize, raw, checksum = writer._encoder.encode, record.dtype.itemsize, record.raw, writer.checksum
        parts = _Parts(len(rows) * (2 if checksum else 1) + 1, local)
        entries: list[tuple[int, int] | None] = []
        offset = 0
        for row in rows:
            encoded = encode(row.reshape(-1).view(np.uint8), itemsize, raw)
            size = encoded.nbytes if isinstance(encoded, np.ndarray) else len(encoded)
            parts.add(encoded)
            if checksum:
                parts.add(_CRC.pack(google_crc32c.value(encoded)))
                size += 4
            entries.append((offset, size))
            offset += size
        entries.extend([None] * (per_shard - len(rows)))
        index_bytes = encode_index(entries)
        parts.add(index_bytes)
        writer.backend.put(f"{key}/c.{index}{zeros}", parts.buffers())
        with lock:
            state["stats"][index] = stats
            state["left"] -= 1
            last = state["left"] == 0
        if last:
            if writer.stats:  # the statistics array before the record's document: a torn window's record has both
                record.stats = _stats_column(record, [s for part in state["stats"] for s in part])
                writer.backend.put_many(_column_items(record.stats, prefix, checksum))
                record.stats.written = True
            document = pack_array_document_bytes(
                (count, *record.shape),
                record.dtype,
                (per_shard, *record.shape),
                NO_COMPRESSION if raw else writer.compressor,
                _record_attributes(pack, record),
                (TASK_DIM, *record.dims),
                checksum,
            )
            writer.backend.put(f"{key}/zarr.json", document)
            record.document = document
            record.written = True

    return [writer.pool.submit(run, index) for index in range(shards)]
