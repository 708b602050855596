"""A record's data in its logical shape, lazily (dask), including truncated records.

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
records table says so in its ``stats_scope`` column (:func:`stats_scope`). :class:`FlatPrefix` reads the
first elements of any array in C order, flat (what a partial comparison compares).

Laziness: the view is cut into row blocks (axis 0, every other axis whole) of about one stored chunk
each. The task of a block reads only the flat range ``[start, stop)`` it covers, with zarr's own
indexing (``zarr.Array[start:stop]``), so selecting a few rows (``.isel(row=slice(0, 8))``) reads at
most the one or two stored chunks behind them, and blocks wholly past the prefix read nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
import copy
import hashlib
import json
import math
from typing import TYPE_CHECKING, Any

import numpy as np
import zarr
from zarr.abc.store import Store

from megadump_zarr.read.documents import check_array_doc, open_array_checked
from megadump_zarr.read.errors import DumpIntegrityError
from megadump_zarr.read.integrity import GuardedArray

if TYPE_CHECKING:
    import dask.array as da

__all__ = [
    "MAX_DERIVED_ROWS",
    "MAX_LOGICAL_BYTES",
    "MAX_NAN_BLOCKS",
    "ROWS_PER_STORED_ELEMENT",
    "FlatPrefix",
    "captured_mask",
    "captured_rows",
    "check_logical_shape",
    "check_padded_rows",
    "logical_dims",
    "logical_dtype",
    "open_zarr_array",
    "record_dask",
    "stats_scope",
    "stored_dask",
    "truncated_dask",
]

_ML_FLOATS = frozenset(("bfloat16", "float8_e4m3fn", "float8_e5m2"))


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


class FlatPrefix:
    """The first ``elements`` elements of an array in C order, as a 1-D array-like read block by block
    (a truncated record's stored prefix, or the same elements of a whole record).

    Args:
        source: An array-like with ``shape``, ``dtype`` and ``__getitem__`` on row slices (a zarr array).
        elements: How many elements (at most the source's size).
    """

    def __init__(self, source: Any, elements: int) -> None:
        self.source = source
        self.source_shape = tuple(int(d) for d in source.shape)
        size = math.prod(self.source_shape)
        if not 0 <= int(elements) <= size:
            raise ValueError(f"FlatPrefix.elements must be within 0..{size}, got {elements!r}")
        self.shape = (int(elements),)
        self.dtype = source.dtype
        self.ndim = 1

    def __getitem__(self, index: Any) -> np.ndarray:
        key = index[0] if isinstance(index, tuple) and index else index
        if isinstance(key, tuple) and not key or key is Ellipsis:
            key = slice(None)
        if not isinstance(key, slice):
            raise TypeError(f"FlatPrefix reads slices, got {index!r}")
        start, stop, step = key.indices(self.shape[0])
        if step != 1:
            raise TypeError(f"FlatPrefix reads contiguous slices, got step {step}")
        if stop <= start:
            return np.empty(0, dtype=self.dtype)
        if len(self.source_shape) <= 1:
            return np.asarray(self.source[start:stop]).reshape(-1)
        row = math.prod(self.source_shape[1:])
        first, last = start // row, -(-stop // row)
        block = np.asarray(self.source[first:last]).reshape(-1)
        return block[start - first * row : stop - first * row]


_PARSED: dict[str, Any] = {}
"""Parsed zarr metadata by array document less its ``attributes`` (:func:`_structure`): the records of a window
share a few layouts, and zarr's parse of a document costs more than reading a small record."""
_PARSED_MAX = 1024


def _structure(doc: Any) -> str | None:
    """A document's fields other than ``attributes``, as canonical JSON (None: not a plain document)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("attributes", {}), dict):
        return None
    try:
        return json.dumps({k: v for k, v in doc.items() if k != "attributes"}, sort_keys=True, allow_nan=True)
    except (TypeError, ValueError):
        return None


def open_zarr_array(store: Store, key: str, doc: dict[str, Any]) -> zarr.Array:
    """A zarr array built from its (already fetched) ``zarr.json`` document: no extra ``get``.

    A document whose fields other than ``attributes`` equal those of one zarr parsed before takes that parse,
    with its own attributes (zarr's metadata is immutable); the cheap checks of the document run every time.

    Args:
        store: The dump store.
        key: Array path relative to the root.
        doc: Its ``zarr.json`` document (from consolidated metadata or a listing).

    Raises:
        ValueError: The document is not a valid array document (names the key and the field).
    """
    from zarr.core.array import AsyncArray

    from megadump_zarr.read.location import store_path

    structure = _structure(doc)
    parsed = _PARSED.get(structure) if structure is not None else None
    if parsed is None:
        array = open_array_checked(store, key, doc)
        if structure is not None and len(_PARSED) < _PARSED_MAX:
            _PARSED[structure] = array.metadata
        return array
    check_array_doc(doc, f"{key}/zarr.json")
    metadata = copy.copy(parsed)
    object.__setattr__(metadata, "attributes", doc.get("attributes") or {})  # as zarr's own parse sets it
    return zarr.Array(AsyncArray(metadata=metadata, store_path=store_path(store, key)))


def _token(*parts: Any) -> str:
    return hashlib.sha1(repr(parts).encode()).hexdigest()[:16]


def stored_dask(array: zarr.Array, key: str, root: str = "") -> da.Array:
    """The stored array as dask, one dask block per stored chunk (decoded in dask's threads where the layout
    allows: :mod:`megadump_zarr.read.chunks`).

    Args:
        array: The zarr array.
        key: Its path (for a stable dask name).
        root: The dump root (for a stable dask name).
    """
    import dask.array as da
    from megadump_zarr.read.chunks import chunk_rows

    chunks = array.chunks if array.ndim else ()
    return da.from_array(
        chunk_rows(GuardedArray(array, key, root)),
        chunks=chunks,
        name=f"megadump-stored-{_token(root, key)}",
        lock=False,
        asarray=False,
        inline_array=True,
        meta=np.empty((0,) * array.ndim, dtype=array.dtype),
    )


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


_NAN_BLOCK_ELEMENTS = 1 << 22
"""Elements of one block of a truncated view past its stored prefix (all NaN, no read)."""

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


def truncated_dask(array: zarr.Array, logical_shape: Sequence[int], key: str, root: str = "") -> da.Array:
    """The logical-shape view of a truncated record (see the module docstring).

    Args:
        array: The stored flat prefix (1-D zarr array).
        logical_shape: ``actualShape`` of the record.
        key: Its path (for a stable dask name).
        root: The dump root (for a stable dask name).
    """
    import dask.array as da
    from dask.highlevelgraph import HighLevelGraph

    shape = tuple(logical_shape)
    if array.ndim != 1:  # the writer stores a truncated record as the flat prefix of its elements, always 1-D
        raise DumpIntegrityError(
            f"{key}/zarr.json: attributes.truncated is true, but the record stores a {list(array.shape)} array, not "
            "the 1-D flat prefix a truncated record stores; the document was edited",
            key=f"{key}/zarr.json",
        )
    check_logical_shape(shape, array.dtype.itemsize, key)
    array = GuardedArray(array, key, root)
    dtype = logical_dtype(array.dtype)
    name = f"megadump-truncated-{_token(root, key, shape)}"
    if not shape:  # a 0-d tensor has one element: never truncated, but stay total
        graph = {(name,): (_read_flat, array, 0, 1, (), dtype)}
        return da.Array(HighLevelGraph.from_collections(name, graph, dependencies=()), name, (), dtype=dtype)
    row = math.prod(shape[1:])
    stored_chunk = int(array.chunks[0]) if array.ndim and array.chunks[0] else max(1, int(array.shape[0]))
    rows_per_block = max(1, stored_chunk // row) if row else max(1, shape[0])
    # rows holding captured elements: one block per stored chunk; past the prefix (NaN, nothing to read)
    # few large blocks, so the graph and any pass over the view cost the stored bytes, not the logical size
    captured_rows = min(shape[0], -(-int(array.shape[0]) // row)) if row else shape[0]
    nan_rows = (
        max(rows_per_block, _NAN_BLOCK_ELEMENTS // row, -(-(shape[0] - captured_rows) // MAX_NAN_BLOCKS))
        if row
        else max(1, shape[0])
    )
    block_rows: list[int] = []
    left = shape[0]
    done = 0
    while left > 0:
        block_rows.append(
            min(
                rows_per_block if done < captured_rows else nan_rows,
                left,
                captured_rows - done if done < captured_rows else left,
            )
        )
        left -= block_rows[-1]
        done += block_rows[-1]
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
