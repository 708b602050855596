"""The dask helpers' old address, kept for one release: they live in the leaf :mod:`megadump_zarr._parallel`.

``verify`` and ``analyse`` both hand work to dask, and ``verify`` ranks below ``analyse``; the helpers import
nothing of the package, so they sit below both. Import them from ``megadump_zarr._parallel``.
"""

from __future__ import annotations

from megadump_zarr._parallel import active_client, map_ordered

__all__ = ["active_client", "map_ordered"]
