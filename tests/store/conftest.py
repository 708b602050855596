"""Shared helpers for the store tests."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
import uuid

import numpy as np
import pytest

from megadump_zarr.layout.write_model import ArrayWrite, GroupWrite, InvocationWrite, WindowWrite


def read_json(path: str | os.PathLike[str]) -> dict:
    """Parse a zarr.json file."""
    return json.loads(Path(path).read_bytes())


def tree_hashes(root: str | os.PathLike[str]) -> dict[str, str]:
    """sha256 of every file below ``root`` keyed by relative path (plus directories with an empty hash)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            out[os.path.relpath(os.path.join(dirpath, name), root) + "/"] = ""
        for name in filenames:
            full = os.path.join(dirpath, name)
            out[os.path.relpath(full, root)] = hashlib.sha256(Path(full).read_bytes()).hexdigest()
    return out


def l1_invocation(name: str = "invocation_000001_forward", *, seed: int = 0) -> InvocationWrite:
    """A small L1-shaped invocation: two stages, three task groups, coordinates, mixed dtypes."""
    rng = np.random.default_rng(seed)
    groups = [
        GroupWrite("stages/expert_up", {"stage": "expert_up"}),
        GroupWrite("stages/expert_up/task_000003", {"taskId": 3, "coreType": "AIC", "coreId": 1}),
        GroupWrite("stages/expert_up/task_000004_worker_002", {"taskId": 4, "coreType": "AIV", "coreId": 2}),
        GroupWrite("stages/combine/task_000007", {"taskId": 7, "owner": {"label": "moe", "id": 1}}),
    ]
    arrays = [
        ArrayWrite(
            "stages/expert_up/task_000003/input_00_x",
            rng.standard_normal((6, 8), dtype=np.float32),
            ("row", "col"),
            {"paramPosition": 0, "capturePhase": "before"},
            coords={"row": np.arange(12, 18, dtype=np.int64)},
        ),
        ArrayWrite(
            "stages/expert_up/task_000003/output_00_y",
            rng.standard_normal((6, 4)).astype(np.float16),
            ("row", "hidden"),
            {"paramPosition": 1},
            coords={"row": np.arange(12, 18, dtype=np.int64)},
        ),
        ArrayWrite(
            "stages/expert_up/task_000004_worker_002/output_00_y",
            rng.integers(-5, 5, size=(3, 5), dtype=np.int64),
            ("row", "col"),
            {"paramPosition": 1},
        ),
        ArrayWrite(
            "stages/combine/task_000007/output_00_mask",
            rng.integers(0, 2, size=(9,)).astype(bool),
            ("token",),
            {"paramPosition": 2},
        ),
        ArrayWrite("x", rng.integers(0, 255, size=(4, 3), dtype=np.uint8), ("x_d0", "x_d1"), {"role": "input"}),
    ]
    return InvocationWrite(name, {"invocationId": 1, "step": 0, "direction": "forward"}, groups, arrays)


def l1_window(rank: int = 0, window_index: int = 0, **kwargs) -> WindowWrite:
    """A window holding one :func:`l1_invocation`."""
    return WindowWrite(rank, window_index, {"schemaVersion": 1, "level": "L1"}, [l1_invocation(**kwargs)])


@pytest.fixture
def memory_url():
    """A fresh ``memory://`` root, removed afterwards."""
    import fsspec

    name = f"store-test-{uuid.uuid4().hex}"
    yield f"memory://{name}"
    fs = fsspec.filesystem("memory")
    if fs.exists(f"/{name}"):
        fs.rm(f"/{name}", recursive=True)


@pytest.fixture
def helpers():
    """The helper functions of this conftest (test modules must not import conftest by name)."""
    from types import SimpleNamespace

    return SimpleNamespace(
        read_json=read_json, tree_hashes=tree_hashes, l1_invocation=l1_invocation, l1_window=l1_window
    )
