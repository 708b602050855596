"""Many ranks in one S3 root (issue 16): 64 ranks x 2 windows written by 8 concurrent processes into moto.

Listing costs requests per rank and per window, never per object; comparing two such roots on a real
two-process dask cluster gives exactly the rows of the local comparison, with workers reading the
dumps from their URL and no credential in any task key, task repr or worker log.
"""

from __future__ import annotations

from collections.abc import Iterator
import os
import time
from typing import Any

import pandas as pd
import pytest

distributed = pytest.importorskip("distributed")
import distributed.diagnostics.plugin  # noqa: E402, F811

from megadump_zarr import compare, open_dump
from tests.distributed._job import measure_listing, moto_process, write_job

pytest.importorskip("s3fs")
boto3 = pytest.importorskip("boto3")

RANKS, WINDOWS, PROCESSES = 64, 2, 8
PERTURBED = (5, 42)
ACCESS_KEY = "AKIAMEGADUMPDISTRIB1"
SECRET = "dIsTrIbUtEd/secret+never-in-a-task-key-0123"


@pytest.fixture(scope="module")
def job() -> Iterator[dict[str, Any]]:
    """Two roots of the same 64-rank job (``b`` with two ranks seeded differently) on one moto server."""
    with moto_process("job", key=ACCESS_KEY, secret=SECRET) as endpoint:
        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET,
            region_name="us-east-1",
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(
            AWS_ENDPOINT_URL=endpoint,
            AWS_ACCESS_KEY_ID=ACCESS_KEY,
            AWS_SECRET_ACCESS_KEY=SECRET,
            AWS_DEFAULT_REGION="us-east-1",
            AWS_CONFIG_FILE="/nonexistent",
            AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
        )
        seconds = write_job(
            {"s3://job/a": (), "s3://job/b": PERTURBED}, ranks=RANKS, windows=WINDOWS, processes=PROCESSES, env=env
        )
        objects = {}
        for prefix in ("a", "b"):
            pages = client.get_paginator("list_objects_v2").paginate(Bucket="job", Prefix=f"{prefix}/")
            objects[prefix] = sum(len(page.get("Contents", [])) for page in pages)
        yield {
            "endpoint": endpoint,
            "objects": objects,
            "write_seconds": seconds,
            "options": {"key": ACCESS_KEY, "secret": SECRET, "endpoint_url": endpoint},
        }


def test_many_ranks_listing_and_compare_on_a_two_worker_cluster(job, cluster):
    """One test for both checks, so that the job (the expensive part) is written once even under xdist."""
    check_listing_costs_requests_per_rank_and_window_not_per_object(job)
    check_compare_on_a_two_worker_cluster_equals_the_local_compare(job, cluster)


def check_listing_costs_requests_per_rank_and_window_not_per_object(job):
    measured = measure_listing(job["endpoint"], "s3://job/a", job["options"])
    windows, records, listing, after = (measured[k] for k in ("windows", "records", "requests", "records_requests"))
    listed = measured["list_seconds"]
    assert len(windows) == RANKS * WINDOWS and set(windows["status"]) == {"complete"}
    assert sorted(set(windows["rank"])) == list(range(RANKS))
    # one GET of the root document, one LIST of the root, one LIST per rank (concurrent), one GET per window
    assert listing == {"GET": 1 + RANKS * WINDOWS, "LIST": 1 + RANKS}, listing
    assert sum(listing.values()) < job["objects"]["a"] / 4
    assert len(records) == RANKS * WINDOWS * 3 and after == {}  # from the window documents already read
    assert sorted(set(records["rank"])) == list(range(RANKS))
    print(
        f"\nlisting {RANKS} ranks x {WINDOWS} windows ({job['objects']['a']} objects): "
        f"{sum(listing.values())} requests {listing}, {listed:.2f} s; job written in {job['write_seconds']:.1f} s"
    )


class TaskSpy(distributed.diagnostics.plugin.SchedulerPlugin):
    """Records every task key and the repr of its task spec as the scheduler receives them."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        self.keys: list[str] = []
        self.specs: list[str] = []

    def transition(self, key: Any, start: str, finish: str, *args: Any, **kwargs: Any) -> None:
        if finish == "processing":
            self.keys.append(str(key))
            task = self.scheduler.tasks.get(key)
            self.specs.append(repr(getattr(task, "run_spec", None)))


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0") as c:
        yield c


def _frames_equal(local: pd.DataFrame, remote: pd.DataFrame) -> None:
    assert list(remote.columns) == list(local.columns)
    assert list(remote.index) == list(local.index)
    pd.testing.assert_frame_equal(remote, local, check_exact=True)


def check_compare_on_a_two_worker_cluster_equals_the_local_compare(job, cluster):
    options = job["options"]
    start = time.perf_counter()
    local = compare(open_dump("s3://job/a", options), open_dump("s3://job/b", options))
    local_seconds = time.perf_counter() - start
    assert len(local) == RANKS * WINDOWS * 3
    failing = local[local["verdict"] != "pass"]
    assert set(failing["rank"]) == set(PERTURBED) and not failing.empty
    seen = TaskSpy(cluster.scheduler)
    cluster.scheduler.add_plugin(seen, name="task-spy")
    try:
        with distributed.Client(cluster) as client:
            before = sum(client.run(lambda dask_worker: dask_worker.state.executed_count).values())
            start = time.perf_counter()
            remote = compare(open_dump("s3://job/a", options), open_dump("s3://job/b", options))
            remote_seconds = time.perf_counter() - start
            ran = sum(client.run(lambda dask_worker: dask_worker.state.executed_count).values()) - before
            logs = repr(client.get_worker_logs()) + repr(client.get_scheduler_logs())
    finally:
        cluster.scheduler.remove_plugin(name="task-spy")
    print(
        f"\ncompare of {len(local)} record pairs: local threads {local_seconds:.2f} s, "
        f"2-worker cluster {remote_seconds:.2f} s"
    )
    _frames_equal(local, remote)
    assert ran >= len(local)  # every record pair ran on a worker process
    assert len(seen.keys) >= len(local)
    for text in (logs, repr(seen.keys), "\n".join(seen.specs)):
        assert SECRET not in text and ACCESS_KEY not in text
