"""Summary statistics of a stored tensor, computed from the in-memory data while it is written.

Definitions (``compute_stats`` and :class:`StatsAccumulator`):

- ``nanCount`` / ``infCount``: number of NaN and of +/-Inf elements (always 0 for bool and integers).
- ``min``, ``max``, ``mean``, ``l2norm`` (``sqrt(sum(x**2))``) are over the *finite* elements only: NaN
  and Inf are excluded, so one bad element does not hide the scale of the rest. They are ``None`` when
  there is no finite element (empty or all NaN/Inf), and also when the float64 accumulation itself
  overflows (possible only for float64 data near its range limit), so the result is always strict JSON.
- Integer arrays report exact ``min``/``max`` as Python ints; bool arrays are treated as 0/1 integers.
  Float arrays report Python floats. bfloat16/float8/float16 slices are widened to float32 first.
- Sums are accumulated in float64 over slices of at most 2**18 elements (2 MiB of float64, cast into a
  reused per-thread buffer), so a large array never gets a full-size float64 copy; partial results of
  chunks merge exactly (counts, min, max) or to float64 rounding (sums).
"""

from __future__ import annotations

from collections.abc import Iterator
import math
import threading
from typing import Any

import numpy as np

from megadump_zarr.layout.dtypes import ML_FLOATS

__all__ = ["StatsAccumulator", "compute_stats"]

SLICE_ELEMENTS = 1 << 18  # elements per float64 working slice (2 MiB: stays in cache across the passes)
_NATIVE_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _kind(dtype: np.dtype) -> str:
    if dtype == np.bool_:
        return "bool"
    if dtype.kind in "iu":
        return "int"
    if dtype.kind == "f" or dtype.name in ML_FLOATS:
        return "float"
    raise TypeError(f"statistics are not defined for dtype {dtype}")


def _slices(array: np.ndarray) -> Iterator[np.ndarray]:
    """Yield 1-D pieces of ``array`` of at most ``SLICE_ELEMENTS`` elements, copying only non-contiguous input."""
    if array.flags.c_contiguous:
        flat = array.reshape(-1)
        for start in range(0, flat.size, SLICE_ELEMENTS):
            yield flat[start : start + SLICE_ELEMENTS]
        return
    if array.ndim == 0:  # pragma: no cover - 0-d arrays are always contiguous
        yield array.reshape(1)
        return
    row = math.prod(array.shape[1:])
    if row > SLICE_ELEMENTS:
        for i in range(array.shape[0]):
            yield from _slices(array[i])
        return
    step = max(1, SLICE_ELEMENTS // max(row, 1))
    for start in range(0, array.shape[0], step):
        yield np.ascontiguousarray(array[start : start + step]).reshape(-1)


class StatsAccumulator:
    """Running statistics over slices of one array; partial accumulators of chunks can be merged.

    Args:
        dtype: The array's dtype (decides int/bool/float semantics).
    """

    __slots__ = ("kind", "count", "nan", "inf", "min", "max", "total", "sumsq")

    def __init__(self, dtype: np.dtype) -> None:
        self.kind = _kind(np.dtype(dtype))
        self.count = 0  # finite elements
        self.nan = 0
        self.inf = 0
        self.min: Any = None
        self.max: Any = None
        self.total = 0.0
        self.sumsq = 0.0

    def update(self, array: np.ndarray) -> StatsAccumulator:
        """Add the elements of ``array`` (any shape) to the statistics.

        Args:
            array: Data of the accumulator's dtype.

        Returns:
            ``self``, for chaining.
        """
        for piece in _slices(array):
            if piece.size:
                self._update_flat(piece)
        return self

    def _update_flat(self, x: np.ndarray) -> None:
        if self.kind == "bool":
            x = x.view(np.uint8)
        if self.kind == "float":
            if x.dtype not in _NATIVE_FLOATS:
                x = _scratch(np.float32, x)
            lo, hi = x.min(), x.max()
            if not (np.isfinite(lo) and np.isfinite(hi)):
                finite = np.isfinite(x)
                n_finite = int(np.count_nonzero(finite))
                n_inf = int(np.count_nonzero(np.isinf(x)))
                self.inf += n_inf
                self.nan += x.size - n_finite - n_inf
                if n_finite == 0:
                    return
                x = x[finite]
                lo, hi = x.min(), x.max()
            lo, hi = float(lo), float(hi)
        else:
            lo, hi = int(x.min()), int(x.max())
        self.count += x.size
        if x.dtype == np.float64:
            self.total += float(x.sum())
            self.sumsq += float(np.einsum("i,i->", x, x))  # not np.dot: BLAS threads thrash in a pool
        else:
            x64 = _scratch(np.float64, x)
            self.total += float(x64.sum())
            self.sumsq += float(np.multiply(x64, x64, out=x64).sum())
        self.min = lo if self.min is None else min(self.min, lo)
        self.max = hi if self.max is None else max(self.max, hi)

    def merge(self, other: StatsAccumulator) -> StatsAccumulator:
        """Fold another accumulator (for another part of the same array) into this one.

        Args:
            other: Accumulator of the same kind.

        Returns:
            ``self``.
        """
        self.count += other.count
        self.nan += other.nan
        self.inf += other.inf
        self.total += other.total
        self.sumsq += other.sumsq
        if other.min is not None:
            self.min = other.min if self.min is None else min(self.min, other.min)
            self.max = other.max if self.max is None else max(self.max, other.max)
        return self

    def result(self) -> dict[str, Any]:
        """The JSON-safe statistics dictionary (keys min, max, mean, l2norm, nanCount, infCount)."""
        if self.count == 0:
            lo = hi = mean = l2 = None
        else:
            lo, hi = self.min, self.max
            mean = _finite_or_none(self.total / self.count)
            l2 = _finite_or_none(math.sqrt(self.sumsq))
        return {"min": lo, "max": hi, "mean": mean, "l2norm": l2, "nanCount": self.nan, "infCount": self.inf}


_local = threading.local()


def _scratch(dtype: type, values: np.ndarray) -> np.ndarray:
    """``values`` cast into this thread's reusable buffer of ``dtype`` (at most ``SLICE_ELEMENTS`` elements).

    Reusing one buffer per thread matters: fresh multi-MiB temporaries in every pool thread cost more
    in page faults than the arithmetic itself.
    """
    key = np.dtype(dtype).char
    buffer = getattr(_local, key, None)
    if buffer is None or buffer.size < values.size:
        buffer = np.empty(max(values.size, SLICE_ELEMENTS), dtype=dtype)
        setattr(_local, key, buffer)
    out = buffer[: values.size]
    np.copyto(out, values, casting="unsafe")
    return out


def _finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None


def compute_stats(array: np.ndarray) -> dict[str, Any]:
    """Statistics of a whole array (see the module docstring for the exact definitions).

    Args:
        array: bool, integer, float16/32/64, bfloat16 or float8 data of any shape.

    Returns:
        ``{"min", "max", "mean", "l2norm", "nanCount", "infCount"}`` with Python ints/floats or ``None``.
    """
    array = np.asarray(array)
    return StatsAccumulator(array.dtype).update(array).result()
