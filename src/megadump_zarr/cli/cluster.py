"""``--scheduler ADDRESS`` / ``--workers N``: run a command's analysis on a dask.distributed cluster.

The analysis functions run their work through :func:`megadump_zarr.analyse.parallel.map_ordered`, which
uses the active ``distributed.Client``. :func:`cluster_from_args` makes one active for the duration of a
command: ``--scheduler tcp://host:8786`` connects to a running cluster (its workers must reach the dump:
an ``s3://`` URL, or a local path mounted at the same place), ``--workers N`` starts a local cluster of
``N`` worker processes (four threads each) and stops it afterwards. Without either flag the work runs in
local threads, as before. The results are the same either way.

``megadump_zarr.cli.main`` enters :func:`cluster_from_args` around every handler, so a command only
calls :func:`add_cluster_flags` in its ``register``.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
import contextlib
import logging
from typing import Any

from megadump_zarr.cli.common import CliError

__all__ = ["add_cluster_flags", "cluster_from_args"]

_CONNECT_TIMEOUT = "10s"
_THREADS = 4
"""Threads per local worker process: reading records from an object store waits on round trips; four
threads per process overlap them (measured: one thread per worker serialised the reads, 7x slower than
local threads on small records)."""


def add_cluster_flags(parser: argparse.ArgumentParser) -> None:
    """Add ``--scheduler ADDRESS`` and ``--workers N`` to a command."""
    group = parser.add_argument_group("dask cluster (needs the 'distributed' package)")
    exclusive = group.add_mutually_exclusive_group()
    exclusive.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        dest="dask_scheduler",
        help="run on the dask.distributed cluster at ADDRESS (e.g. tcp://scheduler:8786); its "
        "workers open the dump from its URL (s3://..., or a path they all see)",
    )
    exclusive.add_argument(
        "--workers",
        metavar="N",
        type=int,
        dest="dask_workers",
        help="start a local dask cluster of N worker processes for this command",
    )


@contextlib.contextmanager
def cluster_from_args(args: argparse.Namespace) -> Iterator[Any]:
    """The ``distributed.Client`` that ``--scheduler``/``--workers`` ask for, active while the block runs.

    Yields ``None`` (local threads) when neither flag is given.

    Raises:
        CliError: ``distributed`` is not installed, ``N`` is not positive, or the scheduler cannot be reached
            (one line, exit 2).
    """
    # own dests: other commands have options of these names (``upload --workers`` is its upload concurrency)
    address, workers = getattr(args, "dask_scheduler", None), getattr(args, "dask_workers", None)
    if address is None and workers is None:
        yield None
        return
    flag = f"--scheduler {address}" if address is not None else f"--workers {workers}"
    if workers is not None and workers < 1:
        raise CliError(f"--workers must be a positive number of worker processes, got {workers}")
    try:
        import distributed
    except ImportError:
        raise CliError(f"{flag} needs the 'distributed' package: pip install 'megadump_zarr[distributed]'") from None
    with contextlib.ExitStack() as stack:
        if address is not None:
            try:
                client = distributed.Client(address, timeout=_CONNECT_TIMEOUT)
            except (OSError, TimeoutError, ValueError) as error:
                text = " ".join(str(error).split()) or type(error).__name__
                raise CliError(f"cannot reach the dask scheduler at {address}: {text}") from None
            stack.callback(client.close)
        else:
            cluster = distributed.LocalCluster(
                n_workers=workers,
                processes=True,
                threads_per_worker=_THREADS,
                dashboard_address=":0",
                silence_logs=logging.ERROR,
            )
            stack.callback(cluster.close)
            client = distributed.Client(cluster)
            stack.callback(client.close)
        yield client  # a new Client is dask's default scheduler until it closes
