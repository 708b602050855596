"""Plots of dumped tensors: a heatmap of a 2-D view and a histogram of the values.

Both take a lazy ``xarray.DataArray`` (``Dump.tensor``, ``Dump.record_array``, ``xr.open_zarr(...)[name]``),
a numpy array or a torch tensor, read only what they draw, and return the matplotlib ``Axes``::

    from megadump_zarr.analyse.plot import plot_heatmap, plot_histogram
    plot_heatmap(dump.tensor("ws", stage="expert_up"))
    plot_histogram(dump.record_array(path), bins=50)

Without ``ax`` they draw on a new ``pyplot`` figure (shown inline in a notebook); pass an ``Axes`` of a
``matplotlib.figure.Figure`` to draw without pyplot (as ``megadump plot`` does, with the Agg canvas).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["HEATMAP_MAX_SIZE", "HISTOGRAM_MAX_ELEMENTS", "heatmap_values", "histogram_values", "plot_heatmap",
           "plot_histogram"]

HEATMAP_MAX_SIZE = 512
"""Largest heatmap side: longer axes are strided down to at most this many cells."""
HISTOGRAM_MAX_ELEMENTS = 1 << 22
"""Histograms of larger tensors use every k-th row along axis 0 (k chosen to stay under this)."""


def _as_dataarray(x: Any) -> Any:
    import xarray as xr

    if isinstance(x, xr.DataArray):
        return x
    if type(x).__module__.startswith("torch"):
        x = x.detach().cpu()
        x = x.float().numpy() if not x.dtype.is_floating_point or x.dtype.itemsize < 4 else x.numpy()
    return xr.DataArray(np.asarray(x))


def _float(values: Any) -> np.ndarray:
    values = np.asarray(values)
    if values.dtype.kind == "f" and values.dtype.itemsize >= 4:
        return values
    return values.astype(np.float32 if values.dtype.itemsize <= 2 else np.float64)


def _label(da: Any) -> str:
    name = da.name if da.name is not None else "tensor"
    shape = "×".join(str(int(s)) for s in da.shape) or "scalar"
    return f"{name} [{shape}] {da.dtype}"


def heatmap_values(da: Any, max_size: int = HEATMAP_MAX_SIZE) -> tuple[np.ndarray, tuple[int, int], tuple[str, str]]:
    """The values a heatmap of ``da`` shows, read lazily.

    The first two dimensions (other dimensions at index 0; a 1-D tensor is one row), every ``step``-th
    element along an axis longer than ``max_size``.

    Args:
        da: The tensor (DataArray, numpy array or torch tensor).
        max_size: Most cells per side.

    Returns:
        ``(values, (row_step, col_step), (row_dim, col_dim))``; values as float32/float64, NaN kept.

    Raises:
        ValueError: A 0-dimensional tensor.
    """
    da = _as_dataarray(da)
    if da.ndim == 0:
        raise ValueError(f"a heatmap needs at least one dimension; {_label(da)} is a scalar")
    if max_size < 1:
        raise ValueError(f"max_size must be positive, got {max_size}")
    index: dict[str, Any] = {d: 0 for d in da.dims[2:]}
    steps = []
    for dim in da.dims[:2]:
        n = int(da.sizes[dim])
        step = max(1, math.ceil(n / max_size))
        steps.append(step)
        index[dim] = slice(None, None, step)
    values = _float(da.isel(index).values)
    if da.ndim == 1:
        return values.reshape(1, -1), (1, steps[0]), ("", str(da.dims[0]))
    return values, (steps[0], steps[1]), (str(da.dims[0]), str(da.dims[1]))


def plot_heatmap(da: Any, ax: Any = None, *, max_size: int = HEATMAP_MAX_SIZE, cmap: str = "viridis",
                 title: str | None = None, colorbar: bool = True) -> Any:
    """Heatmap of the first two dimensions of ``da`` (see :func:`heatmap_values`).

    Axes are labelled with the dimension names and ticks in original indices, so a strided heatmap of
    a huge tensor still reads in the tensor's coordinates. NaN cells (e.g. not captured by a truncated
    record) are drawn light grey.

    Args:
        da: The tensor (DataArray, numpy array or torch tensor).
        ax: Axes to draw on (default: a new pyplot figure).
        max_size: Most cells per side (longer axes are strided).
        cmap: Matplotlib colormap name.
        title: Title (default: name, shape, dtype and any striding).
        colorbar: Add a colorbar.

    Returns:
        The Axes.
    """
    import matplotlib

    da = _as_dataarray(da)
    values, (row_step, col_step), (row_dim, col_dim) = heatmap_values(da, max_size)
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(8, 6))
    n_rows = 1 if da.ndim == 1 else int(da.shape[0])
    n_cols = int(da.shape[-1] if da.ndim == 1 else da.shape[1])
    colormap = matplotlib.colormaps[cmap].with_extremes(bad="#d9d9d9")
    finite = values[np.isfinite(values)]
    vmin, vmax = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    image = ax.imshow(np.ma.masked_invalid(values), aspect="auto", interpolation="nearest", cmap=colormap,
                      vmin=vmin, vmax=vmax, extent=(-0.5, n_cols - 0.5, n_rows - 0.5, -0.5))
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(col_dim + (f" (every {col_step})" if col_step > 1 else ""))
    ax.set_ylabel(row_dim + (f" (every {row_step})" if row_step > 1 else ""))
    if title is None:
        title = _label(da)
        if da.ndim > 2:
            title += f"; {', '.join(f'{d}=0' for d in da.dims[2:])}"
    ax.set_title(title)
    if colorbar:
        ax.figure.colorbar(image, ax=ax)
    return ax


def histogram_values(da: Any, max_elements: int = HISTOGRAM_MAX_ELEMENTS) -> tuple[np.ndarray, int, int, int]:
    """The finite values a histogram of ``da`` counts, read lazily.

    Args:
        da: The tensor.
        max_elements: Larger tensors use every k-th index along axis 0.

    Returns:
        ``(finite values, NaN count, Inf count, row step)`` (counts over the values read).
    """
    da = _as_dataarray(da)
    step = 1
    if da.ndim and da.size > max_elements:
        rows = int(da.shape[0])
        per_row = max(1, da.size // max(1, rows))
        step = max(1, math.ceil(rows / max(1, max_elements // per_row)))
        da = da.isel({da.dims[0]: slice(None, None, step)})
    values = _float(da.values).reshape(-1)
    finite = np.isfinite(values)
    return values[finite], int(np.isnan(values).sum()), int(np.isinf(values).sum()), step


def plot_histogram(da: Any, ax: Any = None, bins: int = 100, *, max_elements: int = HISTOGRAM_MAX_ELEMENTS,
                   log: bool = False, title: str | None = None) -> Any:
    """Histogram of the finite values of ``da``; NaN/Inf counts go into the title.

    Args:
        da: The tensor (DataArray, numpy array or torch tensor).
        ax: Axes to draw on (default: a new pyplot figure).
        bins: Number of bins.
        max_elements: Larger tensors are subsampled along axis 0 (noted in the title).
        log: Logarithmic count axis.
        title: Title (default: name, shape, dtype, NaN/Inf counts).

    Returns:
        The Axes.
    """
    if bins < 1:
        raise ValueError(f"bins must be positive, got {bins}")
    da = _as_dataarray(da)
    values, nans, infs, step = histogram_values(da, max_elements)
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(8, 5))
    if values.size:
        ax.hist(values, bins=bins, log=log, color="#4c72b0")
    else:
        ax.text(0.5, 0.5, "no finite values", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("value")
    ax.set_ylabel("count")
    if title is None:
        extra = [f"{values.size} finite"]
        if nans:
            extra.append(f"{nans} NaN")
        if infs:
            extra.append(f"{infs} Inf")
        if step > 1:
            extra.append(f"every {step}th row")
        title = f"{_label(da)}: {', '.join(extra)}"
    ax.set_title(title)
    return ax
