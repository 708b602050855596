"""A two-stage kernel without owners, as a user writes one: ``h = x @ w`` then ``y = gelu(h)``, both split
along ``token`` in row tiles of :data:`TILE`; the weight ``w`` is read whole by every task (not split)."""

from __future__ import annotations

from typing import Any

import torch

from megadump_zarr.runtime import Graph, MegaKernel, SplitSpec
from tests.dump._dump_helpers import op, spec

M, K, N, TILE = 32, 16, 8, 8


def matmul_gelu() -> MegaKernel:
    """The kernel (parameters ``x (M, K)``, ``w (K, N)``, ``h (M, N)``, ``y (M, N)``)."""
    x = spec("x", (M, K), 0, dims=("token", "k"))
    w = spec("w", (K, N), 1, dims=("k", "n"))
    h = spec("h", (M, N), 2, dims=("token", "n"))
    y = spec("y", (M, N), 3, dims=("token", "n"))

    def matmul(t: Any) -> None:
        t.params[2][t.rows] = t.params[0][t.rows] @ t.params[1]

    def gelu(t: Any) -> None:
        t.params[3][t.rows] = torch.nn.functional.gelu(t.params[2][t.rows])

    rows = SplitSpec(((0, 0),), (0,))  # input 0 and output 0 split along axis 0; w (input 1) is read whole
    return MegaKernel(
        Graph(
            [
                op("matmul", (x, w), (h,), matmul, core="cube", split=rows, tile_rows=TILE),
                op("gelu", (h,), (y,), gelu, split=rows, tile_rows=TILE),
            ]
        ),
        name="mlp",
    )


def dump_pair(base: Any, *, rows: slice = slice(24, 32)) -> tuple[Any, Any]:
    """Two L1 dumps of one launch of :func:`matmul_gelu` (stages ``matmul`` and ``gelu``): ``a`` with ``x``'s
    ``rows`` nudged by up to 1e-2 (so task 3's records fail), ``b`` the reference.

    Args:
        base: A directory; the dumps go to ``base/a`` and ``base/b``.
        rows: The rows of ``x`` nudged in ``a``.
    """
    from pathlib import Path

    from megadump_zarr import TensorDumpConfig, tensor_dump

    generator = torch.Generator().manual_seed(0)
    x, w = torch.randn(M, K, generator=generator), torch.randn(K, N, generator=generator)
    nudged = x.clone()
    count = rows.stop - rows.start
    nudged[rows] += 0.01 * torch.arange(count * K, dtype=torch.float32).reshape(count, K) / (count * K)
    roots = Path(base) / "a", Path(base) / "b"
    for root, xx in zip(roots, (nudged, x)):
        with tensor_dump(TensorDumpConfig(root, level="L1", stages=("matmul", "gelu"))):
            matmul_gelu().launch([xx, w.clone(), torch.zeros(M, N), torch.zeros(M, N)])
    return roots
