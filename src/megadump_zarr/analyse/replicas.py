"""Replicas: records that should be identical on every rank (a replicated weight, an all-reduced gradient),
compared across ranks step by step.

A record's place across ranks is its step, kernel, direction, stage, task id, port and name (and its order
among equal places within the step). The lowest rank seen at a place is the reference; another rank
diverges when its content digest (the statistics table's ``digest``, where both sides have one) or any statistic (dtype, shape, NaN/Inf counts, min, max, mean, L2 norm; exactly) differs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
import fnmatch
from typing import Any

import numpy as np
import pandas as pd

from megadump_zarr.layout.statistics import DIGEST_COLUMN

__all__ = ["ReplicaDivergence", "ReplicaTracker", "replica_divergence"]

_PLACE = ("step", "kernel", "direction", "stage", "task_id", "io", "index", "name")
_STATISTICS = ("dtype", "shape", "nan_count", "inf_count", "min", "max", "mean", "l2norm")
_DIGESTS = (DIGEST_COLUMN,)


@dataclass(frozen=True)
class ReplicaDivergence:
    """The first place where a rank's replica differs from the reference rank's.

    Args:
        rank: The rank that diverges.
        reference_rank: The rank compared with.
        step: User step.
        window: The diverging rank's window.
        row: The diverging rank's record row.
        differs: What differs (``digest`` or the statistics' names).
    """

    rank: int
    reference_rank: int
    step: int
    window: int
    row: dict[str, Any]
    differs: tuple[str, ...]

    def describe(self) -> str:
        """One sentence."""
        return (
            f"replica {self.row.get('name')!s} on rank {self.rank} differs from rank {self.reference_rank} at step "
            f"{self.step} ({', '.join(self.differs)})"
        )


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple, np.ndarray)):
        return tuple(int(v) for v in value)
    try:
        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        return value
    if isinstance(value, np.generic):
        return value.item()
    return value


class ReplicaTracker:
    """Follows replicated records across ranks as windows arrive (``megadump watch --replicas``).

    Args:
        patterns: Shell-style tensor name patterns.
    """

    def __init__(self, patterns: Iterable[str]) -> None:
        self.patterns = tuple(patterns)
        self._places: dict[tuple[Any, ...], dict[int, dict[str, Any]]] = {}
        self._reported: set[str] = set()

    def _selected(self, records: pd.DataFrame) -> pd.DataFrame:
        if not self.patterns or not len(records):
            return records.iloc[0:0]
        names = records["name"].astype(str)
        mask = np.zeros(len(records), dtype=bool)
        for pattern in self.patterns:
            mask |= names.map(lambda n, p=pattern: fnmatch.fnmatchcase(n, p)).to_numpy(dtype=bool)
        return records[mask]

    def add(self, records: pd.DataFrame) -> list[ReplicaDivergence]:
        """Take one window's records; return the divergences they show, by step then rank (each record name
        is reported once, at the first divergence seen).

        Args:
            records: Rows of ``Dump.records()`` (one window, or more).
        """
        touched = []
        order: dict[tuple[Any, ...], int] = {}
        for _, row in self._selected(records).iterrows():
            values = {k: _plain(row.get(k)) for k in (*_PLACE, *_STATISTICS, *_DIGESTS, "rank", "window")}
            rank = int(values["rank"])
            base = (*(values[k] for k in _PLACE), rank)
            order[base] = order.get(base, -1) + 1
            place = (*(values[k] for k in _PLACE), order[base])
            self._places.setdefault(place, {})[rank] = values
            touched.append(place)
        candidates = []
        for place in dict.fromkeys(touched):
            ranks = self._places[place]
            reference_rank = min(ranks)
            for rank in sorted(ranks):
                differs = () if rank == reference_rank else _differs(ranks[reference_rank], ranks[rank])
                if differs:
                    values = ranks[rank]
                    candidates.append(
                        ReplicaDivergence(
                            rank, reference_rank, int(values["step"]), int(values["window"]), values, differs
                        )
                    )
        found = []
        for divergence in sorted(candidates, key=lambda d: (d.step, d.rank)):
            name = str(divergence.row["name"])
            if name not in self._reported:
                self._reported.add(name)
                found.append(divergence)
        return found


def _differs(a: dict[str, Any], b: dict[str, Any]) -> tuple[str, ...]:
    out = []
    for key in _DIGESTS:
        if a.get(key) is not None and b.get(key) is not None:
            if a[key] != b[key]:
                out.append(key)
            break
    for key in _STATISTICS:
        x, y = a.get(key), b.get(key)
        if isinstance(x, float) and isinstance(y, float) and np.isnan(x) and np.isnan(y):
            continue
        if x != y:
            out.append(key)
    return tuple(out)


def replica_divergence(dump: Any, patterns: str | Iterable[str]) -> ReplicaDivergence | None:
    """The first step (then the lowest rank) where a replicated record differs across ranks.

    Args:
        dump: An opened ``Dump``.
        patterns: Shell-style tensor name patterns of the records that should be identical on every rank.

    Returns:
        The first divergence, or None when every replica agrees.
    """
    patterns = (patterns,) if isinstance(patterns, str) else tuple(patterns)
    found = ReplicaTracker(patterns).add(dump.records())
    return found[0] if found else None
