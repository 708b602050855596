"""``Dump``: one dump root opened for reading — catalogue, records table, xarray views, tensors.

Nothing here reads chunk data until asked for values: ``windows()`` and ``records()`` read window
``zarr.json`` documents only, ``tree()``/``dataset()``/``record_array()`` return dask-backed objects
without default indexes, and ``tensor()`` reads only the small global-index coordinate arrays it
stitches by.

Window statuses: ``complete`` windows are what every default reads. ``aborted`` windows (committed
after a failure) and ``writing`` windows (torn: the writer was killed or is still writing; their
``zarr.json`` never says ``complete``) are listed by ``windows()``, included by ``records()`` and
``tree()`` only with ``include_incomplete=True``, and read by ``dataset()``/``tensor()`` only when
named with ``window=``.
"""

from __future__ import annotations

import asyncio
import math
import os
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from zarr.abc.store import Store
from zarr.core.sync import sync

from megadump_zarr.layout.paths import WINDOW_KEY
from megadump_zarr.read.statistics_table import load_tables
from megadump_zarr.read.catalog import (
    DataGroup,
    WindowInfo,
    check_root,
    data_groups,
    scan_windows,
    store_fetch,
    window_info,
    window_nodes,
)
from megadump_zarr.layout.dtypes import itemsize
from megadump_zarr.read.records_table import records_frame
from megadump_zarr.read.documents import check_array_doc, check_attributes, count_field, shape_field
from megadump_zarr.read.errors import DumpIntegrityError, FormatVersionError
from megadump_zarr.read.integrity import IntegrityStore, guard_read
from megadump_zarr.read.inventory import Inventories
from megadump_zarr.read.location import DumpLocation, get_bytes, open_location, store_path
from megadump_zarr.read.pack_arrays import RangeArray, RowArray, is_packed_array
from megadump_zarr.read.pack_checks import rest_nodes
from megadump_zarr.read.pack_record import PackedCoordinate, PackedRecord
from megadump_zarr.read.select import (
    check_tensor_choice,
    listing,
    no_match_message,
    pick_groups,
    pick_tensor_rows,
    pick_windows,
    select_records,
    single_group,
)
from megadump_zarr.read.stitch import Piece, stitch
from megadump_zarr.read.lazy import RecordArray, record_lazy, stored_dask, truncated_dask
from megadump_zarr.store.metadata import consolidated_sort_key
from megadump_zarr.read.truncated import (
    captured_mask,
    captured_rows,
    check_padded_rows,
    logical_dims,
    open_zarr_array,
)

if TYPE_CHECKING:
    import xarray as xr

__all__ = ["Dump", "open_dump"]


def open_dump(url: str | os.PathLike[str] | Store, storage_options: dict[str, Any] | None = None) -> Dump:
    """Open a dump root for reading.

    Args:
        url: The dump root: a local directory, a ``file://`` URL, an fsspec URL (``s3://bucket/prefix``,
            ``memory://name``), or a zarr ``Store`` rooted at the dump root.
        storage_options: fsspec options for URL roots (for example ``{"endpoint_url": ...}``).

    An msprobe dump directory (``dump_path``, ``step{N}/`` or ``step{N}/rank{R}|proc{PID}/``) opens in
    place, read-only, as its conversion would look (:mod:`megadump_zarr.read.msprobe.store`).

    Raises:
        ValueError: ``url`` is not a dump root; the message names it and what is missing. An msprobe
            directory whose ``dump.json`` is invalid or unsafe (naming the file and field).
        FormatVersionError: A window of another format than
            :data:`~megadump_zarr.layout.schema.FORMAT_VERSION` (naming it and both versions).
    """
    from megadump_zarr.read.msprobe import msprobe_location

    location = msprobe_location(url) or open_location(url, storage_options)
    attrs = check_root(location.store, location.url)
    dump = Dump(location, attrs)
    try:  # a window of another format is refused here, with the version found and the one supported
        dump._scan()
    except FormatVersionError:
        raise
    except ValueError:  # damage is named where it is read (records(), verify), never at open
        pass
    return dump


class _CommittedNodes:
    """The consolidated nodes as stored of the windows a :class:`Dump`'s catalogue read as committed, by window key
    (its integrity store's :data:`~megadump_zarr.read.integrity.Committed`: that store parses no catalogue).

    Args:
        infos: The dump's window catalogue (shared: windows scanned later count too).
    """

    def __init__(self, infos: dict[str, Any]) -> None:
        self.infos = infos

    def __call__(self, window: str) -> dict[str, dict[str, Any]] | None:
        info = self.infos.get(window)
        if info is None or isinstance(info, dict):  # a copy shipped to a worker holds the nodes themselves
            return info
        if not info.final:
            return None
        return info.stored if info.stored is not None else info.nodes

    def __getstate__(self) -> dict[str, Any]:  # the nodes, not the catalogue (its checked packs stay behind)
        return {"infos": {key: nodes for key in list(self.infos) if (nodes := self(key)) is not None}}


def _int_or(value: Any, default: int = -1) -> int:
    return default if value is None or value is pd.NA else int(value)


class Dump:
    """A dump root opened for reading (use :func:`open_dump`).

    Args:
        location: The opened root.
        root_attrs: The root group's attributes.
    """

    def __init__(self, location: DumpLocation, root_attrs: dict[str, Any] | None = None) -> None:
        self.root_attrs = dict(root_attrs or {})
        self._windows: dict[str, WindowInfo] = {}
        self.location = location
        # every read goes through this wrapper: missing/corrupt chunks of committed windows raise
        # DumpIntegrityError (``location`` keeps the plain store, for DumpSource.of and distributed workers)
        self._store = (
            location.store
            if isinstance(location.store, IntegrityStore)
            else IntegrityStore(
                location.store,
                _CommittedNodes(self._windows),
                location.url,
                Inventories(location.url, required=not getattr(location.store, "made_in_memory", False)),
            )
        )
        self._frames: dict[str, pd.DataFrame] = {}

    # ------------------------------------------------------------------ catalogue
    @property
    def root(self) -> str:
        """The dump root as given (path or URL)."""
        return self.location.url

    @property
    def store(self) -> Store:
        """The read-only zarr store of the root (wrapped: see :mod:`megadump_zarr.read.integrity`)."""
        return self._store

    def _scan(self) -> list[WindowInfo]:
        return scan_windows(self.store, self._windows)

    def windows(self) -> pd.DataFrame:
        """Every window of every rank, torn ones included.

        Returns:
            DataFrame with columns rank, window, status (``complete``/``aborted``/``writing``), level,
            invocations (count from the manifest), path (relative to the root), created_at,
            committed_at; ordered by (rank, window).
        """
        rows = [
            {
                "rank": info.rank,
                "window": info.window,
                "status": info.status,
                "level": info.level,
                "invocations": len(info.invocation_names),
                "path": info.key,
                "created_at": info.attrs.get("createdAt"),
                "committed_at": info.attrs.get("committedAt"),
            }
            for info in self._scan()
        ]
        columns = ["rank", "window", "status", "level", "invocations", "path", "created_at", "committed_at"]
        frame = pd.DataFrame(rows, columns=columns)
        for name in ("rank", "window", "invocations"):
            frame[name] = frame[name].astype(np.int64)
        return frame

    def _nodes(self, info: WindowInfo) -> dict[str, dict[str, Any]]:
        return window_nodes(self.store, info)

    def _node(self, info: WindowInfo, rel: str) -> dict[str, Any] | None:
        """The document of node ``rel`` of a window: a packed record's or row coordinate's description (found
        from its pack, :mod:`megadump_zarr.read.pack_record`), else the window's node."""
        nodes = info.nodes if info.nodes is not None else self._nodes(info)  # a torn window's packs: read now
        found = info.packed(rel)
        if found is not None:
            return found.doc
        return nodes.get(rel)

    def _array(self, info: WindowInfo, rel: str, doc: dict[str, Any]) -> Any:
        """The stored array of node ``rel`` of a window: a zarr array, or where a packed record or row
        coordinate is stored (``(pack array, row)``, :mod:`megadump_zarr.read.pack_rows`)."""
        found = info.packed(rel)
        if isinstance(found, PackedRecord):
            array = f"{info.key}/{found.array}" if info.key else found.array
            key = f"{info.key}/{rel}" if info.key else rel
            packs = info.packs
            return RowArray(
                packs, self.store, array, found.pack_doc, found.row, key, found.shape, self.root, found.source()
            )
        if isinstance(found, PackedCoordinate):
            return RangeArray(found.start, found.stop)
        return open_zarr_array(self.store, f"{info.key}/{rel}", doc)

    def _window_frame(self, info: WindowInfo) -> pd.DataFrame:
        cached = self._frames.get(info.key)
        if cached is not None:
            return cached
        nodes = info.stored if info.tables is not None and info.stored is not None else self._nodes(info)
        frame = records_frame([(info, nodes)], {info.key: load_tables(self.store, info.key, nodes)})
        if info.final:
            self._frames[info.key] = frame
        return frame

    def window_records(self, key: str) -> pd.DataFrame:
        """The records table of one committed window (what :meth:`records` concatenates), read on its own: a
        window this ``Dump`` has not scanned yet is read and joins its catalogue (a dask worker builds one
        window's table this way).

        Args:
            key: The window key (``rank_0/window_0003``).

        Raises:
            ValueError: The window is missing or not committed (the message names it).
        """
        info = self._windows.get(key)
        if info is None or not info.final:
            info = window_info(key, get_bytes(self.store, f"{key}/zarr.json"), fetch=store_fetch(self.store))
        if not info.final:
            raise ValueError(f"window {key} of {self.root} is not committed (status {info.status})")
        self._windows.setdefault(key, info)  # the integrity checks read which windows are committed here
        return self._window_frame(info)

    def records(self, *, include_incomplete: bool = False) -> pd.DataFrame:
        """One row per stored tensor, from metadata only (no chunk is read).

        Columns, in order: rank, window, invocation, step, direction, kernel, level, stage, task_id,
        stage_task_index, owner_label, owner_id, core_type, core_id, worker, io, index, name, dtype,
        shape, stored_shape, truncated, bytes, stored_bytes, min, max, mean, l2norm, nan_count,
        inf_count, path; then role, capture_phase, status, param_position, note, invocation_name, group.

        L0 rows have ``stage``, task columns, ``io`` and ``index`` missing and their L0 ``role``
        (external_input, stage_output, final_output) in ``role``; L1 rows have ``role`` missing.
        ``shape`` is the logical (actual) shape, ``stored_shape`` the stored array's (a truncated
        record stores a flat prefix). ``bytes``/``stored_bytes`` are the logical and stored payload
        sizes. Statistics are the writer's (over finite elements; see ``megadump_zarr.store.tensor_stats``).
        ``path`` and ``group`` are relative to the root (pass ``path`` to :meth:`record_array`).

        Args:
            include_incomplete: Also list records of ``aborted`` and torn (``writing``) windows; the
                ``status`` column tells them apart. Torn windows have no group documents, so their
                task and invocation columns come from the path names where possible.
        """
        frames = [self._window_frame(info) for info in self._scan() if include_incomplete or info.status == "complete"]
        frames = [f for f in frames if len(f)]
        if not frames:
            return records_frame([])
        if len(frames) == 1:
            return frames[0].copy()
        return pd.concat(frames, ignore_index=True)

    def catalogue(self) -> list[WindowInfo]:
        """Every window's catalogue entry (key, status, attributes), torn ones included, scanned once per
        ``Dump`` and kept: what faces that list groups (the xarray engine) read instead of scanning again."""
        return self._scan()

    def group_attributes(self, info: WindowInfo, rel: str) -> dict[str, Any]:
        """The attributes of node ``rel`` (relative to window ``info``), ``{}`` when it has none.

        Args:
            info: A window of :meth:`catalogue`.
            rel: A group path relative to the window (``invocation_000000_forward/stages/attn``).
        """
        nodes = self._nodes(info)
        attrs = info.tasks.task_attributes(rel) if info.tasks is not None else None
        if attrs is None:
            attrs = (nodes.get(rel) or {}).get("attributes")
        return dict(attrs) if isinstance(attrs, dict) else {}

    def unbuilt_windows(self) -> list[WindowInfo]:
        """The committed windows whose records table is not built yet (a committed window never changes, so
        a table built once, here or on a cluster and handed to :meth:`keep_records`, is kept)."""
        return [info for info in self._scan() if info.final and info.key not in self._frames]

    def keep_records(self, frames: dict[str, pd.DataFrame]) -> None:
        """Keep records tables built elsewhere (a dask cluster), by window key, for committed windows only.

        Args:
            frames: Window key -> its records table, as :meth:`records` builds it.
        """
        final = {info.key for info in self._scan() if info.final}
        self._frames.update({key: frame for key, frame in frames.items() if key in final})

    # ------------------------------------------------------------------ selection (see read.select)
    def _windows_for(self, rank: int, window: int | None) -> list[WindowInfo]:
        return pick_windows(self._scan(), rank, window, self.root)

    def _groups(
        self,
        rank: int,
        window: int | None,
        invocation: int | str | None,
        stage: str | None,
        task: int | str | None,
        owner: int | None = None,
        core: int | str | None = None,
    ) -> list[DataGroup]:
        infos = self._windows_for(rank, window)
        select = {"owner": owner, "core": core}

        def groups_of(info: WindowInfo) -> list[DataGroup]:
            groups = data_groups(info, self._nodes(info))
            if owner is None and core is None:
                return groups
            keep = set(select_records(self._window_frame(info), select)["group"])
            return [g for g in groups if g.key in keep]

        try:
            return pick_groups(infos, groups_of, rank, invocation, stage, task, self.root)
        except ValueError:
            if owner is None and core is None:
                raise
            frame = pd.concat([self._window_frame(info) for info in infos])
            why = (
                no_match_message(
                    frame, {"invocation": invocation, "stage": stage, "task": task, **select}, what="data groups"
                )
                or "no data group matches"
            )
            raise ValueError(f"{why} (rank {rank} window(s) {[w.window for w in infos]} of {self.root})") from None

    # ------------------------------------------------------------------ xarray views
    def dataset(
        self,
        *,
        rank: int = 0,
        window: int | None = None,
        invocation: int | str | None = None,
        stage: str | None = None,
        task: int | str | None = None,
        owner: int | None = None,
        core: int | str | None = None,
    ) -> xr.Dataset:
        """One data group as a lazy ``xarray.Dataset``: an L0 invocation group or an L1 task group.

        The Dataset is what ``xr.open_zarr(group)`` gives (dask-backed, dimension names and
        coordinates as stored, group attributes as ``attrs``), except that no default index is built,
        so no chunk is read; call ``ds.set_xindex(dim)`` for label selection along a coordinate.

        Args:
            rank: The rank.
            window: Window index; default: the first complete window of the rank with a match.
            invocation: Invocation id (int) or group name (``invocation_000001_forward``); default:
                the only matching one.
            stage: L1 stage name (original or path component); default: the only matching one.
            task: L1 task id (int) or task group name (``task_000003_worker_001``); default: the only
                matching one.
            owner: L1 owner id (e.g. the expert): only task groups holding that owner's records.
            core: L1 core id, or core type and id (``"MIX5"``): only task groups that ran there.

        Raises:
            ValueError: No match (the message names the filter that left nothing and the values that
                exist), or several matches (the message lists them).
        """
        groups = self._groups(rank, window, invocation, stage, task, owner, core)
        return self._open_group(single_group(groups))

    def _info(self, key: str) -> WindowInfo:
        window_key = "/".join(key.split("/")[:2])
        info = self._windows.get(window_key)
        if info is None:
            self._scan()
            info = self._windows.get(window_key)
        if info is None:
            raise ValueError(f"{key} is not inside a window of {self.root}")
        return info

    def _open_group(self, group: DataGroup) -> xr.Dataset:
        import xarray as xr

        info = self._info(group.key)
        if info.nodes is not None and info.packs is None:
            return xr.open_zarr(
                store_path(self.store, group.key),
                consolidated=True,
                chunks={},
                create_default_indexes=False,
                zarr_format=3,
            )
        return self._manual_dataset(info, group.key[len(info.key) + 1 :], {})

    def _manual_dataset(self, info: WindowInfo, rel: str, attrs: dict[str, Any]) -> xr.Dataset:
        """A Dataset of the arrays directly in ``rel``, from the window's nodes (torn windows have no group
        documents), or of a packed task group's records and row coordinates, each from its pack's row."""
        import xarray as xr

        nodes = self._nodes(info)
        tasks = info.tasks
        task_attrs = tasks.task_attributes(rel) if tasks is not None else None
        if task_attrs is not None:  # a packed task group: its members described from its pack
            paths = sorted((f"{rel}/{name}" for name in tasks.members(rel)), key=consolidated_sort_key)
            members = {path: info.packed(path) for path in paths}
            entries = [(path, member.doc) for path, member in members.items() if member is not None]
            group_attrs = task_attrs
        else:
            prefix = f"{rel}/" if rel else ""
            entries = [
                (path, doc)
                for path, doc in nodes.items()
                if doc.get("node_type") == "array" and path.startswith(prefix) and "/" not in path[len(prefix) :]
            ]
            group_attrs = (nodes.get(rel) or {}).get("attributes") or {}
        variables: dict[str, xr.Variable] = {}
        coords: dict[str, xr.Variable] = {}
        for path, doc in entries:
            name = path.rpartition("/")[2]
            key = f"{info.key}/{path}"
            array = self._array(info, path, doc)
            dims = tuple(doc.get("dimension_names") or (f"{name}_dim_{i}" for i in range(array.ndim)))
            variable = xr.Variable(dims, stored_dask(array, key, self.root), attrs=doc.get("attributes") or {})
            (coords if dims == (name,) else variables)[name] = variable
        return xr.Dataset(variables, coords=xr.Coordinates(coords, indexes={}), attrs={**group_attrs, **attrs})

    def tree(self, *, include_incomplete: bool = False) -> xr.DataTree:
        """The whole dump as a lazy ``xarray.DataTree``: ``/rank_{r}/window_{wwww}/invocation_.../...``.

        Committed windows open with ``xr.open_datatree(window, engine="zarr")`` from their consolidated
        metadata (one ``get`` per window, no chunk reads, no default indexes); every node keeps its
        group's attributes (window manifests, invocation and task attributes).

        Args:
            include_incomplete: Also include ``aborted`` windows and torn (``writing``) windows; torn
                ones are built from their arrays' own metadata (their groups have no documents).
        """
        import xarray as xr

        nodes: dict[str, xr.Dataset] = {"/": xr.Dataset(attrs=self.root_attrs)}
        for info in self._scan():
            if not include_incomplete and info.status != "complete":
                continue
            rank_path = f"/rank_{info.rank}"
            nodes.setdefault(rank_path, xr.Dataset())
            if info.nodes is not None and info.packs is None:
                window_tree = xr.open_datatree(
                    store_path(self.store, info.key),
                    engine="zarr",
                    chunks={},
                    create_default_indexes=False,
                    consolidated=True,
                    zarr_format=3,
                )
                for node in window_tree.subtree:
                    path = f"/{info.key}" + ("" if node.path == "/" else node.path)
                    nodes[path] = node.to_dataset(inherit=False)
            else:
                nodes[f"/{info.key}"] = xr.Dataset(attrs=info.attrs)
                members = rest_nodes(self._nodes(info))  # its packs: the task groups they hold, below
                parents = {p.rpartition("/")[0] for p, d in members.items() if d.get("node_type") == "array"}
                if info.nodes is not None:  # committed (a packed window): every group, with its attributes
                    parents |= {p for p, d in members.items() if d.get("node_type") == "group"}
                tasks = info.tasks
                if tasks is not None:  # a torn window's packed task group shows once it holds an array
                    parents |= {g for g in tasks.groups() if info.nodes is not None or tasks.members(g)}
                for rel in sorted(parents):
                    nodes[f"/{info.key}/{rel}" if rel else f"/{info.key}"] = self._manual_dataset(
                        info, rel, info.attrs if not rel else {}
                    )
        return xr.DataTree.from_dict(nodes, name=os.path.basename(self.root.rstrip("/")) or None)

    # ------------------------------------------------------------------ records and tensors
    def _record(self, path: str) -> tuple[WindowInfo, str, dict[str, Any]]:
        match = WINDOW_KEY.match(path.strip("/"))
        if not match:
            raise ValueError(
                f"{path!r} is not a record path (expected rank_{{r}}/window_{{wwww}}/invocation_.../...; "
                "see the records() 'path' column)"
            )
        info = self._info(match.group(1))
        rel = match.group(2)
        doc = self._node(info, rel)
        if not isinstance(doc, dict) or doc.get("node_type") != "array":
            frame = self._window_frame(info)
            if "payload" in frame and ((frame["path"] == path.strip("/")) & ~frame["payload"]).any():
                raise ValueError(
                    f"{path!r} holds statistics only (a statistics-first dump keeps no payload for it);"
                    " its statistics are in records()"
                )
            raise ValueError(f"{path!r} is not an array of window {info.key} in {self.root}")
        where = f"{info.key}/{rel}/zarr.json"
        check_array_doc(doc, where)  # shape, chunk grid, dimension names: what the views below index into
        attrs = check_attributes(doc, where)
        for field in ("actualShape", "declaredShape"):
            if attrs.get(field) is not None:
                shape_field(attrs[field], where, f"attributes.{field}")
        count_field(attrs.get("sourceOffsetBytes"), where, "attributes.sourceOffsetBytes")
        dims = attrs.get("logicalDims")
        if dims is not None and not (isinstance(dims, list) and all(isinstance(d, str) for d in dims)):
            raise ValueError(f"{where}: attributes.logicalDims {str(dims)[:60]!r} is not a list of names")
        return info, rel, doc

    def _row_coordinate(self, info: WindowInfo, rel: str, doc: dict[str, Any]) -> tuple[str, Any] | None:
        dims = doc.get("dimension_names") or []
        if not dims:
            return None
        group = rel.rpartition("/")[0]
        coord_rel = f"{group}/{dims[0]}" if group else dims[0]
        coord = self._node(info, coord_rel)
        if coord is None or coord.get("node_type") != "array" or coord.get("attributes") or coord_rel == rel:
            return None
        if list(coord.get("shape", [])) != [doc["shape"][0]]:
            return None
        return f"{info.key}/{coord_rel}", self._array(info, coord_rel, coord)

    def record_array(self, path: str) -> xr.DataArray:
        """One record as a lazy ``DataArray`` in its logical shape.

        A non-truncated record is the stored array (dims as stored; its group's coordinate arrays for
        those dims attached lazily, without an index). A truncated record is its logical-shape view
        (see :mod:`megadump_zarr.read.truncated`): dims from ``logicalDims``, else ``row``, ``dim_1``, ... (the writer keeps no
        dimension names for truncated records), captured elements present and NaN elsewhere, reading
        only the stored chunks that the selected rows need; its ``row`` coordinate holds global row
        indices when the record is a whole-row slice of its declared tensor, its boolean ``captured``
        coordinate is True for the rows stored whole, and ``attrs`` ``capturedRows``/``missingRows``
        count them.

        Args:
            path: The record's path relative to the root (the records() ``path`` column).

        Raises:
            ValueError: ``path`` is not an array of this dump.
        """
        import xarray as xr

        info, rel, doc = self._record(path)
        key = f"{info.key}/{rel}"
        attrs = dict(doc.get("attributes") or {})
        array = self._array(info, rel, doc)
        actual = attrs.get("actualShape")
        name = attrs.get("name", rel.rpartition("/")[2])
        if attrs.get("truncated") and isinstance(actual, list):
            data = truncated_dask(array, actual, key, self.root)
            dims = logical_dims(attrs, len(actual))
            if data.dtype != array.dtype:
                attrs["promotedFrom"] = str(array.dtype)
            coords: dict[str, Any] = {}
            rows = _derived_rows(attrs, doc, key)
            if rows is not None:  # a lazy range: no allocation per logical row
                coords[dims[0]] = xr.Variable(dims[0], _row_range(rows, data.chunks[0] if data.ndim else ()))
            if data.ndim:  # True where a row holds stored values only: NaN there is the tensor's own
                coords["captured"] = xr.Variable(dims[0], captured_mask(actual, int(array.shape[0]), data.chunks[0]))
                attrs["capturedRows"] = captured_rows(actual, int(array.shape[0]))
                attrs["missingRows"] = int(actual[0]) - attrs["capturedRows"]
            attrs["capturedElements"] = int(array.shape[0])
            return xr.DataArray(data, dims=dims, coords=xr.Coordinates(coords, indexes={}), name=name, attrs=attrs)
        dims = tuple(doc.get("dimension_names") or (f"dim_{i}" for i in range(array.ndim)))
        coords = {}
        group = rel.rpartition("/")[0]
        for axis, dim in enumerate(dims):
            coord_rel = f"{group}/{dim}" if group else dim
            coord = self._node(info, coord_rel)
            if (
                coord_rel != rel
                and coord is not None
                and coord.get("node_type") == "array"
                and not coord.get("attributes")
                and list(coord.get("shape", [])) == [array.shape[axis]]
            ):
                coord_key = f"{info.key}/{coord_rel}"
                coords[dim] = xr.Variable(dim, stored_dask(self._array(info, coord_rel, coord), coord_key, self.root))
        return xr.DataArray(
            stored_dask(array, key, self.root),
            dims=dims,
            coords=xr.Coordinates(coords, indexes={}),
            name=name,
            attrs=attrs,
        )

    def tensor(
        self,
        name: str,
        *,
        rank: int = 0,
        window: int | None = None,
        invocation: int | str | None = None,
        stage: str | None = None,
        io: str | None = None,
        kernel: str | None = None,
        task: int | str | None = None,
        owner: int | None = None,
        core: int | str | None = None,
        core_type: str | None = None,
    ) -> xr.DataArray:
        """A logical tensor as a lazy ``DataArray``.

        L0: the stored array (``record_array``). L1: stitched along axis 0 from its task records (see
        :mod:`megadump_zarr.read.stitch`): ordered by global row, rows no task captured are absent,
        rows captured twice are checked equal when computed, coordinates ``task_id``/``owner_id``/
        ``core_type``/``core_id``/``worker`` per row and ``da.sel(owner_id=k)`` selects owner ``k``'s rows.
        ``owner=``/``core=`` stitch only the records of that owner or core: exactly its rows, each with
        its own task, owner and core coordinates (rows another owner also captured are not borrowed).
        Truncated records (L0 or L1) are given in logical shape, NaN where not captured; the
        ``captured`` coordinate along axis 0 is True for the rows stored whole, and ``attrs``
        ``capturedRows``/``missingRows`` count those rows and the others against the declared length.

        Args:
            name: The tensor's logical name (the records() ``name`` column).
            rank: The rank.
            window: Window index; default: the first complete window of the rank holding the tensor.
            invocation: Invocation id or group name; default: the only one holding the tensor.
            stage: L1 stage; required when the tensor appears in several stages.
            io: ``input`` or ``output`` (L1); required when the tensor is both.
            kernel: Kernel name, to choose among invocations.
            task: L1 task id or task group name: only that task's record(s).
            owner: L1 owner id (e.g. the expert): only that owner's record(s).
            core: L1 core id, or core type and id (``"MIX5"``): only the record(s) of tasks that ran there.
            core_type: L1 core type (``"AIC"``, ``"AIV"``, ``"MIX"``): only records of tasks on such cores.

        Raises:
            ValueError: Unknown tensor, an ambiguous choice (the message lists the options), or L1
                records without global row indices (they cannot be stitched; use ``task=`` or
                :meth:`record_array`).
        """
        infos = self._windows_for(rank, window)
        rows = pick_tensor_rows(
            infos,
            self._window_frame,
            name,
            rank=rank,
            invocation=invocation,
            stage=stage,
            io=io,
            kernel=kernel,
            task=task,
            root=self.root,
            owner=owner,
            core=core,
            core_type=core_type,
        )
        if not check_tensor_choice(name, rows):
            return self.record_array(rows["path"].iloc[0])
        return self._stitched(name, rows)

    def _stitched(self, name: str, rows: pd.DataFrame) -> xr.DataArray:
        paths = list(rows["path"])
        records = [self._record(p) for p in paths]
        coordinate_of = [self._row_coordinate(info, rel, doc) for info, rel, doc in records]
        derived = [
            None if c is not None else _derived_rows(doc.get("attributes") or {}, doc, f"{info.key}/{rel}")
            for (info, rel, doc), c in zip(records, coordinate_of)
        ]
        unstitchable = [p for p, c, d in zip(paths, coordinate_of, derived) if c is None and d is None]
        if unstitchable:
            if len(paths) == 1:
                return self.record_array(paths[0])
            raise ValueError(
                f"tensor {name!r}: {len(unstitchable)} of its {len(paths)} records have no global row index along "
                f"axis 0 (no coordinate array named after their first dimension in their task group: they are not "
                f"whole-row slices of the declared tensor, e.g. per-owner weight slices), so they cannot be stitched; "
                f"pass task= for one task's record or use record_array(path): {listing(unstitchable)}"
            )
        coordinate_values = _read_coordinates(self.store, [c for c in coordinate_of if c is not None])
        values = iter(coordinate_values)
        pieces = []
        for row, (info, rel, doc), coord, rows_from_attrs in zip(rows.itertuples(), records, coordinate_of, derived):
            attrs = doc.get("attributes") or {}
            key = f"{info.key}/{rel}"
            array = self._array(info, rel, doc)
            truncated = bool(attrs.get("truncated")) and isinstance(attrs.get("actualShape"), list)
            global_rows = next(values) if coord is not None else _stitch_rows(rows_from_attrs, doc, attrs, key)
            whole = captured_rows(attrs["actualShape"], int(array.shape[0])) if truncated else None
            if coord is not None and not truncated:
                _check_row_coordinate(coord[0], global_rows, _derived_rows(attrs, doc, key), key)
            pieces.append(
                Piece(
                    path=key,
                    data=record_lazy(array, attrs, key, self.root),
                    rows=np.asarray(global_rows, dtype=np.int64),
                    dims=(tuple(attrs["logicalDims"]) if isinstance(attrs.get("logicalDims"), list) else None)
                    if truncated
                    else tuple(doc.get("dimension_names") or ()) or None,
                    task_id=_int_or(row.task_id),
                    owner_id=_int_or(row.owner_id),
                    core_id=_int_or(row.core_id),
                    core_type="" if not isinstance(row.core_type, str) else row.core_type,
                    worker=_int_or(row.worker),
                    truncated=truncated,
                    captured=None if whole is None else np.arange(len(global_rows)) < whole,
                )
            )
        first = rows.iloc[0]
        declared = (records[0][2].get("attributes") or {}).get("declaredShape")
        # a row counts as captured when some record stored every element of it (NaN padding is not captured)
        held = [p.rows if p.captured is None else p.rows[p.captured] for p in pieces]
        captured = len(np.unique(np.concatenate(held))) if pieces else 0
        attrs = {
            "name": name,
            "level": "L1",
            "rank": int(first["rank"]),
            "window": int(first["window"]),
            "invocation": _int_or(first["invocation"]),
            "kernel": first["kernel"],
            "direction": first["direction"],
            "stage": first["stage"],
            "io": first["io"],
            "index": _int_or(first["index"]),
            "records": len(pieces),
            "truncatedRecords": sum(p.truncated for p in pieces),
            "capturedRows": captured,
        }
        if _int_or(first["step"]) >= 0:
            attrs["step"] = _int_or(first["step"])
        if isinstance(declared, list) and declared:
            attrs["declaredShape"] = list(declared)
            attrs["missingRows"] = max(0, int(declared[0]) - captured)
        return stitch(pieces, name=name, attrs=attrs)

    # ------------------------------------------------------------------ display
    def __repr__(self) -> str:
        infos = self._scan()
        ranks = sorted({w.rank for w in infos})
        counts: dict[str, int] = {}
        for w in infos:
            counts[w.status] = counts.get(w.status, 0) + 1
        status = ", ".join(f"{counts[s]} {s}" for s in ("complete", "aborted", "writing") if s in counts)
        levels = sorted({w.level for w in infos if w.level})
        return (
            f"<megadump_zarr.Dump {self.root!r}: ranks {ranks}, {len(infos)} window"
            f"{'' if len(infos) == 1 else 's'}{f' ({status})' if status else ''}"
            f"{', levels ' + '/'.join(levels) if levels else ''}>"
        )


def _derived_rows(attrs: dict[str, Any], doc: dict[str, Any], key: str = "") -> tuple[int, int] | None:
    """Global rows of a record from its attributes (the writer's rule for its coordinate arrays), as
    ``(first row, row count)``: the record must be a whole-row slice of its declared tensor at a
    row-aligned source offset. Nothing is allocated: callers build a lazy range (a view) or, for a
    stitch, check :func:`_stitch_rows` first.

    Args:
        attrs: The record's attributes.
        doc: Its array document.
        key: The record's key, for messages.

    Raises:
        DumpIntegrityError: The slice reaches past its declared tensor (``actualShape`` rows from
            ``sourceOffsetBytes`` beyond ``declaredShape[0]``): an edited document.
    """
    actual, declared = attrs.get("actualShape"), attrs.get("declaredShape")
    offset = attrs.get("sourceOffsetBytes")
    if not isinstance(actual, list) or not isinstance(declared, list) or not actual or offset is None:
        return None
    if len(actual) != len(declared) or list(actual[1:]) != list(declared[1:]):
        return None
    row_bytes = math.prod(int(d) for d in actual[1:]) * itemsize(doc.get("data_type"))
    if row_bytes <= 0 or int(offset) % row_bytes:
        return None
    start = int(offset) // row_bytes
    if start + int(actual[0]) > int(declared[0]):
        raise DumpIntegrityError(
            f"{key}/zarr.json: attributes.actualShape {list(actual)} at attributes.sourceOffsetBytes {int(offset)} "
            f"(row {start}) reaches past attributes.declaredShape {list(declared)}; the document was edited",
            key=f"{key}/zarr.json",
        )
    return start, int(actual[0])


def _check_row_coordinate(coord_key: str, values: np.ndarray, derived: tuple[int, int] | None, key: str) -> None:
    """A stored row coordinate is int64 and holds the rows its record's ``sourceOffsetBytes`` gives (the writer's
    rule); a coordinate moved in from another task, or retyped, places no row.

    Raises:
        DumpIntegrityError: Naming the coordinate and its record.
    """
    if values.dtype != np.int64:
        raise DumpIntegrityError(
            f"{coord_key}: the row coordinate of {key} is {values.dtype}, not int64: the document was edited",
            key=f"{coord_key}/zarr.json",
        )
    if derived is None:
        return
    start, count = derived
    if values.shape != (count,) or not np.array_equal(values, np.arange(start, start + count, dtype=np.int64)):
        raise DumpIntegrityError(
            f"{coord_key}: the row coordinate of {key} does not hold rows {start}..{start + count - 1} "
            f"(attributes.sourceOffsetBytes): it was moved or edited",
            key=coord_key,
        )


def _row_range(extent: tuple[int, int], chunks: tuple[int, ...]) -> Any:
    """A record's derived global rows as a lazy range, chunked like the view's first axis."""
    import dask.array as da

    start, count = extent
    return da.arange(start, start + count, chunks=chunks or (count,), dtype=np.int64)


def _stitch_rows(extent: tuple[int, int], doc: dict[str, Any], attrs: dict[str, Any], key: str) -> np.ndarray:
    """A record's derived global rows, materialised for a stitch: bounded by its stored prefix first
    (:func:`megadump_zarr.read.truncated.check_padded_rows`; a record that is not truncated stores its rows)."""
    if attrs.get("truncated"):
        check_padded_rows(attrs["actualShape"], math.prod(int(d) for d in doc.get("shape") or [0]), key)
    start, count = extent
    return np.arange(start, start + count, dtype=np.int64)


def _read_coordinates(store: Store, coords: list[tuple[str, Any]]) -> list[np.ndarray]:
    """Read several small coordinate arrays concurrently (a packed task's are computed: nothing to read)."""
    if not coords:
        return []
    if any(is_packed_array(array) for _, array in coords):
        return [np.asarray(RecordArray(array, key)[...]) for key, array in coords]
    arrays = [array for _, array in coords]

    async def run() -> list[Any]:
        return list(await asyncio.gather(*(a._async_array.getitem(slice(None)) for a in arrays)))

    try:
        return [np.asarray(v) for v in sync(run())]
    except DumpIntegrityError:
        raise
    except (
        RuntimeError,
        ValueError,
        TypeError,
        EOFError,
    ):  # a coordinate chunk without a checksum that fails to decode
        for array, (key, _) in zip(arrays, coords):
            guard_read(array, key, lambda a=array: a[...])  # raises naming the failing chunk
        raise
