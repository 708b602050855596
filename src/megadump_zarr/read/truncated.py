"""A truncated record's logical shape: its dtype, dimension names, captured rows and the bounds a document must keep.

A truncated record (attribute ``truncated: true``) is stored as a flat prefix: the first
``storedShape[0]`` elements, in C order, of a tensor whose logical shape is ``actualShape``. The view
made here has the logical shape: captured elements hold their values, the rest is NaN.

Dtypes: float records keep their dtype (float16/32/64, bfloat16 and both float8 formats all have a
NaN). Integer and bool records cannot hold NaN, so their truncated views are promoted to ``float64``
(exact for integers up to 2**53 in magnitude); ``attrs["promotedFrom"]`` names the stored dtype.

What was captured: :func:`captured_rows` counts the rows whose every element was stored, and the view
carries a boolean ``captured`` coordinate along its first dimension (:func:`captured_mask`): True where a row
holds stored values only, False where any of its elements is NaN padding. A NaN in a ``captured`` row is a
NaN the tensor held. A record's statistics (``attributes.stats``) are those of the stored prefix: the
records table says so in its ``stats_scope`` column (:func:`stats_scope`).

The view itself is a :class:`~megadump_zarr.read.lazy.RecordArray` with a logical shape: a selection reads only
the stored elements of the rows it touches (``.isel(row=slice(0, 8))`` reads at most the one or two stored
chunks behind them), and rows wholly past the prefix read nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
import math
from typing import Any

import numpy as np

from megadump_zarr.layout.dtypes import ML_FLOATS
from megadump_zarr.read.documents import open_array_checked
from megadump_zarr.read.errors import DumpIntegrityError

__all__ = [
    "MAX_DERIVED_ROWS",
    "MAX_LOGICAL_BYTES",
    "MAX_NAN_BLOCKS",
    "ROWS_PER_STORED_ELEMENT",
    "captured_mask",
    "captured_rows",
    "check_logical_shape",
    "check_padded_rows",
    "logical_dims",
    "logical_dtype",
    "open_zarr_array",
    "stats_scope",
]


def captured_rows(logical_shape: Sequence[int], stored_elements: int) -> int:
    """Rows of a truncated record whose every element was stored (a row cut by the prefix does not count).

    Args:
        logical_shape: ``actualShape`` of the record.
        stored_elements: Elements its flat prefix holds.
    """
    shape = tuple(int(d) for d in logical_shape)
    if not shape:
        return 0
    row = math.prod(shape[1:])
    if row == 0:
        return shape[0]
    return min(shape[0], max(0, int(stored_elements)) // row)


def captured_mask(logical_shape: Sequence[int], stored_elements: int, chunks: Sequence[int] | None = None) -> Any:
    """Per row of a truncated record's view, whether every element of the row was stored (lazy, dask).

    Args:
        logical_shape: ``actualShape`` of the record (at least one dimension).
        stored_elements: Elements its flat prefix holds.
        chunks: Row chunks of the view (default: one block).
    """
    import dask.array as da

    rows = int(logical_shape[0])
    whole = captured_rows(logical_shape, stored_elements)
    return da.arange(rows, chunks=tuple(chunks) if chunks else max(1, rows)) < whole


def stats_scope(attrs: dict[str, Any], has_stats: bool) -> str | None:
    """What a record's stored statistics cover: ``"prefix"`` (a truncated record: its stored elements
    only), ``"whole"`` (every element), or None (no statistics).

    Args:
        attrs: The record's attributes.
        has_stats: Whether the record carries statistics.
    """
    if not has_stats:
        return None
    return "prefix" if attrs.get("truncated") else "whole"


open_zarr_array = open_array_checked
"""A zarr array built from its (already fetched) ``zarr.json`` document: no extra ``get``."""


def logical_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype of a truncated record's logical view: floats keep theirs, the rest become float64.

    Args:
        dtype: The stored dtype.
    """
    dtype = np.dtype(dtype)
    if dtype.kind == "f" or dtype.name in ML_FLOATS:
        return dtype
    return np.dtype(np.float64)


def logical_dims(attrs: dict[str, Any], ndim: int) -> tuple[str, ...]:
    """Dimension names for a truncated record's logical view.

    The writer keeps no dimension names for truncated records (their stored array is flat), so the
    first axis is ``row`` and the others ``dim_1``, ``dim_2``, ... unless the attributes carry
    ``logicalDims``.

    Args:
        attrs: The record's attributes.
        ndim: Number of logical dimensions.
    """
    named = attrs.get("logicalDims")
    if isinstance(named, list) and len(named) == ndim and all(isinstance(n, str) for n in named):
        return tuple(named)
    return tuple("row" if axis == 0 else f"dim_{axis}" for axis in range(ndim))


MAX_LOGICAL_BYTES = 1 << 40
"""Largest logical size (1 TiB) a record's ``actualShape`` may describe: no device tensor is larger, and
a crafted shape beyond it is refused before any view is built."""


def check_logical_shape(shape: Sequence[int], itemsize: int, key: str) -> None:
    """Refuse a logical shape that no tensor can have (negative, non-integer, or over :data:`MAX_LOGICAL_BYTES`).

    Args:
        shape: The logical shape (``actualShape``).
        itemsize: Bytes per stored element.
        key: The record's key, for the message.

    Raises:
        ValueError: Naming the key, the field and the value.
    """
    if not all(type(d) is int and d >= 0 for d in shape):
        raise ValueError(
            f"{key}/zarr.json: attributes.actualShape {list(shape)!r} is not a list of non-negative integers"
        )
    size = math.prod(shape) * max(1, int(itemsize))
    if size > MAX_LOGICAL_BYTES:
        raise ValueError(
            f"{key}/zarr.json: attributes.actualShape {list(shape)} describes {size} bytes, more than "
            f"any tensor can hold ({MAX_LOGICAL_BYTES} bytes)"
        )


MAX_NAN_BLOCKS = 64
"""Most dask blocks a truncated view spends on its NaN padding past the stored prefix, whatever its logical
size: the graph of a view is its stored chunks' blocks plus at most this many."""

MAX_DERIVED_ROWS = 1 << 20
"""Rows a truncated record may describe past its stored prefix, whatever that prefix (see :func:`check_padded_rows`)."""

ROWS_PER_STORED_ELEMENT = 64
"""Rows a truncated record may describe per stored element, beyond :data:`MAX_DERIVED_ROWS`."""


def check_padded_rows(actual: Sequence[int], stored_elements: int, key: str) -> None:
    """Refuse a truncated record whose logical rows are out of all proportion to its stored prefix.

    Work that is per logical row (the global-row indices a stitch materialises, one per row, and its
    per-row coordinates) must stay a fixed multiple of what the record stores. The rule: ``actualShape[0]``
    may be at most ``max(MAX_DERIVED_ROWS, ROWS_PER_STORED_ELEMENT * stored elements)``. A real truncation
    keeps whole elements of a tensor of at most :data:`MAX_LOGICAL_BYTES`, and its rows past the prefix are
    NaN padding: a million padded rows (8 MiB of indices) is the most any record pays for, or 64 rows per
    element it stores. Element-wise work is bounded without a rule (the view's NaN blocks are at most
    :data:`MAX_NAN_BLOCKS`, and never read anything).

    Args:
        actual: The logical shape (``actualShape``, already checked to be non-negative integers).
        stored_elements: Elements the record stores (its flat prefix's length).
        key: The record's key, for the message.

    Raises:
        DumpIntegrityError: Naming the record's document, the field, the value and the bound.
    """
    if not actual:
        return
    bound = max(MAX_DERIVED_ROWS, ROWS_PER_STORED_ELEMENT * max(0, int(stored_elements)))
    if int(actual[0]) > bound:
        raise DumpIntegrityError(
            f"{key}/zarr.json: attributes.actualShape {list(actual)} describes {int(actual[0])} rows for a stored prefix "
            f"of {int(stored_elements)} elements, more than a truncated record can describe (at most {bound} rows: "
            f"max({MAX_DERIVED_ROWS}, {ROWS_PER_STORED_ELEMENT} x stored elements)); the document was edited",
            key=f"{key}/zarr.json",
        )
