"""Chunk policy: whole rows along axis 0, every other axis whole.

A chunk of an axis-0-chunked C-contiguous array is a contiguous slice of its buffer, so the writer can
hand it to a compressor (or straight to the file system) without copying. ``chunk_bytes`` bounds the
uncompressed size of a chunk; a single row larger than that still makes one chunk (rows are never
split).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
import math

__all__ = ["CHUNK_KEY_SEPARATOR", "ChunkPlan", "chunk_shape", "plan_chunks"]

# Separator of the "default" chunk key encoding. "." puts chunk files ("c.0.0") beside the array's
# zarr.json, because the writer's cost is file-system operations: with "/" a one-chunk 2-D array "a"
# costs 5 (directories a, a/c and a/c/0, then files a/zarr.json and a/c/0/0), with "." 3 (a,
# a/zarr.json, a/c.0.0); measured ~15% faster for windows of 4096 arrays of 8 KiB. Zarr v3 readers
# follow the encoding recorded in each zarr.json ("chunk_key_encoding"); chunk keys and the documents
# both follow this constant.
CHUNK_KEY_SEPARATOR = "."


def chunk_shape(shape: tuple[int, ...], itemsize: int, chunk_bytes: int) -> tuple[int, ...]:
    """The regular chunk shape for an array.

    Args:
        shape: Array shape.
        itemsize: Bytes per element.
        chunk_bytes: Target uncompressed bytes per chunk (at least one whole row is always taken).

    Returns:
        ``()`` for a 0-d array; otherwise ``(rows, *shape[1:])`` with
        ``rows = max(1, chunk_bytes // row_bytes)`` capped at ``shape[0]``. Every dimension is at least
        1, so zero-size arrays get a valid (never used) chunk shape; rows of zero bytes (some later axis
        is 0) put the whole axis 0 in one chunk.
    """
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be positive, got {chunk_bytes}")
    if not shape:
        return ()
    rest = tuple(max(1, int(d)) for d in shape[1:])
    row_bytes = math.prod(shape[1:]) * itemsize
    rows = max(1, chunk_bytes // row_bytes) if row_bytes > 0 else int(shape[0])  # empty rows: one chunk
    rows = max(1, min(rows, int(shape[0])))
    return (rows, *rest)


@dataclass(frozen=True)
class ChunkPlan:
    """How one array is cut into chunks.

    Args:
        shape: Array shape.
        chunks: Regular chunk shape (see :func:`chunk_shape`).
    """

    shape: tuple[int, ...]
    chunks: tuple[int, ...]

    @property
    def count(self) -> int:
        """Number of chunks to write: 1 for a 0-d array, 0 for a zero-size array."""
        if not self.shape:
            return 1
        if 0 in self.shape:
            return 0
        return -(-self.shape[0] // self.chunks[0])

    def key(self, index: int) -> str:
        """Chunk key (default encoding) relative to the array, e.g. ``c.3.0.0`` (with the "." separator); ``c`` for 0-d arrays.

        Args:
            index: Chunk index along axis 0.
        """
        if not self.shape:
            return "c"
        sep = CHUNK_KEY_SEPARATOR
        return "c" + sep + str(index) + (sep + "0") * (len(self.shape) - 1)

    def rows(self, index: int) -> tuple[int, int]:
        """First and one-past-last row of chunk ``index`` (the last chunk may be short).

        Args:
            index: Chunk index along axis 0.
        """
        start = index * self.chunks[0]
        return start, min(start + self.chunks[0], self.shape[0])

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.count))


def plan_chunks(shape: tuple[int, ...], itemsize: int, chunk_bytes: int) -> ChunkPlan:
    """Chunk plan for an array.

    Args:
        shape: Array shape.
        itemsize: Bytes per element.
        chunk_bytes: Target uncompressed bytes per chunk.
    """
    shape = tuple(int(d) for d in shape)
    return ChunkPlan(shape, chunk_shape(shape, itemsize, chunk_bytes))
