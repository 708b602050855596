"""The record digest: a position-sensitive 64-bit hash of a tensor's bytes, its dtype and element count.

Every statistics record carries one (the statistics table's ``digest`` column, the L1 statistics slot's
word at byte 64). The device computes it with torch integer ops (:mod:`megadump_zarr.runtime.digest`),
the host from stored bytes with :func:`digest_of_bytes` (numpy); both give the same 64 bits on every
device, because every step is integer arithmetic mod ``2**64`` and the only reduction is a wrapping sum
(exact and independent of the order of its terms).

Definition (``fmix64`` is MurmurHash3's 64-bit finaliser, a bijection of 64-bit words; ``+`` and ``*``
wrap mod ``2**64``; ``>>`` is a logical shift)::

    fmix64(x) = x ^= x >> 33; x *= 0xFF51AFD7ED558CCD; x ^= x >> 33; x *= 0xC4CEB9FE1A85EC53; x ^= x >> 33

    the record's bytes (C order, ``n`` elements of ``s`` bytes) are cut into rows of ROW_ELEMENTS elements
    (ROW_ELEMENTS * s bytes), the last row zero-padded; a row is read as little-endian u64 words w_0, w_1, ...
    and only the words that hold record bytes count (the first ceil(bytes in the row / 8)):

        row_sum(t) = sum_j fmix64(w_j + (j + 1) * GOLDEN)                   over the counted words j of row t
        S          = sum_t fmix64(row_sum(t) + (t + 1) * GOLDEN)             over the record's rows t = 0, 1, ...
        digest     = fmix64(S + fmix64(n ^ (dtype_code << 56)))

``dtype_code`` is the L1 ABI's (:data:`megadump_zarr.l1.format.L1_DTYPE_CODES`, repeated here as
:data:`DIGEST_DTYPE_CODES`). Properties:

* any change confined to one 64-bit word (one element of any dtype, one flipped bit, a sign flip, ``+0.0``
  against ``-0.0``, another NaN payload) always changes the digest: each step maps its input one to one;
* moving data changes it: every word is keyed by its place in its row and every row by its place in the
  record, and a swap of two words (or rows) can only keep the sum by a 64-bit accident (no linear relation
  holds between the terms, unlike a weighted sum);
* the same bytes as another dtype or another element count give another digest. The shape is not in it
  (the device sees a byte range); readers compare shapes beside it.
"""

from __future__ import annotations

import numpy as np

from megadump_zarr.layout.dtypes import ITEMSIZES

__all__ = [
    "DIGEST_ALGORITHM",
    "DIGEST_DTYPE_CODES",
    "DIGEST_ITEMSIZES",
    "FMIX_1",
    "FMIX_2",
    "GOLDEN",
    "ROW_ELEMENTS",
    "digest_of_array",
    "digest_of_bytes",
    "fmix64",
]

DIGEST_ALGORITHM = "fmix64-rows-256"
"""The name of the construction above (stamped on statistics tables as ``digestAlgorithm``)."""
ROW_ELEMENTS = 256
"""Elements per row of the digest (the statistics pass's staging rows are as wide)."""
GOLDEN = 0x9E3779B97F4A7C15
"""The 64-bit golden-ratio constant (splitmix64's increment): the position keys are its multiples."""
FMIX_1 = 0xFF51AFD7ED558CCD
FMIX_2 = 0xC4CEB9FE1A85EC53
"""fmix64's multipliers."""
DIGEST_DTYPE_CODES = {
    "bool": 1,
    "int8": 2,
    "uint8": 3,
    "int16": 4,
    "uint16": 5,
    "int32": 6,
    "uint32": 7,
    "int64": 8,
    "uint64": 9,
    "float16": 10,
    "bfloat16": 11,
    "float32": 12,
    "float64": 13,
    "float8_e4m3fn": 14,
    "float8_e5m2": 15,
}
"""The dtype codes mixed into a digest (the L1 ABI's ``dtype_code``)."""
DIGEST_ITEMSIZES = ITEMSIZES
"""Bytes per element of each dtype a digest is defined for."""


def fmix64(x: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser of every element of ``x`` (uint64; a new array).

    Args:
        x: uint64 values.
    """
    x = np.asarray(x, dtype=np.uint64).copy()
    with np.errstate(over="ignore"):
        x ^= x >> np.uint64(33)
        x *= np.uint64(FMIX_1)
        x ^= x >> np.uint64(33)
        x *= np.uint64(FMIX_2)
        x ^= x >> np.uint64(33)
    return x


def _keys(count: int) -> np.ndarray:
    """``(j + 1) * GOLDEN`` mod 2**64 for j < count (uint64)."""
    with np.errstate(over="ignore"):
        return (np.arange(1, count + 1, dtype=np.uint64) * np.uint64(GOLDEN)).astype(np.uint64)


def digest_of_bytes(raw: bytes | bytearray | memoryview | np.ndarray, dtype: str, count: int) -> int:
    """The digest of ``count`` elements of ``dtype`` whose bytes (C order, little-endian) are ``raw``.

    Args:
        raw: The record's bytes, exactly ``count * itemsize`` of them.
        dtype: Its dtype name (a key of :data:`DIGEST_DTYPE_CODES`: ``float32``, ``bfloat16``, ...).
        count: Its element count.

    Raises:
        ValueError: An unknown dtype, or a byte count other than ``count * itemsize``.
    """
    name = str(dtype).removeprefix("torch.")
    if name not in DIGEST_DTYPE_CODES:
        raise ValueError(f"digest: no dtype code for {dtype!r} (known: {', '.join(DIGEST_DTYPE_CODES)})")
    size = DIGEST_ITEMSIZES[name]
    data = np.frombuffer(raw, dtype=np.uint8) if not isinstance(raw, np.ndarray) else raw.reshape(-1).view(np.uint8)
    if data.size != count * size:
        raise ValueError(f"digest: {data.size} bytes are not {count} {name} elements ({count * size} bytes)")
    row_bytes = ROW_ELEMENTS * size
    rows = -(-data.size // row_bytes)
    padded = np.zeros(rows * row_bytes, dtype=np.uint8)
    padded[: data.size] = data
    words = padded.view("<u8").reshape(rows, row_bytes // 8).astype(np.uint64)
    per_row = row_bytes // 8
    with np.errstate(over="ignore"):
        terms = fmix64(words + _keys(per_row)[None, :])
        if rows and data.size % row_bytes:  # the last row's words beyond the record's bytes do not count
            used = -(-(data.size - (rows - 1) * row_bytes) // 8)
            terms[-1, used:] = 0
        row_sums = terms.sum(axis=1, dtype=np.uint64)
        total = fmix64(row_sums + _keys(rows)).sum(dtype=np.uint64)
        meta = fmix64(np.uint64(count) ^ (np.uint64(DIGEST_DTYPE_CODES[name]) << np.uint64(56)))
        return int(fmix64(np.uint64(total) + meta)[()])


def digest_of_array(values: np.ndarray, dtype: str | None = None) -> int:
    """The digest of a numpy array's elements (C order; ml_dtypes bfloat16/float8 arrays too).

    Args:
        values: The array (any layout; its elements are read in C order).
        dtype: Its dtype name when numpy's differs from the stored one (default: ``values.dtype``'s name).
    """
    array = np.ascontiguousarray(values)
    name = dtype or str(array.dtype)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return digest_of_bytes(array.reshape(-1).view(np.uint8), name, array.size)
