"""Dumps for the read-layer tests, written by the real dump path from the demo MoE block.

Each fixture runs one forward step of a freshly seeded ``MoEBlock`` under a dump and records, by
spying on the kernels' ``launch``, every kernel's parameters after it ran: the runtime's full tensors
that the stitched L1 tensors must reproduce. Blocks with the same seed compute identical values, so
an L0 dump and an L1 dump of two blocks describe the same step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from zarr.abc.store import Store
from zarr.storage import WrapperStore

from megadump_zarr import TensorDumpConfig, schedule, tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from megadump_zarr.layout.write_model import ArrayWrite, GroupWrite, InvocationWrite, WindowWrite
from megadump_zarr.layout.names import safe_name

L1_STAGES = ("expert_up", "expert_down", "unpermute", "combine", "gather")
# Every tensor of the two kernels except ``ys``: unpermute reads ys through a data-dependent gather,
# which has no diagnostic view, so the L1 dump refuses to capture unpermute's inputs when ys is selected.
L1_TENSORS = ("x", "h", "order", "xs", "expert_counts", "w_up", "w_down", "ws", "inverse_order", "gate", "out")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A float64/int64 numpy copy of a runtime tensor (bfloat16 widened exactly)."""
    tensor = tensor.detach().cpu()
    if tensor.is_floating_point():
        return tensor.to(torch.float64).numpy()
    return tensor.numpy().copy()


@dataclass
class DemoRun:
    """A dump of one forward step and the runtime's tensors of that step."""

    root: Path
    config: DemoConfig
    launches: dict[str, list[torch.Tensor]] = field(default_factory=dict)

    def param(self, kernel: str, position: int) -> np.ndarray:
        return to_numpy(self.launches[kernel][position])


def _spy(block: MoEBlock, launches: dict[str, list[torch.Tensor]]) -> None:
    for kernel in (block.router_kernel, block.dispatch_kernel, block.expert_kernel):
        original = kernel.launch

        def launch(
            parameters: Any, *, direction: str = "forward", _original: Any = original, _name: str = kernel.kernel_name
        ) -> Any:
            result = _original(parameters, direction=direction)
            launches[_name] = [p.detach().clone() for p in parameters]
            return result

        kernel.launch = launch


def run_step(root: Path, config: TensorDumpConfig, demo: DemoConfig, *, ranks: tuple[int, ...] = (0,)) -> list[DemoRun]:
    """One forward step per rank (one block per rank, seeded alike but fed rank-specific inputs)."""
    runs = []
    blocks = []
    for rank in ranks:
        block = MoEBlock(demo, rank=rank)
        for _ in range(rank):  # a different input per rank
            block.make_input()
        run = DemoRun(root, demo)
        _spy(block, run.launches)
        blocks.append(block)
        runs.append(run)
    with tensor_dump(config, schedule(wait=0, warmup=0, active=1, repeat=1)) as dumper:
        for block in blocks:
            with torch.no_grad():
                block(block.make_input())
        dumper.step()
    return runs


@pytest.fixture(scope="session", params=sorted(DTYPES))
def demo_dumps(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """An L0 dump and an L1 dump of the same forward step, in float32 and in bfloat16."""
    dtype = request.param
    base = tmp_path_factory.mktemp(f"demo_{dtype}")
    demo = DemoConfig(dtype=DTYPES[dtype])
    l0 = run_step(base / "l0", TensorDumpConfig(base / "l0", level="L0"), demo)[0]
    l1_config = TensorDumpConfig(
        base / "l1", level="L1", kernel_names=("moe_experts", "moe_dispatch"), stages=L1_STAGES, tensor_names=L1_TENSORS
    )
    l1 = run_step(base / "l1", l1_config, demo)[0]
    return {"dtype": dtype, "l0": l0, "l1": l1}


@pytest.fixture(scope="session")
def truncated_dump(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """An L1 dump whose large records are truncated (2 KiB cap) and stored in 256-byte chunks."""
    base = tmp_path_factory.mktemp("truncated")
    demo = DemoConfig(tokens=256, tile_rows=64)
    config = TensorDumpConfig(
        base / "l1",
        level="L1",
        kernel_names="moe_experts",
        stages=("expert_up", "unpermute", "combine"),
        tensor_names=("xs", "ws", "out", "x"),
        max_bytes_per_tensor=2048,
        chunk_bytes=256,
    )
    return run_step(base / "l1", config, demo)[0]


@pytest.fixture(scope="session")
def multirank_dump(tmp_path_factory: pytest.TempPathFactory) -> list[DemoRun]:
    """An L0 dump of one step on ranks 0 and 1 (different inputs)."""
    base = tmp_path_factory.mktemp("multirank")
    config = TensorDumpConfig(base / "l0", level="L0", kernel_names="moe_router")
    return run_step(base / "l0", config, DemoConfig(), ranks=(0, 1))


class CountingStore(WrapperStore):
    """A store wrapper that records every key read (``get`` and partial reads)."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.reads: list[str] = []

    def _with_store(self, store: Store) -> CountingStore:
        wrapped = type(self)(store)
        wrapped.reads = self.reads
        return wrapped

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        self.reads.append(key)
        return await self._store.get(key, prototype, byte_range)

    async def get_partial_values(self, prototype: Any, key_ranges: Any) -> Any:
        key_ranges = list(key_ranges)
        self.reads.extend(key for key, _ in key_ranges)
        return await self._store.get_partial_values(prototype, key_ranges)

    def chunk_reads(self, prefix: str = "") -> list[str]:
        """Keys read that are chunks (not ``zarr.json``, nor a window's ``inventory.json``), optionally below
        ``prefix``."""
        return [
            k
            for k in self.reads
            if not k.endswith("zarr.json") and not k.endswith("/inventory.json") and k.startswith(prefix)
        ]


@pytest.fixture
def counting_store() -> type[CountingStore]:
    """The counting wrapper class."""
    return CountingStore


@dataclass
class HandRecord:
    """One L1 record of a hand-built window.

    Args:
        name: Tensor name.
        data: Stored data (a flat prefix when ``logical_shape`` is given).
        first_row: Global index of the first row (``None``: no coordinate array, not stitchable).
        io: ``input`` or ``output``.
        index: Port index.
        logical_shape: For a truncated record, the logical (actual) shape.
        declared_rows: Declared length of axis 0.
    """

    name: str
    data: np.ndarray
    first_row: int | None = 0
    io: str = "output"
    index: int = 0
    logical_shape: tuple[int, ...] | None = None
    declared_rows: int = 64


def hand_window(
    tasks: dict[int, list[HandRecord]],
    *,
    rank: int = 0,
    window: int = 0,
    stage: str = "stage",
    owners: dict[int, int] | None = None,
    kernel: str = "kern",
) -> WindowWrite:
    """An L1 window of one invocation, laid out as ``megadump_zarr.dump.window`` lays it out."""
    component = safe_name(stage)
    groups = [GroupWrite(f"stages/{component}", {"stage": stage})]
    arrays = []
    for task_id, records in sorted(tasks.items()):
        path = f"stages/{component}/task_{task_id:06d}"
        owner = (owners or {}).get(task_id)
        groups.append(
            GroupWrite(
                path,
                {
                    "taskId": task_id,
                    "stageTaskIndex": task_id,
                    "stage": stage,
                    "owner": {"label": "owner", "id": owner},
                    "coreType": "AIV",
                    "coreId": task_id % 4,
                    "workerId": None,
                    "tensorCount": len(records),
                },
            )
        )
        for record in records:
            array_name = f"{record.io}_{record.index:02d}_{safe_name(record.name)}"
            logical = record.logical_shape or record.data.shape
            truncated = record.logical_shape is not None
            row_bytes = int(np.prod(logical[1:], dtype=np.int64)) * record.data.dtype.itemsize
            first = record.first_row if record.first_row is not None else 0
            attrs = {
                "name": record.name,
                "paramPosition": 0,
                "io": record.io,
                "index": record.index,
                "capturePhase": "after" if record.io == "output" else "before",
                "sourceOffsetBytes": first * row_bytes,
                "declaredShape": [record.declared_rows, *logical[1:]]
                if record.first_row is not None
                else [record.declared_rows, *logical],
                "actualShape": list(logical),
                "storedShape": list(record.data.shape),
                "originalDtype": record.data.dtype.name,
                "storedDtype": record.data.dtype.name,
                "fullBytes": int(np.prod(logical)) * record.data.dtype.itemsize,
                "storedBytes": record.data.nbytes,
                "truncated": truncated,
                "note": "",
            }
            if truncated:
                dims: tuple[str, ...] = (f"{record.io}_{record.index:02d}_element",)
                coords = {}
            else:
                dims = tuple(["row", *(f"col{k}" for k in range(1, record.data.ndim))])
                coords = (
                    {}
                    if record.first_row is None
                    else {"row": np.arange(record.first_row, record.first_row + record.data.shape[0], dtype=np.int64)}
                )
            arrays.append(ArrayWrite(f"{path}/{array_name}", record.data, dims, attrs, coords))
    invocation = InvocationWrite(
        "invocation_000000_forward",
        {"invocationId": 0, "step": 0, "direction": "forward", "kernelName": kernel, "level": "L1", "rank": rank},
        groups,
        arrays,
    )
    attrs = {
        "schemaVersion": 5,
        "level": "L1",
        "windowIndex": window,
        "rank": rank,
        "invocationCount": 1,
        "invocations": [invocation.name],
    }
    return WindowWrite(rank, window, attrs, [invocation])


@pytest.fixture
def hand() -> Any:
    """Builders for hand-made windows: ``hand.Record`` and ``hand.window``."""

    class Hand:
        Record = HandRecord
        window = staticmethod(hand_window)

    return Hand
