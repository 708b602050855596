"""A many-rank job for the distributed tests and benchmark: ``ranks`` ranks x ``windows`` windows of the demo
block's L0 dump, written by ``processes`` concurrent processes into one root (local or ``s3://``).

Each child process owns ranks ``p, p + processes, ...``: one ``MoEBlock(rank=r)`` per rank, all stepped under
one ``tensor_dump`` session with a one-step window per step, so every rank gets ``windows`` windows. The
children read their object-store configuration from the environment (``AWS_ENDPOINT_URL``, keys, ...), as a
job on a cluster would. ``perturbed`` ranks get another seed: their tensors differ from an unperturbed run.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
import json
import os
import subprocess
import sys
import textwrap
import time
from typing import Any

__all__ = ["CHILD", "measure_listing", "moto_process", "write_job"]

_MOTO = textwrap.dedent("""
    import sys, time
    from moto.server import ThreadedMotoServer
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    print(f"http://{host}:{port}", flush=True)
    sys.stdin.read()  # until the parent closes our stdin (or dies)
    server.stop()
""")


@contextmanager
def moto_process(*buckets: str, key: str = "testing", secret: str = "testing") -> Iterator[str]:
    """moto's ThreadedMotoServer on 127.0.0.1 (port 0) in a child process; yields the endpoint URL.

    A dask ``LocalCluster`` runs its scheduler in the test process: a moto server there would share the
    GIL with it and starve it while the workers read; in its own process it is the S3 server of a real
    deployment.

    Args:
        buckets: Buckets to create.
        key: Access key for creating them.
        secret: Secret key for creating them.
    """
    import boto3

    child = subprocess.Popen(
        [sys.executable, "-c", _MOTO],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        endpoint = child.stdout.readline().strip() if child.stdout else ""
        if not endpoint.startswith("http://"):
            raise RuntimeError("moto server did not start")
        client = boto3.client(
            "s3", endpoint_url=endpoint, aws_access_key_id=key, aws_secret_access_key=secret, region_name="us-east-1"
        )
        for bucket in buckets:
            client.create_bucket(Bucket=bucket)
        yield endpoint
    finally:
        if child.stdin:
            child.stdin.close()
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


CHILD = textwrap.dedent("""
    import sys
    from megadump_zarr import TensorDumpConfig, schedule, tensor_dump
    from megadump_zarr.demo.model import DemoConfig, MoEBlock

    import json
    spec = json.loads(sys.argv[1])
    for root in spec["roots"]:
        perturbed = set(root["perturbed"])
        blocks = [MoEBlock(DemoConfig(tokens=spec["tokens"], d_model=spec.get("d_model", 8), n_experts=2, tile_rows=max(8, spec["tokens"] // 4), num_workers=2,
                                      seed=r + (1000 if r in perturbed else 0)), rank=r) for r in spec["ranks"]]
        config = TensorDumpConfig(root["url"], level="L0", kernel_names="moe_experts", tensor_names=spec["tensors"])
        with tensor_dump(config, schedule(wait=0, warmup=0, active=1)) as dumper:
            for _ in range(spec["windows"]):
                for block in blocks:
                    block(block.make_input())
                dumper.step()
""")


def write_job(
    roots: Mapping[str, Iterable[int]],
    *,
    ranks: int = 64,
    processes: int = 8,
    windows: int = 2,
    tokens: int = 12,
    d_model: int = 8,
    tensors: Iterable[str] | None = ("x", "xs", "out"),
    env: Mapping[str, str] | None = None,
) -> float:
    """Write the job into every root (each process writes its ranks into each root in turn); return the wall time.

    Args:
        roots: Dump root (local path or ``s3://bucket/prefix``) -> ranks whose block is seeded differently there.
        ranks: Number of ranks.
        processes: Concurrent writer processes.
        windows: Windows (steps) per rank.
        tokens: Rows of the demo input (tiny by default).
        d_model: Width of the demo block.
        tensors: Logical tensors to keep (``None``: all eleven of the expert kernel).
        env: Environment of the children (default: this process's).

    Raises:
        RuntimeError: A child failed (its output attached).
    """
    spec_roots = [{"url": url, "perturbed": sorted(int(r) for r in bad)} for url, bad in roots.items()]
    start = time.perf_counter()
    children = []
    for p in range(processes):
        spec = {
            "roots": spec_roots,
            "ranks": list(range(p, ranks, processes)),
            "windows": windows,
            "tokens": tokens,
            "d_model": d_model,
            "tensors": None if tensors is None else list(tensors),
        }
        children.append(
            subprocess.Popen(
                [sys.executable, "-c", CHILD, json.dumps(spec)],
                env=dict(env if env is not None else os.environ),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    failures = []
    for child in children:
        output, _ = child.communicate(timeout=600)
        if child.returncode != 0:
            failures.append(output[-3000:])
    if failures:
        raise RuntimeError("a job process failed:\n" + failures[0])
    return time.perf_counter() - start


def measure_listing(endpoint: str, url: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """Requests and time of ``open_dump(url).windows()``, then of ``records()``, through a counting proxy.

    Args:
        endpoint: moto's ``http://host:port``.
        url: The dump root (``s3://...``).
        options: Storage options (their ``endpoint_url`` is replaced by the proxy's).

    Returns:
        ``windows`` and ``records`` (the frames), ``list_seconds``, ``records_seconds``, ``requests`` and
        ``records_requests`` (method -> count; ``LIST`` for listings).
    """
    from megadump_zarr import open_dump
    from tests.s3._fault_proxy import FaultProxy

    class Counting(FaultProxy):
        def _decide(self, method: str, path: str) -> str | None:
            listing = method == "GET" and ("list-type" in path or "delimiter" in path)
            with self._lock:
                self.counts["LIST" if listing else method] += 1
            return None

    host, port = endpoint.removeprefix("http://").rsplit(":", 1)
    with Counting((host, int(port))) as proxy:
        start = time.perf_counter()
        dump = open_dump(url, dict(options, endpoint_url=proxy.endpoint))
        windows = dump.windows()
        listed = time.perf_counter() - start
        opened = dict(proxy.counts)
        proxy.counts.clear()
        start = time.perf_counter()
        records = dump.records()
        return {
            "windows": windows,
            "records": records,
            "list_seconds": listed,
            "records_seconds": time.perf_counter() - start,
            "requests": opened,
            "records_requests": dict(proxy.counts),
        }
