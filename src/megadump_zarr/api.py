"""The composition root: ``tensor_dump`` wires the dumper to the store's window writer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from megadump_zarr.diagnostics import DiagnosticAction
from megadump_zarr.dump.config import TensorDumpConfig
from megadump_zarr.dump.dumper import TensorDumper
from megadump_zarr.dump.statistics_mode import Baseline
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
    return TensorDumper(config, schedule=schedule, on_dump_ready=on_dump_ready, sink=writer, baseline=_baseline(config))


def _baseline(config: TensorDumpConfig) -> Baseline | None:
    """``mode="diff"``: read the baseline's records through ``open_dump`` (the dump layer never imports
    the read layer; this composition root wires them)."""
    if config.mode != "diff":
        return None
    url = str(config.baseline)

    def records() -> Any:
        from megadump_zarr.read import open_dump

        dump = open_dump(config.baseline, storage_options=config.baseline_storage_options)
        return _with_payload_digests(dump, dump.records())

    def tolerance(dtype: str) -> tuple[float, float]:
        from megadump_zarr.analyse.verdict import tolerance_for

        return tolerance_for(dtype)

    return Baseline(url, records, tolerance)


def _with_payload_digests(dump: Any, frame: Any) -> Any:
    """A tensor-mode baseline's records carry no digest: compute it from each whole stored payload
    (truncated or partial records keep none, so the diff keeps their payloads).

    Args:
        dump: The opened baseline dump.
        frame: Its records table.
    """
    import numpy as np

    from megadump_zarr.layout.digest import DIGEST_ITEMSIZES, digest_of_array
    from megadump_zarr.layout.statistics import DIGEST_COLUMN

    if len(frame) == 0 or frame[DIGEST_COLUMN].notna().all():
        return frame
    frame = frame.copy()
    for i in np.flatnonzero(
        frame[DIGEST_COLUMN].isna().to_numpy()
        & frame["payload"].to_numpy()
        & ~frame["truncated"].to_numpy()
        & ~frame["partial"].to_numpy()
    ):
        row = frame.iloc[i]
        values = np.asarray(dump.record_array(row["path"]).values)
        count = int(np.prod(row["shape"], dtype=np.int64))
        dtype = str(row["dtype"])
        if dtype not in DIGEST_ITEMSIZES or values.size != count or values.nbytes != count * DIGEST_ITEMSIZES[dtype]:
            continue  # the stored values are not the device's elements: no digest, the payload is kept
        frame.iat[i, frame.columns.get_loc(DIGEST_COLUMN)] = digest_of_array(values, dtype)
        frame.iat[i, frame.columns.get_loc("element_count")] = count
    return frame
