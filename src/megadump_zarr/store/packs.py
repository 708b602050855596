"""Task-record packs: the shards of a pack's record arrays (their codecs, index and digest), and where a row is.

The tasks layout gives every L1 task a group, every record an array and every row coordinate an array: 11
file-system operations for a task of two records, the whole cost of a window of small tiles. The packs layout
stores the tasks of one stage whose records all fit in one chunk (``PACK_MAX_RECORD_BYTES``) and share a
signature as one **pack** ``stages/{stage}/pack_{pppp}/`` (names: :mod:`megadump_zarr.layout.packs`):

* the pack group: attributes ``stage``, ``taskCount`` and ``taskAttributes`` (what every task holds alike), and
  consolidated metadata of its arrays (plain ``xr.open_zarr(pack)`` opens it);
* per task, int64 arrays along ``task``: ``task_id``, ``stage_task_index``, ``owner_id``, ``core_id``,
  ``worker_id`` (``-1``: ``null``), ``tile_row_start``/``tile_row_stop``, ``core_type`` (text), and
  ``{dim}_start``/``{dim}_stop`` per row coordinate (each task's rows ``[start, stop)`` in the stitched tensor);
* per record: ``{record}`` (below), ``{record}_offset`` (int64 along ``task``: ``sourceOffsetBytes``) and
  ``{record}_stats`` (float64 ``(task, statistic)``, with the ``statistic`` coordinate naming its columns);
* every array that is not a record is one raw chunk (``bytes`` + ``crc32c``) whose crc32c its document records
  as ``chunkCrc32c`` (binding it to its place, as the tasks layout's arrays);
* ``{record}`` (``input_00_x`` ...) — shape ``(T, *record_shape)``, dims ``("task", *record_dims)``, Zarr v3
  ``sharding_indexed``: inner chunk ``(1, *record_shape)`` whose codec chain is exactly the tasks layout's
  record chunk (bytes, blosc or none, crc32c), shards of ``shard_rows`` tasks, index at the end (``(offset,
  nbytes)`` little-endian uint64 per inner chunk, then its crc32c). Attributes: ``coordinates`` (the per-task
  arrays, so plain xarray shows them as coordinates along ``task``), ``recordAttributes`` (what every row
  holds alike) and ``shardCrc32c`` (:data:`SHARD_DIGEST_ATTR`, with checksums only): 8 lower-case hex digits
  per shard in grid order, :func:`shard_digest`, binding each shard to its place.

So a stage of 2048 tasks of two 8 KiB records is 8 shard files plus a handful of small arrays instead of
22,528 files and directories, and every array is a plain Zarr v3 array that zarr-python and tensorstore read.

Readers find a packed record at its row (``read.pack_record``): :class:`ShardSource` names the inner chunk of a
shard that holds it (byte for byte the tasks layout's chunk, checksum included), read after :func:`decode_index`
of its shard's index.
"""

from __future__ import annotations

from dataclasses import dataclass
import struct
from typing import Any

import google_crc32c
import numpy as np

from megadump_zarr.layout.packs import COORDINATES_ATTR, PACK_PREFIX, TASK_DIM, pack_name
from megadump_zarr.layout.schema import PACK_STORAGE  # re-exported: the layout's name for its windows

__all__ = [
    "COORDINATES_ATTR",
    "INDEX_CODECS",
    "NO_CHUNK",
    "PACK_MAX_RECORD_BYTES",
    "PACK_PREFIX",
    "PACK_SHARD_BYTES",
    "PACK_STORAGE",
    "SHARD_DIGEST_ATTR",
    "TASK_DIM",
    "ShardSource",
    "decode_index",
    "encode_index",
    "index_nbytes",
    "pack_name",
    "shard_rows",
    "shard_digest",
    "shard_digest_of",
    "sharded_codecs",
]

SHARD_DIGEST_ATTR = "shardCrc32c"
"""A record array's attribute binding each shard to its place: :func:`shard_digest` of each, 8 hex digits, grid order."""
PACK_MAX_RECORD_BYTES = 1 << 20
"""Records up to this size (and the writer's chunk size) are packed; larger ones keep an array each."""
PACK_SHARD_BYTES = 4 << 20
"""Uncompressed bytes of one shard (a whole number of records, at least one): the writer's default chunk size.
16 MiB measured no faster on P2 (benchmarks/export.py) and held twice the memory (a shard is encoded whole
before its one write; two are in flight on two cores); readers take the shard shape from each document."""
NO_CHUNK = 2**64 - 1
INDEX_CODECS: list[dict[str, Any]] = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]
_CRC = struct.Struct("<I")


def shard_rows(record_nbytes: int, tasks: int) -> int:
    """Records per shard: as many as fit in ``PACK_SHARD_BYTES`` (at least 1, at most ``tasks``).

    Args:
        record_nbytes: Uncompressed bytes of one record.
        tasks: Rows of the pack.
    """
    return max(1, min(int(tasks), PACK_SHARD_BYTES // max(1, int(record_nbytes))))


def sharded_codecs(inner_shape: list[int], inner_codecs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The codec list of a pack's record array, as zarr-python writes it for ``shards=``.

    Args:
        inner_shape: ``[1, *record_shape]``.
        inner_codecs: The record's own codec chain (the tasks layout's).
    """
    return [
        {
            "name": "sharding_indexed",
            "configuration": {
                "chunk_shape": list(inner_shape),
                "codecs": list(inner_codecs),
                "index_codecs": INDEX_CODECS,
                "index_location": "end",
            },
        }
    ]


def index_nbytes(count: int) -> int:
    """Bytes of a shard index of ``count`` inner chunks (with its checksum)."""
    return 16 * int(count) + 4


def encode_index(entries: list[tuple[int, int] | None]) -> bytes:
    """A shard index: ``(offset, nbytes)`` per inner chunk (``None``: absent), then its crc32c.

    Args:
        entries: One entry per inner chunk, in C order.
    """
    table = np.full((len(entries), 2), NO_CHUNK, dtype="<u8")
    for i, entry in enumerate(entries):
        if entry is not None:
            table[i] = entry
    raw = table.tobytes()
    return raw + _CRC.pack(google_crc32c.value(raw))


def shard_digest(chunk_crcs: bytes, index: bytes) -> int:
    """A shard's digest (:data:`SHARD_DIGEST_ATTR`): the crc32c of its inner chunks' stored crc32c (in index
    order) followed by its index without the index's own crc32c.

    Not the crc32c of the shard's bytes: bytes followed by their own crc32c always have the same crc32c, so a
    run of checksummed chunks would leave only the index to tell shards apart. Each chunk's crc32c stands
    for its bytes (``verify`` checks them), so this binds the same bytes without a second pass over them.

    Args:
        chunk_crcs: The 4 trailing bytes of each inner chunk present, in index order.
        index: The shard index as stored (:func:`encode_index`).
    """
    return google_crc32c.value(chunk_crcs + index[:-4])


def shard_digest_of(raw: bytes, count: int, key: str) -> int:
    """:func:`shard_digest` of the stored shard ``raw`` of ``count`` inner chunks (each ending with its crc32c).

    Args:
        raw: The shard's bytes.
        count: Inner chunks per shard.
        key: The shard's key (for messages).

    Raises:
        ValueError: The index is damaged, an entry lies outside the shard, or a chunk fails its crc32c (named by
            the chunk check: this digest binds intact chunks to their place).
    """
    size = index_nbytes(count)
    index = raw[len(raw) - size :]
    crcs = []
    for entry in decode_index(index, count, key):
        if entry is not None:
            offset, nbytes = entry
            if nbytes < 4 or offset + nbytes > len(raw) - size:
                raise ValueError(f"{key}: shard index entry {entry} lies outside the shard's chunks")
            crc = raw[offset + nbytes - 4 : offset + nbytes]
            if _CRC.pack(google_crc32c.value(raw[offset : offset + nbytes - 4])) != crc:
                raise ValueError(f"{key}: inner chunk {entry} fails its crc32c")
            crcs.append(crc)
    return shard_digest(b"".join(crcs), index)


def decode_index(raw: bytes, count: int, key: str) -> list[tuple[int, int] | None]:
    """Parse a shard index read from the end of shard ``key``.

    Args:
        raw: The last :func:`index_nbytes` bytes of the shard.
        count: Inner chunks per shard.
        key: The shard's key (for messages).

    Raises:
        ValueError: Wrong length or a checksum mismatch (the message names ``key``).
    """
    expected = index_nbytes(count)
    if len(raw) != expected:
        raise ValueError(f"{key}: shard index is {len(raw)} bytes, expected {expected}")
    body, crc = raw[:-4], _CRC.unpack(raw[-4:])[0]
    actual = google_crc32c.value(body)
    if actual != crc:
        raise ValueError(f"{key}: shard index checksum mismatch (stored {crc:#010x}, computed {actual:#010x})")
    table = np.frombuffer(body, dtype="<u8").reshape(count, 2)
    return [None if int(o) == NO_CHUNK and int(n) == NO_CHUNK else (int(o), int(n)) for o, n in table]


@dataclass(frozen=True)
class ShardSource:
    """Where a packed record's chunk is: inner chunk ``slot`` of shard ``shard`` (path relative to the window).

    Args:
        shard: The shard's key relative to the window.
        slot: Inner chunk index in the shard.
        count: Inner chunks per shard (the index length).
    """

    shard: str
    slot: int
    count: int
