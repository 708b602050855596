"""Plots of dumped tensors: a heatmap of a 2-D view, the heatmap of a difference, and a histogram.

Both take a lazy ``xarray.DataArray`` (``Dump.tensor``, ``Dump.record_array``, ``xr.open_zarr(...)[name]``),
a numpy array or a torch tensor, read only what they draw, and return the matplotlib ``Axes``::

    from megadump_zarr.analyse.plot import plot_heatmap, plot_histogram
    plot_heatmap(dump.tensor("ws", stage="expert_up"))
    plot_histogram(dump.record_array(path), bins=50)

Without ``ax`` they draw on a new ``pyplot`` figure (shown inline in a notebook); pass an ``Axes`` of a
``matplotlib.figure.Figure`` to draw without pyplot (as ``megadump plot`` does, with the Agg canvas).

Colours: data of both signs gets a diverging colormap (:data:`DIVERGING`) centred on 0 with
symmetric limits ±max|x| (``TwoSlopeNorm``); data of one sign a sequential one (:data:`SEQUENTIAL`); a
difference (:func:`plot_diff`) the diverging one with symmetric limits (``CenteredNorm`` at 0). Equal
magnitudes get equal colours either way. Every heatmap has a labelled colour bar and a title naming the tensor
and where it was captured (window, invocation, step, stage; see :func:`heatmap_title`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = [
    "DIVERGING",
    "HEATMAP_MAX_SIZE",
    "HISTOGRAM_MAX_ELEMENTS",
    "SEQUENTIAL",
    "diff_values",
    "heatmap_title",
    "heatmap_values",
    "histogram_values",
    "plot_diff",
    "plot_heatmap",
    "plot_histogram",
]

HEATMAP_MAX_SIZE = 512
"""Largest heatmap side: longer axes are strided down to at most this many cells."""
HISTOGRAM_MAX_ELEMENTS = 1 << 22
"""Histograms of larger tensors use every k-th row along axis 0 (k chosen to stay under this)."""
DIVERGING = "RdBu_r"
"""Colormap of signed data and of differences (blue below 0, red above)."""
SEQUENTIAL = "viridis"
"""Colormap of data of one sign."""
_WHERE = ("window", "invocation", "step", "stage", "kernel")


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


def heatmap_title(name: Any, where: dict[str, Any] | None = None, *, detail: str | None = None) -> str:
    """``ws · window 0 · invocation 2 · step 1 · stage expert_up`` (kernel where there is no stage).

    Args:
        name: The tensor name.
        where: ``window``, ``invocation``, ``step``, ``stage``, ``kernel`` (missing ones are left out).
        detail: A second line (shape, dtype, striding).
    """
    where = {
        k: v
        for k, v in (where or {}).items()
        if v is not None and v != "" and not (isinstance(v, float) and math.isnan(v))
    }  # never a bare "stage"
    parts = [str(name)]
    for key in ("window", "invocation", "step", "stage"):
        if key in where:
            parts.append(f"{key} {where[key]}")
    if "stage" not in where and "kernel" in where:
        parts.append(f"kernel {where['kernel']}")
    title = " · ".join(parts)
    return f"{title}\n{detail}" if detail else title


def _where(da: Any, where: dict[str, Any] | None) -> dict[str, Any]:
    found = {k: da.attrs[k] for k in _WHERE if k in getattr(da, "attrs", {})}
    found.update({k: v for k, v in (where or {}).items() if v is not None})
    return found


def _detail(da: Any, row_step: int, col_step: int) -> str:
    text = f"[{'×'.join(str(int(s)) for s in da.shape) or 'scalar'}] {da.dtype}"
    if da.ndim > 2:
        text += f"; {', '.join(f'{d}=0' for d in da.dims[2:])}"
    if row_step > 1 or col_step > 1:
        text += f"; every {row_step}×{col_step}"
    return text


def _norm(values: np.ndarray, *, centred: bool) -> tuple[Any, str]:
    """The norm and colormap for ``values``: diverging at 0 for signed data or differences."""
    from matplotlib.colors import CenteredNorm, Normalize, TwoSlopeNorm

    finite = values[np.isfinite(values)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
    if centred:
        half = max(abs(lo), abs(hi))
        return CenteredNorm(vcenter=0.0, halfrange=half if half > 0 else 1.0), DIVERGING
    if lo < 0 < hi:  # symmetric, so equal magnitudes get equal colours: -0.28 stays light next to +2.95
        half = max(abs(lo), abs(hi))
        return TwoSlopeNorm(vcenter=0.0, vmin=-half, vmax=half), DIVERGING
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    return Normalize(vmin=lo, vmax=hi), SEQUENTIAL


def _draw(
    values: np.ndarray,
    shape: tuple[int, int],
    steps: tuple[int, int],
    dims: tuple[str, str],
    ax: Any,
    *,
    norm: Any,
    cmap: str,
    title: str,
    label: str,
    colorbar: bool,
    origin: tuple[int, int] = (0, 0),
) -> Any:
    import matplotlib
    from matplotlib.ticker import MaxNLocator

    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(8, 6))
    n_rows, n_cols = shape
    colormap = matplotlib.colormaps[cmap].with_extremes(bad="#d9d9d9")
    image = ax.imshow(
        np.ma.masked_invalid(values),
        aspect="auto",
        interpolation="nearest",
        cmap=colormap,
        norm=norm,
        extent=(origin[1] - 0.5, origin[1] + n_cols - 0.5, origin[0] + n_rows - 0.5, origin[0] - 0.5),
    )
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(dims[1] + (f" (every {steps[1]})" if steps[1] > 1 else ""))
    ax.set_ylabel(dims[0] + (f" (every {steps[0]})" if steps[0] > 1 else ""))
    ax.set_title(title, fontsize=10)
    if colorbar:
        bar = ax.figure.colorbar(image, ax=ax)
        bar.set_label(label)
    return ax


def _origin(da: Any) -> tuple[int, int]:
    """The whole tensor's index of ``da``'s first row and column: where a dimension has an integer coordinate
    that counts up by one (an L1 record's global rows), its first value; else 0."""
    out = []
    dims = ("", da.dims[0]) if da.ndim == 1 else tuple(da.dims[:2])
    for dim in dims:
        coord = da.coords.get(dim) if dim else None
        values = None if coord is None or coord.ndim != 1 else np.asarray(coord.values)
        if values is not None and values.size and values.dtype.kind in "iu" and np.all(np.diff(values) == 1):
            out.append(int(values[0]))
        else:
            out.append(0)
    return out[0], out[1]


def _extent(da: Any) -> tuple[int, int]:
    return (1, int(da.shape[-1])) if da.ndim == 1 else (int(da.shape[0]), int(da.shape[1]))


def plot_heatmap(
    da: Any,
    ax: Any = None,
    *,
    max_size: int = HEATMAP_MAX_SIZE,
    cmap: str | None = None,
    title: str | None = None,
    colorbar: bool = True,
    label: str | None = None,
    where: dict[str, Any] | None = None,
) -> Any:
    """Heatmap of the first two dimensions of ``da`` (see :func:`heatmap_values`).

    Axes are labelled with the dimension names and ticks in original indices, so a strided heatmap of
    a huge tensor still reads in the tensor's coordinates, and an L1 record's rows read as the whole
    tensor's (its row coordinate, e.g. rows 24..31, not 0..7). NaN cells (e.g. not captured by a truncated
    record) are drawn light grey. Signed data: :data:`DIVERGING` centred on 0; otherwise :data:`SEQUENTIAL`.

    Args:
        da: The tensor (DataArray, numpy array or torch tensor).
        ax: Axes to draw on (default: a new pyplot figure).
        max_size: Most cells per side (longer axes are strided).
        cmap: Matplotlib colormap name (default: by the data's signs, see above).
        title: Title (default: :func:`heatmap_title` of the name, ``where`` and the DataArray's attrs,
            then shape, dtype and any striding).
        colorbar: Add a colour bar.
        label: Colour bar label (default: ``name (dtype)``).
        where: ``window``/``invocation``/``step``/``stage``/``kernel`` for the title.

    Returns:
        The Axes.
    """
    da = _as_dataarray(da)
    values, (row_step, col_step), dims = heatmap_values(da, max_size)
    norm, default_cmap = _norm(values, centred=False)
    name = da.name if da.name is not None else "tensor"
    if title is None:
        title = heatmap_title(name, _where(da, where), detail=_detail(da, row_step, col_step))
    return _draw(
        values,
        _extent(da),
        (row_step, col_step),
        dims,
        ax,
        norm=norm,
        cmap=cmap or default_cmap,
        title=title,
        label=label or f"{name} ({da.dtype})",
        colorbar=colorbar,
        origin=_origin(da),
    )


def diff_values(
    a: Any, b: Any, max_size: int = HEATMAP_MAX_SIZE
) -> tuple[np.ndarray, tuple[int, int], tuple[str, str]]:
    """``a - b`` (in float64) over the cells a heatmap shows, read lazily; as :func:`heatmap_values`.

    Raises:
        ValueError: The shapes differ.
    """
    a, b = _as_dataarray(a), _as_dataarray(b)
    if tuple(a.shape) != tuple(b.shape):
        raise ValueError(f"cannot subtract {_label(b)} from {_label(a)}: their shapes differ")
    va, steps, dims = heatmap_values(a, max_size)
    vb, _, _ = heatmap_values(b, max_size)
    return va.astype(np.float64) - vb.astype(np.float64), steps, dims


def plot_diff(
    a: Any,
    b: Any,
    ax: Any = None,
    *,
    max_size: int = HEATMAP_MAX_SIZE,
    title: str | None = None,
    colorbar: bool = True,
    label: str | None = None,
    where: dict[str, Any] | None = None,
) -> Any:
    """Heatmap of ``a - b``: :data:`DIVERGING`, symmetric about 0 (``CenteredNorm``), NaN grey.

    Args:
        a: The tensor under test.
        b: The reference, same shape.
        ax: Axes to draw on (default: a new pyplot figure).
        max_size: Most cells per side.
        title: Title (default: :func:`heatmap_title` with ``A − B``, the largest ``|A − B|`` and shape).
        colorbar: Add a colour bar.
        label: Colour bar label (default: ``A − B``).
        where: ``window``/``invocation``/``step``/``stage``/``kernel`` for the title.

    Returns:
        The Axes.

    Raises:
        ValueError: The shapes differ.
    """
    a, b = _as_dataarray(a), _as_dataarray(b)
    values, (row_step, col_step), dims = diff_values(a, b, max_size)
    norm, cmap = _norm(values, centred=True)
    name = a.name if a.name is not None else "tensor"
    if title is None:
        finite = values[np.isfinite(values)]
        worst = f"; max |A − B| {float(np.abs(finite).max()):.4g}" if finite.size else ""
        detail = f"A − B{worst}; {_detail(a, row_step, col_step)}" + (f" vs {b.dtype}" if b.dtype != a.dtype else "")
        title = heatmap_title(name, _where(a, where), detail=detail)
    return _draw(
        values,
        _extent(a),
        (row_step, col_step),
        dims,
        ax,
        norm=norm,
        cmap=cmap,
        title=title,
        label=label or f"A − B ({name})",
        colorbar=colorbar,
        origin=_origin(a),
    )


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


def plot_histogram(
    da: Any,
    ax: Any = None,
    bins: int = 100,
    *,
    max_elements: int = HISTOGRAM_MAX_ELEMENTS,
    log: bool = False,
    title: str | None = None,
    where: dict[str, Any] | None = None,
) -> Any:
    """Histogram of the finite values of ``da``; NaN/Inf counts go into the title.

    Args:
        da: The tensor (DataArray, numpy array or torch tensor).
        ax: Axes to draw on (default: a new pyplot figure).
        bins: Number of bins.
        max_elements: Larger tensors are subsampled along axis 0 (noted in the title).
        log: Logarithmic count axis.
        title: Title (default: name, ``where`` as in :func:`heatmap_title`, shape, dtype, NaN/Inf counts).
        where: ``window``/``invocation``/``step``/``stage``/``kernel`` for the title.

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
        name = da.name if da.name is not None else "tensor"
        title = heatmap_title(name, _where(da, where), detail=f"{_label(da)}: {', '.join(extra)}")
    ax.set_title(title)
    return ax
