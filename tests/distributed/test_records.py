"""stats and first_nonfinite on a dask cluster: the per-window records tables are built by the workers and
equal the local ones exactly; first_nonfinite finds the same record."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from megadump_zarr import TensorDumpConfig, open_dump, tensor_dump
from megadump_zarr.analyse import first_nonfinite
from megadump_zarr.analyse.records import prefetch_records
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from tests._faults import inject_fault


@pytest.fixture(scope="module")
def nan_dump(tmp_path_factory: pytest.TempPathFactory) -> str:
    """Four ranks' L0 windows of one step; rank 2's expert_down task for expert 1 writes NaN."""
    root = str(tmp_path_factory.mktemp("nan") / "dump")
    blocks = [MoEBlock(DemoConfig(tokens=16, d_model=8, n_experts=2, seed=r), rank=r) for r in range(4)]
    with tensor_dump(TensorDumpConfig(root, level="L0", kernel_names="moe_experts")):
        for block in blocks:
            if block is blocks[2]:
                with inject_fault(block.expert_kernel, "expert_down", owner=1, delta=math.nan):
                    block(block.make_input())
            else:
                block(block.make_input())
    return root


def _executed(client) -> int:
    return sum(client.run(lambda dask_worker: dask_worker.state.executed_count).values())


def test_records_and_first_nonfinite_on_the_cluster_equal_local(nan_dump, cluster_client):
    from megadump_zarr.analyse.parallel import active_client

    local_records = open_dump(nan_dump).records()
    with __import__("dask").config.set(scheduler="threads"):  # no cluster: the local answer
        assert active_client() is None
        local_first = first_nonfinite(open_dump(nan_dump))
    assert local_first is not None and local_first["rank"] == 2
    assert active_client() is cluster_client
    before = _executed(cluster_client)
    dump = prefetch_records(open_dump(nan_dump))
    assert _executed(cluster_client) - before == 4  # one task per window
    assert sorted(dump._frames) == [f"rank_{r}/window_0000" for r in range(4)]
    pd.testing.assert_frame_equal(dump.records(), local_records, check_exact=True)
    before = _executed(cluster_client)
    remote_first = first_nonfinite(open_dump(nan_dump))
    assert _executed(cluster_client) - before == 4
    pd.testing.assert_series_equal(remote_first, local_first, check_exact=True)
