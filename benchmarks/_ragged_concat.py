"""PROTOTYPE (benchmark only, not a product format): a "concatenated" layout for ragged L1 tiles.

Written with plain zarr-python 3 from the same window description (``WindowWrite``) the product writer takes,
so ``benchmarks.ragged`` can price it against the tasks and packs layouts. Per stage of an invocation, the
stage group ``stages/{stage}`` itself holds:

* ``task_id``, ``owner_id``, ``core_id`` — int64 ``(T,)``, dims ``("task",)``, tasks in the window's order;
  ``task_id``'s attributes ``{"tasks": [...]}`` keep each task group's attributes (what a pack keeps);
* per row dimension ``d`` of the ragged records (``slot`` in the demo, ``token`` in the synthetic stage):
  ``{d}_start`` / ``{d}_stop`` — int64 ``(T,)``, dims ``("task",)``: task ``i``'s rows are
  ``[{d}_start[i], {d}_stop[i])`` of every record concatenated along ``d``; ``{d}_task_id`` — int64 ``(R,)``,
  dims ``(d,)``: the row -> task coordinate; and ``d`` itself — int64 ``(R,)``: each row's source coordinate
  (the tasks layout's per-task ``arange`` row coordinate, concatenated);
* a record every task of the stage has with one shape ("uniform", e.g. a weight or a count vector):
  ``(T, *shape)``, dims ``("task", *dims)`` (stacked, as a pack does);
* a record whose axis 0 differs between tasks but whose dtype, trailing shape and dims agree ("ragged"):
  ``(sum_rows, *rest)``, dims ``(d, *rest_dims)``, concatenated along axis 0;
* anything else ("fallback": a record only some tasks have, or trailing shapes that differ): one array per
  task and record, ``{task_group}__{record}``, as the tasks layout would store it.

Each record array's attributes are ``{"coordinates": ..., "records": [per-task record attributes with
stats]}`` (the CF ``coordinates`` make plain ``xr.open_zarr(stage)`` show the id and bound arrays as
coordinates; one task's rows: ``ds.set_xindex("slot_task_id").sel(slot_task_id=7)``). Codecs are the product's (``store.metadata.codecs_for``: bytes little-endian, blosc lz4
bitshuffle, crc32c; uncompressed for a one-chunk array under 256 bytes), chunk keys ``c.0.0`` as the product
writes them. Ragged arrays are chunked in ``row_chunk`` rows (a fixed row count: zarr 3.1.6 has only the
regular chunk grid, no rectilinear chunks, so a chunk cannot follow each task's rows), every other array by
the product's rule (whole rows, up to ``chunk_bytes``). The stage groups get consolidated metadata (so plain
``xr.open_zarr(stage)`` opens them), then the window group does. Documents are compact JSON (zarr's
``json_indent`` None), as the product's are.

zarr-python's own costs are part of the write figures: every ``create_array`` tries to create each parent
group (``set_if_not_exists``: a temporary file that fails to link when the parent exists) and consolidation
rewrites the stage and window documents; a purpose-built writer would write each document once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
import warnings

import numpy as np
import pandas as pd
import zarr
from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec
from zarr.storage import LocalStore

from megadump_zarr.codecs import parse_compressor
from megadump_zarr.layout.write_model import ArrayWrite, GroupWrite, InvocationWrite, WindowWrite
from megadump_zarr.store.chunking import chunk_shape
from megadump_zarr.store.encoding import RAW_BELOW_BYTES
from megadump_zarr.store.tensor_stats import compute_stats

__all__ = ["ConcatWriter", "concat_records", "read_concat_task"]

_KEYS = {"name": "default", "separator": "."}
CONCAT_ATTR = "megadumpConcatPrototype"


@dataclass(frozen=True)
class ConcatWriter:
    """Writes windows in the prototype concatenated layout.

    Args:
        root: Local directory of the dump root.
        row_chunk: Rows per chunk of a ragged (concatenated) array; ``0`` uses the product's rule
            (whole rows up to ``chunk_bytes``).
        chunk_bytes: The product writer's chunk size (4 MiB).
        compressor: Compressor name (the product's default).
        lean: Keep the task ids, row bounds, task attributes and each task's source row range in the stage
            group's attributes (``tasks``, ``ids``, ``bounds``) instead of arrays: a stage stores its record
            arrays and the row -> task coordinate only.
    """

    root: str
    row_chunk: int = 256
    chunk_bytes: int = 4 << 20
    compressor: str = "default"
    lean: bool = False

    def __post_init__(self) -> None:
        if self.row_chunk < 0:
            raise ValueError(f"ConcatWriter.row_chunk must be >= 0, got {self.row_chunk}")
        if self.chunk_bytes < 1:
            raise ValueError(f"ConcatWriter.chunk_bytes must be positive, got {self.chunk_bytes}")

    def write(self, windows: Iterable[WindowWrite]) -> None:
        """Write every window (root and rank groups first), then consolidate each stage and window.

        Args:
            windows: The window descriptions.
        """
        with zarr.config.set({"json_indent": None}), warnings.catch_warnings():  # compact, as the product's
            warnings.filterwarnings("ignore", "Consolidated metadata", category=UserWarning)
            self._write(windows)

    def _write(self, windows: Iterable[WindowWrite]) -> None:
        store = LocalStore(self.root)
        root = zarr.open_group(store, mode="a", attributes={CONCAT_ATTR: 0})
        for window in windows:
            rank = root.require_group(window.path.split("/")[0])
            group = rank.create_group(window.path.split("/")[1], attributes={**window.attrs, "status": "complete"})
            stages: list[str] = []
            for invocation in window.invocations:
                stages.extend(f"{window.path}/{s}" for s in self._invocation(group, invocation))
            for stage in stages:
                zarr.consolidate_metadata(store, path=stage)
            zarr.consolidate_metadata(store, path=window.path)

    def _invocation(self, window: zarr.Group, invocation: InvocationWrite) -> list[str]:
        group = window.create_group(invocation.name, attributes=dict(invocation.attrs))
        declared = {g.path: g for g in invocation.groups}
        tasks: dict[str, list[GroupWrite]] = {}
        for g in invocation.groups:
            if g.task:
                tasks.setdefault(g.path.rpartition("/")[0], []).append(g)
        records: dict[str, list[ArrayWrite]] = {}
        for a in invocation.arrays:
            records.setdefault(a.path.rpartition("/")[0], []).append(a)
        written = []
        for stage, members in tasks.items():
            attrs = dict(declared[stage].attrs) if stage in declared else {}
            node = group.require_group(stage.rpartition("/")[0]).create_group(
                stage.rpartition("/")[2], attributes={**attrs, CONCAT_ATTR: 0}
            )
            self._stage(node, members, records)
            written.append(f"{invocation.name}/{stage}")
        return written

    def _stage(self, node: zarr.Group, tasks: list[GroupWrite], records: dict[str, list[ArrayWrite]]) -> None:
        count = len(tasks)
        by_name: dict[str, list[tuple[int, ArrayWrite]]] = {}
        for i, task in enumerate(tasks):
            for a in records.get(task.path, []):
                by_name.setdefault(a.path.rpartition("/")[2], []).append((i, a))
        owners = [t.attrs.get("owner") or {} for t in tasks]
        ids = {
            "task_id": [t.attrs["taskId"] for t in tasks],
            "owner_id": [-1 if o.get("id") is None else o["id"] for o in owners],
            "core_id": [-1 if t.attrs.get("coreId") is None else t.attrs["coreId"] for t in tasks],
        }
        entries = [{"group": t.path.rpartition("/")[2], "attrs": dict(t.attrs)} for t in tasks]
        if not self.lean:
            for name, values in ids.items():
                attrs = {"tasks": entries} if name == "task_id" else {}
                self._array(node, name, np.asarray(values, np.int64), ("task",), attrs)
        bounds: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for name, members in by_name.items():
            first = members[0][1]
            same = all(a.data.dtype == first.data.dtype and a.dims == first.dims for _, a in members)
            uniform = same and len(members) == count and all(a.data.shape == first.data.shape for _, a in members)
            ragged = (
                same
                and not uniform
                and len(members) == count
                and first.data.ndim >= 1
                and all(a.data.shape[1:] == first.data.shape[1:] for _, a in members)
            )
            meta: dict[str, Any] = {"records": [dict(a.attrs, stats=compute_stats(a.data)) for _, a in members]}
            if uniform:
                data = np.stack([a.data for _, a in members])
                if not self.lean:
                    meta["coordinates"] = "task_id owner_id core_id"
                self._array(node, name, data, ("task", *first.dims), meta)
            elif ragged:
                dim = first.dims[0]
                lengths = np.array([a.data.shape[0] for _, a in members], np.int64)
                stop = np.cumsum(lengths)
                if dim in bounds:
                    if not np.array_equal(bounds[dim][1], stop):
                        raise ValueError(f"stage {node.path}: record {name!r} has other {dim!r} rows than its peers")
                else:
                    bounds[dim] = (stop - lengths, stop)
                    self._row_coordinates(node, dim, members, entries, ids["task_id"], lengths)
                meta["coordinates"] = (
                    f"{dim}_task_id" if self.lean else f"{dim}_task_id task_id owner_id core_id {dim}_start {dim}_stop"
                )
                data = np.concatenate([a.data for _, a in members])
                self._array(node, name, data, first.dims, meta, row_chunk=self.row_chunk)
            else:
                for (i, a), record in zip(members, meta["records"]):
                    task = tasks[i].path.rpartition("/")[2]
                    self._array(node, f"{task}__{name}", a.data, a.dims, {"records": [record], "taskIndex": i})
        if self.lean:  # ids, bounds and task attributes in the stage group's document, no arrays for them
            node.attrs.update(
                {
                    "tasks": entries,
                    "ids": ids,
                    "bounds": {d: [start.tolist(), stop.tolist()] for d, (start, stop) in bounds.items()},
                }
            )
            return
        for dim, (start, stop) in bounds.items():
            self._array(node, f"{dim}_start", start, ("task",), {})
            self._array(node, f"{dim}_stop", stop, ("task",), {})

    def _row_coordinates(
        self,
        node: zarr.Group,
        dim: str,
        members: list[tuple[int, ArrayWrite]],
        entries: list[dict[str, Any]],
        task_ids: list[int],
        lengths: np.ndarray,
    ) -> None:
        source = [a.coords.get(dim) for _, a in members]
        if all(s is not None for s in source):
            values = np.concatenate(source).astype(np.int64)
            ranges = all(np.array_equal(s, np.arange(s[0], s[0] + len(s))) for s in source if len(s))
            if self.lean and ranges:  # each task's source rows as [start, stop), as a pack keeps them
                for entry, s in zip(entries, source):
                    entry.setdefault("coords", {})[dim] = [int(s[0]), int(s[0]) + len(s)] if len(s) else [0, 0]
            else:
                self._array(node, dim, values, (dim,), {})
        per_row = np.repeat(np.asarray(task_ids, np.int64), lengths)
        self._array(node, f"{dim}_task_id", per_row, (dim,), {})

    def _array(
        self,
        node: zarr.Group,
        name: str,
        data: np.ndarray,
        dims: tuple[str, ...],
        attrs: dict[str, Any],
        row_chunk: int = 0,
    ) -> None:
        data = np.ascontiguousarray(data)
        if row_chunk and data.ndim >= 1:
            chunks = (min(row_chunk, max(data.shape[0], 1)), *(max(1, d) for d in data.shape[1:]))
        else:
            chunks = chunk_shape(data.shape, data.dtype.itemsize, self.chunk_bytes)
        one_chunk = data.ndim == 0 or chunks[0] >= data.shape[0]
        spec = parse_compressor(self.compressor)
        compressors: list[Any] = []
        if not (one_chunk and data.nbytes < RAW_BELOW_BYTES) and spec.kind == "blosc":
            compressors.append(
                BloscCodec(
                    cname=spec.cname, clevel=spec.level, shuffle=spec.shuffle, typesize=data.dtype.itemsize, blocksize=0
                )
            )
        compressors.append(Crc32cCodec())
        array = node.create_array(
            name,
            shape=data.shape,
            dtype=data.dtype,
            chunks=chunks,
            serializer=BytesCodec(endian="little") if data.dtype.itemsize > 1 else BytesCodec(),
            compressors=compressors,
            fill_value=0,
            dimension_names=dims,
            attributes=attrs,
            chunk_key_encoding=_KEYS,
        )
        array[...] = data


def read_concat_task(root: str, stage: str, name: str, task_id: int) -> np.ndarray:
    """One task's record from the concatenated layout: find its row range, read those rows (or its row of a
    stacked record).

    Args:
        root: The dump root.
        stage: The stage group's path below the root.
        name: The record's name.
        task_id: The task.
    """
    group = zarr.open_group(LocalStore(root, read_only=True), path=stage, mode="r")
    lean = "task_id" not in group
    task_ids = np.asarray(group.attrs["ids"]["task_id"]) if lean else group["task_id"][...]
    i = int(np.flatnonzero(task_ids == task_id)[0])
    array = group[name]
    dim = array.metadata.dimension_names[0]
    if dim == "task":
        return array[i]
    start, stop = _bounds(group, dim)
    return array[int(start[i]) : int(stop[i])]


def _bounds(group: zarr.Group, dim: str) -> tuple[np.ndarray, np.ndarray]:
    """``({dim}_start, {dim}_stop)`` of a stage group (arrays, or the lean layout's attributes)."""
    if f"{dim}_start" in group:
        return group[f"{dim}_start"][...], group[f"{dim}_stop"][...]
    start, stop = group.attrs["bounds"][dim]
    return np.asarray(start), np.asarray(stop)


def concat_records(root: str) -> pd.DataFrame:
    """A records table of the concatenated layout (one row per task and record: stage, task, name, dtype,
    shape and the stored stats), from the windows' consolidated metadata and the row-bound arrays: the work
    ``Dump.records()`` does for the other layouts (without its checks).

    Args:
        root: The dump root.
    """
    store = LocalStore(root, read_only=True)
    top = zarr.open_group(store, mode="r")
    rows = []
    for rank_name, rank in top.groups():
        for window_name, window in rank.groups():
            window = zarr.open_group(store, path=f"{rank_name}/{window_name}", mode="r", use_consolidated=True)
            for path, stage in window.members(max_depth=None):
                if not isinstance(stage, zarr.Group) or CONCAT_ATTR not in stage.attrs:
                    continue
                task_ids = stage["task_id"][...] if "task_id" in stage else np.asarray(stage.attrs["ids"]["task_id"])
                starts = {}
                for array_name, array in stage.arrays():
                    records = array.attrs.get("records")
                    if records is None:
                        continue
                    dim = array.metadata.dimension_names[0]
                    if dim != "task" and dim not in starts and "taskIndex" not in array.attrs:
                        starts[dim] = _bounds(stage, dim)
                    for i, record in enumerate(records):
                        if "taskIndex" in array.attrs:  # a fallback array: one task's record
                            i = int(array.attrs["taskIndex"])
                            shape = tuple(array.shape)
                        elif dim == "task":
                            shape = tuple(array.shape[1:])
                        else:
                            start, stop = starts[dim]
                            shape = (int(stop[i] - start[i]), *array.shape[1:])
                        rows.append(
                            {
                                "window": f"{rank_name}/{window_name}",
                                "stage": path,
                                "task_id": int(task_ids[i]),
                                "name": array_name,
                                "dtype": str(array.dtype),
                                "shape": shape,
                                **record["stats"],
                            }
                        )
    return pd.DataFrame(rows)
