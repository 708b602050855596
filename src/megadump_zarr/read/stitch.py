"""Stitch an L1 tensor from its task records along the split axis (axis 0), lazily.

Each L1 record that is a whole-row slice of its declared tensor knows which global rows it holds: the
writer stores them as a coordinate array named like the record's first dimension (``token``,
``slot``, ...) in the record's task group. Truncated records have no such array; their rows follow
from ``sourceOffsetBytes`` and ``actualShape`` by the writer's own rule (offset a whole number of
rows, trailing dimensions equal to the declared ones), and they contribute their logical-shape view
(NaN past the captured prefix). Records without either (per-expert weight slices, non-row-aligned
views) cannot be stitched.

The result is ordered by global row, one entry per distinct row:

- rows no task captured are *absent* (the global-index coordinate shows the gaps; ``attrs``
  ``missingRows`` counts them against the declared length, together with the NaN-padded rows of
  truncated records);
- when a truncated record takes part, a boolean coordinate ``captured`` says which rows hold stored values
  only (True) and which are NaN padding past a stored prefix, in whole or in part (False);
- rows captured by several records (an input every task reads, such as a whole routing table, or
  broadcast workers) are taken from the first record in (first row, task id, worker, path) order, and
  the other copies are checked against it *when the values are read*: bitwise equality, or, when a
  truncated record takes part, equality where both copies hold a captured value (the truncated
  copy's NaN padding is filled from the other one). A mismatch raises ``ValueError`` naming both
  records and the rows. Only the rows read that have other copies pay for the check.

The values are one lazy array, :class:`~megadump_zarr.read.stitched.StitchedArray` (the xarray engine indexes it
directly), wrapped in dask once: one block per run of rows of one record within one of its stored chunks.

An operand every task reads whole (each record holds every row of ``declaredShape``, a weight for example)
is not split: the result is the tensor itself, with its dimension names and no coordinates (the copies are still checked
equal).

Coordinates along the split dimension: the global index (named as the dimension, an index), and
per-row ``task_id``, ``owner_id``, ``core_type``, ``core_id`` and ``worker`` of the record the row comes
from (``-1`` where a task has no owner or no fixed worker, ``""`` for an unknown core type); they all lie
along the one split dimension, so selecting rows by one of them (``da.sel(owner_id=2)``) keeps the others
aligned: owner 2's rows come with their own task, core type and core id. ``owner_id`` carries an index, so ``da.sel(owner_id=3)``
returns exactly owner 3's rows (scalar labels; the index is not unique, so list labels are refused by
pandas). Select by the other per-row coordinates with a mask, ``da.isel(token=da.task_id.values == t)``
(``da.where(..., drop=True)`` works too, except for bfloat16/float8 data, which xarray's ``where``
cannot promote), and call ``da.drop_indexes("owner_id")`` before combining tensors whose owners differ
along the same dimension.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
import hashlib
from typing import TYPE_CHECKING, Any

import numpy as np

from megadump_zarr.read.lazy import as_dask
from megadump_zarr.read.stitched import StitchedArray

if TYPE_CHECKING:
    import xarray as xr

__all__ = ["Piece", "stitch"]


@dataclass
class Piece:
    """One record taking part in a stitch.

    Args:
        path: The record's path relative to the dump root (for messages).
        data: Its data in logical shape: a lazy array (:class:`~megadump_zarr.read.lazy.RecordArray`), or any
            array-like with ``shape``, ``dtype`` and row slices.
        rows: Global index along axis 0 of each of its rows.
        dims: Its dimension names (``None`` when unknown, e.g. truncated records).
        task_id: Task id.
        owner_id: Owner id (``-1`` for none).
        core_id: Core id (``-1`` for unknown).
        worker: Worker id (``-1`` for any worker).
        truncated: Whether the record is a truncated (NaN-padded) view.
        core_type: Core type (``AIC``/``AIV``/``MIX``; empty when unknown).
        captured: Per row of a truncated record, whether every element of the row was stored
            (``None``: every row was).
    """

    path: str
    data: Any
    rows: np.ndarray
    dims: tuple[str, ...] | None = None
    task_id: int = -1
    owner_id: int = -1
    core_id: int = -1
    worker: int = -1
    truncated: bool = False
    core_type: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    captured: np.ndarray | None = None


def _common_dtype(pieces: Sequence[Piece]) -> np.dtype:
    dtypes = {np.dtype(p.data.dtype) for p in pieces}
    if len(dtypes) == 1:
        return dtypes.pop()
    try:
        return np.result_type(*dtypes)
    except TypeError:
        return np.dtype(np.float64)


def _check_pieces(pieces: Sequence[Piece], name: str) -> None:
    if not pieces:
        raise ValueError(f"no records to stitch for tensor {name!r}")
    trailing = {p.data.shape[1:] for p in pieces}
    if any(p.data.ndim == 0 for p in pieces) or len(trailing) > 1:
        shapes = ", ".join(f"{p.path}: {p.data.shape}" for p in pieces[:8])
        raise ValueError(
            f"records of tensor {name!r} cannot be stitched along axis 0: their shapes differ beyond axis 0 ({shapes})"
        )
    for p in pieces:
        if p.rows.shape != (p.data.shape[0],):
            raise ValueError(f"record {p.path}: {p.rows.shape[0]} global indices for {p.data.shape[0]} rows")


def _token(name: str, pieces: Sequence[Piece], dtype: np.dtype) -> str:
    """A stable dask name of a stitch: its tensor, each piece's data (its record, or its dask name) and rows."""
    parts = []
    for p in pieces:
        data = p.data
        ident = getattr(data, "name", None) if not hasattr(data, "key") else (data.root, data.key, data.shape)
        rows = hashlib.sha1(np.ascontiguousarray(p.rows).tobytes()).hexdigest()
        parts.append((p.path, ident if ident is not None else id(data), rows, p.truncated))
    return hashlib.sha1(repr((name, parts, str(dtype))).encode()).hexdigest()[:16]


def _read_whole(pieces: Sequence[Piece], attrs: dict[str, Any]) -> bool:
    """Whether several records each hold every row of their declared tensor (an operand every task reads
    whole, not split): per-row task and core coordinates would name one arbitrary task for rows every task
    holds."""
    declared = attrs.get("declaredShape")
    if len(pieces) < 2 or not isinstance(declared, list) or not declared:
        return False
    every = np.arange(int(declared[0]), dtype=np.int64)
    return all(p.rows.shape == every.shape and np.array_equal(np.sort(p.rows), every) for p in pieces)


def stitch(
    pieces: Sequence[Piece], *, name: str, dims: Sequence[str] | None = None, attrs: dict[str, Any] | None = None
) -> xr.DataArray:
    """Concatenate records along axis 0 in global-row order (see the module docstring).

    Args:
        pieces: The records.
        name: Tensor name (the DataArray's name, and for messages).
        dims: Dimension names of the result (default: the first piece's that has them).
        attrs: Attributes of the result; its ``declaredShape`` (when given) tells an operand every record
            holds whole (no coordinates) from a split one.

    Raises:
        ValueError: No pieces, or shapes that differ beyond axis 0.
    """
    import xarray as xr

    pieces = list(pieces)
    _check_pieces(pieces, name)
    pieces.sort(
        key=lambda p: (int(p.rows.min()) if p.rows.size else np.iinfo(np.int64).max, p.task_id, p.worker, p.path)
    )
    dtype = _common_dtype(pieces)
    ndim = pieces[0].data.ndim
    if dims is None:
        dims = next((p.dims for p in pieces if p.dims is not None), None) or tuple(
            "row" if axis == 0 else f"dim_{axis}" for axis in range(ndim)
        )
    dims = tuple(dims)

    rows = np.concatenate([p.rows.astype(np.int64) for p in pieces])
    stored = np.concatenate([np.ones(p.rows.shape[0], bool) if p.captured is None else p.captured for p in pieces])
    owner = np.concatenate([np.full(p.rows.shape[0], i, dtype=np.int64) for i, p in enumerate(pieces)])
    local = np.concatenate([np.arange(p.rows.shape[0], dtype=np.int64) for p in pieces])
    order = np.lexsort((owner, rows))
    rows, owner, local, stored = rows[order], owner[order], local[order], stored[order]
    unique_rows, first = np.unique(rows, return_index=True)
    is_primary = np.zeros(rows.shape[0], dtype=bool)
    is_primary[first] = True
    piece_of, local_of = owner[first], local[first]
    dup_pos = np.searchsorted(unique_rows, rows[~is_primary])
    dup_piece, dup_local = owner[~is_primary], local[~is_primary]
    dup_order = np.argsort(dup_pos, kind="stable")
    dup_pos, dup_piece, dup_local = dup_pos[dup_order], dup_piece[dup_order], dup_local[dup_order]

    stitched = StitchedArray(
        [p.data for p in pieces],
        [p.path for p in pieces],
        [p.truncated for p in pieces],
        dtype,
        piece_of,
        local_of,
        unique_rows,
        (dup_pos, dup_piece, dup_local),
    )
    result = as_dask(stitched, f"megadump-stitch-{_token(name, pieces, dtype)}", inline=False)

    out_attrs = dict(attrs or {})
    if _read_whole(pieces, out_attrs):  # not split: the tensor itself, its dimensions as the graph names them
        return xr.DataArray(result, dims=dims, name=name, attrs=out_attrs)

    def per_row(attr: str) -> np.ndarray:
        values = np.array([getattr(p, attr) for p in pieces], dtype=np.int64)
        return values[piece_of] if piece_of.size else np.zeros(0, dtype=np.int64)

    coords = {
        dims[0]: (dims[0], unique_rows),
        "task_id": (dims[0], per_row("task_id")),
        "owner_id": (dims[0], per_row("owner_id")),
        "core_type": (
            dims[0],
            np.array([p.core_type for p in pieces], dtype=object)[piece_of].astype(str)
            if piece_of.size
            else np.zeros(0, dtype=str),
        ),
        "core_id": (dims[0], per_row("core_id")),
        "worker": (dims[0], per_row("worker")),
    }
    if any(p.captured is not None for p in pieces):  # a truncated record: which rows hold stored values only
        captured = np.zeros(unique_rows.shape[0], dtype=bool)
        np.logical_or.at(captured, np.searchsorted(unique_rows, rows), stored)
        coords["captured"] = (dims[0], captured)
    out = xr.DataArray(result, dims=dims, coords=coords, name=name, attrs=out_attrs)
    return out.set_xindex("owner_id")
