"""Make zarr itself load megadump_zarr's data types, in an interpreter that never imports megadump_zarr.

zarr 3.1.x collects the ``zarr.data_type`` entry points (we declare ours there, which is the right place
and what newer zarr releases load) but never loads them: nothing calls its data-type registry's lazy
load. zarr does load every ``zarr.buffer`` entry point before it reads its first ``zarr.json`` (the
default buffer prototype is looked up for every store read). This module is declared as such an entry
point: importing it registers bfloat16/float8 (``megadump_zarr.store.dtypes``), and the class it hands
back is zarr's own default ``Buffer``, registered under the name it already has, so zarr's buffer
registry is unchanged. (zarr reads an *array's* own zarr.json with a fixed CPU prototype, so
``zarr.open_array(path)`` of a bfloat16 array as the very first zarr read of a process does not trigger
it; any group read does, which covers ``xr.open_zarr``. ``import megadump_zarr`` always does.) Keep this module and ``dtypes`` free of heavy imports: every zarr user loads them.
"""

from zarr.core.buffer.cpu import Buffer

from megadump_zarr.store import dtypes as _dtypes  # noqa: F401  (registers the data types on import)

__all__ = ["Buffer"]
