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


# --------------------------------------------------------------------------- store helpers
def read_json(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def node_attrs(path: str | Path) -> dict[str, Any]:
    """Attributes of the Zarr node (group or array) at ``path`` read from its zarr.json."""
    return read_json(Path(path) / "zarr.json")["attributes"]


def read_array(path: str | Path) -> np.ndarray:
    import zarr

    return zarr.open_array(str(path), mode="r")[...]


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
    from megadump_zarr.dump.arrays import tensor_to_numpy

    return tensor_to_numpy(t.detach().cpu().contiguous())


def assert_same(stored: np.ndarray, expected: torch.Tensor | np.ndarray) -> None:
    """Bit-exact equality of a stored array with a tensor (dtype, shape and bytes)."""
    exp = np_of(expected) if torch.is_tensor(expected) else np.asarray(expected)
    assert stored.dtype == exp.dtype, (stored.dtype, exp.dtype)
    assert stored.shape == exp.shape, (stored.shape, exp.shape)
    assert stored.tobytes() == exp.tobytes()


# --------------------------------------------------------------------------- tiny graphs
def spec(name: str, shape: Sequence[int], position: int, dtype: torch.dtype = torch.float32,
         dims: Sequence[str] | None = None, dynamic: bool = False) -> TensorSpec:
    return TensorSpec(name, tuple(shape), dtype, position, tuple(dims) if dims is not None else None, dynamic)


def op(name: str, inputs: Sequence[TensorSpec], outputs: Sequence[TensorSpec], fn: Callable[[Any], None], *,
       core: str = "vector", split: SplitSpec | None = None, tile_rows: int | None = None, **kw: Any) -> OperatorNode:
    return OperatorNode(name, core, tuple(inputs), tuple(outputs), fn, split or SplitSpec(), tile_rows, **kw)


def copy_rows_graph(rows: int = 8, cols: int = 4, tile_rows: int = 4, *, name_in: str = "a", name_out: str = "b",
                    stage: str = "copy", dtype: torch.dtype = torch.float32, **kw: Any) -> Graph:
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
