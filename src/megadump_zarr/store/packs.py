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
* every array that is not a record is one raw chunk (``bytes`` + ``crc32c``);
* ``{record}`` (``input_00_x`` ...) — shape ``(T, *record_shape)``, dims ``("task", *record_dims)``, Zarr v3
  ``sharding_indexed``: inner chunk ``(1, *record_shape)`` whose codec chain is exactly the tasks layout's
  record chunk (bytes, blosc or none, crc32c), shards of ``shard_rows`` tasks, index at the end (``(offset,
  nbytes)`` little-endian uint64 per inner chunk, then its crc32c). Attributes: ``coordinates`` (the per-task
  arrays, so plain xarray shows them as coordinates along ``task``) and ``recordAttributes`` (what every row
  holds alike).

What binds every chunk and shard to its place is the window inventory (:mod:`megadump_zarr.layout.inventory`).

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
    "TASK_DIM",
    "ShardSource",
    "decode_index",
    "encode_index",
    "index_nbytes",
    "pack_name",
    "shard_rows",
    "sharded_codecs",
]

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
