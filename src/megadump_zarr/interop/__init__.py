"""Interoperability: import legacy ``torch.save`` dumps, export windows to HDF5/netCDF4.

``convert_legacy`` (needs torch) and ``export_hdf5`` / ``decode_hdf5_attrs`` (need h5py and h5netcdf, the
``hdf5`` extra) are imported on first use, so importing this package pulls in neither.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = ["convert_legacy", "decode_hdf5_attrs", "export_hdf5"]

_PUBLIC = {
    "convert_legacy": "megadump_zarr.interop.legacy",
    "export_hdf5": "megadump_zarr.interop.hdf5",
    "decode_hdf5_attrs": "megadump_zarr.interop.hdf5",
}


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'megadump_zarr.interop' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
