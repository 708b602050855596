"""``--scheduler ADDRESS`` and ``--workers N`` on compare, stats and verify: the same output as the local run."""

from __future__ import annotations

from collections.abc import Iterator
import json
import os
from pathlib import Path
import subprocess
import sys
from typing import Any

import pytest

from tests.distributed._job import write_job

distributed = pytest.importorskip("distributed")

MEGADUMP = [sys.executable, "-m", "megadump_zarr.cli.main"]


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A 6-rank job in two local roots; rank 4 differs in ``b``."""
    base = tmp_path_factory.mktemp("job")
    a, b = str(base / "a"), str(base / "b")
    write_job({a: (), b: (4,)}, ranks=6, processes=2)
    return {"a": a, "b": b}


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=":0") as cluster:
        yield cluster.scheduler_address


def megadump(*argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, COLUMNS="200")
    return subprocess.run([*MEGADUMP, *argv], capture_output=True, text=True, timeout=300, env=env)


def _json(result: subprocess.CompletedProcess[str]) -> Any:
    assert result.stdout, result.stderr
    return json.loads(result.stdout)


def test_compare_stats_verify_on_a_scheduler_equal_the_local_run(roots, scheduler):
    a, b = roots["a"], roots["b"]
    for argv, status in ((["compare", a, b, "--json"], 1), (["stats", a, "--json"], 0), (["verify", a, "--json"], 0)):
        local = megadump(*argv)
        remote = megadump(*argv, "--scheduler", scheduler)
        assert (local.returncode, remote.returncode) == (status, status), (argv, local.stderr, remote.stderr)
        assert _json(remote) == _json(local), argv
    rows = _json(megadump("compare", a, b, "--json", "--scheduler", scheduler))
    rows = rows["records"] if isinstance(rows, dict) and "records" in rows else rows
    assert rows  # the comparison did find rank 4's differences
    with distributed.Client(scheduler) as client:  # the work ran on the cluster's worker processes
        executed = client.run(lambda dask_worker: dask_worker.state.executed_count)
    assert len(executed) == 2 and all(n > 0 for n in executed.values()), executed


def test_workers_start_a_local_cluster(roots):
    local = megadump("compare", roots["a"], roots["b"], "--json")
    remote = megadump("compare", roots["a"], roots["b"], "--json", "--workers", "2")
    assert remote.returncode == local.returncode == 1, remote.stderr
    assert _json(remote) == _json(local)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--workers", "0"], "error: --workers must be a positive number of worker processes, got 0"),
        (["--scheduler", "tcp://127.0.0.1:9"], "error: cannot reach the dask scheduler at tcp://127.0.0.1:9: "),
        (
            ["--workers", "2", "--scheduler", "tcp://127.0.0.1:9"],
            "error: argument --scheduler: not allowed with argument --workers",
        ),
    ],
)
def test_bad_cluster_flags_are_one_line_errors(roots, flags, message, capsys, monkeypatch):
    from megadump_zarr.cli import cluster
    from megadump_zarr.cli.main import main

    monkeypatch.setattr(cluster, "_CONNECT_TIMEOUT", "1s")
    assert main(["stats", roots["a"], *flags]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), lines


def test_help_names_the_flags(capsys):
    from megadump_zarr.cli.main import main

    for command in ("compare", "stats", "verify"):
        assert main([command, "--help"]) == 0
        text = capsys.readouterr().out
        assert "--scheduler ADDRESS" in text and "--workers N" in text, command


def test_local_paths_travel_absolute(roots, tmp_path):
    from megadump_zarr.read.source import DumpSource

    relative = os.path.relpath(roots["a"], Path.cwd())
    assert DumpSource(relative).url == roots["a"]


def test_other_commands_options_named_workers_start_no_cluster():
    """``upload --workers 16`` is upload's own thread count, never a dask cluster."""
    from megadump_zarr.cli.cluster import cluster_from_args
    from megadump_zarr.cli.main import build_parser

    args = build_parser().parse_args(["upload", "local", "s3://bucket/run", "--workers", "16"])
    with cluster_from_args(args) as client:
        assert client is None
    args = build_parser().parse_args(["stats", "root", "--workers", "3"])
    assert (args.dask_workers, args.dask_scheduler) == (3, None)
