"""msprobe dump directories compared in place on a real dask.distributed cluster (no conversion step).

A worker cannot receive an open dump; it receives a :class:`~megadump_zarr.read.source.DumpSource` naming
the msprobe directory and opens it in place itself. Before that, an msprobe side was shipped as the open
dump and ``compare --workers 2`` died with an internal pickling error.
"""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest

from megadump_zarr import compare, open_dump
from megadump_zarr.read.source import DumpSource

pytest.importorskip("msprobe")
distributed = pytest.importorskip("distributed")

CLI = [sys.executable, "-m", "megadump_zarr.cli.main"]


def test_an_msprobe_dump_travels_as_its_directory(msprobe_dumps):
    dump = open_dump(msprobe_dumps["golden"])
    source = DumpSource.of(dump)
    assert source is not None and source.url == str(msprobe_dumps["golden"].resolve())
    again = pickle.loads(pickle.dumps(source)).open()
    assert list(again.records()["path"]) == list(dump.records()["path"])


def test_compare_on_a_local_cluster_equals_the_serial_compare(msprobe_dumps):
    serial = compare(msprobe_dumps["target"], msprobe_dumps["golden"])
    with (
        distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0") as cluster,
        distributed.Client(cluster),
    ):
        parallel = compare(msprobe_dumps["target"], msprobe_dumps["golden"])
    assert list(parallel["path"]) == list(serial["path"])
    assert list(parallel["verdict"]) == list(serial["verdict"])
    assert "fail" in set(serial["verdict"])


def test_cli_workers_on_raw_directories(msprobe_dumps):
    args = [*CLI, "compare", str(msprobe_dumps["target"]), str(msprobe_dumps["golden"]), "-q"]
    serial = subprocess.run(args, capture_output=True, text=True, timeout=300)
    parallel = subprocess.run([*args, "--workers", "2"], capture_output=True, text=True, timeout=300)
    assert serial.returncode == parallel.returncode == 1, parallel.stderr[-2000:]
    assert "internal error" not in parallel.stderr
    assert parallel.stdout.splitlines()[-3:] == serial.stdout.splitlines()[-3:]
