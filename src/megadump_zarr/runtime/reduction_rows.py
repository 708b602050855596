"""The one pass over a dtype's staging rows behind the statistics slots, then per-record combination.

:func:`row_partials` reads ``[R, BLOCK]`` staging rows once, a chunk of rows at a time, and gives per-row
partial statistics (min, max, NaN and Inf counts, the block sums of the values and of their squares,
the row's digest sum, :mod:`megadump_zarr.runtime.digest`); :func:`combine_rows` folds the rows of each
record into its statistics. The definitions are :mod:`megadump_zarr.runtime.reductions`'; everything here computes
exactly those bits, on any torch device.

On CPU the pass runs on the calling thread (:func:`one_thread`) a chunk of rows at a time, each op's
operands in cache, into buffers allocated once per pass. The common row (no NaN, no Inf, no padding)
takes the cheap path: ``amin``/``amax`` (which propagate NaN and return the infinities, so they also
tell which rows were not clean), the block rule in place, and the digest's words in the same chunk;
the few rows that hold a non-finite value or a record's padded end are then gathered and
redone with masks. Elsewhere (CUDA, NPU) every chunk takes the masked path, so nothing waits for the
host; the two paths give the same bits (tests/dump/test_statistics_segmented.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
import contextlib
import threading
import time
from typing import NamedTuple

import torch

from megadump_zarr.runtime.digest import RowDigests, record_sums

__all__ = ["BLOCK", "TAIL", "RowPartials", "block_sum", "combine_rows", "one_thread", "row_partials", "segment_tree"]

BLOCK = 256
"""Elements per block of the defined summation order (a power of two)."""
TAIL = 16
"""The block rule's last steps (the partial sums of 16 elements onwards) run once over every row's tail:
on 16-wide rows they are a few tiny ops per chunk otherwise."""
_CPU_CHUNK = 1 << 17
"""Elements per op on CPU before a size is chosen (:class:`_ChunkChoice`; measured on the 2-core EPYC: 17.6 ms
per 4096-record float32 pass against 23.8 at 1 << 16 and 19.0 at 1 << 18)."""
_CPU_CHUNKS = (1 << 15, 1 << 16, 1 << 17)
"""The CPU op sizes a process tries. Which is fastest depends on the machine's caches: 1 << 17 on the 2-core EPYC
of stop 30; 1 << 15 on the 2-core Xeon of 2026-12 (2 MiB L2 a core: 29.4 ms per pass against 30.4 at 1 << 16
and 34.5 at 1 << 17). The bits do not depend on it: every row is reduced on its own."""
_TIMED_ELEMENTS = 1 << 20
"""Passes smaller than this are not timed for the choice (their per-op overheads would decide it)."""
_TRIES = 2
"""Timed passes per candidate size before the fastest is kept."""
_DEVICE_CHUNK = 1 << 22
"""Elements per op elsewhere (a few large kernels rather than many small launches)."""
_INT64_MAX = (1 << 63) - 1
_INT64_MIN = -(1 << 63)
_NATIVE_MINMAX = frozenset(
    (torch.bool, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)
    + (torch.float16, torch.bfloat16, torch.float32, torch.float64)
)
"""Dtypes whose ``amin``/``amax`` torch implements on CPU (others are widened first, which is exact)."""


class RowPartials(NamedTuple):
    """Per-row partial statistics of ``R`` staging rows (all ``[R]`` tensors on the rows' device).

    Args:
        lo: Minimum of the row's finite valid elements (+inf / int64 max when none).
        hi: Maximum (-inf / int64 min when none).
        nan: NaN count (int64; zeros for integers).
        inf: Inf count (int64).
        total: Block sum of the values (non-finite ones as +0.0), the accumulation dtype.
        sumsq: Block sum of their squares.
        digest: The row's digest sum (int64, mod 2**64; :class:`~megadump_zarr.runtime.digest.RowDigests`).
    """

    lo: torch.Tensor
    hi: torch.Tensor
    nan: torch.Tensor
    inf: torch.Tensor
    total: torch.Tensor
    sumsq: torch.Tensor
    digest: torch.Tensor


def block_sum(v: torch.Tensor) -> torch.Tensor:
    """``[r, width]`` → ``[r]``: the pairwise sum of each row (element j + element j + h, h halving).

    Args:
        v: Rows of a power-of-two width.
    """
    width = v.shape[1]
    while width > 1:
        width //= 2
        v = v[:, :width] + v[:, width : 2 * width]
    return v[:, 0]


def _levels(tree: torch.Tensor, first: int, last: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """In-place steps of the block rule on ``tree`` ([..., 2 * first]): ``(dst, src)`` views, ``dst += src``,
    for ``h = first, first / 2, ..., last``."""
    steps, half = [], first
    while half >= last:
        steps.append((tree[..., :half], tree[..., half : 2 * half]))
        half //= 2
    return steps


def _tree_tails(values: torch.Tensor) -> torch.Tensor:
    """The block rule's first steps on ``values`` ([k, BLOCK], the accumulation dtype) and on its squares:
    ``[2, k, TAIL]`` partial sums (:meth:`_Pass.result` takes the last steps for every row at once)."""
    tree = torch.empty((2,) + tuple(values.shape), dtype=values.dtype, device=values.device)
    tree[0].copy_(values)
    torch.mul(values, values, out=tree[1])
    for dst, src in _levels(tree, BLOCK // 2, TAIL):
        dst.add_(src)
    return tree[:, :, :TAIL]


def _masked(rows: torch.Tensor, valid: torch.Tensor | None, accumulate: torch.dtype) -> tuple[torch.Tensor, ...]:
    """``(lo, hi, nan, inf, tails)`` of ``rows`` ([k, BLOCK]) by masks: any values, any padding.

    Args:
        rows: The rows, of the records' dtype.
        valid: Valid elements per row (the rest is padding), or None when every row is full.
        accumulate: The sums' dtype.
    """
    device = rows.device
    mask = None if valid is None else torch.arange(BLOCK, device=device)[None, :] < valid[:, None]
    if not rows.dtype.is_floating_point:
        ints = rows.to(torch.int64)  # uint64 wraps to int64, as defined
        lo = (ints if mask is None else torch.where(mask, ints, _INT64_MAX)).amin(1)
        hi = (ints if mask is None else torch.where(mask, ints, _INT64_MIN)).amax(1)
        zeros = torch.zeros(rows.shape[0], dtype=torch.int64, device=device)
        return (lo, hi, zeros, zeros, _tree_tails(ints.to(accumulate)))
    x = rows if rows.dtype in (torch.float32, torch.float64) else rows.to(torch.float32)
    finite = torch.isfinite(x)
    nan = torch.isnan(x).sum(1)
    kept = torch.where(finite, x, 0).to(accumulate)
    if mask is not None:
        finite &= mask
    present = BLOCK if valid is None else valid
    inf = present - finite.sum(1) - nan
    lo = torch.where(finite, x, torch.inf).amin(1).to(accumulate)
    hi = torch.where(finite, x, -torch.inf).amax(1).to(accumulate)
    return (lo, hi, nan, inf, _tree_tails(kept))


class _ChunkChoice:
    """The CPU op size of this process's passes: the first large passes try each of :data:`_CPU_CHUNKS`
    (:data:`_TRIES` each, timed per element), then the fastest is kept. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._timed: dict[int, list[float]] = {size: [] for size in _CPU_CHUNKS}
        self.chosen: int | None = None

    def size(self, elements: int) -> int:
        """The op size for a pass over ``elements`` values."""
        if self.chosen is not None:
            return self.chosen
        if elements < _TIMED_ELEMENTS:
            return _CPU_CHUNK
        with self._lock:
            return min(_CPU_CHUNKS, key=lambda size: len(self._timed[size]))

    def record(self, size: int, elements: int, seconds: float) -> None:
        """A pass over ``elements`` values took ``seconds`` at op size ``size``."""
        if self.chosen is not None or elements < _TIMED_ELEMENTS or size not in self._timed:
            return
        with self._lock:
            self._timed[size].append(seconds / elements)
            if all(len(times) >= _TRIES for times in self._timed.values()):
                self.chosen = min(_CPU_CHUNKS, key=lambda size: min(self._timed[size]))


_CHOICE = _ChunkChoice()


class _Pass:
    """The output columns and reusable buffers of one pass over ``R`` rows of one dtype.

    Args:
        rows: ``[R, BLOCK]`` staging rows.
        accumulate: The sums' dtype.
        op_size: Elements per op (CPU: :class:`_ChunkChoice`'s; elsewhere :data:`_DEVICE_CHUNK`).
    """

    def __init__(self, rows: torch.Tensor, accumulate: torch.dtype, op_size: int) -> None:
        device, count, dtype = rows.device, rows.shape[0], rows.dtype
        self.rows = rows
        self.accumulate = accumulate
        self.words_per_row = BLOCK * rows.element_size() // 8
        self.cpu = device.type == "cpu"
        self.chunk = max(1, op_size // BLOCK)
        self.native = dtype in _NATIVE_MINMAX
        # min/max are taken in the rows' dtype where torch can, else widened (float8 → float32, uint → int64)
        self.extreme = dtype if self.native else (torch.float32 if dtype.is_floating_point else torch.int64)
        self.lo = torch.empty(count, dtype=self.extreme, device=device)
        self.hi = torch.empty(count, dtype=self.extreme, device=device)
        self.nan = torch.zeros(count, dtype=torch.int64, device=device)
        self.inf = torch.zeros(count, dtype=torch.int64, device=device)
        self.tails = torch.empty(2, count, TAIL, dtype=accumulate, device=device)
        self.digests = RowDigests(count, self.words_per_row, self.chunk, device)
        self.tree = torch.empty(2, self.chunk, BLOCK, dtype=accumulate, device=device) if self.cpu else None
        self.steps = _levels(self.tree, BLOCK // 2, 2 * TAIL) if self.cpu else []

    def words(self, start: int, stop: int) -> None:
        """The digest sums of rows ``start:stop`` (their bytes as u64 words)."""
        rows = self.rows[start:stop]
        self.digests.add(start, stop, rows.view(torch.uint8).view(torch.int64))

    def clean(self, start: int, stop: int) -> None:
        """Rows ``start:stop`` as if they held no NaN, Inf or padding (CPU; :meth:`redo` fixes the rest)."""
        rows = self.rows[start:stop]
        values = rows if self.native else rows.to(self.extreme)
        torch.amin(values, 1, out=self.lo[start:stop])
        torch.amax(values, 1, out=self.hi[start:stop])
        count = stop - start
        tree = self.tree if count == self.chunk else self.tree[:, :count]
        steps = self.steps if count == self.chunk else _levels(tree, BLOCK // 2, 2 * TAIL)
        # floats: the rows' own values (their widening is exact); integers: as int64 (uint64 wraps)
        tree[0].copy_(values if not rows.dtype.is_floating_point else rows)
        torch.mul(tree[0], tree[0], out=tree[1])
        for dst, src in steps:
            dst.add_(src)
        torch.add(tree[..., :TAIL], tree[..., TAIL : 2 * TAIL], out=self.tails[:, start:stop])  # the step h = TAIL

    def masked(self, start: int, stop: int, valid: torch.Tensor | None) -> None:
        """Rows ``start:stop`` by masks (``valid``: their valid elements, None when all are full)."""
        self._put(slice(start, stop), *_masked(self.rows[start:stop], valid, self.accumulate))

    def redo(self, index: torch.Tensor, valid: torch.Tensor) -> None:
        """Recompute the rows ``index`` (a few: non-finite values or padding) by masks."""
        for begin in range(0, index.numel(), self.chunk):
            part = index[begin : begin + self.chunk]
            self._put(part, *_masked(self.rows.index_select(0, part), valid[part], self.accumulate))

    def _put(self, where: slice | torch.Tensor, *columns: torch.Tensor) -> None:
        lo, hi, nan, inf, tails = columns
        self.lo[where], self.hi[where] = lo.to(self.extreme), hi.to(self.extreme)  # exact: values of the rows
        self.nan[where], self.inf[where] = nan, inf
        self.tails[:, where] = tails

    def result(self) -> RowPartials:
        floating = self.rows.dtype.is_floating_point
        cast = self.accumulate if floating else torch.int64
        for dst, src in _levels(self.tails, TAIL // 2, 1):
            dst.add_(src)
        total, sumsq = self.tails[:, :, 0].contiguous()
        return RowPartials(self.lo.to(cast), self.hi.to(cast), self.nan, self.inf, total, sumsq, self.digests.sums)


def row_partials(
    rows: torch.Tensor,
    valid: torch.Tensor,
    padded: torch.Tensor,
    accumulate: torch.dtype,
    *,
    masked: bool | None = None,
    op_size: int | None = None,
) -> RowPartials:
    """Per-row partial statistics of every staging row, in one pass.

    Args:
        rows: ``[R, BLOCK]`` staging rows of one dtype (a contiguous view).
        valid: Valid elements per row (int64 on the rows' device; ``BLOCK`` but in a record's last row).
        padded: Indices of the rows with padding (int64, on the rows' device).
        accumulate: The sums' dtype (float64; float32 on devices without it).
        masked: Take the masked path for every row (default: on every device but the CPU). Both paths
            give the same bits; tests set it.
        op_size: Elements per op (default: on CPU the process's choice, :class:`_ChunkChoice`, timed on its
            first large passes; elsewhere :data:`_DEVICE_CHUNK`). Every size gives the same bits; tests set it.
    """
    cpu = rows.device.type == "cpu"
    elements = rows.numel()
    chosen = op_size is None and cpu
    size = op_size or (_CHOICE.size(elements) if cpu else _DEVICE_CHUNK)
    started = time.perf_counter()
    work = _Pass(rows, accumulate, size)
    use_masks = (not work.cpu) if masked is None else masked
    padded_any = padded.numel() > 0
    for start in range(0, rows.shape[0], work.chunk):
        stop = min(start + work.chunk, rows.shape[0])
        work.words(start, stop)
        if use_masks:
            work.masked(start, stop, valid[start:stop] if padded_any else None)
        else:
            work.clean(start, stop)
    if not use_masks:
        redo = padded
        if rows.dtype.is_floating_point:  # amin/amax propagate NaN and return ±Inf: unclean rows show
            unclean = torch.nonzero(~(torch.isfinite(work.lo) & torch.isfinite(work.hi))).view(-1)
            if unclean.numel():
                redo = torch.unique(torch.cat([padded, unclean]))
        if redo.numel():
            work.redo(redo, valid)
    work.digests.unpad(padded, valid, rows.element_size())
    result = work.result()
    if chosen and not use_masks:  # the cheap path's passes choose the size it runs at
        _CHOICE.record(size, elements, time.perf_counter() - started)
    return result


@contextlib.contextmanager
def one_thread(device: torch.device) -> Iterator[None]:
    """On CPU, torch ops on this thread run single-threaded meanwhile (then the previous count is back).

    The statistics pass is one core's work in cache-sized ops; its per-row and per-record columns (tens of
    thousands of elements) would otherwise go parallel, where OpenMP's handoff costs more than the op,
    and far more on a loaded machine (measured: 95 against 35 ms of CPU time per 4096-record pass at
    load average 12 on 2 cores).

    Args:
        device: Where the ops run (other devices: nothing changes).
    """
    threads = torch.get_num_threads() if device.type == "cpu" else 1
    if threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def segment_tree(values: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """Each record's block sums (``values``: its sequence after the previous record's, ``lengths`` long)
    summed on by the block rule until one value is left; ``[records]`` (an empty record gives 0).

    A block of ``L <= BLOCK`` values sums over a width of the next power of two (the rest of the block's
    padding adds ``+0.0``, which changes no value but the sign of a zero: the result's zeros are ``+0.0``).

    Args:
        values: The block sums of every record, one after another.
        lengths: Each record's number of blocks.
    """
    device = values.device
    while max(lengths, default=0) > 1:
        width = min(BLOCK, 1 << (max(lengths) - 1).bit_length())
        blocks = [-(-n // width) for n in lengths]
        if len(set(lengths)) == 1 and lengths[0] % width == 0:  # records share a size: a reshape
            grid = values.view(-1, width)
        else:
            owner = torch.repeat_interleave(
                torch.arange(len(lengths), device=device), torch.tensor(lengths, dtype=torch.int64, device=device)
            )
            row0 = torch.tensor([0, *blocks], dtype=torch.int64, device=device).cumsum(0)[:-1]
            first = torch.tensor([0, *lengths], dtype=torch.int64, device=device).cumsum(0)[:-1]
            position = row0[owner] * width + torch.arange(values.numel(), device=device) - first[owner]
            grid = torch.zeros(sum(blocks) * width, dtype=values.dtype, device=device)
            grid[position] = values
            grid = grid.view(-1, width)
        values, lengths = block_sum(grid), blocks
    if len(set(lengths)) == 1 and lengths and lengths[0] == 1:
        return values + 0.0  # a zero sum is +0.0
    out = torch.zeros(len(lengths), dtype=values.dtype, device=device)
    out[torch.tensor(lengths, device=device) == 1] = values
    return out + 0.0


def combine_rows(partials: RowPartials, blocks: Sequence[int]) -> tuple[torch.Tensor, ...]:
    """Per-row partials → per-record ``(nan, inf, lo, hi, total, sumsq, digest_sum)`` (the digest's ``S``:
    :func:`~megadump_zarr.runtime.digest.finish` makes the digest of it).

    Args:
        partials: From :func:`row_partials`.
        blocks: Each record's staging rows.
    """
    blocks = list(blocks)
    device = partials.lo.device
    records = len(blocks)
    floating = partials.lo.dtype.is_floating_point
    shared = records > 0 and blocks[0] > 0 and blocks.count(blocks[0]) == records
    if shared:  # every record has the same rows: reshapes, no scatter
        width = blocks[0]

        def fold(column: torch.Tensor) -> torch.Tensor:
            return column.view(records, width)

        nan, inf = fold(partials.nan).sum(1), fold(partials.inf).sum(1)
        lo, hi = fold(partials.lo).amin(1), fold(partials.hi).amax(1)
        local = torch.arange(width, device=device).repeat(records)
        digest = record_sums(partials.digest, local, None, records)
    else:
        owner = torch.repeat_interleave(
            torch.arange(records, device=device), torch.tensor(blocks, dtype=torch.int64, device=device)
        )
        row0 = torch.tensor([0, *blocks], dtype=torch.int64, device=device).cumsum(0)[:-1]

        def add(column: torch.Tensor) -> torch.Tensor:
            return torch.zeros(records, dtype=column.dtype, device=device).index_add_(0, owner, column)

        def extreme(column: torch.Tensor, how: str, empty: float | int) -> torch.Tensor:
            out = torch.full((records,), empty, dtype=column.dtype, device=device)
            return out.scatter_reduce_(0, owner, column, how, include_self=True)

        nan, inf = add(partials.nan), add(partials.inf)
        lo = extreme(partials.lo, "amin", torch.inf if floating else _INT64_MAX)
        hi = extreme(partials.hi, "amax", -torch.inf if floating else _INT64_MIN)
        local = torch.arange(owner.numel(), device=device) - row0[owner]
        digest = record_sums(partials.digest, local, owner, records)
    if floating:
        lo, hi = lo + 0.0, hi + 0.0  # -0.0 → +0.0: a zero extreme's sign is not the reduction order's choice
    return (
        nan,
        inf,
        lo,
        hi,
        segment_tree(partials.total, blocks),
        segment_tree(partials.sumsq, blocks),
        digest,
    )
