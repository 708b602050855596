"""A record's data in its logical shape, lazily (dask), including truncated records.

A truncated record (attribute ``truncated: true``) is stored as a flat prefix: the first
``storedShape[0]`` elements, in C order, of a tensor whose logical shape is ``actualShape``. The view
made here has the logical shape: captured elements hold their values, the rest is NaN.

Dtypes: float records keep their dtype (float16/32/64, bfloat16 and both float8 formats all have a
NaN). Integer and bool records cannot hold NaN, so their truncated views are promoted to ``float64``
(exact for integers up to 2**53 in magnitude); ``attrs["promotedFrom"]`` names the stored dtype.

Laziness: the view is cut into row blocks (axis 0, every other axis whole) of about one stored chunk
each. The task of a block reads only the flat range ``[start, stop)`` it covers, with zarr's own
indexing (``zarr.Array[start:stop]``), so selecting a few rows (``.isel(row=slice(0, 8))``) reads at
most the one or two stored chunks behind them, and blocks wholly past the prefix read nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
import hashlib
import math
from typing import Any

import dask.array as da
from dask.highlevelgraph import HighLevelGraph
import numpy as np
import zarr
from zarr.abc.store import Store

from megadump_zarr.read.location import store_path

__all__ = ["logical_dims", "logical_dtype", "open_zarr_array", "record_dask", "stored_dask", "truncated_dask"]

_ML_FLOATS = frozenset(("bfloat16", "float8_e4m3fn", "float8_e5m2"))


def open_zarr_array(store: Store, key: str, doc: dict[str, Any]) -> zarr.Array:
    """A zarr array built from its (already fetched) ``zarr.json`` document: no extra ``get``.

    Args:
        store: The dump store.
        key: Array path relative to the root.
        doc: Its ``zarr.json`` document (from consolidated metadata or a listing).
    """
    return zarr.Array.from_dict(store_path(store, key), doc)


def _token(*parts: Any) -> str:
    return hashlib.sha1(repr(parts).encode()).hexdigest()[:16]


def stored_dask(array: zarr.Array, key: str, root: str = "") -> da.Array:
    """The stored array as dask, one dask block per stored chunk.

    Args:
        array: The zarr array.
        key: Its path (for a stable dask name).
        root: The dump root (for a stable dask name).
    """
    chunks = array.chunks if array.ndim else ()
    return da.from_array(array, chunks=chunks, name=f"megadump-stored-{_token(root, key)}", lock=False,
                         asarray=False, inline_array=True, meta=np.empty((0,) * array.ndim, dtype=array.dtype))


def logical_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype of a truncated record's logical view: floats keep theirs, the rest become float64.

    Args:
        dtype: The stored dtype.
    """
    dtype = np.dtype(dtype)
    if dtype.kind == "f" or dtype.name in _ML_FLOATS:
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


def _read_flat(array: zarr.Array, start: int, stop: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Elements ``[start, stop)`` of the logical flat tensor, NaN past the stored prefix."""
    out = np.full(stop - start, np.nan, dtype=dtype)
    stored = int(array.shape[0])
    if start < stored:
        end = min(stop, stored)
        out[: end - start] = np.asarray(array[start:end]).astype(dtype, copy=False)
    return out.reshape(shape)


def truncated_dask(array: zarr.Array, logical_shape: Sequence[int], key: str, root: str = "") -> da.Array:
    """The logical-shape view of a truncated record (see the module docstring).

    Args:
        array: The stored flat prefix (1-D zarr array).
        logical_shape: ``actualShape`` of the record.
        key: Its path (for a stable dask name).
        root: The dump root (for a stable dask name).
    """
    shape = tuple(int(d) for d in logical_shape)
    dtype = logical_dtype(array.dtype)
    name = f"megadump-truncated-{_token(root, key, shape)}"
    if not shape:  # a 0-d tensor has one element: never truncated, but stay total
        graph = {(name,): (_read_flat, array, 0, 1, (), dtype)}
        return da.Array(HighLevelGraph.from_collections(name, graph, dependencies=()), name, (), dtype=dtype)
    row = math.prod(shape[1:])
    stored_chunk = int(array.chunks[0]) if array.ndim and array.chunks[0] else max(1, int(array.shape[0]))
    rows_per_block = max(1, stored_chunk // row) if row else max(1, shape[0])
    block_rows: list[int] = []
    left = shape[0]
    while left > 0:
        block_rows.append(min(rows_per_block, left))
        left -= block_rows[-1]
    if not block_rows:
        block_rows = [0]
    chunks = (tuple(block_rows), *((d,) for d in shape[1:]))
    graph: dict[Any, Any] = {}
    first = 0
    rest_index = (0,) * (len(shape) - 1)
    for index, rows in enumerate(block_rows):
        block_shape = (rows, *shape[1:])
        graph[(name, index, *rest_index)] = (_read_flat, array, first * row, (first + rows) * row, block_shape, dtype)
        first += rows
    return da.Array(HighLevelGraph.from_collections(name, graph, dependencies=()), name, chunks, dtype=dtype)


def record_dask(array: zarr.Array, attrs: dict[str, Any], key: str, root: str = "") -> da.Array:
    """A record's data in its logical shape: the stored array, or the truncated view.

    Args:
        array: The stored zarr array.
        attrs: The record's attributes (``truncated``, ``actualShape``).
        key: Its path.
        root: The dump root.
    """
    actual = attrs.get("actualShape")
    if attrs.get("truncated") and isinstance(actual, list):
        return truncated_dask(array, actual, key, root)
    return stored_dask(array, key, root)
