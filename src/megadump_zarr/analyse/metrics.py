"""Chunked accuracy metrics for one pair of tensors (``a`` = the dump side, ``b`` = the reference).

Both sides are read block by block along axis 0 (further axes are split too when a single index of
axis 0 is larger than the budget), each block is upcast to float64 on the host, and the block's
contribution is folded into a :class:`MetricAccumulator`. No more than one block of each side is in
memory at a time, so tensors far larger than host memory can be compared. Accepted inputs: numpy
arrays (including ``ml_dtypes`` bfloat16 / float8), dask arrays, xarray DataArrays (lazy or not),
zarr arrays, torch tensors on any device (each block goes through ``.float().cpu().numpy()``), and
anything else that slices along axis 0 and converts with :func:`numpy.asarray`.

Metric definitions (all over *finite pairs*: positions where both sides are finite):

* ``cosine``: ``sum(a*b) / (|a| |b|)``. When a side has zero norm the cosine is undefined: it is
  ``1.0`` when both norms are zero (two zero vectors, or no finite pair at all) and ``0.0`` when only
  one is. Accumulated with running rescaling (as LAPACK's ``nrm2`` does) so that neither huge nor tiny
  values overflow or underflow.
* ``max_abs``: ``max |a - b|``.
* ``max_rel``: ``max |a - b| / max(|b|, REL_EPS)`` with ``REL_EPS`` the smallest normal float32
  (~1.2e-38): an exact zero in the reference gives a huge, finite relative error unless ``a`` is zero
  too.
* ``rmse``: ``sqrt(mean((a - b)**2))``.
* ``within_0_1pct`` / ``within_0_5pct``: share of finite pairs whose relative error (as in
  ``max_rel``) is at most 0.001 / 0.005. With no finite pair at all the shares are 1.0 (vacuous).
* ``nan_a``/``inf_a``/``nan_b``/``inf_b``: counts of NaN and ±Inf on each side.
* ``nonfinite_mismatch``: positions where the non-finite patterns differ (NaN on one side only, Inf on
  one side only, or +Inf against -Inf).
* ``allclose`` (only when ``rtol`` or ``atol`` is given; the missing one is 0): whether
  ``|a - b| <= atol + rtol * |b|`` holds at every finite pair.

Integer and bool tensors are compared as float64 too (exact below 2**53).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_BLOCK_BYTES",
    "REL_EPS",
    "MetricAccumulator",
    "TensorMetrics",
    "compute_metrics",
    "dtype_name",
    "iter_blocks",
    "read_block",
    "row_chunks",
    "shape_of",
]

DEFAULT_BLOCK_BYTES = 8 << 20
"""Budget of one block of one side, in float64 bytes (so at most 1 Mi elements per side per block)."""

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
    """Read ``x[index]`` into a host float64 numpy array.

    Args:
        x: An array-like (see the module docstring).
        index: A tuple of slices, as :func:`iter_blocks` yields.
    """
    if _is_torch(x):
        block = x[index].detach()
        if block.is_floating_point() and block.dtype.itemsize < 8:
            block = block.float()  # bf16/fp16/fp8 have no numpy counterpart in torch's bridge
        elif block.is_complex():
            raise TypeError(f"complex tensors are not supported (dtype {block.dtype})")
        return np.asarray(block.cpu().numpy(), dtype=np.float64)
    if not hasattr(x, "shape") or not hasattr(x, "__getitem__"):
        x = np.asarray(x)
    block = x[index] if index else x[...]
    if hasattr(block, "compute") and not isinstance(block, np.ndarray):  # dask array / dask-backed DataArray
        block = block.compute()
    if hasattr(block, "values") and not isinstance(block, np.ndarray):  # xarray DataArray / pandas
        block = block.values
    block = np.asarray(block)
    if block.dtype.kind == "c":
        raise TypeError(f"complex arrays are not supported (dtype {block.dtype})")
    return block.astype(np.float64, copy=False)


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


def iter_blocks(shape: tuple[int, ...], block_bytes: int = DEFAULT_BLOCK_BYTES,
                chunks: tuple[int, ...] | None = None) -> Iterator[tuple[slice, ...]]:
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
def _rescale(old_scale: float, new_scale: float) -> float:
    return old_scale / new_scale if new_scale > 0 else 0.0


class MetricAccumulator:
    """Folds block pairs into running metrics; :meth:`result` gives the :class:`TensorMetrics`.

    Args:
        rtol: Relative tolerance of the optional allclose check.
        atol: Absolute tolerance of the optional allclose check.
    """

    def __init__(self, *, rtol: float | None = None, atol: float | None = None) -> None:
        self.check_close = rtol is not None or atol is not None
        self.rtol = float(rtol or 0.0)
        self.atol = float(atol or 0.0)
        self.elements = 0
        self.finite = 0
        self.nan_a = self.inf_a = self.nan_b = self.inf_b = 0
        self.mismatch = 0
        # scaled sums: saa = sum((a/sa)^2), sbb = sum((b/sb)^2), sab = sum(a/sa * b/sb), sdd = sum((d/sd)^2)
        self.sa = self.sb = self.sd = 0.0
        self.saa = self.sbb = self.sab = self.sdd = 0.0
        self.max_rel = 0.0
        self.within_tight = 0
        self.within_loose = 0
        self.not_close = 0

    def update(self, a: np.ndarray, b: np.ndarray) -> None:
        """Add one block pair (float64 arrays of the same shape)."""
        a = np.ravel(a)
        b = np.ravel(b)
        if a.shape != b.shape:
            raise ValueError(f"block shapes differ: {a.shape} vs {b.shape}")
        self.elements += a.size
        if a.size == 0:
            return
        nan_a, nan_b = np.isnan(a), np.isnan(b)
        inf_a, inf_b = np.isinf(a), np.isinf(b)
        self.nan_a += int(nan_a.sum())
        self.nan_b += int(nan_b.sum())
        self.inf_a += int(inf_a.sum())
        self.inf_b += int(inf_b.sum())
        finite = ~(nan_a | nan_b | inf_a | inf_b)
        if not finite.all():
            nonfinite = ~finite
            na, nb, ia, ib = nan_a[nonfinite], nan_b[nonfinite], inf_a[nonfinite], inf_b[nonfinite]
            same = (na & nb) | (ia & ib & (a[nonfinite] == b[nonfinite]))
            self.mismatch += int((~same).sum())
            a, b = a[finite], b[finite]
        if a.size == 0:
            return
        self.finite += a.size
        d = np.abs(a - b)
        abs_a, abs_b = np.abs(a), np.abs(b)
        ca, cb, cd = float(abs_a.max()), float(abs_b.max()), float(d.max())

        new_sa, new_sb, new_sd = max(self.sa, ca), max(self.sb, cb), max(self.sd, cd)
        fa, fb, fd = _rescale(self.sa, new_sa), _rescale(self.sb, new_sb), _rescale(self.sd, new_sd)
        self.saa *= fa * fa
        self.sbb *= fb * fb
        self.sab *= fa * fb
        self.sdd *= fd * fd
        self.sa, self.sb, self.sd = new_sa, new_sb, new_sd
        xa = a / new_sa if new_sa > 0 else a
        xb = b / new_sb if new_sb > 0 else b
        self.saa += float(np.dot(xa, xa))
        self.sbb += float(np.dot(xb, xb))
        self.sab += float(np.dot(xa, xb))
        if new_sd > 0:
            xd = d / new_sd
            self.sdd += float(np.dot(xd, xd))

        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            rel = d / np.maximum(abs_b, REL_EPS)
        self.max_rel = max(self.max_rel, float(rel.max()))
        self.within_tight += int((rel <= WITHIN_TIGHT).sum())
        self.within_loose += int((rel <= WITHIN_LOOSE).sum())
        if self.check_close:
            with np.errstate(over="ignore", invalid="ignore"):
                self.not_close += int((d > self.atol + self.rtol * abs_b).sum())

    def result(self) -> TensorMetrics:
        """The metrics of everything added so far."""
        if self.saa > 0 and self.sbb > 0:
            # saa and sbb lie in [1, n] (each side scaled by its max), so the product cannot overflow, and
            # sqrt(x * x) == x exactly: identical inputs give a cosine of exactly 1.0
            cosine = self.sab / np.sqrt(self.saa * self.sbb)
            cosine = float(min(1.0, max(-1.0, cosine)))
        else:
            cosine = 1.0 if self.saa == 0 and self.sbb == 0 else 0.0
        n = self.finite
        rmse = self.sd * float(np.sqrt(self.sdd / n)) if n else 0.0
        return TensorMetrics(
            elements=self.elements,
            finite_pairs=n,
            cosine=cosine,
            max_abs=self.sd,
            max_rel=self.max_rel,
            rmse=rmse,
            within_0_1pct=self.within_tight / n if n else 1.0,
            within_0_5pct=self.within_loose / n if n else 1.0,
            nan_a=self.nan_a,
            inf_a=self.inf_a,
            nan_b=self.nan_b,
            inf_b=self.inf_b,
            nonfinite_mismatch=self.mismatch,
            allclose=(self.not_close == 0) if self.check_close else None,
        )


def compute_metrics(
    a: Any,
    b: Any,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
) -> TensorMetrics:
    """Metrics of ``a`` (dump side) against ``b`` (reference), read block by block.

    Args:
        a: The tensor under test.
        b: The reference tensor, same shape.
        rtol: Relative tolerance of the optional allclose check.
        atol: Absolute tolerance of the optional allclose check.
        block_bytes: Float64 bytes of one block of one side.

    Raises:
        ValueError: The shapes differ.
    """
    shape_a, shape_b = shape_of(a), shape_of(b)
    if shape_a != shape_b:
        raise ValueError(f"shape mismatch: {shape_a} vs {shape_b}")
    acc = MetricAccumulator(rtol=rtol, atol=atol)
    for index in iter_blocks(shape_a, block_bytes, row_chunks(a) or row_chunks(b)):
        acc.update(read_block(a, index), read_block(b, index))
    return acc.result()
