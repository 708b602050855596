"""P7 — past one machine: compare two multi-rank S3 roots on dask.distributed, and the cost of opening a root.

Run as ``python -m benchmarks.distributed [--quick] [--ranks N] [--json OUT]``.

One job (the demo block's L0 dump, ``--ranks`` ranks x 2 windows, written by 8 concurrent processes into
two roots on moto; two ranks seeded differently in the second root) is compared three ways in one run,
on the same data: in local threads (no cluster, the baseline), and on a ``LocalCluster`` of 1 and of 2
worker processes (four threads each: small records make the work round-trip bound; the workers open both
roots from their ``s3://`` URL). Each way runs
once to warm up (imports, worker-side opening of the roots) and is then timed; the reported scaling is
``t(1 worker) / t(2 workers)``, and each worker's peak RSS is sampled every 10 ms during the timed run.
All three results must be equal (checked). Then the request count and time of ``open_dump(root).windows()``
and ``records()`` on a 64-rank root, counted by a pass-through proxy in front of moto.

moto runs in its own process. It is a single Python process serving every request: with two workers
reading small records it is likely the bottleneck, so the scaling here is a floor for a real object store.
"""

from __future__ import annotations

import argparse
from collections import Counter
import os
import sys
import threading
import time
from typing import Any

import pandas as pd

from benchmarks._common import machine, print_table, start_run, write_json
from tests.distributed._job import measure_listing, moto_process, write_job

KEY, SECRET = "AKIABENCHDISTRIBUTED", "bench/secret+never-shown"
PERTURBED = (1, 5)
THREADS = 4  # per worker: reading small records from an object store is round-trip bound, threads overlap them


def _rss_sampler() -> str:
    """Runs on a worker: start sampling this process's RSS every 10 ms (peak kept in a module global)."""
    import psutil

    state = sys.modules[__name__].__dict__.setdefault("_PEAK", {})
    state["peak"] = psutil.Process().memory_info().rss
    state["stop"] = threading.Event()

    def sample() -> None:
        process = psutil.Process()
        while not state["stop"].wait(0.01):
            state["peak"] = max(state["peak"], process.memory_info().rss)

    threading.Thread(target=sample, daemon=True).start()
    return "ok"


def _rss_peak() -> int:
    state = sys.modules[__name__].__dict__.get("_PEAK", {})
    if "stop" in state:
        state["stop"].set()
    return int(state.get("peak", 0))


def compare_roots(options: dict[str, Any]) -> pd.DataFrame:
    from megadump_zarr import compare, open_dump

    return compare(open_dump("s3://job/a", options), open_dump("s3://job/b", options))


def run_compare(options: dict[str, Any], workers: int | None) -> dict[str, Any]:
    """Warm-up run, then a timed run (with per-worker peak RSS) of the comparison."""
    if workers is None:
        compare_roots(options)
        start = time.perf_counter()
        result = compare_roots(options)
        return {"seconds": time.perf_counter() - start, "result": result, "peak_mib": []}
    import distributed

    with (
        distributed.LocalCluster(
            n_workers=workers, processes=True, threads_per_worker=THREADS, dashboard_address=":0", silence_logs=50
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        compare_roots(options)
        client.run(_rss_sampler)
        start = time.perf_counter()
        result = compare_roots(options)
        seconds = time.perf_counter() - start
        peaks = client.run(_rss_peak)
    return {"seconds": seconds, "result": result, "peak_mib": sorted(p / 2**20 for p in peaks.values())}


def count_listing(endpoint: str, options: dict[str, Any]) -> dict[str, Any]:
    """Requests and time of ``windows()`` and ``records()`` of root ``a``, through a counting proxy."""
    measured = measure_listing(endpoint, "s3://job/a", options)
    return {**measured, "windows": len(measured["windows"]), "records": len(measured["records"])}


def count_objects(endpoint: str, prefix: str) -> int:
    import boto3

    client = boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=KEY, aws_secret_access_key=SECRET, region_name="us-east-1"
    )
    pages = client.get_paginator("list_objects_v2").paginate(Bucket="job", Prefix=f"{prefix}/")
    return sum(len(page.get("Contents", [])) for page in pages)


def main() -> None:
    start_run()  # the JSON's run record (load average, CPU and wall seconds) counts from here
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--quick", action="store_true", help="16 ranks of tiny records instead of 64 ranks of records up to 256 KiB"
    )
    parser.add_argument("--ranks", type=int, default=None, help="ranks of the job (default 64; --quick 16)")
    parser.add_argument("--json", dest="json_out", default=None, help="write the entries as JSON here")
    args = parser.parse_args()
    ranks = args.ranks or (16 if args.quick else 64)
    tokens, d_model = (64, 8) if args.quick else (2048, 32)

    with moto_process("job", key=KEY, secret=SECRET) as endpoint:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(
            AWS_ENDPOINT_URL=endpoint,
            AWS_ACCESS_KEY_ID=KEY,
            AWS_SECRET_ACCESS_KEY=SECRET,
            AWS_DEFAULT_REGION="us-east-1",
        )
        written = write_job(
            {"s3://job/a": (), "s3://job/b": PERTURBED},
            ranks=ranks,
            processes=8,
            tokens=tokens,
            d_model=d_model,
            tensors=None,
            env=env,
        )
        objects = count_objects(endpoint, "a")
        options = {"key": KEY, "secret": SECRET, "endpoint_url": endpoint}
        print(
            f"{machine()}; job: {ranks} ranks x 2 windows, {objects} objects per root, written by 8 processes "
            f"in {written:.1f} s"
        )
        runs = {
            name: run_compare(options, workers)
            for name, workers in (("local threads", None), ("1 dask worker", 1), ("2 dask workers", 2))
        }
        base = runs["local threads"]["result"]
        for name, run in runs.items():
            pd.testing.assert_frame_equal(run["result"], base, check_exact=True)
        listing = count_listing(endpoint, options)
    pairs = len(base)
    failing = int((base["verdict"] != "pass").sum())
    t1, t2 = runs["1 dask worker"]["seconds"], runs["2 dask workers"]["seconds"]
    rows = [
        {
            "workload": f"compare {pairs} record pairs ({failing} failing), {name}",
            "seconds": run["seconds"],
            "peak_mib": ", ".join(f"{p:.0f}" for p in run["peak_mib"]) or "-",
            "ratio": runs["local threads"]["seconds"] / run["seconds"],
        }
        for name, run in runs.items()
    ]
    print_table(
        rows,
        [
            ("workload", "workload"),
            ("seconds", "s"),
            ("ratio", "local / this"),
            ("peak_mib", "peak RSS per worker, MiB"),
        ],
    )
    load = os.getloadavg()
    print(
        f"scaling 1 -> 2 workers: {t1 / t2:.2f}x (results identical to the local run); load average "
        f"{load[0]:.1f}, {load[1]:.1f}, {load[2]:.1f} on {os.cpu_count()} cores (a shared machine moves these 2-10x)"
    )
    total = sum(listing["requests"].values())
    print(
        f"open_dump + windows() of {ranks} ranks x 2 windows ({objects} objects): {total} requests "
        f"{dict(Counter(listing['requests']))} in {listing['list_seconds']:.2f} s; records() {listing['records']} rows, "
        f"{sum(listing['records_requests'].values())} more requests, {listing['records_seconds']:.2f} s"
    )
    write_json(
        args.json_out,
        [
            *(
                {"workload": r["workload"], "seconds": r["seconds"], "ratio": r["ratio"], "peak_mib": r["peak_mib"]}
                for r in rows
            ),
            {"workload": "scaling 1 -> 2 workers", "ratio": t1 / t2, "load_average": load},
            {"workload": f"open {ranks}-rank root", "objects": objects, **listing},
        ],
    )


if __name__ == "__main__":
    main()
