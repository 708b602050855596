"""The xarray engine ``megadump``: ``xr.open_dataset(root, engine="megadump", group=...)`` and ``xr.open_datatree``.

A face beside the CLI: it reads through :mod:`megadump_zarr.read` (``Dump.tensor``, ``Dump.record_array``)
and hands xarray lazily indexed variables (see :mod:`megadump_zarr.engine.backend`), so a dump opens as
stitched logical tensors with labelled coordinates, not as raw task records.

xarray imports this module (its ``xarray.backends`` entry point) whenever it picks an engine, for every
``open_dataset`` in the interpreter, so it must stay light: everything heavy is imported on first use.
Importing it registers bfloat16/float8 with zarr (``store.dtypes``), which makes ``xr.open_zarr`` of a
bf16 array work in an interpreter that never imported megadump_zarr.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any, ClassVar

from xarray.backends import BackendEntrypoint

from megadump_zarr.store import dtypes as _dtypes  # noqa: F401  (registers bf16/fp8 with zarr)

__all__ = ["MegadumpBackendEntrypoint"]

_OPEN_PARAMETERS = ("filename_or_obj", "drop_variables", "group", "upcast", "storage_options")


class MegadumpBackendEntrypoint(BackendEntrypoint):
    """xarray backend for megadump_zarr dump roots (``engine="megadump"``).

    ``open_dataset`` keywords (besides xarray's own ``chunks``, ``drop_variables``, ...):

    Args:
        group: ``rank_{r}/window_{wwww}/invocation_{iiiiii}_{direction}`` (an L0 invocation: its tensors),
            ``.../invocation_.../stages/{stage}`` (an L1 stage: its stitched tensors; ``stages/`` optional),
            or a root, rank or window group (attributes only). Default: the root.
        upcast: A float dtype (``"float32"``): bfloat16 and float8 variables are decoded to it on read, so
            numpy reductions, ``.plot()`` and netCDF export work; ``None`` keeps the stored dtype.
        storage_options: fsspec options for URL roots.
    """

    description = "megadump_zarr dumps: stitched MegaKernel tensors with task/owner/core coordinates"
    url = "https://github.com/megadump/megadump_zarr"
    open_dataset_parameters: ClassVar[tuple[str, ...]] = _OPEN_PARAMETERS
    supports_groups = True

    def guess_can_open(self, filename_or_obj: Any) -> bool:
        """Whether ``filename_or_obj`` is a local dump root (its ``zarr.json`` names megadump_zarr).

        Args:
            filename_or_obj: What was passed to ``xr.open_dataset``.
        """
        if not isinstance(filename_or_obj, str | os.PathLike):
            return False
        path = os.fspath(filename_or_obj)
        if "://" in str(path):
            return False
        try:
            with open(os.path.join(path, "zarr.json"), "rb") as handle:
                doc = json.loads(handle.read(1 << 20))
        except (OSError, ValueError, TypeError):
            return False
        attrs = doc.get("attributes") if isinstance(doc, dict) else None
        return isinstance(attrs, dict) and "megadump_zarr" in attrs

    def open_dataset(
        self,
        filename_or_obj: Any,
        *,
        drop_variables: str | Iterable[str] | None = None,
        group: str | None = None,
        upcast: Any = None,
        storage_options: dict[str, Any] | None = None,
    ) -> Any:
        """One group of a dump as a Dataset (see the class docstring for the keywords)."""
        from megadump_zarr.engine.backend import open_group_dataset

        return open_group_dataset(
            filename_or_obj, group=group, drop_variables=drop_variables, upcast=upcast, storage_options=storage_options
        )

    def open_groups_as_dict(
        self,
        filename_or_obj: Any,
        *,
        drop_variables: str | Iterable[str] | None = None,
        group: str | None = None,
        upcast: Any = None,
        storage_options: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Every group of a dump (or below ``group``) as ``{path: Dataset}``."""
        from megadump_zarr.engine.backend import open_groups

        return open_groups(
            filename_or_obj, group=group, drop_variables=drop_variables, upcast=upcast, storage_options=storage_options
        )

    def open_datatree(
        self,
        filename_or_obj: Any,
        *,
        drop_variables: str | Iterable[str] | None = None,
        group: str | None = None,
        upcast: Any = None,
        storage_options: dict[str, Any] | None = None,
    ) -> Any:
        """The whole dump (or the subtree at ``group``) as a DataTree."""
        from xarray import DataTree

        groups = self.open_groups_as_dict(
            filename_or_obj, drop_variables=drop_variables, group=group, upcast=upcast, storage_options=storage_options
        )
        return DataTree.from_dict(groups)
