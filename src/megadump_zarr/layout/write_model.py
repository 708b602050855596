"""The dump layer's output contract: plain, graph-free descriptions of one window.

The dump layer (and the importers in ``interop``) build these; the store layer persists them. Both import
this leaf; neither imports the other for it. Nothing here knows about graphs, runtimes or torch: arrays are numpy (ml_dtypes for bfloat16/float8), attributes are JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from megadump_zarr.layout.paths import window_path
from megadump_zarr.layout.schema import FORMAT_VERSION


__all__ = ["FORMAT_VERSION", "ArrayWrite", "GroupWrite", "InvocationWrite", "StatisticsTable", "WindowWrite"]


@dataclass(frozen=True)
class ArrayWrite:
    """One stored tensor.

    Args:
        path: Slash-separated path relative to the invocation group, already sanitised by the
            caller (for example ``"x"`` at L0 or ``"stages/expert_up/task_000003/output_00_ws"`` at L1).
            Its parent group must be the invocation group or a declared ``GroupWrite``.
        data: Host array, possibly a zero-copy view into a decoded Device buffer; any of bool, the
            integer and float numpy dtypes, or ml_dtypes ``bfloat16``/``float8_e4m3fn``/``float8_e5m2``.
        dims: One dimension name per axis of ``data``. Within one group no dimension name may be used
            with two different lengths.
        attrs: JSON-serialisable attributes (the record's metadata); the store adds ``stats``.
        coords: Optional 1-D coordinate arrays keyed by dimension name; the store writes each as a
            sibling array in the same group (named after the dimension, dims ``(name,)``) once per group.
    """

    path: str
    data: np.ndarray
    dims: tuple[str, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    coords: Mapping[str, np.ndarray] = field(default_factory=dict)


@dataclass(frozen=True)
class GroupWrite:
    """One group below the invocation group (an L1 task group, or the ``stages/{stage}`` level).

    Args:
        path: Slash-separated path relative to the invocation group.
        attrs: JSON-serialisable attributes.
        task: An L1 task group: with ``layout="packs"`` the store may pack it with its stage's other task
            groups (task-record packs, for tasks whose records are all small; the readers' view is unchanged).
    """

    path: str
    attrs: Mapping[str, Any] = field(default_factory=dict)
    task: bool = False


@dataclass(frozen=True)
class StatisticsTable:
    """Per-record statistics of one invocation, stored as the invocation's ``statistics`` group.

    Args:
        coords: 1-D columns naming each record (stage, task_id, owner_id, core_type, core_id, worker,
            io, index, name, shape, dtype, path, payload), one entry per record; text columns are
            object arrays of ``str``.
        variables: 1-D statistics columns (element_count, nan_count, inf_count, min, max, mean, l2norm,
            digest), numeric (:mod:`megadump_zarr.layout.statistics`).
        attrs: Group attributes.
    """

    coords: Mapping[str, np.ndarray]
    variables: Mapping[str, np.ndarray]
    attrs: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class InvocationWrite:
    """One kernel invocation inside a window.

    Args:
        name: Group name, ``invocation_{id:06d}_{direction}``.
        attrs: Invocation attributes (invocationId, step, direction, kernelName, device, counts, ...).
        groups: Groups below the invocation group; parents are created implicitly.
        arrays: Arrays below the invocation group.
        statistics: The invocation's statistics table (statistics-first modes), or None.
    """

    name: str
    attrs: dict[str, Any]
    groups: list[GroupWrite] = field(default_factory=list)
    arrays: list[ArrayWrite] = field(default_factory=list)
    statistics: StatisticsTable | None = None


@dataclass
class WindowWrite:
    """One rank's window.

    Args:
        rank: Job-global rank.
        window_index: Zero-based window index.
        attrs: Window manifest attributes (schemaVersion, level, capturePhaseSemantics, ...); the store
            adds ``status`` and timestamps.
        invocations: The window's invocations in order.
    """

    rank: int
    window_index: int
    attrs: dict[str, Any]
    invocations: list[InvocationWrite] = field(default_factory=list)

    @property
    def path(self) -> str:
        """Relative path of the window group below the dump root."""
        return window_path(self.rank, self.window_index)
