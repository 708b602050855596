"""Statistics as TensorBoard scalars (the ``tensorboard`` package's event file writer; ``pip install
megadump_zarr[tensorboard]``).

One run directory per rank (``OUT/rank_{r}``); one scalar per stage, owner (or core), record and statistic:
tag ``{stage}/{owner_N | CORE}/{io}_{index}_{name}/{statistic}`` at L1 (``{kernel}/{role}/{name}/{statistic}``
at L0), step = the record's user step. The records of one tag at one step (row tiles of one stage on one
core) are combined: L2 norms as the norm of their concatenation, NaN/Inf counts summed, min/max of all.
"""

from __future__ import annotations

import math
from pathlib import Path
import time
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["STATISTICS", "TensorBoardScalars", "export_tensorboard", "scalar_rows"]

STATISTICS = ("l2norm", "min", "max", "nan_count", "inf_count")
"""The statistics written, each under its own tag suffix."""


def _missing(value: Any) -> bool:
    try:
        return value is None or bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _who(row: Any) -> str:
    owner = row.get("owner_id")
    if not _missing(owner):
        return f"owner_{int(owner)}"
    core_type, core_id = row.get("core_type"), row.get("core_id")
    if not _missing(core_type) and not _missing(core_id):
        return f"{core_type}{int(core_id)}"
    role = row.get("role")
    return "" if _missing(role) else str(role)


def _tag(row: Any) -> str:
    name = str(row.get("name"))
    if not _missing(row.get("stage")):
        io, index = row.get("io"), row.get("index")
        record = name if _missing(io) else f"{io}_{int(index):02d}_{name}" if not _missing(index) else f"{io}_{name}"
        parts = [str(row["stage"]), _who(row), record]
    else:
        parts = [str(row.get("kernel")), _who(row), name]
    return "/".join(part.replace(" ", "_") for part in parts if part)


def scalar_rows(records: pd.DataFrame) -> list[tuple[int, int, str, float]]:
    """``(rank, step, tag, value)`` for every statistic of every record (combined per tag and step).

    Args:
        records: Rows of ``Dump.records()``.
    """
    combined: dict[tuple[int, int, str], dict[str, float]] = {}
    for _, row in records.iterrows():
        if _missing(row.get("step")):
            continue
        key = (int(row["rank"]), int(row["step"]), _tag(row))
        into = combined.setdefault(key, {})
        norm = row.get("l2norm")
        if not _missing(norm):
            into["l2norm"] = math.hypot(into.get("l2norm", 0.0), float(norm))
        for name, pick in (("min", min), ("max", max)):
            value = row.get(name)
            if not _missing(value):
                into[name] = pick(into[name], float(value)) if name in into else float(value)
        for name in ("nan_count", "inf_count"):
            value = row.get(name)
            into[name] = into.get(name, 0.0) + (0.0 if _missing(value) else float(value))
    out = []
    for (rank, step, tag), values in combined.items():
        for name in STATISTICS:
            if name in values and np.isfinite(values[name]):
                out.append((rank, step, f"{tag}/{name}", values[name]))
    return out


class TensorBoardScalars:
    """Writes records' statistics into TensorBoard event files under ``out`` (one run per rank).

    Args:
        out: The log directory.
    """

    def __init__(self, out: str | Path) -> None:
        try:
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
        except ImportError as error:  # pragma: no cover - the extra is not installed
            raise ValueError(
                "writing TensorBoard scalars needs the tensorboard package: pip install 'megadump_zarr[tensorboard]'"
            ) from error
        self._writer_class = EventFileWriter
        self.out = Path(out)
        self._writers: dict[int, Any] = {}
        self.written = 0

    def _writer(self, rank: int) -> Any:
        writer = self._writers.get(rank)
        if writer is None:
            folder = self.out / f"rank_{rank}"
            folder.mkdir(parents=True, exist_ok=True)
            writer = self._writers[rank] = self._writer_class(str(folder))
        return writer

    def add_records(self, records: pd.DataFrame) -> int:
        """Write the statistics of ``records``; return how many scalars were written.

        Args:
            records: Rows of ``Dump.records()``.
        """
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        count = 0
        now = time.time()
        for rank, step, tag, value in scalar_rows(records):
            summary = Summary(value=[Summary.Value(tag=tag, simple_value=value)])
            self._writer(rank).add_event(Event(wall_time=now, step=step, summary=summary))
            count += 1
        for writer in self._writers.values():
            writer.flush()
        self.written += count
        return count

    def close(self) -> None:
        """Flush and close every event file."""
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()


def export_tensorboard(dump: Any, out: str | Path) -> int:
    """Write every committed record's statistics of ``dump`` as TensorBoard scalars under ``out``.

    Args:
        dump: An opened ``Dump``.
        out: The log directory (one run per rank below it).

    Returns:
        The number of scalars written.
    """
    scalars = TensorBoardScalars(out)
    try:
        return scalars.add_records(dump.records())
    finally:
        scalars.close()
