"""The composition root: ``tensor_dump`` wires the dumper to the store's window writer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from megadump_zarr.diagnostics import DiagnosticAction
from megadump_zarr.dump.config import TensorDumpConfig
from megadump_zarr.dump.dumper import TensorDumper
from megadump_zarr.dump.statistics import Baseline
from megadump_zarr.store.writer import WindowWriter

__all__ = ["tensor_dump"]


def tensor_dump(
    config: TensorDumpConfig,
    schedule: Callable[[int], DiagnosticAction] | None = None,
    on_dump_ready: Callable[[Any], None] | None = None,
) -> TensorDumper:
    """Create the schedule-driven MegaKernel tensor dumper (a context manager).

    Args:
        config: What to capture, and where and how to store it.
        schedule: Step schedule (see ``schedule``); None records every step into one window.
            WARMUP steps copy nothing.
        on_dump_ready: Called with the dumper after each window is committed.

    Note:
        Dumping synchronises Device-to-Host copies and changes execution timing.
    """
    if not isinstance(config, TensorDumpConfig):
        raise TypeError(f"config must be TensorDumpConfig, got {type(config).__name__}")
    writer = WindowWriter(
        config.output_dir,
        storage_options=config.storage_options,
        compressor=config.compressor,
        chunk_bytes=config.chunk_bytes,
        stats=config.stats,
        durable=config.durable,
        pack=config.layout == "packs",
    )
    return TensorDumper(config, schedule=schedule, on_dump_ready=on_dump_ready, sink=writer,
                        baseline=_baseline(config))


def _baseline(config: TensorDumpConfig) -> Baseline | None:
    """``mode="diff"``: read the baseline's records through ``open_dump`` (the dump layer never imports
    the read layer; this composition root wires them)."""
    if config.mode != "diff":
        return None
    url = str(config.baseline)

    def records() -> Any:
        from megadump_zarr.read import open_dump

        return open_dump(config.baseline, storage_options=config.baseline_storage_options).records()

    def tolerance(dtype: str) -> tuple[float, float]:
        from megadump_zarr.analyse.verdict import tolerance_for

        return tolerance_for(dtype)

    return Baseline(url, records, tolerance)
