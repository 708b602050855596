"""A stitched tensor's rows as a lazy array: a selection reads the rows of the records it touches, copies checked.

:func:`~megadump_zarr.read.stitch.stitch` places each global row at one output position and takes it from one
record (its *primary* copy); rows several records hold have *duplicate* copies. :class:`StitchedArray` reads a
basic selection by rows: for each run of output rows that comes from consecutive rows of one record, that
record's lazy array is indexed (:class:`~megadump_zarr.read.lazy.RecordArray`: only the chunks behind those rows
are read), and the duplicate copies of the selected rows are read and checked against it
(:func:`verify_copies`): bitwise equality, or, when a truncated record takes part, equality where both copies
hold a value (the truncated copy's NaN padding is filled from the other one). Rows without duplicates pay for no
check; a mismatch raises ``ValueError`` naming both records and the global rows.

Records that cannot be stitched (per-task weight slices) but have one shape are a :class:`StackedArray`: stacked
along a new first axis, a selection reading only the records it picks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from megadump_zarr.layout.dtypes import ML_FLOATS
from megadump_zarr.read.lazy import basic_index, row_span

__all__ = ["StackedArray", "StitchedArray", "row_runs", "verify_copies"]


def verify_copies(
    primary: np.ndarray,
    duplicates: list[np.ndarray],
    offsets: list[int],
    merge: bool,
    primary_label: str,
    labels: list[str],
    rows: list[tuple[int, int]],
) -> np.ndarray:
    """Check (and, in merge mode, fill) a block's duplicated rows against its primary rows.

    Args:
        primary: The primary copy of a run of rows.
        duplicates: Other records' copies of some of them.
        offsets: Where each duplicate starts in ``primary``.
        merge: A truncated record takes part: compare where both hold a value, fill the primary's NaN.
        primary_label: The primary record's path (for the message).
        labels: Each duplicate's record path.
        rows: Each duplicate's first and last global row.

    Raises:
        ValueError: A duplicate differs, naming both records and its global rows.
    """
    out = np.array(primary, copy=True)
    for dup, offset, label, (first, last) in zip(duplicates, offsets, labels, rows):
        dup = np.asarray(dup)
        target = out[offset : offset + dup.shape[0]]
        if merge and (target.dtype.kind == "f" or target.dtype.name in ML_FLOATS):
            a = target.astype(np.float64)
            b = dup.astype(np.float64)
            both = ~np.isnan(a) & ~np.isnan(b)
            if not np.array_equal(a[both], b[both]):
                raise ValueError(
                    f"records {primary_label} and {label} hold different values for global rows "
                    f"{first}..{last}; read them one by one with Dump.record_array(path)"
                )
            fill = np.isnan(a) & ~np.isnan(b)
            target[fill] = dup.astype(target.dtype)[fill]
        elif (
            np.ascontiguousarray(target).tobytes()
            != np.ascontiguousarray(dup.astype(target.dtype, copy=False)).tobytes()
        ):
            raise ValueError(
                f"records {primary_label} and {label} hold different values for global rows "
                f"{first}..{last}; read them one by one with Dump.record_array(path)"
            )
    return out


def row_runs(piece_of: np.ndarray, local_of: np.ndarray) -> list[tuple[int, int, int, int]]:
    """Maximal runs of output positions that come from consecutive rows of one piece:
    ``(first output, last output + 1, piece, first local row)``.

    Args:
        piece_of: Per output position, the piece it is read from.
        local_of: Per output position, its row in that piece.
    """
    n = piece_of.shape[0]
    if n == 0:
        return []
    breaks = np.flatnonzero((piece_of[1:] != piece_of[:-1]) | (local_of[1:] != local_of[:-1] + 1)) + 1
    starts = np.concatenate(([0], breaks))
    stops = np.concatenate((breaks, [n]))
    return [(int(a), int(b), int(piece_of[a]), int(local_of[a])) for a, b in zip(starts, stops)]


def _row_blocks(data: Any) -> tuple[int, ...]:
    """The row blocks of a piece's data (its dask blocks along axis 0)."""
    if hasattr(data, "dask_chunks"):
        chunks = data.dask_chunks()
        return tuple(chunks[0]) if chunks else ()
    chunks = getattr(data, "chunks", None)
    if chunks and isinstance(chunks[0], tuple):
        return tuple(int(c) for c in chunks[0])
    n = int(data.shape[0])
    step = max(1, int(chunks[0])) if chunks else max(1, n)
    return (step,) * (n // step) + ((n % step,) if n % step else ())


class StitchedArray:
    """The rows of several records in global-row order, read lazily (see the module docstring).

    Args:
        datas: Each piece's data (lazy arrays, shapes equal beyond axis 0).
        paths: Each piece's record path (for messages).
        truncated: Whether each piece is a truncated (NaN-padded) view.
        dtype: The common dtype of the result.
        piece_of: Per output position, the piece holding its primary copy.
        local_of: Per output position, its row in that piece.
        unique_rows: Per output position, its global row.
        duplicates: ``(output position, piece, row in the piece)`` of every other copy, sorted by position.
    """

    def __init__(
        self,
        datas: Sequence[Any],
        paths: Sequence[str],
        truncated: Sequence[bool],
        dtype: np.dtype,
        piece_of: np.ndarray,
        local_of: np.ndarray,
        unique_rows: np.ndarray,
        duplicates: tuple[np.ndarray, np.ndarray, np.ndarray],
    ) -> None:
        self.datas, self.paths, self.truncated = list(datas), list(paths), list(truncated)
        self.dtype = np.dtype(dtype)
        trailing = tuple(int(d) for d in datas[0].shape[1:])
        self.shape = (int(piece_of.shape[0]), *trailing)
        self.ndim = len(self.shape)
        self.unique_rows = unique_rows
        self.dup_pos, self.dup_piece, self.dup_local = duplicates
        self.runs = row_runs(piece_of, local_of)
        self._run_stops = np.array([b for _, b, _, _ in self.runs], dtype=np.int64)
        blocks = self._blocks()
        self.chunks = (max(blocks, default=1) or 1, *trailing)
        self._row_chunks = tuple(blocks) or (0,)

    def __repr__(self) -> str:
        return f"<StitchedArray {self.shape} {self.dtype}: {len(self.datas)} records>"

    def _blocks(self) -> list[int]:
        """Output rows cut at every run's edges and at its piece's own row blocks (one stored chunk each)."""
        blocks: list[int] = []
        for start, stop, p, l0 in self.runs:
            bounds = np.cumsum((0, *_row_blocks(self.datas[p])))
            end = l0 + stop - start
            cuts = sorted({l0, end, *(int(b) for b in bounds if l0 < b < end)})
            blocks.extend(b - a for a, b in zip(cuts[:-1], cuts[1:]))
        return blocks

    def dask_chunks(self) -> tuple[tuple[int, ...], ...]:
        """The blocks dask cuts this array into: along axis 0, one per run of rows of one record within one of its
        stored chunks; every other axis whole."""
        return (self._row_chunks, *((d,) for d in self.shape[1:]))

    def __getitem__(self, selection: Any) -> np.ndarray:
        index = basic_index(selection, self.shape)
        if index is None:
            raise TypeError(f"a stitched tensor takes integers and slices, got {selection!r}")
        start, stop, within = row_span(index[0], self.shape[0])
        return self._rows(start, stop)[(within, *index[1:])]

    def _rows(self, start: int, stop: int) -> np.ndarray:
        """Output rows ``start:stop``, each from its primary copy, duplicates checked."""
        out = np.empty((max(0, stop - start), *self.shape[1:]), dtype=self.dtype)
        at = int(np.searchsorted(self._run_stops, start, side="right"))
        while at < len(self.runs) and self.runs[at][0] < stop:
            first, last, p, l0 = self.runs[at]
            lo, hi = max(first, start), min(last, stop)
            part = np.asarray(self.datas[p][l0 + lo - first : l0 + hi - first])
            d_lo, d_hi = (int(i) for i in np.searchsorted(self.dup_pos, [lo, hi]))
            if d_lo < d_hi:
                part = self._checked(part, p, lo, d_lo, d_hi)
            out[lo - start : hi - start] = part.astype(self.dtype, copy=False)
            at += 1
        return out

    def _checked(self, part: np.ndarray, p: int, lo: int, d_lo: int, d_hi: int) -> np.ndarray:
        """``part`` (output rows from ``lo``, piece ``p``'s copy) with its duplicates ``d_lo:d_hi`` checked."""
        sub = np.lexsort((self.dup_local[d_lo:d_hi], self.dup_piece[d_lo:d_hi]))
        positions = self.dup_pos[d_lo:d_hi][sub]
        sources = self.dup_piece[d_lo:d_hi][sub]
        locals_ = self.dup_local[d_lo:d_hi][sub]
        breaks = (
            np.flatnonzero(
                (sources[1:] != sources[:-1])
                | (locals_[1:] != locals_[:-1] + 1)
                | (positions[1:] != positions[:-1] + 1)
            )
            + 1
        )
        merge = self.truncated[p]
        copies, offsets, labels, rows = [], [], [], []
        for r0, r1 in zip(np.concatenate(([0], breaks)), np.concatenate((breaks, [positions.shape[0]]))):
            s, sl0, span = int(sources[r0]), int(locals_[r0]), int(r1 - r0)
            merge = merge or self.truncated[s]
            copies.append(np.asarray(self.datas[s][sl0 : sl0 + span]))
            offsets.append(int(positions[r0]) - lo)
            labels.append(self.paths[s])
            rows.append((int(self.unique_rows[positions[r0]]), int(self.unique_rows[positions[r1 - 1]])))
        return verify_copies(part, copies, offsets, merge, self.paths[p], labels, rows)


class StackedArray:
    """Lazy arrays of one shape stacked along a new first axis (one record per task, when they cannot be
    stitched): a selection reads only the members it picks.

    Args:
        members: The lazy arrays (at least one, shapes equal).
    """

    def __init__(self, members: Sequence[Any]) -> None:
        if not members:
            raise ValueError("StackedArray.members must hold at least one array, got none")
        shapes = {tuple(m.shape) for m in members}
        if len(shapes) != 1:
            raise ValueError(f"StackedArray.members must have one shape, got {sorted(shapes)}")
        self.members = list(members)
        self.shape = (len(self.members), *tuple(members[0].shape))
        self.ndim = len(self.shape)
        self.dtype = np.result_type(*(np.dtype(m.dtype) for m in members))
        self.chunks = (1, *(tuple(members[0].chunks) if self.ndim > 1 else ()))

    def dask_chunks(self) -> tuple[tuple[int, ...], ...]:
        """One block per member along the new axis, each member's own blocks along the others."""
        first = self.members[0]
        rest = first.dask_chunks() if hasattr(first, "dask_chunks") else tuple((d,) for d in first.shape)
        return ((1,) * len(self.members), *rest)

    def __getitem__(self, selection: Any) -> np.ndarray:
        index = basic_index(selection, self.shape)
        if index is None:
            raise TypeError(f"a stack of records takes integers and slices, got {selection!r}")
        picked = range(len(self.members))[index[0]]
        if isinstance(picked, int):
            return np.asarray(self.members[picked][index[1:]]).astype(self.dtype, copy=False)
        blocks = [np.asarray(self.members[i][index[1:]]).astype(self.dtype, copy=False) for i in picked]
        if not blocks:
            empty = np.empty(self.shape[1:], dtype=self.dtype)[index[1:]]
            return np.empty((0, *empty.shape), dtype=self.dtype)
        return np.stack(blocks)
