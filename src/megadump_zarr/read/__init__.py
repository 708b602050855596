"""Read a tensor dump: ``open_dump(root)`` gives a :class:`Dump` (records table, xarray views, tensors).

Modules: ``location`` (root path/URL -> zarr store), ``catalog`` (windows from metadata), ``records_table``
(the records table from metadata), ``dump`` (the ``Dump`` class), ``stitch`` (L1 tensors from task slices), ``truncated``
(records in logical shape, lazily).
"""

from __future__ import annotations

from megadump_zarr.read.records_table import EXTRA_COLUMNS, RECORD_COLUMNS
from megadump_zarr.read.dump import Dump, open_dump

__all__ = ["Dump", "EXTRA_COLUMNS", "RECORD_COLUMNS", "open_dump"]
