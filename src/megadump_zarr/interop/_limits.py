"""Moved to :mod:`megadump_zarr.read.msprobe.limits` (the read layer checks msprobe dumps in place too)."""

from megadump_zarr.read.msprobe.limits import INT64_MAX, check_declared_bytes, check_npy_header, supported_itemsize

__all__ = ["INT64_MAX", "check_declared_bytes", "check_npy_header", "supported_itemsize"]
