"""The reference MegaKernel runtime, and the launch protocol every runtime implements.

Public API (what ``__all__`` lists, documented in the API reference): the graph a kernel is written in
(``Graph``, ``OperatorNode``, ``TensorSpec``, ``SplitSpec``, ``Tile``), the kernel (``MegaKernel``,
``megakernel_apply``), the native ABI (``RuntimeConfigC``, ``TaskDescC``, ``TensorDescC``, ``TaskAiCoreType``),
the compiler and executor (``compile_runtime``, ``PreparedRuntime``, ``execute``, ``DeviceWorker``), and the
launch protocol another runtime follows to take part in dumps (``LaunchContext``, ``LaunchArguments``,
``DiagnosticCall``, ``active_session``).
"""

from megadump_zarr.diagnostics import DiagnosticCall, LaunchArguments, LaunchContext, active_session
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
    "DiagnosticCall",
    "Graph",
    "GraphTensor",
    "LaunchArguments",
    "LaunchContext",
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
    "active_session",
    "compile_runtime",
    "execute",
    "megakernel_apply",
    "operator_diagnostic_name",
    "shard_view_resolver",
    "split_k_matmul",
    "worker_shard",
]
