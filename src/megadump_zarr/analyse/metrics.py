"""Chunked accuracy metrics for one pair of tensors (``a`` = the dump side, ``b`` = the reference).

Both sides are read block by block along axis 0 (further axes are split too when a single index of
axis 0 is larger than the budget), in their own dtype, and each block pair is folded into a
:class:`MetricAccumulator`, which works through it in cache-sized pieces (see "Precision" below).
No more than one block of each side is in memory at a time, so tensors far larger than host memory can be compared. Accepted inputs: numpy
arrays (including ``ml_dtypes`` bfloat16 / float8), dask arrays, xarray DataArrays (lazy or not),
zarr arrays, torch tensors on any device (each block goes through ``.float().cpu().numpy()``), and
anything else that slices along axis 0 and converts with :func:`numpy.asarray`.

Metric definitions (all over *finite pairs*: positions where both sides are finite). When the NaN/Inf
patterns of the sides differ (``nonfinite_mismatch > 0``) every metric below from ``cosine`` to
``five_thousandths_ratio`` is NaN: computed over the finite pairs alone they would read as perfect (an
all-NaN side against finite values has no finite pair at all, so cosine 1.0 and max_abs 0):

* ``cosine``: ``sum(a*b) / (|a| |b|)``. When a side has zero norm the cosine is undefined: it is
  ``1.0`` when both norms are zero (two zero vectors, or no finite pair at all) and ``0.0`` when only
  one is; exactly ``1.0`` when every finite pair is identical.
* ``max_abs``: ``max |a - b|``.
* ``max_rel``: ``max |a - b| / max(|b|, REL_EPS)`` with ``REL_EPS`` the smallest normal float32
  (~1.2e-38): an exact zero in the reference gives a huge, finite relative error unless ``a`` is zero
  too.
* ``rmse``: ``sqrt(mean((a - b)**2))``.
* ``within_0_1pct`` / ``within_0_5pct``: share of finite pairs whose relative error (as in
  ``max_rel``) is at most 0.001 / 0.005. With no finite pair at all the shares are 1.0 (vacuous).
* msprobe's definitions (``msprobe compare``'s EucDist, MaxRelativeErr, One/Five Thousandth Err Ratio),
  for side-by-side use with it: ``euc_dist`` ``sqrt(sum((a - b)**2))`` over finite pairs;
  ``max_rel_eps`` ``max |a - b| / |b|`` where a zero reference counts as the machine epsilon of float32
  (float64 for float64 inputs) instead of ``REL_EPS``; ``one_thousandth_ratio`` /
  ``five_thousandths_ratio`` the share of *all* elements whose relative error (as in ``max_rel_eps``) is
  strictly below 0.001 / 0.005, positions where both sides hold the same NaN/Inf counting as exact. Like
  msprobe, the four are NaN when the NaN/Inf patterns of the sides differ.
* ``nan_a``/``inf_a``/``nan_b``/``inf_b``: counts of NaN and ±Inf on each side.
* ``nonfinite_mismatch``: positions where the non-finite patterns differ (NaN on one side only, Inf on
  one side only, or +Inf against -Inf).
* ``mismatches``: elements failing the elementwise rule: for an exact comparison (integer, bool)
  ``a != b``; otherwise finite pairs with ``|a - b| > atol + rtol * |b|`` plus the positions whose
  NaN/Inf patterns differ. ``first_mismatch``: the logical index (C order) of the first of them.
* ``allclose`` (float comparisons with tolerances): ``mismatches == 0``.
* ``worst_index``/``worst_a``/``worst_b``: the logical index of the largest ``|a - b|`` among finite
  pairs (the first such position) and the two values there; when no finite pair differs but an element
  mismatches (NaN/Inf patterns differ, integers beyond 2**53 differ), the first mismatching element
  (None when nothing differs).

Precision. *Inputs of at most 32 bits* (float32, float16, bfloat16, float8) take the fast path, all in
float32: ``d = a - b`` and ``s = a + b`` rounded to float32 (relative error <= 2**-24), per piece of
:data:`PIECE` elements four BLAS sums ``a.a``, ``b.b``, ``d.d`` and ``d.s`` (= ``a.a - b.b``, without
the cancellation), added up across pieces in float64; the cosine is ``1 - (d.d - g**2) / (2|a||b|)``
with ``g = |a| - |b| = d.s / (|a| + |b|)``, so its distance from 1 is computed from the small sums
themselves and keeps its relative precision when ``a`` and ``b`` nearly agree. OpenBLAS's ``sdot``
keeps several float32 accumulators: measured relative error of a 64 Ki-element sum ~1e-7 (the bound
is looser, ~n/16 * 2**-24); the elementwise rules and ``max_rel`` work on ``|d|`` in float32 and
``max_abs`` is exact (the difference at the worst position recomputed in float64). A piece holding
NaN/Inf, or overflowing float32, takes the float64 path. *Integers and bools* are compared in float64
(sums exact below 2**53); their mismatch count compares the integers themselves, and ``max_abs`` (with
the worst index) is the integer difference computed in integer arithmetic (``2**53 + 1`` against
``2**53`` differs by 1, which float64 would round to 0). *float64 inputs*
keep float64 throughout with sums rescaled by the running maximum, as LAPACK's ``nrm2`` does, so that
neither huge nor tiny values overflow or underflow.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
import math
from math import prod
import threading
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_BLOCK_BYTES",
    "REL_EPS",
    "MetricAccumulator",
    "TensorMetrics",
    "compute_metrics",
    "dtype_name",
    "block_offset",
    "iter_blocks",
    "read_block",
    "read_native_block",
    "row_chunks",
    "shape_of",
]

DEFAULT_BLOCK_BYTES = 8 << 20
"""Budget of one block of one side, in float64 bytes (so at most 1 Mi elements per side per block)."""

PIECE = 1 << 16
"""Elements of one piece of a block (the working set stays in L2; measured on one 4 MiB float32 chunk
pair: 2.5 ms at 8 Ki, 1.3 ms at 32 Ki, 1.25 ms at 64 Ki, 1.2 ms at 128 Ki)."""

REL_EPS = float(np.finfo(np.float32).tiny)
"""Floor of the reference magnitude in the relative error."""

WITHIN_TIGHT = 1e-3
WITHIN_LOOSE = 5e-3


@dataclass(frozen=True)
class TensorMetrics:
    """Metrics of one tensor pair; see the module docstring for the definitions."""

    elements: int
    finite_pairs: int
    cosine: float
    max_abs: float
    max_rel: float
    rmse: float
    within_0_1pct: float
    within_0_5pct: float
    nan_a: int
    inf_a: int
    nan_b: int
    inf_b: int
    nonfinite_mismatch: int
    allclose: bool | None = None
    mismatches: int = 0
    first_mismatch: tuple[int, ...] | None = None
    worst_index: tuple[int, ...] | None = None
    worst_a: float | None = None
    worst_b: float | None = None
    rtol: float | None = None
    atol: float | None = None
    exact: bool = False
    euc_dist: float = math.nan
    max_rel_eps: float = math.nan
    one_thousandth_ratio: float = math.nan
    five_thousandths_ratio: float = math.nan


# ---------------------------------------------------------------------------------------------------- input adapters
def _is_torch(x: Any) -> bool:
    module = type(x).__module__
    if not module.startswith("torch"):
        return False
    import torch

    return isinstance(x, torch.Tensor)


def shape_of(x: Any) -> tuple[int, ...]:
    """The logical shape of an array-like (a tuple of ints)."""
    shape = getattr(x, "shape", None)
    if shape is None:
        shape = np.shape(x)
    return tuple(int(s) for s in shape)


def dtype_name(x: Any) -> str:
    """A short dtype name: ``float32``, ``bfloat16``, ``int64`` (torch's ``torch.`` prefix dropped)."""
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        return str(np.asarray(x).dtype)
    text = str(dtype)
    return text.removeprefix("torch.")


def read_block(x: Any, index: tuple[slice, ...]) -> np.ndarray:
    """Read ``x[index]`` into a host float64 numpy array (see :func:`read_native_block`).

    Args:
        x: An array-like (see the module docstring).
        index: A tuple of slices, as :func:`iter_blocks` yields.
    """
    return read_native_block(x, index).astype(np.float64, copy=False)


def read_native_block(x: Any, index: tuple[slice, ...]) -> np.ndarray:
    """Read ``x[index]`` into a host numpy array in its own dtype (torch bf16/fp16/fp8: float32).

    Args:
        x: An array-like (see the module docstring).
        index: A tuple of slices, as :func:`iter_blocks` yields.
    """
    if _is_torch(x):
        block = x[index].detach()
        if block.is_complex():
            raise TypeError(f"complex tensors are not supported (dtype {block.dtype})")
        if block.is_floating_point() and block.dtype.itemsize < 4:
            block = block.float()  # bf16/fp16/fp8: exact in float32
        return np.asarray(block.cpu().numpy())
    if not hasattr(x, "shape") or not hasattr(x, "__getitem__"):
        x = np.asarray(x)
    block = x[index] if index else x[...]
    if hasattr(block, "compute") and not isinstance(block, np.ndarray):
        block = block.compute()
    if hasattr(block, "values") and not isinstance(block, np.ndarray):
        block = block.values
    block = np.asarray(block)
    if block.dtype.kind == "c":
        raise TypeError(f"complex arrays are not supported (dtype {block.dtype})")
    return block


def block_offset(shape: tuple[int, ...], index: tuple[slice, ...]) -> int:
    """The flat (C order) position of the first element of ``x[index]`` (blocks of :func:`iter_blocks`
    are contiguous in C order).

    Args:
        shape: The array shape.
        index: A block's index tuple.
    """
    offset, stride = 0, 1
    starts = [0] * len(shape)
    for axis, sl in enumerate(index):
        starts[axis] = sl.start or 0
    for axis in range(len(shape) - 1, -1, -1):
        offset += starts[axis] * stride
        stride *= shape[axis]
    return offset


def row_chunks(x: Any) -> tuple[int, ...] | None:
    """The storage chunk sizes of ``x`` along axis 0 (dask, chunked xarray, zarr), or None."""
    chunks = getattr(x, "chunks", None)
    if chunks is None or callable(chunks) or not isinstance(chunks, tuple) or not chunks:
        return None
    first = chunks[0]
    if isinstance(first, tuple):  # dask / dask-backed DataArray: explicit sizes
        return tuple(int(c) for c in first)
    if isinstance(first, (int, np.integer)) and int(first) > 0:  # zarr: a regular chunk shape
        n = shape_of(x)[0]
        size = int(first)
        return tuple(min(size, n - start) for start in range(0, n, size))
    return None


def iter_blocks(
    shape: tuple[int, ...], block_bytes: int = DEFAULT_BLOCK_BYTES, chunks: tuple[int, ...] | None = None
) -> Iterator[tuple[slice, ...]]:
    """Index tuples covering ``shape`` in C order, each holding at most ``block_bytes // 8`` elements.

    Whole rows along axis 0 are grouped while they fit; a single row larger than the budget is split
    along the next axis, recursively. With ``chunks`` (storage chunk sizes along axis 0), block
    boundaries follow chunk boundaries where possible (consecutive chunks are merged while they fit, a
    chunk larger than a block is split), so that no storage chunk is read for two blocks needlessly. A
    0-d shape yields one empty index; a zero-size axis 0 yields nothing.

    Args:
        shape: The array shape.
        block_bytes: Budget of one block in float64 bytes.
        chunks: Optional chunk sizes along axis 0 (summing to ``shape[0]``).
    """
    budget = max(1, int(block_bytes) // 8)
    shape = tuple(shape)
    if chunks is None or not shape or sum(chunks) != shape[0] or prod(shape[1:]) > budget:
        yield from _blocks(shape, budget)
        return
    rows = max(1, budget // max(prod(shape[1:]), 1))
    start = stop = 0
    for size in chunks:
        if stop - start + size <= rows:
            stop += size
            continue
        if stop > start:
            yield (slice(start, stop),)
        start = stop
        while size > rows:  # a chunk larger than one block: split it
            yield (slice(start, start + rows),)
            start += rows
            size -= rows
        stop = start + size
    if stop > start:
        yield (slice(start, stop),)


def _blocks(shape: tuple[int, ...], budget: int) -> Iterator[tuple[slice, ...]]:
    if not shape:
        yield ()
        return
    n, inner = shape[0], prod(shape[1:])
    if inner <= budget:
        rows = max(1, budget // max(inner, 1))
        for start in range(0, n, rows):
            yield (slice(start, min(start + rows, n)),)
        return
    for i in range(n):
        for sub in _blocks(shape[1:], budget):
            yield (slice(i, i + 1), *sub)


# ---------------------------------------------------------------------------------------------------- accumulation
class MetricAccumulator:
    """Folds block pairs into running metrics; :meth:`result` gives the :class:`TensorMetrics`.

    Args:
        shape: The logical shape of the whole tensor (for logical indices); default: flat indices.
        rtol: Relative tolerance of the elementwise rule (floats).
        atol: Absolute tolerance of the elementwise rule (floats).
        exact: Integer/bool rule: an element mismatches when ``a != b``.
    """

    def __init__(
        self,
        shape: tuple[int, ...] | None = None,
        *,
        rtol: float | None = None,
        atol: float | None = None,
        exact: bool = False,
    ) -> None:
        self.shape = None if shape is None else tuple(int(s) for s in shape)
        self.exact = bool(exact)
        self.check_close = not self.exact and (rtol is not None or atol is not None)
        self.rtol = float(rtol or 0.0)
        self.atol = float(atol or 0.0)
        self.elements = 0
        self.finite = 0
        self.nan_a = self.inf_a = self.nan_b = self.inf_b = 0
        self.nonfinite = 0
        self.mismatches = 0
        self.first_mismatch: int | None = None
        self.first_values: tuple[float, float] | None = None  # (a, b) at first_mismatch, when known
        self.worst = -1.0
        self.worst_at: int | None = None
        self.worst_values: tuple[float, float] | None = None
        # sums: total = scale**2 * scaled sum (scales stay 1.0 for inputs of at most 32 bits)
        self.sa = self.sb = self.sd = 0.0
        self.saa = self.sbb = self.sab = self.sdd = 0.0
        self.sds = 0.0  # sum((a - b) * (a + b)) = saa - sbb without cancellation (plain sums only)
        self.scaled: bool | None = None
        self.max_rel = 0.0
        self.within_tight = 0
        self.within_loose = 0
        self.max_rel_eps = 0.0  # msprobe's definitions (see the module docstring)
        self.eps_tight = 0
        self.eps_loose = 0
        self.narrow: bool | None = None

    # ------------------------------------------------------------------ blocks
    def update(self, a: np.ndarray, b: np.ndarray, offset: int | None = None) -> None:
        """Add one block pair (numpy arrays of the same shape, any real dtype).

        Args:
            a: Block of the tensor under test.
            b: The same block of the reference.
            offset: Flat (C order) position of the block's first element; default: right after the
                previous block.
        """
        a = np.ravel(a)
        b = np.ravel(b)
        if a.shape != b.shape:
            raise ValueError(f"block shapes differ: {a.shape} vs {b.shape}")
        base = self.elements if offset is None else int(offset)
        self.elements += a.size
        if a.size == 0:
            return
        if self.scaled is None:
            self.scaled = any(x.dtype.kind == "f" and x.dtype.itemsize > 4 for x in (a, b))
        if self.exact:
            differ = a != b
            count = int(np.count_nonzero(differ))
            if count:
                self.mismatches += count
                i = int(np.argmax(differ))
                self._mismatch_at(base + i, (float(a[i]), float(b[i])))
        integral = self.exact and _integer_difference(a[:0], b[:0]) is not None
        before = (self.worst, self.worst_at, self.worst_values)
        for start in range(0, a.size, PIECE):
            self._piece(a[start : start + PIECE], b[start : start + PIECE], base + start)
        if integral:  # the worst difference in integer arithmetic, not float64's rounding of it
            self.worst, self.worst_at, self.worst_values = before
            self._integer_worst(a, b, base)

    def _integer_worst(self, a: np.ndarray, b: np.ndarray, base: int) -> None:
        """Fold the largest exact ``|a - b|`` of an integer block pair into the worst difference."""
        d = _integer_difference(a, b)
        if d is None or d.size == 0:
            return
        i = int(np.argmax(d))
        dmax = int(d[i])
        if dmax > self.worst:
            self.worst, self.worst_at, self.worst_values = float(dmax), base + i, (float(a[i]), float(b[i]))

    def _mismatch_at(self, flat: int, values: tuple[float, float] | None = None) -> None:
        if self.first_mismatch is None or flat < self.first_mismatch:
            self.first_mismatch, self.first_values = flat, values

    @staticmethod
    def _buffers_for(n: int) -> tuple[np.ndarray, ...]:
        """Four float64 and one bool scratch buffers of ``n`` elements, one set per thread (so memory
        stays a few MiB per thread however many tensors are being accumulated)."""
        buffers = getattr(_SCRATCH, "f64", None)
        if buffers is None or buffers[0].size < n:
            buffers = _SCRATCH.f64 = tuple(np.empty(max(n, PIECE)) for _ in range(4)) + (np.empty(max(n, PIECE), bool),)
        return tuple(buf[:n] for buf in buffers)

    @staticmethod
    def _buffers32_for(n: int) -> tuple[np.ndarray, ...]:
        buffers = getattr(_SCRATCH, "f32", None)
        if buffers is None or buffers[0].size < n:
            buffers = _SCRATCH.f32 = tuple(np.empty(max(n, PIECE), np.float32) for _ in range(5))
        return tuple(buf[:n] for buf in buffers)

    def _piece(self, a: np.ndarray, b: np.ndarray, base: int) -> None:
        if self.narrow is None:
            self.narrow = not self.exact and all(_narrow_float(x.dtype) for x in (a, b))
        if self.narrow and self._piece32(a, b, base):
            return
        n = a.size
        fa, fb, d, t, mask = self._buffers_for(n)
        np.copyto(fa, a, casting="unsafe")
        np.copyto(fb, b, casting="unsafe")
        if not self.scaled:
            saa, sbb = float(np.dot(fa, fa)), float(np.dot(fb, fb))
            if math.isfinite(saa) and math.isfinite(sbb):  # no NaN/Inf in this piece
                self._finite(fa, fb, d, t, mask, base, None, (saa, sbb))
                return
        finite_a, finite_b = np.isfinite(fa), np.isfinite(fb)
        if finite_a.all() and finite_b.all():
            self._finite(fa, fb, d, t, mask, base, None, None)
            return
        nan_a, nan_b = np.isnan(fa), np.isnan(fb)
        inf_a, inf_b = ~finite_a & ~nan_a, ~finite_b & ~nan_b
        self.nan_a += int(nan_a.sum())
        self.nan_b += int(nan_b.sum())
        self.inf_a += int(inf_a.sum())
        self.inf_b += int(inf_b.sum())
        finite = finite_a & finite_b
        nonfinite = ~finite
        same = (nan_a & nan_b) | (inf_a & inf_b & (fa == fb))
        bad = nonfinite & ~same
        count = int(bad.sum())
        if count:
            self.nonfinite += count
            if not self.exact:
                self.mismatches += count
                i = int(np.argmax(bad))
                self._mismatch_at(base + i, (float(fa[i]), float(fb[i])))
        positions = np.flatnonzero(finite)
        if positions.size:
            m = positions.size
            ga, gb, gd, gt, gmask = self._buffers_for(n)
            ca, cb = fa[positions], fb[positions]
            self._finite(ca, cb, gd[:m], gt[:m], gmask[:m], base, positions, None)

    def _piece32(self, a: np.ndarray, b: np.ndarray, base: int) -> bool:
        """The fast path of a finite piece of inputs of at most 32 bits, all in float32: ``d = a - b``
        and ``s = a + b`` rounded to float32, four BLAS sums per piece (``a.a``, ``b.b``, ``d.d``,
        ``d.s``) added up in float64 across pieces, the elementwise rules on ``|d|``. False: the piece
        holds NaN/Inf (or overflows float32), and the float64 path takes it."""
        n = a.size
        mask = self._buffers_for(n)[4]
        ca, cb, d32, t32, scratch = self._buffers32_for(n)
        a32 = a if a.dtype == np.float32 else _copy_into(ca, a)
        b32 = b if b.dtype == np.float32 else _copy_into(cb, b)
        with np.errstate(over="ignore", invalid="ignore"):
            np.subtract(a32, b32, out=d32)
            np.add(a32, b32, out=t32)
            sums = (float(np.dot(a32, a32)), float(np.dot(b32, b32)), float(np.dot(d32, d32)), float(np.dot(d32, t32)))
        if not all(math.isfinite(x) for x in sums):
            return False
        self.finite += n
        self.saa += sums[0]
        self.sbb += sums[1]
        self.sdd += sums[2]
        self.sds += sums[3]
        np.abs(d32, out=d32)
        i = int(np.argmax(d32))
        dmax = abs(float(a32[i]) - float(b32[i]))  # exact in float64
        if dmax > self.worst:
            self.worst, self.worst_at, self.worst_values = dmax, base + i, (float(a32[i]), float(b32[i]))
        if dmax == 0.0:  # identical piece: every pair within every tolerance
            self._all_within(n)
            return True
        np.abs(b32, out=t32)
        self._elementwise(d32, t32, scratch, mask, n, lambda k: base + k, dmax)
        return True

    def _all_within(self, n: int) -> None:
        self.within_tight += n
        self.within_loose += n
        self.eps_tight += n
        self.eps_loose += n

    def _finite(
        self,
        a: np.ndarray,
        b: np.ndarray,
        d: np.ndarray,
        t: np.ndarray,
        mask: np.ndarray,
        base: int,
        positions: np.ndarray | None,
        sums: tuple[float, float] | None,
    ) -> None:
        """Fold finite pairs (float64 pieces); ``positions`` maps piece positions to ``base``-relative ones."""
        n = a.size
        self.finite += n

        def flat(i: int) -> int:
            return base + (int(positions[i]) if positions is not None else i)

        np.subtract(a, b, out=d)
        if self.scaled:
            self._fold_scaled(a, b, d)
        else:
            saa, sbb = sums if sums is not None else (float(np.dot(a, a)), float(np.dot(b, b)))
            self.saa += saa
            self.sbb += sbb
            self.sdd += float(np.dot(d, d))
            np.add(a, b, out=t)
            self.sds += float(np.dot(d, t))
        np.abs(d, out=d)
        i = int(np.argmax(d))
        dmax = float(d[i])
        if dmax > self.worst:
            self.worst, self.worst_at, self.worst_values = dmax, flat(i), (float(a[i]), float(b[i]))
        if dmax == 0.0:  # identical piece: every pair within every tolerance
            self._all_within(n)
            return
        np.abs(b, out=t)
        self._elementwise(d, t, a, mask, n, flat, dmax)  # ``a`` is no longer needed: scratch

    def _elementwise(
        self, d: np.ndarray, t: np.ndarray, scratch: np.ndarray, mask: np.ndarray, n: int, flat: Any, dmax: float
    ) -> None:
        """The elementwise rules on ``d = |a - b|`` and ``t = |b|`` (one dtype; ``t`` and ``scratch`` are
        overwritten). Every pass writes into a preallocated buffer: ``t`` becomes the denominator, ``scratch``
        the relative error."""
        tmin = float(t.min())
        if self.check_close and dmax > self.atol:
            np.multiply(t, self.rtol, out=scratch)
            scratch += self.atol
            np.greater(d, scratch, out=mask)
            count = int(np.count_nonzero(mask))
            if count:
                self.mismatches += count
                self._mismatch_at(flat(int(np.argmax(mask))))
        zero_b = None
        if tmin == 0.0:  # msprobe's relative error divides by eps where the reference is zero (see _fold_eps)
            zero_b = _zero_mask(n)
            np.equal(t, 0, out=zero_b)
        if tmin < REL_EPS:
            np.maximum(t, REL_EPS, out=t)
        with np.errstate(over="ignore"):
            np.divide(d, t, out=scratch)
        rel = float(scratch.max())
        self.max_rel = max(self.max_rel, rel)
        for limit, attr in ((WITHIN_TIGHT, "within_tight"), (WITHIN_LOOSE, "within_loose")):
            if rel <= limit:
                setattr(self, attr, getattr(self, attr) + n)
            else:
                np.less_equal(scratch, limit, out=mask)
                setattr(self, attr, getattr(self, attr) + int(np.count_nonzero(mask)))
        if zero_b is not None:
            # the denominator eps where the reference is zero: there t is REL_EPS (2**-126), and REL_EPS + eps
            # rounds to eps exactly (float32 and float64); masked writes (copyto/putmask with a mask) cost 20x
            np.multiply(zero_b, np.finfo(np.float64 if self.scaled else np.float32).eps, out=scratch)
            np.add(t, scratch, out=t)
            with np.errstate(over="ignore"):
                np.divide(d, t, out=scratch)
            rel = float(scratch.max())
        self._fold_eps(scratch, rel, mask)

    def _fold_eps(self, rel: np.ndarray, rel_max: float, mask: np.ndarray) -> None:
        """msprobe's relative error ``rel`` (``|a - b| / |b|``, ``|a - b| / eps`` where the reference is zero)
        and its maximum folded in."""
        self.max_rel_eps = max(self.max_rel_eps, rel_max)
        n = rel.size
        for limit, attr in ((WITHIN_TIGHT, "eps_tight"), (WITHIN_LOOSE, "eps_loose")):
            if rel_max < limit:
                setattr(self, attr, getattr(self, attr) + n)
            else:
                np.less(rel, limit, out=mask)
                setattr(self, attr, getattr(self, attr) + int(np.count_nonzero(mask)))

    def _fold_scaled(self, a: np.ndarray, b: np.ndarray, d: np.ndarray) -> None:
        """Sums of float64 inputs, rescaled by the running maxima so nothing overflows or underflows."""
        with np.errstate(over="ignore", invalid="ignore"):
            ca, cb, cd = float(np.abs(a).max()), float(np.abs(b).max()), float(np.abs(d).max())
        self._add_scaled(ca, cb, cd, a, b, d)

    def _add_scaled(self, ca: float, cb: float, cd: float, a: np.ndarray, b: np.ndarray, d: np.ndarray) -> None:
        new_sa, new_sb = max(self.sa, ca), max(self.sb, cb)
        fa, fb = _rescale(self.sa, new_sa), _rescale(self.sb, new_sb)
        self.saa *= fa * fa
        self.sbb *= fb * fb
        self.sab *= fa * fb
        self.sa, self.sb = new_sa, new_sb
        xa = a / new_sa if new_sa > 0 else a
        xb = b / new_sb if new_sb > 0 else b
        self.saa += float(np.dot(xa, xa))
        self.sbb += float(np.dot(xb, xb))
        self.sab += float(np.dot(xa, xb))
        if not math.isfinite(cd) or not math.isfinite(self.sd):  # a - b overflowed float64
            self.sd, self.sdd = math.inf, 1.0
            return
        new_sd = max(self.sd, cd)
        self.sdd *= _rescale(self.sd, new_sd) ** 2
        self.sd = new_sd
        if new_sd > 0:
            xd = d / new_sd
            self.sdd += float(np.dot(xd, xd))

    # ------------------------------------------------------------------ result
    def _index(self, flat: int | None) -> tuple[int, ...] | None:
        if flat is None:
            return None
        if self.shape is None:
            return (int(flat),)
        if not self.shape:
            return ()
        return tuple(int(i) for i in np.unravel_index(int(flat), self.shape))

    def merge(self, other: MetricAccumulator) -> None:
        """Add the blocks another accumulator (same tensor, other blocks) folded."""
        for attr in (
            "elements",
            "finite",
            "nan_a",
            "inf_a",
            "nan_b",
            "inf_b",
            "nonfinite",
            "mismatches",
            "within_tight",
            "within_loose",
            "eps_tight",
            "eps_loose",
        ):
            setattr(self, attr, getattr(self, attr) + getattr(other, attr))
        if other.first_mismatch is not None:
            self._mismatch_at(other.first_mismatch, other.first_values)
        if other.worst > self.worst or (
            other.worst == self.worst
            and other.worst_at is not None
            and (self.worst_at is None or other.worst_at < self.worst_at)
        ):
            self.worst, self.worst_at, self.worst_values = other.worst, other.worst_at, other.worst_values
        self.max_rel = max(self.max_rel, other.max_rel)
        self.max_rel_eps = max(self.max_rel_eps, other.max_rel_eps)
        if self.scaled is None:
            self.scaled = other.scaled
        if self.scaled:
            new_sa, new_sb, new_sd = max(self.sa, other.sa), max(self.sb, other.sb), max(self.sd, other.sd)

            def part(acc: MetricAccumulator) -> tuple[float, float, float, float]:
                ra, rb, rd = _rescale(acc.sa, new_sa), _rescale(acc.sb, new_sb), _rescale(acc.sd, new_sd)
                return acc.saa * ra * ra, acc.sbb * rb * rb, acc.sab * ra * rb, acc.sdd * rd * rd

            mine, theirs = part(self), part(other)
            self.saa, self.sbb, self.sab, self.sdd = (x + y for x, y in zip(mine, theirs))
            self.sa, self.sb, self.sd = new_sa, new_sb, new_sd
        else:
            self.saa += other.saa
            self.sbb += other.sbb
            self.sab += other.sab
            self.sdd += other.sdd
            self.sds += other.sds

    def result(self) -> TensorMetrics:
        """The metrics of everything added so far."""
        n = self.finite
        if self.saa > 0 and self.sbb > 0:
            if self.worst == 0.0 and self.nonfinite == 0:
                cosine = 1.0  # every finite pair identical
            elif self.scaled:
                cosine = self.sab / math.sqrt(self.saa * self.sbb)
                cosine = float(min(1.0, max(-1.0, cosine)))
            else:
                # 1 - cos = (|a - b|^2 - (|a| - |b|)^2) / (2 |a| |b|), with |a| - |b| = sds / (|a| + |b|): the
                # distance to 1 comes from the small sums themselves, not from cancelling two large ones
                na, nb = math.sqrt(self.saa), math.sqrt(self.sbb)
                gap = self.sds / (na + nb)
                cosine = float(min(1.0, max(-1.0, 1.0 - (self.sdd - gap * gap) / (2.0 * na * nb))))
        else:
            cosine = 1.0 if self.saa == 0 and self.sbb == 0 else 0.0
        if self.scaled:
            rmse = self.sd * math.sqrt(self.sdd / n) if n else 0.0
        else:
            rmse = math.sqrt(self.sdd / n) if n else 0.0
        differs = self.worst > 0
        worst_at, worst_values = self.worst_at, self.worst_values
        if not differs and self.first_mismatch is not None and self.first_values is not None:
            # no finite pair differs (NaN/Inf patterns differ, or integers beyond float64's 2**53 differ):
            # the worst element is the first mismatching one
            differs, worst_at, worst_values = True, self.first_mismatch, self.first_values
        if self.scaled:
            euc = self.sd * math.sqrt(self.sdd) if n else 0.0
        else:
            euc = math.sqrt(self.sdd)
        same_nonfinite = self.elements - n - self.nonfinite  # NaN/Inf at the same place on both sides
        peer = self.nonfinite == 0 and self.elements > 0
        # NaN/Inf patterns differ: metrics over the finite pairs alone would read as perfect (an all-NaN side
        # against finite values has no finite pair: cosine 1, max_abs 0), so every metric is NaN ("n/a")
        known = self.nonfinite == 0
        return TensorMetrics(
            elements=self.elements,
            finite_pairs=n,
            cosine=cosine if known else math.nan,
            max_abs=max(self.worst, 0.0) if known else math.nan,
            max_rel=self.max_rel if known else math.nan,
            rmse=rmse if known else math.nan,
            within_0_1pct=(self.within_tight / n if n else 1.0) if known else math.nan,
            within_0_5pct=(self.within_loose / n if n else 1.0) if known else math.nan,
            nan_a=self.nan_a,
            inf_a=self.inf_a,
            nan_b=self.nan_b,
            inf_b=self.inf_b,
            nonfinite_mismatch=self.nonfinite,
            allclose=(self.mismatches - self.nonfinite == 0) if self.check_close else None,
            mismatches=self.mismatches,
            first_mismatch=self._index(self.first_mismatch),
            worst_index=self._index(worst_at) if differs else None,
            worst_a=worst_values[0] if differs and worst_values else None,
            worst_b=worst_values[1] if differs and worst_values else None,
            rtol=None if self.exact or not self.check_close else self.rtol,
            atol=None if self.exact or not self.check_close else self.atol,
            exact=self.exact,
            euc_dist=euc if self.nonfinite == 0 else math.nan,
            max_rel_eps=self.max_rel_eps if peer else math.nan,
            one_thousandth_ratio=(self.eps_tight + same_nonfinite) / self.elements if peer else math.nan,
            five_thousandths_ratio=(self.eps_loose + same_nonfinite) / self.elements if peer else math.nan,
        )


_SCRATCH = threading.local()

_NARROW_NAMES = ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz")


def _integer_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """``|a - b|`` as uint64, exact, for integer or bool arrays (None for other dtypes, and for int64
    against uint64, whose difference may not fit)."""
    kinds = {a.dtype.kind, b.dtype.kind}
    if not kinds <= {"i", "u", "b"}:
        return None
    wide_unsigned = [x.dtype.kind == "u" and x.dtype.itemsize == 8 for x in (a, b)]
    if any(wide_unsigned) and not all(wide_unsigned):
        return None
    if all(wide_unsigned):
        ua, ub = a, b
        ge = a >= b
    else:
        ia, ib = a.astype(np.int64, copy=False), b.astype(np.int64, copy=False)
        ua, ub = ia.view(np.uint64), ib.view(np.uint64)
        ge = ia >= ib
    with np.errstate(over="ignore"):
        return np.where(ge, ua - ub, ub - ua)  # mod 2**64, and the true difference is below 2**64


def _narrow_float(dtype: np.dtype) -> bool:
    """A floating dtype of at most 32 bits (float32, float16, bfloat16, float8): exact in float32."""
    return dtype.itemsize <= 4 and (dtype.kind == "f" or dtype.name in _NARROW_NAMES)


def _zero_mask(n: int) -> np.ndarray:
    """A bool scratch buffer of ``n`` elements, one per thread (besides the ``mask`` of the other buffers)."""
    buffer = getattr(_SCRATCH, "zero", None)
    if buffer is None or buffer.size < n:
        buffer = _SCRATCH.zero = np.empty(max(n, PIECE), bool)
    return buffer[:n]


def _copy_into(buffer: np.ndarray, x: np.ndarray) -> np.ndarray:
    np.copyto(buffer, x, casting="unsafe")
    return buffer


def _rescale(old_scale: float, new_scale: float) -> float:
    return old_scale / new_scale if new_scale > 0 else 0.0


def compute_metrics(
    a: Any,
    b: Any,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    exact: bool = False,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
) -> TensorMetrics:
    """Metrics of ``a`` (dump side) against ``b`` (reference), read block by block.

    Args:
        a: The tensor under test.
        b: The reference tensor, same shape.
        rtol: Relative tolerance of the elementwise rule (floats).
        atol: Absolute tolerance of the elementwise rule (floats).
        exact: Compare exactly (integers, bool): ``mismatches`` counts ``a != b``.
        block_bytes: Float64 bytes of one block of one side.

    Raises:
        ValueError: The shapes differ.
    """
    shape_a, shape_b = shape_of(a), shape_of(b)
    if shape_a != shape_b:
        raise ValueError(f"shape mismatch: {shape_a} vs {shape_b}")
    acc = MetricAccumulator(shape_a, rtol=rtol, atol=atol, exact=exact)
    for index in iter_blocks(shape_a, block_bytes, row_chunks(a) or row_chunks(b)):
        # each block folded on its own and merged in block order: the same sums in the same order as the
        # threaded comparison of dump records (megadump_zarr.analyse.lanes), so both give the same bits
        part = MetricAccumulator(shape_a, rtol=rtol, atol=atol, exact=exact)
        part.update(read_native_block(a, index), read_native_block(b, index), block_offset(shape_a, index))
        acc.merge(part)
    return acc.result()
