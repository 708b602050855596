"""An operand every task reads whole (not split) keeps its graph dimension names and gets no task or core
coordinates; split operands get them along the split dimension only. Checked in the task groups (plain
``xr.open_zarr``), stitched (``Dump.tensor``) and in the xarray engine, on a two-stage matmul + GELU kernel
whose weight is not split and on the demo model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr

from megadump_zarr import TensorDumpConfig, open_dump, tensor_dump

from tests._mlp import K, M, N, TILE, matmul_gelu

_TASK_COORDS = {"task_id", "owner_id", "core_type", "core_id", "worker"}


@pytest.fixture(scope="module", params=["tasks", "packs"])
def mlp(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[str, torch.Tensor]]:
    root = tmp_path_factory.mktemp(f"mlp_{request.param}") / "l1"
    torch.manual_seed(0)
    params = {"x": torch.randn(M, K), "w": torch.randn(K, N), "h": torch.zeros(M, N), "y": torch.zeros(M, N)}
    with tensor_dump(TensorDumpConfig(root, level="L1", stages=("matmul", "gelu"), layout=request.param)):
        matmul_gelu().launch(list(params.values()))
    return root, params


def _task_groups(root: Path, stage: str) -> list[Path]:
    return sorted(root.glob(f"rank_*/window_*/invocation_*/stages/{stage}/task_*"))


def test_the_whole_weight_shares_k_with_x_in_every_task_group(mlp: tuple[Path, dict[str, torch.Tensor]]) -> None:
    root, params = mlp
    groups = _task_groups(root, "matmul")
    if not groups:
        pytest.skip("packs: no task groups")
    assert len(groups) == M // TILE
    for i, group in enumerate(groups):
        ds = xr.open_zarr(group)
        assert ds["input_00_x"].dims == ("token", "k")
        assert ds["input_01_w"].dims == ("k", "n")  # not k_input01
        assert set(ds.dims) == {"token", "k", "n"}
        assert "k" not in ds.coords and "n" not in ds.coords  # the weight's rows are every row: no coordinate
        np.testing.assert_array_equal(ds["token"].values, np.arange(i * TILE, (i + 1) * TILE))
        np.testing.assert_array_equal(ds["input_01_w"].values, params["w"].numpy())
        xr.dot(ds["input_00_x"], ds["input_01_w"], dim="k")  # the weight lines up with x along k


def test_the_stitched_weight_has_no_task_coordinates(mlp: tuple[Path, dict[str, torch.Tensor]]) -> None:
    root, params = mlp
    dump = open_dump(root)
    w = dump.tensor("w")
    assert w.dims == ("k", "n") and w.sizes == {"k": K, "n": N}
    assert not set(w.coords) & (_TASK_COORDS | {"k"}), dict(w.coords)
    np.testing.assert_array_equal(w.values, params["w"].numpy())
    assert w.attrs["records"] == M // TILE
    x = dump.tensor("x")
    assert x.dims == ("token", "k")
    np.testing.assert_array_equal(x["task_id"].values, np.repeat(np.arange(M // TILE), TILE))
    assert x["task_id"].dims == ("token",)


def test_the_engine_keeps_k_and_puts_tasks_along_token_only(mlp: tuple[Path, dict[str, torch.Tensor]]) -> None:
    root, params = mlp
    ds = xr.open_dataset(root, engine="megadump", group="rank_0/window_0000/invocation_000000_forward/matmul")
    assert ds["w"].dims == ("k", "n") and ds["x"].dims == ("token", "k") and ds["h"].dims == ("token", "n")
    assert set(ds.dims) == {"token", "k", "n"}
    for name in sorted(_TASK_COORDS):
        assert ds[name].dims == ("token",), name
    np.testing.assert_array_equal(ds["task_id"].values, np.repeat(np.arange(M // TILE), TILE))
    expected = ds["x"].values @ ds["w"].values
    np.testing.assert_allclose(
        xr.dot(ds["x"], ds["w"], dim="k").transpose("token", "n").values, expected, rtol=1e-4, atol=1e-5
    )


def test_the_demo_counts_read_whole_by_every_expert_have_no_task_coordinates(tmp_path: Path) -> None:
    from megadump_zarr.demo.run import run_demo

    root = run_demo(tmp_path / "demo", steps=1).roots["L1"]
    for group in _task_groups(root, "expert_up"):
        ds = xr.open_zarr(group)
        assert ds["input_01_expert_counts"].dims == ("expert",) and "expert" not in ds.coords
    counts = open_dump(root).tensor("expert_counts", stage="expert_up", invocation=0)
    assert counts.dims == ("expert",) and not set(counts.coords) & _TASK_COORDS, dict(counts.coords)
    xs = open_dump(root).tensor("xs", stage="expert_up", invocation=0)
    assert xs["owner_id"].dims == ("slot",) and sorted(set(xs["owner_id"].values.tolist())) == [0, 1]
