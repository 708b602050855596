"""Build the engine's Datasets: one per dump group, from ``Dump.tensor``/``Dump.record_array``, lazily.

Groups (the stored layout's paths, so a path that works with zarr works here):

* ``""`` (root), ``rank_{r}``, ``rank_{r}/window_{wwww}``: attributes only.
* ``rank_{r}/window_{wwww}/invocation_{iiiiii}_{direction}``: L0: one variable per tensor, as stored.
  L1: attributes only (its tensors are per stage); ``open_dataset`` refuses it and names the stage groups.
* ``.../invocation_.../stages/{stage}`` (``stages/`` may be left out): one variable per logical tensor of
  the stage, stitched from its task records along the split axis, with coordinates along that axis:
  the global index (named as the axis), ``task_id``, ``owner_id``, ``core_type``, ``core_id`` and
  ``worker``. A tensor that is an input and an output of the stage is two variables, ``input.NAME`` and
  ``output.NAME``. A tensor every task reads whole (not split, a weight) is one variable with the graph's
  dimension names and no task coordinates. Per-task slices that cannot be stitched (per-expert weights) are stacked along a new
  ``NAME.task`` axis when their shapes agree (coordinates ``NAME.task_id``, ...), else one variable per
  task (``NAME.task_000003``).

Dimension names are kept where tensors agree (same size and, along the split axis, the same global
indices and task coordinates); a tensor whose axis disagrees with an earlier one gets its own axis,
``VAR.DIM`` (and its coordinates ``VAR.DIM``, ``VAR.task_id``, ...). A coordinate name used by two axes
is qualified by its axis on the second (``slot.task_id``).

Laziness: every data variable is an xarray ``BackendArray`` over the reader's lazy array (a record's
:class:`~megadump_zarr.read.lazy.RecordArray`, a stitched tensor's :class:`~megadump_zarr.read.stitched.StitchedArray`,
a stack of records' :class:`~megadump_zarr.read.stitched.StackedArray`), as xarray's own zarr backend indexes a zarr
array: an indexing reads the chunks it selects, through no dask graph, so nothing is read until values are asked
for; ``chunks={}`` gives dask arrays cut as the reader's blocks (one per task record or stored chunk),
``chunks=None`` lazily indexed numpy. Coordinates are read eagerly (they are the small global-index arrays the
stitch reads anyway). Stages are told apart by the records table's columns: a record's ``stage``, and its stage
group, the parent of its task group (``group``).
"""

from __future__ import annotations

from collections.abc import Iterable
import hashlib
import posixpath
import re
from typing import Any

import dask.array as da
import numpy as np
import pandas as pd
import xarray as xr
from xarray.backends import BackendArray
from xarray.core import indexing

from megadump_zarr.layout.paths import rank_dir, task_dir, window_dir
from megadump_zarr.read import open_dump
from megadump_zarr.read.dump import Dump
from megadump_zarr.read.lazy import as_dask, lazy_of
from megadump_zarr.read.stitched import StackedArray

__all__ = ["open_group_dataset", "open_groups"]

_ML_FLOATS = frozenset(("bfloat16", "float8_e4m3fn", "float8_e5m2"))
# The group= selector: a prefix of the dump's path grammar (layout/paths.py), any depth, so its own pattern;
# anchored and ASCII-digit like the leaf's.
_GROUP = re.compile(
    r"^(?:rank_([0-9]+))?(?:/window_([0-9]+))?(?:/(invocation_[0-9]+_[A-Za-z0-9]+))?(?:/(?:stages/)?([^/]+))?\Z"
)
_TASK_COORDS = ("task_id", "owner_id", "core_type", "core_id", "worker")


class LazyReaderArray(BackendArray):
    """A reader's lazy array as an xarray backend array: an indexing reads what it selects (no dask graph).

    Args:
        lazy: The reader's lazy array (integers and slices select; numpy arrays out).
        dtype: The dtype handed to xarray (the stored one, or the ``upcast`` one).
    """

    def __init__(self, lazy: Any, dtype: np.dtype) -> None:
        self.lazy = lazy
        self.shape = tuple(int(n) for n in lazy.shape)
        self.dtype = np.dtype(dtype)

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.BASIC, self._raw)

    def _raw(self, key: tuple[Any, ...]) -> np.ndarray:
        values = np.asarray(self.lazy[key])
        return values if values.dtype == self.dtype else values.astype(self.dtype)


def _upcast_dtype(upcast: Any) -> np.dtype | None:
    if upcast is None:
        return None
    try:
        dtype = np.dtype(upcast)
    except TypeError:
        raise ValueError(f"upcast={upcast!r} is not a numpy dtype (expected e.g. 'float32')") from None
    if dtype.kind != "f" or dtype.name in _ML_FLOATS:
        raise ValueError(f"upcast={upcast!r} must be a numpy float dtype such as 'float32' or 'float64'")
    return dtype


def _variable(array: xr.DataArray, upcast: np.dtype | None) -> xr.Variable:
    """The lazily indexed variable of a reader DataArray (its reader's lazy array: no dask graph is computed to
    index it), upcast when asked; data no reader's lazy array stands behind (a dask array built elsewhere, numpy)
    is indexed as it is."""
    data = array.data
    lazy = lazy_of(data)
    if lazy is None:
        lazy = data if isinstance(data, da.Array) else np.asarray(data)
    chunks = data.chunks if isinstance(data, da.Array) else tuple((int(n),) for n in lazy.shape)
    attrs = dict(array.attrs)
    dtype = np.dtype(lazy.dtype)
    encoding: dict[str, Any] = {"preferred_chunks": dict(zip(array.dims, chunks)), "dtype": dtype}
    if upcast is not None and dtype.name in _ML_FLOATS:
        attrs["upcastFrom"] = dtype.name
        dtype = upcast
    return xr.Variable(
        array.dims, indexing.LazilyIndexedArray(LazyReaderArray(lazy, dtype)), attrs=attrs, encoding=encoding
    )


def _coord_values(coord: xr.DataArray) -> np.ndarray:
    return np.asarray(coord.values)


class _Builder:
    """Collects variables for one Dataset, giving disagreeing axes and coordinates their own names."""

    def __init__(self, upcast: np.dtype | None, drop: set[str]) -> None:
        self.upcast = upcast
        self.drop = drop
        self.variables: dict[str, xr.Variable] = {}
        self.coords: dict[str, xr.Variable] = {}
        self.dim_sig: dict[str, tuple[Any, ...]] = {}
        self.coord_dim: dict[str, str] = {}

    def _signature(self, array: xr.DataArray, dim: str) -> tuple[Any, ...]:
        along = sorted(name for name, c in array.coords.items() if c.dims == (dim,))
        return (int(array.sizes[dim]), *((n, _coord_values(array.coords[n]).tobytes()) for n in along))

    def add(self, name: str, array: xr.DataArray) -> None:
        if name in self.drop:
            return
        renames: dict[str, str] = {}
        for dim in array.dims:
            sig = self._signature(array, dim)
            known = self.dim_sig.get(dim)
            if known is None or known == sig:
                self.dim_sig[dim] = sig
                continue
            new = f"{name}.{dim}"
            renames[dim] = new
            self.dim_sig[new] = sig
        variable = _variable(array, self.upcast)
        if renames:
            variable = xr.Variable(
                tuple(renames.get(d, d) for d in variable.dims),
                variable._data,
                variable.attrs,
                {
                    **variable.encoding,
                    "preferred_chunks": {
                        renames.get(d, d): c for d, c in variable.encoding["preferred_chunks"].items()
                    },
                },
            )
        for cname, coord in array.coords.items():
            if len(coord.dims) != 1:
                continue
            dim = renames.get(coord.dims[0], coord.dims[0])
            if cname == coord.dims[0]:
                target = dim
            elif coord.dims[0] in renames:
                target = f"{name}.{cname}"
            else:
                target = cname
                owner = self.coord_dim.get(target)
                if owner is not None and owner != dim:
                    target = f"{dim}.{cname}"
            if target in self.coords:
                continue
            self.coord_dim[target] = dim
            self.coords[target] = xr.Variable((dim,), _coord_values(coord), attrs=dict(coord.attrs))
        self.variables[name] = variable

    def dataset(self, attrs: dict[str, Any]) -> xr.Dataset:
        coords = {k: v for k, v in self.coords.items() if k not in self.drop}
        return xr.Dataset(self.variables, coords=coords, attrs=attrs)


def _with_core_type(array: xr.DataArray, task_core: dict[int, str]) -> xr.DataArray:
    """Add a ``core_type`` coordinate next to a stitched tensor's ``task_id``."""
    if "task_id" not in array.coords or "core_type" in array.coords:
        return array
    task = array.coords["task_id"]
    values = np.array([task_core.get(int(t), "") for t in _coord_values(task)], dtype=object).astype(str)
    return array.assign_coords(core_type=(task.dims, values))


def _stacked(name: str, dump: Dump, rows: pd.DataFrame, task_core: dict[int, str]) -> list[tuple[str, xr.DataArray]]:
    """Per-task records that cannot be stitched: stacked along ``NAME.task`` if shapes agree, else one each."""
    arrays = [dump.record_array(p) for p in rows["path"]]
    shapes = {a.shape for a in arrays}
    dims = {a.dims for a in arrays}
    if len(shapes) == 1 and len(dims) == 1:
        axis = f"{name}.task"
        members = [lazy_of(a.data) for a in arrays]
        token = hashlib.sha1(repr([a.data.name for a in arrays]).encode()).hexdigest()[:16]
        stacked = xr.DataArray(
            as_dask(StackedArray(members), f"megadump-stack-{token}", inline=False), dims=(axis, *arrays[0].dims)
        )
        coords = {
            "task_id": rows["task_id"].to_numpy(np.int64),
            "owner_id": rows["owner_id"].fillna(-1).to_numpy(np.int64),
            "core_type": np.array([task_core.get(int(t), "") for t in rows["task_id"]], dtype=str),
            "core_id": rows["core_id"].fillna(-1).to_numpy(np.int64),
            "worker": rows["worker"].fillna(-1).to_numpy(np.int64),
        }
        stacked = stacked.assign_coords({axis: np.arange(len(arrays))}).assign_coords(
            {f"{name}.{k}": (axis, v) for k, v in coords.items()}
        )
        stacked.attrs = {**arrays[0].attrs, "stackedRecords": len(arrays)}
        return [(name, stacked)]
    return [(f"{name}.{task_dir(int(t))}", a) for t, a in zip(rows["task_id"], arrays)]


def _payload_rows(rows: pd.DataFrame, attrs: dict[str, Any]) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The rows whose payload is stored; statistics-only records (statistics-first modes) have no tensor to
    show: they are skipped and counted in the ``statisticsOnlyRecords`` attribute (their statistics are in
    ``records()`` and the invocation's ``statistics`` group)."""
    if "payload" not in rows.columns:
        return rows, attrs
    kept = rows["payload"].astype(bool).to_numpy()
    if kept.all():
        return rows, attrs
    return rows[kept], {**attrs, "statisticsOnlyRecords": int((~kept).sum())}


def _stage_dataset(
    dump: Dump, rows: pd.DataFrame, attrs: dict[str, Any], upcast: np.dtype | None, drop: set[str]
) -> xr.Dataset:
    rows, attrs = _payload_rows(rows, attrs)
    if not len(rows):
        return xr.Dataset(attrs=attrs)
    builder = _Builder(upcast, drop)
    task_core = {int(t): str(c) for t, c in zip(rows["task_id"], rows["core_type"]) if pd.notna(t) and pd.notna(c)}
    first = rows.iloc[0]
    pairs = list(dict.fromkeys(zip(rows["io"], rows["name"])))
    names = [n for _, n in pairs]
    for io, name in pairs:
        var = name if names.count(name) == 1 else f"{io}.{name}"
        if var in drop:
            continue
        picked = rows[(rows["io"] == io) & (rows["name"] == name)]
        try:
            array = dump.tensor(
                name,
                rank=int(first["rank"]),
                window=int(first["window"]),
                invocation=str(first["invocation_name"]),
                stage=str(first["stage"]),
                io=io,
            )
        except ValueError:
            for label, part in _stacked(var, dump, picked, task_core):
                builder.add(label, part)
            continue
        builder.add(var, _with_core_type(array, task_core))
    return builder.dataset(attrs)


def _l0_dataset(
    dump: Dump, rows: pd.DataFrame, attrs: dict[str, Any], upcast: np.dtype | None, drop: set[str]
) -> xr.Dataset:
    rows, attrs = _payload_rows(rows, attrs)
    builder = _Builder(upcast, drop)
    for name, path in zip(rows["name"], rows["path"]):
        if name not in drop:
            builder.add(str(name), dump.record_array(path))
    return builder.dataset(attrs)


class _Catalog:
    """The groups of one dump: attributes from its catalogue (scanned once, by the ``Dump``), records from
    ``records()``."""

    def __init__(self, dump: Dump) -> None:
        self.dump = dump
        self.windows = [w for w in dump.catalogue() if w.status == "complete"]
        records = dump.records()
        self.records = records.assign(_inv=records["invocation_name"], _stage_group=_stage_groups(records))

    def invocations(self, info: Any) -> list[str]:
        """The invocation groups of a window its manifest lists (else those its records name)."""
        names = info.attrs.get("invocations")
        if isinstance(names, list):
            return [str(n) for n in names]
        r = self.records
        return sorted(set(r[(r["rank"] == info.rank) & (r["window"] == info.window)]["_inv"].dropna()))

    def group_attrs(self, info: Any, rel: str) -> dict[str, Any]:
        return self.dump.group_attributes(info, rel)

    def window(self, rank: int, window: int) -> Any:
        for info in self.windows:
            if info.rank == rank and info.window == window:
                return info
        known = ", ".join(info.key for info in self.windows) or "none"
        raise ValueError(
            f"{self.dump.root}: no complete window rank_{rank}/window_{window:04d} (complete windows: {known})"
        )

    def invocation_rows(self, info: Any, invocation: str) -> pd.DataFrame:
        r = self.records
        rows = r[(r["rank"] == info.rank) & (r["window"] == info.window) & (r["_inv"] == invocation)]
        if not len(rows) and invocation not in self.invocations(info):
            names = self.invocations(info)
            raise ValueError(f"{self.dump.root}: {info.key} has no {invocation} (invocations: {', '.join(names)})")
        return rows


def _stage_groups(records: pd.DataFrame) -> list[str | None]:
    """Per record, its L1 stage group relative to its invocation group (``stages/{stage}``): the parent of its task
    group (the records table's ``group``); None for an L0 record.

    Args:
        records: The dump's records table.
    """
    out: list[str | None] = []
    for level, group, rank, window, invocation in zip(
        records["level"], records["group"], records["rank"], records["window"], records["invocation_name"]
    ):
        parent = posixpath.dirname(group) if level == "L1" and isinstance(group, str) else ""
        below = f"{rank_dir(int(rank))}/{window_dir(int(window))}/{invocation}/"
        out.append(parent[len(below) :] if parent.startswith(below) and len(parent) > len(below) else None)
    return out


def _parse_group(group: str | None) -> tuple[int | None, int | None, str | None, str | None]:
    text = (group or "").strip("/")
    match = _GROUP.match(text)
    if text and (not match or not match.group(1)):
        raise ValueError(
            f"group={group!r} is not a dump group: expected rank_{{r}}[/window_{{wwww}}"
            "[/invocation_{iiiiii}_{direction}[/stages/{stage}]]]"
        )
    if not text:
        return None, None, None, None
    assert match is not None
    rank, window, invocation, stage = match.groups()
    if stage is not None and invocation is None:
        raise ValueError(f"group={group!r} is not a dump group: a stage needs an invocation")
    return (int(rank), None if window is None else int(window), invocation, stage)


def _drop_set(drop_variables: str | Iterable[str] | None) -> set[str]:
    if drop_variables is None:
        return set()
    if isinstance(drop_variables, str):
        return {drop_variables}
    return set(drop_variables)


def _invocation_node(
    cat: _Catalog, info: Any, invocation: str, upcast: np.dtype | None, drop: set[str], stage: str | None = None
) -> dict[str, xr.Dataset]:
    """``{relative path: Dataset}`` for an invocation (and its stages), or one stage of it."""
    rows = cat.invocation_rows(info, invocation)
    attrs = cat.group_attrs(info, invocation)
    level = attrs.get("level") or (rows["level"].iloc[0] if len(rows) else None)
    if level != "L1":
        if stage is not None:
            raise ValueError(f"{cat.dump.root}: {info.key}/{invocation} is an L0 invocation; it has no stage {stage!r}")
        return {"": _l0_dataset(cat.dump, rows, attrs, upcast, drop)}
    groups = list(dict.fromkeys(g for g in rows["_stage_group"] if g))  # "stages/{name}", below the invocation
    stages = [posixpath.basename(g) for g in groups]  # the stage groups' names
    out: dict[str, xr.Dataset] = {} if stage is not None else {"": xr.Dataset(attrs={**attrs, "stages": stages})}
    wanted = [
        g
        for g, named in zip(groups, stages)
        if stage is None or named == stage or str(rows[rows["_stage_group"] == g]["stage"].iloc[0]) == stage
    ]
    if stage is not None and not wanted:
        raise ValueError(
            f"{cat.dump.root}: {info.key}/{invocation} has no stage {stage!r} (stages: {', '.join(stages)})"
        )
    for rel in wanted:
        stage_rows = rows[rows["_stage_group"] == rel]
        stage_attrs = {
            **cat.group_attrs(info, f"{invocation}/{rel}"),
            "invocation": invocation,
            "stage": str(stage_rows["stage"].iloc[0]),
        }
        ds = _stage_dataset(cat.dump, stage_rows, stage_attrs, upcast, drop)
        out["" if stage is not None else rel] = ds
    if stage is None:
        out["stages"] = xr.Dataset()
    return out


def open_group_dataset(
    root: Any,
    *,
    group: str | None,
    drop_variables: str | Iterable[str] | None,
    upcast: Any,
    storage_options: dict[str, Any] | None,
) -> xr.Dataset:
    """One group as a Dataset (see the module docstring).

    Args:
        root: The dump root (path, URL or zarr store).
        group: The group path.
        drop_variables: Variable or coordinate names to leave out.
        upcast: Float dtype to decode bfloat16/float8 to, or ``None``.
        storage_options: fsspec options for URL roots.

    Raises:
        ValueError: Not a dump, not a group of it, or an L1 invocation (name a stage).
    """
    dtype = _upcast_dtype(upcast)
    drop = _drop_set(drop_variables)
    rank, window, invocation, stage = _parse_group(group)
    dump = open_dump(root, storage_options)
    if rank is None:
        return xr.Dataset(attrs=dict(dump.root_attrs))
    cat = _Catalog(dump)
    if window is None:
        if not any(w.rank == rank for w in cat.windows):
            raise ValueError(f"{dump.root}: no complete window of rank_{rank}")
        return xr.Dataset()
    info = cat.window(rank, window)
    if invocation is None:
        return xr.Dataset(attrs=dict(info.attrs))
    nodes = _invocation_node(cat, info, invocation, dtype, drop, stage)
    if stage is None and "stages" in nodes:
        stage_names = [k for k in nodes if k.startswith("stages/")]
        raise ValueError(
            f"{dump.root}: {info.key}/{invocation} is an L1 invocation: its tensors are per stage; "
            f"open one of group={', '.join(f'{info.key}/{invocation}/{s}' for s in stage_names)}"
        )
    return nodes[""]


def open_groups(
    root: Any,
    *,
    group: str | None,
    drop_variables: str | Iterable[str] | None,
    upcast: Any,
    storage_options: dict[str, Any] | None,
) -> dict[str, xr.Dataset]:
    """Every group of the dump, or of the subtree at ``group``, as ``{"/path": Dataset}`` (root first).

    Args:
        root: The dump root.
        group: Subtree root (``None``: the whole dump).
        drop_variables: Names to leave out of every group.
        upcast: Float dtype to decode bfloat16/float8 to, or ``None``.
        storage_options: fsspec options for URL roots.
    """
    dtype = _upcast_dtype(upcast)
    drop = _drop_set(drop_variables)
    rank_sel, window_sel, invocation_sel, stage_sel = _parse_group(group)
    dump = open_dump(root, storage_options)
    cat = _Catalog(dump)
    out: dict[str, xr.Dataset] = {}
    out["/"] = xr.Dataset(attrs=dict(dump.root_attrs))
    for info in cat.windows:
        if (rank_sel is not None and info.rank != rank_sel) or (window_sel is not None and info.window != window_sel):
            continue
        rank_path = f"/{rank_dir(info.rank)}"
        out.setdefault(rank_path, xr.Dataset())
        window_path = f"{rank_path}/{window_dir(info.window)}"
        out[window_path] = xr.Dataset(attrs=dict(info.attrs))
        for name in cat.invocations(info):
            if invocation_sel is not None and name != invocation_sel:
                continue
            for rel, ds in _invocation_node(cat, info, str(name), dtype, drop).items():
                out[f"{window_path}/{name}" + (f"/{rel}" if rel else "")] = ds
    if rank_sel is not None:
        prefix = f"/{rank_dir(rank_sel)}"
        if window_sel is not None:
            prefix += f"/{window_dir(window_sel)}"
        if invocation_sel is not None:
            prefix += f"/{invocation_sel}"
        if stage_sel is not None:
            prefix += f"/stages/{stage_sel}"
        out = {
            ("/" + k[len(prefix) :].lstrip("/")): v for k, v in out.items() if k == prefix or k.startswith(prefix + "/")
        }
        if not out:
            raise ValueError(f"{dump.root}: no group {group!r}")
    return out
