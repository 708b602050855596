"""Moved to :mod:`megadump_zarr.read.msprobe.stats` (in-place reading serves the same tables)."""

from megadump_zarr.read.msprobe.stats import statistics_table

__all__ = ["statistics_table"]
