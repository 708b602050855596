"""A heatmap of an L1 record reads in the whole tensor's rows (its row coordinate), not the record's 0..n."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import xarray as xr

from megadump_zarr.analyse.plot import plot_diff, plot_heatmap


def _record(first: int) -> xr.DataArray:
    values = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
    return xr.DataArray(values, dims=("token", "k"), coords={"token": np.arange(first, first + 8)}, name="x")


def test_record_rows_are_the_tensors_rows() -> None:
    ax = plot_heatmap(_record(24))
    assert ax.get_ylim() == (31.5, 23.5) and ax.get_xlim() == (-0.5, 3.5)
    assert ax.get_ylabel() == "token"
    ax = plot_diff(_record(24), _record(24) * 0)
    assert ax.get_ylim() == (31.5, 23.5)


def test_without_a_row_coordinate_rows_count_from_zero() -> None:
    ax = plot_heatmap(_record(0).drop_vars("token"))
    assert ax.get_ylim() == (7.5, -0.5)
