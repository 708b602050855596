"""A real two-process dask cluster per module (LocalCluster(n_workers=2, processes=True)), closed after."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="module")
def cluster_client() -> Iterator[object]:
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0", silence_logs=False
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client
