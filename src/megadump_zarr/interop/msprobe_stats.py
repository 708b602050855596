"""Moved to :mod:`megadump_zarr.read.msprobe.statistics_table` (in-place reading serves the same tables)."""

from megadump_zarr.read.msprobe.statistics_table import statistics_table

__all__ = ["statistics_table"]
