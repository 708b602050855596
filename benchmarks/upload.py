"""P6 — upload a local dump to S3 (moto's server on loopback): ``megadump_zarr.transfer.upload`` against
``aws s3 cp --recursive`` of the same directory.

Run as ``python -m benchmarks.upload [--quick] [--repeat N] [--json OUT]``.

Workloads (written once with ``WindowWriter``, the default compressor, like a dump):

- ``large``: two windows of 4 MiB bfloat16 activation arrays, >= 512 MiB on disk (``--quick``: 64 MiB);
- ``small``: one L1-like window of 2048 x 8 KiB float32 arrays in 1024 task groups (``--quick``: 512
  arrays) — about 5,000 objects, where the cost is requests, not bytes.

moto runs in its own process (as the S3 server would), started here on a free port of 127.0.0.1; both
contenders upload into fresh prefixes of one bucket, interleaved per repeat, and each prefix is deleted
afterwards so that moto's memory stays bounded. The baseline is the ``aws`` CLI found on ``PATH`` (or in
the venv) with its default transfer settings (10 concurrent requests, 8 MiB multipart threshold),
pointed at moto with ``--endpoint-url``; when there is none, ``s3transfer``'s ``TransferManager`` with a
default ``TransferConfig`` (what the CLI uses inside) uploads every file, and the table says so. Ours uses
16 workers and includes its own verification (re-listing every window, checking sizes and checksums).

moto is a single Python process that parses every request under one GIL: at these sizes it is likely the
bottleneck for both contenders, so the ratio understates the difference against real S3.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import ml_dtypes
import numpy as np

from benchmarks._common import machine, print_table, start_run, write_json
from megadump_zarr.layout.write_model import ArrayWrite, GroupWrite, InvocationWrite, WindowWrite
from megadump_zarr.store.writer import WindowWriter
from megadump_zarr.transfer import upload

BUCKET = "megadump-bench"
KEY, SECRET = "bench-access-key", "bench-secret-key"
INV = "invocation_000000_forward"


# ---------------------------------------------------------------------------------------------- data
def disk_bytes(root: str) -> tuple[int, int]:
    """(bytes, files) below ``root``."""
    total = files = 0
    for directory, _, names in os.walk(root):
        for name in names:
            total += os.path.getsize(os.path.join(directory, name))
            files += 1
    return total, files


def write_large(root: str, target: int) -> None:
    """Windows of 4 MiB bf16 arrays until ``target`` bytes are on disk (two windows when large enough)."""
    rng = np.random.default_rng(0)
    blocks = [rng.standard_normal((2048, 1024), dtype=np.float32).astype(ml_dtypes.bfloat16) for _ in range(4)]
    with WindowWriter(root) as writer:
        window = 0
        while disk_bytes(root)[0] < target:
            left = target - disk_bytes(root)[0]
            count = max(1, min(64, -(-left // (3 << 20))))  # ~3.3 MiB per compressed array
            arrays = [ArrayWrite(f"act_{k:03d}", blocks[k % 4] * (1 + k % 7), ("row", "col")) for k in range(count)]
            writer.write_window(
                WindowWrite(0, window, {"level": "L0"}, [InvocationWrite(INV, {"step": window}, [], arrays)])
            )
            window += 1


def write_small(root: str, n_arrays: int) -> None:
    """One L1-like window: ``n_arrays`` 8 KiB float32 arrays, two per task group."""
    data = np.random.default_rng(1).standard_normal((n_arrays, 16, 128), dtype=np.float32)
    groups, arrays = [], []
    for task in range(n_arrays // 2):
        path = f"stages/stage_{task % 4}/task_{task:06d}"
        groups.append(GroupWrite(path, {"taskId": task, "stage": f"stage_{task % 4}"}))
        for io, k in (("input_00_a", 2 * task), ("output_00_b", 2 * task + 1)):
            arrays.append(ArrayWrite(f"{path}/{io}", data[k], (f"{io}_d0", f"{io}_d1"), {"paramPosition": k % 7}))
    with WindowWriter(root) as writer:
        writer.write_window(WindowWrite(0, 0, {"level": "L1"}, [InvocationWrite(INV, {"step": 0}, groups, arrays)]))


# ---------------------------------------------------------------------------------------------- server
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_moto() -> tuple[subprocess.Popen, str]:
    """moto's threaded server in a child process; returns it and its endpoint."""
    port = free_port()
    code = (
        "from moto.server import ThreadedMotoServer; import time; "
        f"s = ThreadedMotoServer(ip_address='127.0.0.1', port={port}, verbose=False); s.start(); "
        "time.sleep(10**7)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.time() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError("moto server did not start") from None
            time.sleep(0.1)
    return proc, f"http://127.0.0.1:{port}"


def client(endpoint: str) -> Any:
    import boto3

    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=KEY, aws_secret_access_key=SECRET, region_name="us-east-1"
    )


def delete_prefix(s3: Any, prefix: str) -> None:
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
        if keys:
            s3.delete_objects(Bucket=BUCKET, Delete={"Objects": keys})


def count_prefix(s3: Any, prefix: str) -> tuple[int, int]:
    n = size = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        for item in page.get("Contents", []):
            n += 1
            size += item["Size"]
    return n, size


# ---------------------------------------------------------------------------------------------- contenders
def find_aws() -> str | None:
    """The aws CLI: on PATH, or next to this interpreter."""
    candidate = os.path.join(os.path.dirname(sys.executable), "aws")
    if os.path.exists(candidate):
        return candidate
    found = shutil.which("aws")
    if found is None:
        return None
    try:
        ok = subprocess.run([found, "--version"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return found if ok else None


def run_aws(aws: str, root: str, endpoint: str, prefix: str) -> float:
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }
    start = time.perf_counter()
    subprocess.run(
        [
            aws,
            "s3",
            "cp",
            "--recursive",
            "--only-show-errors",
            "--no-progress",
            "--endpoint-url",
            endpoint,
            root,
            f"s3://{BUCKET}/{prefix}",
        ],
        env=env,
        check=True,
    )
    return time.perf_counter() - start


def run_s3transfer(root: str, endpoint: str, prefix: str) -> float:
    from boto3.s3.transfer import TransferConfig
    from s3transfer.manager import TransferManager

    start = time.perf_counter()
    with TransferManager(client(endpoint), TransferConfig()) as manager:
        for directory, _, names in os.walk(root):
            for name in names:
                path = os.path.join(directory, name)
                key = f"{prefix}/{os.path.relpath(path, root).replace(os.sep, '/')}"
                manager.upload(path, BUCKET, key)
    return time.perf_counter() - start


def run_ours(root: str, endpoint: str, prefix: str, workers: int) -> float:
    options = {"key": KEY, "secret": SECRET, "endpoint_url": endpoint}
    start = time.perf_counter()
    report = upload(root, f"s3://{BUCKET}/{prefix}", storage_options=options, workers=workers)
    elapsed = time.perf_counter() - start
    if not report.ok or report.present_objects:
        raise RuntimeError(f"unexpected upload report: {report.summary()}")
    return elapsed


# ---------------------------------------------------------------------------------------------- main
def main() -> None:
    start_run()  # the JSON's run record (load average, CPU and wall seconds) counts from here
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="64 MiB and 512 small arrays instead of 512 MiB and 2048")
    parser.add_argument("--repeat", type=int, default=3, help="runs per contender (median reported; default 3)")
    parser.add_argument("--workers", type=int, default=16, help="our upload's workers (default 16)")
    parser.add_argument("--root", default=None, help="where the local dumps are written (default: a temp dir)")
    parser.add_argument("--only", choices=("large", "small"), help="run one workload")
    parser.add_argument("--json", dest="json_out", default=None, help="write the entries as JSON here")
    args = parser.parse_args()

    aws = find_aws()
    baseline = "aws s3 cp --recursive" if aws else "s3transfer TransferManager (no aws CLI found)"
    print(f"# {machine()}; baseline: {baseline}{f' ({aws})' if aws else ''}; ours: {args.workers} workers", flush=True)
    base = tempfile.mkdtemp(prefix="megadump-upload-bench-", dir=args.root)
    proc, endpoint = start_moto()
    entries: list[dict[str, Any]] = []
    try:
        s3 = client(endpoint)
        s3.create_bucket(Bucket=BUCKET)
        workloads = {
            "large": (lambda r: write_large(r, (64 if args.quick else 512) << 20)),
            "small": (lambda r: write_small(r, 512 if args.quick else 2048)),
        }
        for name, make in workloads.items():
            if args.only and name != args.only:
                continue
            root = os.path.join(base, name)
            make(root)
            nbytes, files = disk_bytes(root)
            print(f"# {name}: {files} files, {nbytes / 2**20:.1f} MiB on disk", flush=True)
            times: dict[str, list[float]] = {"baseline": [], "ours": []}
            for rep in range(args.repeat):
                for who in ("baseline", "ours") if rep % 2 == 0 else ("ours", "baseline"):
                    prefix = f"{name}-{who}-{rep}"
                    if who == "ours":
                        seconds = run_ours(root, endpoint, prefix, args.workers)
                    elif aws:
                        seconds = run_aws(aws, root, endpoint, prefix)
                    else:
                        seconds = run_s3transfer(root, endpoint, prefix)
                    objects, size = count_prefix(s3, prefix)
                    if objects != files or size != nbytes:
                        raise RuntimeError(
                            f"{who} uploaded {objects} objects / {size} bytes, expected {files} / {nbytes}"
                        )
                    delete_prefix(s3, prefix)
                    times[who].append(seconds)
                    print(
                        f"  {name} {who} run {rep}: {seconds:.2f} s ({nbytes / seconds / 2**20:.0f} MiB/s)", flush=True
                    )
            b, o = statistics.median(times["baseline"]), statistics.median(times["ours"])
            entries.append(
                {
                    "workload": f"{name} ({files} objects)",
                    "baseline": baseline,
                    "baseline_s": round(b, 3),
                    "ours_s": round(o, 3),
                    "ratio": round(b / o, 3),
                    "bytes": nbytes,
                    "objects": files,
                    "baseline_runs": [round(t, 3) for t in times["baseline"]],
                    "ours_runs": [round(t, 3) for t in times["ours"]],
                    "baseline_MiBps": round(nbytes / b / 2**20, 1),
                    "ours_MiBps": round(nbytes / o / 2**20, 1),
                }
            )
            shutil.rmtree(root, ignore_errors=True)
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(base, ignore_errors=True)
    print()
    print_table(
        entries,
        [
            ("workload", "workload"),
            ("bytes", "bytes"),
            ("baseline_s", "baseline s"),
            ("ours_s", "ours s"),
            ("baseline_MiBps", "baseline MiB/s"),
            ("ours_MiBps", "ours MiB/s"),
            ("ratio", "ratio (ours speed-up)"),
        ],
    )
    write_json(args.json_out, entries)


if __name__ == "__main__":
    main()
