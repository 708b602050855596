"""Dumps of the issue's truncation case (an 8192x512 float32 tensor split over 4 tasks, 64 KiB per record: 32 of
each task's 2048 rows stored, 128 of 8192 in all); imported as ``tests._truncated``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from megadump_zarr import TensorDumpConfig, tensor_dump
from megadump_zarr.runtime import MegaKernel
from tests.dump._dump_helpers import copy_rows_graph

ROWS, COLS, TILE, CAP = 8192, 512, 2048, 64 * 1024
STORED_ROWS = CAP // (COLS * 4)  # 32 rows of each record


def source(change: str | None = None) -> torch.Tensor:
    """The kernel input; ``change``: ``"beyond"`` alters the last element (never stored), ``"inside"`` the first."""
    a = torch.arange(ROWS * COLS, dtype=torch.float32).reshape(ROWS, COLS) / 1024
    if change == "beyond":
        a[-1, -1] += 1000.0
    elif change == "inside":
        a[0, 0] += 1000.0
    return a


def write(root: Path, change: str | None = None, cap: int | None = CAP, **options: Any) -> Path:
    """One L1 window of ``b = a * 2`` over 4 tasks, each record capped at ``cap`` bytes (None: whole);
    ``options``: more ``TensorDumpConfig`` fields (``mode="statistics"``)."""
    kernel = MegaKernel(copy_rows_graph(rows=ROWS, cols=COLS, tile_rows=TILE), name="trunc")
    config = TensorDumpConfig(root, level="L1", stages="copy", max_bytes_per_tensor=cap, **options)
    with tensor_dump(config):
        kernel.launch([source(change), torch.zeros(ROWS, COLS)])
    return root
