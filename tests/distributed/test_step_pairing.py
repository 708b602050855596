"""Records pair by step on a dask cluster too: each record unit carries B's own path (``RecordPair.path_b``)."""

from __future__ import annotations

import dask

from megadump_zarr.analyse import compare
from tests.analyse._steps import write_pair


def _executed(client) -> int:
    return sum(client.run(lambda dask_worker: dask_worker.state.executed_count).values())


def test_step_pairs_on_the_cluster_equal_local(tmp_path, cluster_client):
    from megadump_zarr.analyse.parallel import active_client

    target, golden = write_pair(tmp_path)
    with dask.config.set(scheduler="threads"):  # no cluster: the local answer
        assert active_client() is None
        local = compare(target, golden, pair={1: 0, 2: 1})
        lagged = compare(target, golden)
    assert active_client() is cluster_client
    before = _executed(cluster_client)
    remote = compare(target, golden, pair={1: 0, 2: 1})
    assert _executed(cluster_client) > before  # the record units ran on the workers
    assert set(remote["verdict"]) == {"pass"} and list(remote["path_b"]) == list(local["path_b"])
    assert list(remote["verdict"]) == list(local["verdict"])
    remote_lagged = compare(target, golden)
    assert list(remote_lagged["verdict"]) == list(lagged["verdict"])
    assert set(remote_lagged[remote_lagged["verdict"] != "missing"]["verdict"]) == {"fail"}
