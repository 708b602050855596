"""Make zarr, dask and xarray load megadump_zarr's data types in an interpreter that never imports us.

zarr 3.1.x collects the ``zarr.data_type`` entry points (we declare ours there, which is the right place
and what newer zarr releases load) but never loads them: nothing calls its data-type registry's lazy
load, and an array's ``data_type`` is parsed before any other pluggable part of zarr is looked up. So we
register from every hook that the ecosystem *does* load before a bfloat16/float8 array is parsed:

* ``zarr.buffer`` (this module's :class:`Buffer`): zarr loads every such entry point the first time it
  looks up its default buffer prototype, which every *group* read does (``zarr.open_group``,
  ``xr.open_zarr``, ``xr.open_datatree(engine="zarr")``). The class handed back is zarr's own default
  ``Buffer``, registered under the name it already has, so zarr's buffer registry is unchanged.
* ``dask.sizeof`` (:func:`register_sizeof`): dask loads every such entry point when ``dask.sizeof`` is
  imported, which ``import dask.array`` does, so ``dask.array.from_zarr(url)`` works as a process's
  first zarr call. The registrar adds nothing to dask's ``sizeof``.
* ``xarray.backends`` (``megadump_zarr.engine``): xarray loads every backend entry point when it picks
  an engine for ``open_dataset``/``open_zarr``/``open_datatree``.
* ``import megadump_zarr`` registers them too.

What no hook covers: ``zarr.open_array(path)`` of a bfloat16/float8 array as the very first zarr read
of a process that imported neither megadump_zarr, dask.array nor xarray, and read no group (zarr reads
an array's own ``zarr.json`` with a fixed CPU buffer prototype and parses its data type first). zarr
3.2's data-type entry points will cover it. Keep this module and ``dtypes`` free of heavy imports: every
zarr, dask and xarray user loads them.
"""

from typing import Any

from zarr.core.buffer.cpu import Buffer

from megadump_zarr.store import dtypes as _dtypes  # noqa: F401  (registers the data types on import)

__all__ = ["Buffer", "register_sizeof"]


def register_sizeof(sizeof: Any) -> None:
    """The ``dask.sizeof`` entry point: importing this module registered the data types; nothing else to do.

    Args:
        sizeof: dask's ``sizeof`` dispatcher (left unchanged).
    """
    del sizeof
