"""Two small L1 dumps of the same kernel that recorded different steps, for the step-pairing tests; imported as
``tests.analyse._steps``.

``golden`` records steps 0 and 1. ``target`` records steps 1 and 2 and has the lag bug being hunted: the data its
step ``s`` sees are the golden run's step ``s - 1``. Each dump holds two windows (``window_0000`` and
``window_0001``), so pairing windows by position compares target step 1 with golden step 0 (equal data).
"""

from __future__ import annotations

from pathlib import Path

import torch

from megadump_zarr import DiagnosticAction, TensorDumpConfig, tensor_dump
from megadump_zarr.runtime import MegaKernel
from tests.dump._dump_helpers import copy_rows_graph


def step_data(step: int) -> torch.Tensor:
    """The kernel input at ``step`` (every step's differs from the others')."""
    return torch.arange(32, dtype=torch.float32).reshape(8, 4) + 100.0 * step


def write_run(root: Path, steps: set[int], *, lag: int = 0, runs: int = 3) -> Path:
    """Run the kernel ``runs`` steps and dump the ``steps`` (one window each); step ``s`` sees ``step_data(s - lag)``."""
    kernel = MegaKernel(copy_rows_graph(rows=8, cols=4, tile_rows=4), name="k")

    def schedule(step: int) -> DiagnosticAction:
        return DiagnosticAction.RECORD_AND_SAVE if step in steps else DiagnosticAction.NONE

    with tensor_dump(TensorDumpConfig(root, level="L1", stages="copy"), schedule=schedule) as dumper:
        for step in range(runs):
            kernel.launch([step_data(step - lag), torch.zeros(8, 4)])
            dumper.step()
    return root


def write_pair(base: Path) -> tuple[Path, Path]:
    """``(target, golden)``: target steps {1, 2} with the lag bug, golden steps {0, 1}."""
    return write_run(base / "target", {1, 2}, lag=1), write_run(base / "golden", {0, 1})
