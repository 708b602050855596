"""A record's values as one lazy array: :class:`RecordArray` reads exactly the chunks a selection needs.

Every reader hands the same type on: ``Dump.record_array`` and ``Dump.tensor`` wrap it in dask once
(:func:`as_dask`), the xarray engine indexes it directly (no dask graph), a comparison reads its row blocks
(:func:`read_many`: both sides' chunks fetched together). Where the bytes are is its source:

* a zarr array (a record of the tasks layout, an L0 record, a row coordinate): its chunk grid;
* a packed record, row ``r`` of its pack's sharded array
  (:class:`~megadump_zarr.read.pack_arrays.RowArray`: its one chunk is its row's inner chunk, index checked);
* a packed task's row coordinate, an ``arange`` (:class:`~megadump_zarr.read.pack_arrays.RangeArray`).

A basic selection (integers and slices) is read by rows: the rows it spans, whole, then cut. Where the layout
allows (:mod:`megadump_zarr.read.chunks`), those rows' chunks are fetched in one call to the dump's store, each
checked once there (the integrity store: missing chunks, inventory digests, crc32c), and decoded in the calling
thread. Anything else, and any range the fast path cannot read, is read by the source itself (zarr's codecs,
:func:`~megadump_zarr.read.integrity.guard_read`: a chunk that does not decode is named), so every error and
every fill value is zarr's own.

A truncated record (a flat stored prefix of a larger tensor, :mod:`megadump_zarr.read.truncated`) is the same
type with a logical shape: a selection reads only the stored elements of the rows it touches, the rest is NaN
(integers promoted to float64). :class:`FlatPrefix` is the first elements of a record in C order, flat (what a
partial comparison compares).
"""

from __future__ import annotations

from collections.abc import Sequence
import hashlib
import math
import threading
from typing import TYPE_CHECKING, Any
import weakref

import numpy as np

from megadump_zarr.read.chunks import ChunkReader, fetch, row_reader, zarr_reader
from megadump_zarr.read.errors import DumpIntegrityError
from megadump_zarr.read.integrity import guard_read
from megadump_zarr.read.pack_arrays import RangeArray, RowArray
from megadump_zarr.read.truncated import MAX_NAN_BLOCKS, check_logical_shape, logical_dtype

if TYPE_CHECKING:
    import dask.array as da

__all__ = [
    "FlatPrefix",
    "RecordArray",
    "as_dask",
    "basic_index",
    "lazy_of",
    "read_many",
    "record_dask",
    "record_lazy",
    "row_span",
    "stored_dask",
    "truncated_dask",
]

_NAN_BLOCK_ELEMENTS = 1 << 22
"""Elements of one dask block of a truncated view past its stored prefix (all NaN, no read)."""


def basic_index(selection: Any, shape: tuple[int, ...]) -> tuple[int | slice, ...] | None:
    """``selection`` as one integer or slice per axis of ``shape`` (``...`` expanded, missing axes whole), or
    None when it is not a basic selection (arrays, ``None``, booleans).

    Args:
        selection: An index, as ``x[selection]`` gets it.
        shape: The array's shape.

    Raises:
        IndexError: More indices than axes, or an integer out of range.
    """
    if not isinstance(selection, tuple):
        selection = (selection,)
    if sum(s is Ellipsis for s in selection) > 1:
        return None
    if any(s is Ellipsis for s in selection):
        at = next(i for i, s in enumerate(selection) if s is Ellipsis)
        fill = len(shape) - (len(selection) - 1)
        selection = selection[:at] + (slice(None),) * max(0, fill) + selection[at + 1 :]
    out: list[int | slice] = []
    for s in selection:
        if isinstance(s, slice):
            out.append(s)
        elif isinstance(s, (int, np.integer)) and not isinstance(s, (bool, np.bool_)):
            out.append(int(s))
        else:
            return None
    if len(out) > len(shape):
        raise IndexError(f"too many indices: {len(out)} for an array of {len(shape)} dimensions")
    for axis, (s, n) in enumerate(zip(out, shape)):
        if isinstance(s, int):
            if not -n <= s < n:
                raise IndexError(f"index {s} is out of bounds for axis {axis} with size {n}")
            out[axis] = s % n
    return tuple(out) + (slice(None),) * (len(shape) - len(out))


def row_span(index: int | slice, rows: int) -> tuple[int, int, Any]:
    """``(start, stop, within)``: the rows ``start:stop`` an axis-0 index touches, and the index into them that
    selects it (an integer, a slice, or positions for a strided slice).

    Args:
        index: An integer (in range) or a slice along axis 0.
        rows: Rows of axis 0.
    """
    if isinstance(index, int):
        return index, index + 1, 0
    start, stop, step = index.indices(rows)
    if step == 1:
        return (start, stop, slice(0, stop - start)) if stop > start else (0, 0, slice(0, 0))
    picked = np.arange(start, stop, step)
    if not picked.size:
        return 0, 0, slice(0, 0)
    low = int(picked.min())
    return low, int(picked.max()) + 1, picked - low


class RecordArray:
    """A record's values, read lazily by rows (see the module docstring).

    ``shape``, ``dtype``, ``ndim`` and ``chunks`` are the record's (its logical ones for a truncated view);
    ``x[selection]`` returns a numpy array. Pickles (dask workers): no lock travels.

    Args:
        source: Where the bytes are: a zarr array, a packed record (``RowArray``) or a row range
            (``RangeArray``).
        key: The record's key relative to the dump root (for messages).
        root: The dump root (for messages).
        logical_shape: A truncated record's ``actualShape`` (its source is the 1-D stored prefix); None: the
            stored array as it is.

    Raises:
        DumpIntegrityError: A truncated record whose stored array is not 1-D.
        ValueError: A logical shape no tensor can have.
    """

    def __init__(self, source: Any, key: str, root: str = "", logical_shape: Sequence[int] | None = None) -> None:
        self.source, self.key, self.root = source, key, root
        self.stored_shape = tuple(int(d) for d in source.shape)
        self.stored_dtype = np.dtype(source.dtype)
        self.truncated = logical_shape is not None
        if logical_shape is None:
            self.shape, self.dtype = self.stored_shape, self.stored_dtype
            self.chunks = tuple(int(c) for c in source.chunks) if self.stored_shape else ()
        else:
            shape = tuple(logical_shape)
            if len(self.stored_shape) != 1:  # the writer stores a truncated record as a flat prefix, always 1-D
                raise DumpIntegrityError(
                    f"{key}/zarr.json: attributes.truncated is true, but the record stores a "
                    f"{list(self.stored_shape)} array, not the 1-D flat prefix a truncated record stores; "
                    "the document was edited",
                    key=f"{key}/zarr.json",
                )
            check_logical_shape(shape, self.stored_dtype.itemsize, key)
            self.shape, self.dtype = shape, logical_dtype(self.stored_dtype)
            stored_chunk = int(source.chunks[0]) if source.chunks and source.chunks[0] else max(1, self.stored_shape[0])
            row = math.prod(shape[1:])
            rows_per_block = max(1, stored_chunk // row) if row else max(1, shape[0] if shape else 1)
            self.chunks = (rows_per_block, *shape[1:]) if shape else ()
        self.ndim = len(self.shape)
        self.reader: ChunkReader | None = None
        if isinstance(source, RowArray):
            self.reader = row_reader(source)
        elif not isinstance(source, RangeArray):
            self.reader = zarr_reader(source)
        self.fast_reads = 0  # row ranges the fast path read (the rest went through the source)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<RecordArray {self.key} {self.shape} {self.dtype}>"

    def __getstate__(self) -> dict[str, Any]:  # dask may pickle it to a worker: the lock stays behind
        state = dict(self.__dict__)
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def batchable(self) -> bool:
        """Whether :func:`read_many` fetches this array's row blocks together with others'."""
        return self.reader is not None and self.reader.direct is None and not self.truncated

    def __getitem__(self, selection: Any) -> Any:
        if self.truncated:
            index = basic_index(selection, self.shape)
            if index is None:
                raise TypeError(f"{self.key}: a truncated record's view takes integers and slices, got {selection!r}")
            return self._logical(index)
        index = basic_index(selection, self.shape)
        if index is None:
            return self.read_by_source(selection)
        return self._stored(index)

    def read_by_source(self, selection: Any) -> Any:
        """``selection`` of the stored array read by its source itself (zarr's codecs), a chunk that does not
        decode named (:func:`~megadump_zarr.read.integrity.guard_read`).

        Args:
            selection: Any selection the source takes.
        """
        source = self.source
        return guard_read(source, self.key, lambda: source[selection], self.root)

    def fast_plan(self, index: tuple[int | slice, ...]) -> tuple[int, int, Any] | None:
        """``(start, stop, within)`` when the fast path reads stored selection ``index`` (a :func:`basic_index`):
        rows ``start:stop`` read whole, then ``block[(within, *index[1:])]``; None: the source reads it.

        Args:
            index: A basic index of the stored array.
        """
        if self.reader is None or not self.stored_shape:
            return None
        start, stop, within = row_span(index[0], self.stored_shape[0])
        if stop <= start:
            return None
        if not isinstance(within, (int, slice)):  # a stride: only when it touches every chunk its rows span
            step = self.reader.chunks[0]
            if len(np.unique((within + start) // step)) != (stop - 1) // step - start // step + 1:
                return None
        return start, stop, within

    def _stored(self, index: tuple[int | slice, ...]) -> Any:
        plan = self.fast_plan(index)
        if plan is not None:
            start, stop, within = plan
            try:
                block = self.reader.read(start, stop)  # type: ignore[union-attr]
            except Exception:  # noqa: BLE001 - the source reads it again and raises (or fills) exactly as it would
                pass
            else:
                self.count_fast()
                return block[(within, *index[1:])]
        return self.read_by_source(index)

    def count_fast(self) -> None:
        """Count one row range read by the fast path."""
        with self._lock:
            self.fast_reads += 1

    def _logical(self, index: tuple[int | slice, ...]) -> np.ndarray:
        """A basic selection of a truncated record's logical view: stored elements read, NaN past them."""
        if not self.shape:
            return self._flat(0, 1).reshape(())
        start, stop, within = row_span(index[0], self.shape[0])
        row = math.prod(self.shape[1:])
        block = self._flat(start * row, stop * row).reshape((stop - start, *self.shape[1:]))
        return block[(within, *index[1:])]

    def _flat(self, start: int, stop: int) -> np.ndarray:
        """Elements ``[start, stop)`` of the logical flat tensor, NaN past the stored prefix."""
        out = np.full(max(0, stop - start), np.nan, dtype=self.dtype)
        stored = self.stored_shape[0]
        if start < stored and stop > start:
            end = min(stop, stored)
            out[: end - start] = np.asarray(self._stored((slice(start, end),))).astype(self.dtype, copy=False)
        return out

    def dask_chunks(self) -> tuple[tuple[int, ...], ...]:
        """The blocks dask cuts this array into: one per stored chunk; a truncated view's rows past its stored
        prefix (NaN, nothing to read) in at most :data:`~megadump_zarr.read.truncated.MAX_NAN_BLOCKS` large
        blocks, so a graph and any pass over the view cost the stored bytes, not the logical size."""
        if not self.shape:
            return ()
        if not self.truncated:
            return tuple(_regular(n, c) for n, c in zip(self.shape, self.chunks))
        shape, row = self.shape, math.prod(self.shape[1:])
        rows_per_block = self.chunks[0]
        captured = min(shape[0], -(-self.stored_shape[0] // row)) if row else shape[0]
        nan_rows = (
            max(rows_per_block, _NAN_BLOCK_ELEMENTS // row, -(-(shape[0] - captured) // MAX_NAN_BLOCKS))
            if row
            else max(1, shape[0])
        )
        blocks: list[int] = []
        done = 0
        while done < shape[0]:
            size = min(rows_per_block, captured - done) if done < captured else nan_rows
            blocks.append(min(size, shape[0] - done))
            done += blocks[-1]
        return (tuple(blocks) or (0,), *((d,) for d in shape[1:]))


def _regular(n: int, c: int) -> tuple[int, ...]:
    if n == 0:
        return (0,)
    c = max(1, c)
    return (c,) * (n // c) + ((n % c,) if n % c else ())


class FlatPrefix:
    """The first ``elements`` elements of an array in C order, as a 1-D array-like read block by block
    (a truncated record's stored prefix, or the same elements of a whole record).

    Args:
        source: An array-like with ``shape``, ``dtype`` and ``__getitem__`` on row slices (a :class:`RecordArray`).
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


def read_many(items: list[tuple[Any, tuple[Any, ...]]]) -> list[Any]:
    """``x[index]`` of every ``(x, index)``, the chunk fetches of all the batchable :class:`RecordArray` reads
    among them issued together (one round trip to zarr's event loop, the stores' reads running concurrently),
    each range decoded in the calling thread. A compare lane reads the same block of both sides this way.
    Other items, and a range the fast path cannot read, are read by ``x[index]`` (zarr's own errors).

    Args:
        items: Array-likes and their index tuples.
    """
    from zarr.core.sync import sync

    plans: list[tuple[int, int, Any, tuple[Any, ...], int, int, int] | None] = []
    requests: list[tuple[Any, str, Any]] = []
    for x, index in items:
        plan = None
        if isinstance(x, RecordArray) and x.batchable:
            basic = basic_index(index, x.shape)
            rows = x.fast_plan(basic) if basic is not None else None
            if rows is not None:
                try:
                    first, more = x.reader.requests(rows[0], rows[1])  # type: ignore[union-attr]
                except Exception:  # noqa: BLE001 - a packed record whose index check fails: its own read says so
                    pass
                else:
                    plan = (*rows, basic[1:], first, len(requests), len(more))
                    requests.extend(more)
        plans.append(plan)
    raws = sync(fetch(requests)) if requests else []
    out: list[Any] = []
    for (x, index), plan in zip(items, plans):
        if plan is None:
            out.append(x[index] if index else x[...])
            continue
        start, stop, within, rest, first, at, count = plan
        try:
            block = x.reader.assemble(
                start, stop, first, raws[at : at + count], x.reader.store_checks(requests[at : at + count])
            )
        except Exception:  # noqa: BLE001 - the source reads it again and raises (or fills) exactly as it would
            out.append(x.read_by_source(index))
            continue
        x.count_fast()
        out.append(block[(within, *rest)])
    return out


_LAZY: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
"""dask name -> the lazy array it reads whole (:func:`as_dask`; the graph holds the array, so the entry lives as
long as a dask array of that name does)."""


def as_dask(lazy: Any, name: str, inline: bool = True) -> da.Array:
    """``lazy`` (a :class:`RecordArray` or another lazy array with ``dask_chunks``) as a dask array: one block per
    stored chunk, each read by ``lazy[block]``.

    Args:
        lazy: The lazy array.
        name: The dask name (stable: the same record gives the same name).
        inline: Each task holds the array (a record: small); False: the graph holds it once, under its own key
            (a stitched tensor holds every record it reads: a worker gets it once, not with every task).
    """
    import dask.array as da

    array = da.from_array(
        lazy,
        chunks=lazy.dask_chunks(),
        name=name,
        lock=False,
        asarray=False,
        inline_array=inline,
        meta=np.empty((0,) * lazy.ndim, dtype=lazy.dtype),
    )
    _LAZY[name] = lazy
    return array


def lazy_of(data: Any) -> Any:
    """The lazy array a dask array made by :func:`as_dask` reads whole, else None (a dask array derived from it
    by any operation has another name).

    Args:
        data: A dask array (or anything).
    """
    name = getattr(data, "name", None)
    return _LAZY.get(name) if isinstance(name, str) else None


def _token(*parts: Any) -> str:
    return hashlib.sha1(repr(parts).encode()).hexdigest()[:16]


def record_lazy(source: Any, attrs: dict[str, Any], key: str, root: str = "") -> RecordArray:
    """A record's values in its logical shape: the stored array, or a truncated record's view.

    Args:
        source: Where its bytes are (``Dump``'s stored array of the record).
        attrs: The record's attributes (``truncated``, ``actualShape``).
        key: Its path.
        root: The dump root.
    """
    actual = attrs.get("actualShape")
    logical = actual if attrs.get("truncated") and isinstance(actual, list) else None
    return RecordArray(source, key, root, logical)


def stored_dask(array: Any, key: str, root: str = "") -> da.Array:
    """The stored array as dask, one block per stored chunk (a :class:`RecordArray`).

    Args:
        array: Where its bytes are (a zarr array, ``RowArray`` or ``RangeArray``).
        key: Its path (for a stable dask name).
        root: The dump root (for a stable dask name).
    """
    return as_dask(RecordArray(array, key, root), f"megadump-stored-{_token(root, key)}")


def truncated_dask(array: Any, logical_shape: Sequence[int], key: str, root: str = "") -> da.Array:
    """The logical-shape view of a truncated record as dask (see :mod:`megadump_zarr.read.truncated`).

    Args:
        array: The stored flat prefix (1-D).
        logical_shape: ``actualShape`` of the record.
        key: Its path (for a stable dask name).
        root: The dump root (for a stable dask name).
    """
    shape = tuple(logical_shape)
    return as_dask(RecordArray(array, key, root, shape), f"megadump-truncated-{_token(root, key, shape)}")


def record_dask(array: Any, attrs: dict[str, Any], key: str, root: str = "") -> da.Array:
    """A record's data in its logical shape as dask: the stored array, or the truncated view.

    Args:
        array: Where its bytes are.
        attrs: The record's attributes (``truncated``, ``actualShape``).
        key: Its path.
        root: The dump root.
    """
    actual = attrs.get("actualShape")
    if attrs.get("truncated") and isinstance(actual, list):
        return truncated_dask(array, actual, key, root)
    return stored_dask(array, key, root)
