"""Helpers for the dump-layer tests (tiny graphs, store readers); imported as ``tests.dump._dump_helpers``."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from megadump_zarr.diagnostics import LaunchContext
from megadump_zarr.runtime import Graph, MegaKernel, OperatorNode, SplitSpec, TensorSpec, compile_runtime
from tests._packs import packed_tasks


# --------------------------------------------------------------------------- store helpers
# The packs layout stores a stage's small task records as task-record packs; these helpers read a node path of
# the tasks layout's view (stages/{stage}/task_.../input_00_x) from its physical document or, in a packed stage,
# from the pack row that holds it, as the readers find it (read.pack_record.PackedTasks: the writer's contract
# with the readers).
def _stage_of(path: Path) -> Path | None:
    for stage in (path, *path.parents):
        if stage.parent.name == "stages":
            return stage
    return None


def _pack_view(path: Path) -> tuple[Path, Any] | None:
    """``(window, PackedTasks)`` of the packs of the stage holding ``path``, or None."""
    stage = _stage_of(path)
    window = next((a for a in path.parents if a.name.startswith("window_")), None)
    if stage is None or window is None:
        return None
    packs = sorted(p.relative_to(window).as_posix() for p in stage.glob("pack_*") if (p / "zarr.json").is_file())
    return window, packed_tasks(window, packs, strict=False)


def _packed(path: Path) -> tuple[Path, Any, Any] | None:
    """``(window, task attributes or None, packed member or None)`` of ``path`` in its stage's packs, or None."""
    view = _pack_view(path)
    if view is None:
        return None
    window, tasks = view
    rel = path.relative_to(window).as_posix()
    return window, tasks.task_attributes(rel), tasks.find(rel)


def view_doc(path: str | Path) -> dict[str, Any]:
    """The document of the node at ``path`` in the schema-6 view (physical, or described from its pack row)."""
    path = Path(path)
    if (path / "zarr.json").is_file():
        return read_json(path / "zarr.json")
    found = _packed(path)
    if found is not None and found[1] is not None:
        return {"node_type": "group", "attributes": found[1]}
    if found is not None and found[2] is not None:
        return found[2].doc
    raise FileNotFoundError(f"no node at {path} (nor in a pack of its stage)")


def read_json(path: str | Path) -> dict[str, Any]:
    """A JSON file; a ``zarr.json`` of the schema-6 view that a pack holds comes from the pack."""
    path = Path(path)
    if path.name == "zarr.json" and not path.is_file():
        return view_doc(path.parent)
    return json.loads(path.read_text(encoding="utf-8"))


def node_attrs(path: str | Path) -> dict[str, Any]:
    """Attributes of the Zarr node (group or array) at ``path`` (see :func:`view_doc`)."""
    return view_doc(path)["attributes"]


def pack_row(path: str | Path) -> tuple[Path, int]:
    """The pack directory holding the packed task group (or record) at ``path``, and the task's row in it."""
    path = Path(path)
    stage = _stage_of(path)
    assert stage is not None, path
    task = path if path.parent == stage else next(a for a in path.parents if a.parent == stage)
    view = _pack_view(task)
    assert view is not None, path
    window, tasks = view
    group = task.relative_to(window).as_posix()
    for name in tasks.members(group):
        member = tasks.find(f"{group}/{name}")
        if hasattr(member, "row"):
            return window / member.array.rpartition("/")[0], member.row
    raise FileNotFoundError(f"task group {task} is in no pack of {stage}")


def read_array(path: str | Path) -> np.ndarray:
    """The array at ``path`` of the schema-6 view: zarr's read of the physical array, or of its pack row."""
    import zarr

    path = Path(path)
    if (path / "zarr.json").is_file():
        return zarr.open_array(str(path), mode="r")[...]
    found = _packed(path)
    member = None if found is None else found[2]
    if member is None:
        raise FileNotFoundError(f"no array at {path} (nor in a pack of its stage)")
    if not hasattr(member, "row"):  # a row coordinate: arange(start, stop)
        return np.arange(member.start, member.stop, dtype=np.int64)
    return zarr.open_array(str(found[0] / member.array), mode="r")[member.row]


def open_task(task: str | Path) -> Any:
    """``xr.open_zarr`` of a task group: the physical group itself, or its row of the pack holding it (the pack
    is the physical data group plain xarray opens)."""
    import xarray as xr

    task = Path(task)
    if (task / "zarr.json").is_file():
        return xr.open_zarr(str(task))
    pack, row = pack_row(task)
    return xr.open_zarr(str(pack)).isel(task=row)


def view_children(group: str | Path) -> tuple[list[str], list[str]]:
    """(groups, arrays) directly below ``group`` in the schema-6 view (packs replaced by their task groups)."""
    group = Path(group)
    direct = {
        p.name: read_json(p / "zarr.json")["node_type"]
        for p in (group.iterdir() if group.is_dir() else ())
        if (p / "zarr.json").is_file() and not p.name.startswith("pack_")
    }
    view = _pack_view(group / "x") if group.parent.name == "stages" else _pack_view(group)
    if view is not None:
        window, tasks = view
        rel = group.relative_to(window).as_posix()
        if rel in tasks.groups():
            direct |= {name: "array" for name in tasks.members(rel)}
        else:
            direct |= {g.rpartition("/")[2]: "group" for g in tasks.groups() if g.rpartition("/")[0] == rel}
    return (
        sorted(k for k, v in direct.items() if v == "group"),
        sorted(k for k, v in direct.items() if v == "array"),
    )


def file_hashes(root: str | Path) -> dict[str, str]:
    """sha256 of every file below ``root`` (relative path → digest)."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            full = Path(dirpath) / name
            out[str(full.relative_to(root))] = hashlib.sha256(full.read_bytes()).hexdigest()
    return out


def to_float(t: torch.Tensor) -> np.ndarray:
    return t.detach().float().cpu().numpy()


def np_of(t: torch.Tensor) -> np.ndarray:
    """Exact numpy view of a tensor (bfloat16 as ml_dtypes.bfloat16)."""
    from megadump_zarr.tensor_arrays import tensor_to_numpy

    return tensor_to_numpy(t.detach().cpu().contiguous())


def assert_same(stored: np.ndarray, expected: torch.Tensor | np.ndarray) -> None:
    """Bit-exact equality of a stored array with a tensor (dtype, shape and bytes)."""
    exp = np_of(expected) if torch.is_tensor(expected) else np.asarray(expected)
    assert stored.dtype == exp.dtype, (stored.dtype, exp.dtype)
    assert stored.shape == exp.shape, (stored.shape, exp.shape)
    assert stored.tobytes() == exp.tobytes()


# --------------------------------------------------------------------------- tiny graphs
def spec(
    name: str,
    shape: Sequence[int],
    position: int,
    dtype: torch.dtype = torch.float32,
    dims: Sequence[str] | None = None,
    dynamic: bool = False,
) -> TensorSpec:
    return TensorSpec(name, tuple(shape), dtype, position, tuple(dims) if dims is not None else None, dynamic)


def op(
    name: str,
    inputs: Sequence[TensorSpec],
    outputs: Sequence[TensorSpec],
    fn: Callable[[Any], None],
    *,
    core: str = "vector",
    split: SplitSpec | None = None,
    tile_rows: int | None = None,
    **kw: Any,
) -> OperatorNode:
    return OperatorNode(name, core, tuple(inputs), tuple(outputs), fn, split or SplitSpec(), tile_rows, **kw)


def copy_rows_graph(
    rows: int = 8,
    cols: int = 4,
    tile_rows: int = 4,
    *,
    name_in: str = "a",
    name_out: str = "b",
    stage: str = "copy",
    dtype: torch.dtype = torch.float32,
    **kw: Any,
) -> Graph:
    """``b[rows] = a[rows] * 2`` split on axis 0."""
    a = spec(name_in, (rows, cols), 0, dtype, ("row", "col"))
    b = spec(name_out, (rows, cols), 1, dtype, ("row", "col"))

    def fn(t: Any) -> None:
        t.params[1][t.rows] = t.params[0][t.rows] * 2

    return Graph([op(stage, (a,), (b,), fn, split=SplitSpec(((0, 0),), (0,)), tile_rows=tile_rows, **kw)])


def context_for(runtime: Any, parameters: Sequence[Any], direction: str = "forward") -> LaunchContext:
    counters = torch.zeros(max(len(runtime.tasks), 1), dtype=torch.int32)
    return LaunchContext(runtime, direction, tuple(parameters), counters)


def compile_graph(graph: Graph, parameters: Sequence[torch.Tensor], **kw: Any) -> Any:
    kw.setdefault("kernel_name", "tiny")
    return compile_runtime(graph, parameters, **kw)


__all__ = [
    "MegaKernel",
    "assert_same",
    "compile_graph",
    "context_for",
    "copy_rows_graph",
    "file_hashes",
    "node_attrs",
    "np_of",
    "op",
    "read_array",
    "read_json",
    "spec",
    "to_float",
]
