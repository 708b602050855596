"""The reference MegaKernel runtime: graph, ABI, compiler, executor with L1 device worker, kernel."""

from megadump_zarr.runtime.accumulation import AccumulationOrder, accumulate, split_k_matmul
from megadump_zarr.runtime.abi import RuntimeConfigC, TaskAiCoreType, TaskDescC, TensorDescC
from megadump_zarr.runtime.compiler import PreparedRuntime, compile_runtime, shard_view_resolver, worker_shard
from megadump_zarr.runtime.executor import DeviceWorker, Tile, execute
from megadump_zarr.runtime.graph import (
    Graph,
    GraphTensor,
    OperatorNode,
    SplitSpec,
    TensorSpec,
    operator_diagnostic_name,
)
from megadump_zarr.runtime.kernel import MegaKernel, megakernel_apply

__all__ = [
    "AccumulationOrder",
    "DeviceWorker",
    "Graph",
    "GraphTensor",
    "MegaKernel",
    "OperatorNode",
    "PreparedRuntime",
    "RuntimeConfigC",
    "SplitSpec",
    "TaskAiCoreType",
    "TaskDescC",
    "TensorDescC",
    "TensorSpec",
    "Tile",
    "accumulate",
    "compile_runtime",
    "execute",
    "megakernel_apply",
    "operator_diagnostic_name",
    "shard_view_resolver",
    "split_k_matmul",
    "worker_shard",
]
