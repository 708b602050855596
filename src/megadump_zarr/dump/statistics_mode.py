"""Statistics-first dumping: per-record device statistics, which payloads to keep, and the table to store.

``mode="statistics"`` keeps no payload; ``"nonfinite"`` keeps the records holding NaN or Inf;
``"diff"`` keeps the records that differ from the same record of a baseline dump. The baseline is read
by the composition root (``api.py`` injects a :class:`Baseline`): the dump layer never imports the read
layer. A record's identity across runs (:func:`record_key`) is rank, step, kernel, direction, the
occurrence of that kernel within the step, stage, task id, worker, port and name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
import functools
import json
import math
from typing import Any

import numpy as np
import torch

from megadump_zarr.tensor_arrays import dtype_name
from megadump_zarr.layout.statistics import DIGEST_COLUMN, STATISTICS_GROUP
from megadump_zarr.layout.write_model import StatisticsTable
from megadump_zarr.l1.format import L1Statistics
from megadump_zarr.l1.reader import read_l1_statistics
from megadump_zarr.runtime.reductions import statistics_slot

__all__ = [
    "STATISTICS_GROUP",
    "Baseline",
    "L0StatisticsCapture",
    "PayloadPolicy",
    "StatisticsRow",
    "record_key",
    "statistics_table",
]

RECORDER_POLICY = "recorder"
"""The flight recorder's payload policy: statistics for every record, every payload kept."""


@dataclass(frozen=True)
class Baseline:
    """How ``mode="diff"`` reads its baseline (built by ``api.py``, the composition root).

    Args:
        url: The baseline dump, for messages.
        records: Loads the baseline's records table (``open_dump(url).records()``).
        tolerance: ``dtype name -> (rtol, atol)`` for floating statistics (``analyse.verdict.tolerance_for``).
    """

    url: str
    records: Callable[[], Any]
    tolerance: Callable[[str], tuple[float, float]]


@dataclass(slots=True)
class StatisticsRow:
    """One record's statistics, with everything the statistics table needs to name it.

    Args:
        key: Identity across runs (see :func:`record_key`), without the invocation part.
        stage: L1 stage ("" at L0).
        task_id: L1 task id (-1 at L0).
        owner_id: Owner id (-1 when none).
        core_type: ``AIC``/``AIV``/``MIX`` ("" at L0).
        core_id: Core id (-1 at L0).
        worker: Broadcast worker (-1 when any).
        io: ``input``/``output`` (L1) or the L0 role.
        index: Port index (-1 at L0).
        name: Tensor name.
        shape: Logical shape.
        dtype: dtype name.
        statistics: The device statistics.
        kept: Whether the payload is stored too.
        path: Path of the record's payload array relative to the invocation group (set by the window builder).
        plan: The L1 record plan (L1 rows).
        param_position: The ABI parameter the record reads.
    """

    key: tuple[Any, ...]
    stage: str
    task_id: int
    owner_id: int
    core_type: str
    core_id: int
    worker: int
    io: str
    index: int
    name: str
    shape: tuple[int, ...]
    dtype: str
    statistics: L1Statistics
    kept: bool
    path: str = ""
    plan: Any = field(default=None, repr=False)
    param_position: int = -1


def _number(value: Any) -> int:
    return -1 if _missing(value) else int(value)  # None, NaN and pandas NA are "none" (NA != NA is NA, not a bool)


def _text(value: Any) -> str:
    return "" if _missing(value) else str(value)


def record_key(
    rank: int,
    step: int,
    kernel: Any,
    direction: Any,
    occurrence: int,
    stage: Any,
    task_id: Any,
    worker: Any,
    io: Any,
    index: Any,
    name: Any,
) -> tuple[Any, ...]:
    """The identity of one record across runs of the same program.

    Args:
        rank: Rank.
        step: User step.
        kernel: Kernel name.
        direction: ``forward``/``backward``.
        occurrence: How many earlier invocations of this kernel and direction the step had.
        stage: L1 stage (None or "" at L0).
        task_id: L1 task id (None or -1 at L0).
        worker: Broadcast worker (None or -1 when any).
        io: L1 port direction (None at L0).
        index: L1 port index (None or -1 at L0).
        name: Tensor name.
    """
    return (
        _number(rank),
        _number(step),
        _text(kernel),
        _text(direction),
        int(occurrence),
        _text(stage),
        _number(task_id),
        _number(worker),
        _text(io),
        _number(index),
        _text(name),
    )


def _baseline_index(frame: Any) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Baseline records table → ``{record_key: {digest, element_count, nan/inf counts, min, max, mean,
    l2norm, dtype}}``."""
    index: dict[tuple[Any, ...], dict[str, Any]] = {}
    if len(frame) == 0:
        return index
    occurrences: dict[tuple[Any, ...], dict[tuple[int, int], int]] = {}
    columns = {name: frame[name].tolist() for name in frame.columns}
    n = len(frame)
    for i in range(n):
        group = (columns["rank"][i], columns["step"][i], columns["kernel"][i], columns["direction"][i])
        seen = occurrences.setdefault(group, {})
        seen.setdefault((int(columns["window"][i]), int(columns["invocation"][i])), len(seen))
    for group, seen in occurrences.items():  # occurrence = order of the invocation within its step
        for rank_in_step, pair in enumerate(sorted(seen)):
            seen[pair] = rank_in_step
    get = columns.get
    for i in range(n):
        group = (columns["rank"][i], columns["step"][i], columns["kernel"][i], columns["direction"][i])
        occurrence = occurrences[group][(int(columns["window"][i]), int(columns["invocation"][i]))]
        worker = (
            columns["worker"][i] if columns["worker"][i] is not None and not _missing(columns["worker"][i]) else None
        )
        key = record_key(
            columns["rank"][i],
            columns["step"][i],
            columns["kernel"][i],
            columns["direction"][i],
            occurrence,
            columns["stage"][i],
            columns["task_id"][i],
            worker,
            columns["io"][i],
            columns["index"][i],
            columns["name"][i],
        )
        digests = get(DIGEST_COLUMN)
        counts = get("element_count")
        index[key] = {
            "digest": None if digests is None or _missing(digests[i]) else int(digests[i]),
            "element_count": None if counts is None or _missing(counts[i]) else int(counts[i]),
            "nan_count": _int_or_none(columns["nan_count"][i]),
            "inf_count": _int_or_none(columns["inf_count"][i]),
            "dtype": columns["dtype"][i],
            "shape": _shape_or_none(columns["shape"][i]) if "shape" in columns else None,
            **{name: _float_or_none(columns[name][i]) for name in ("min", "max", "mean", "l2norm")},
        }
    return index


def _missing(value: Any) -> bool:
    try:
        return value is None or bool(value != value)  # NaN and pandas NA
    except (TypeError, ValueError):
        return True


def _shape_or_none(value: Any) -> tuple[int, ...] | None:
    try:
        return tuple(int(d) for d in value)
    except (TypeError, ValueError):
        return None


def _int_or_none(value: Any) -> int | None:
    return None if _missing(value) else int(value)


def _float_or_none(value: Any) -> float | None:
    return None if _missing(value) else float(value)


class PayloadPolicy:
    """Which records keep their payload, for the config's mode.

    Args:
        mode: ``statistics``, ``nonfinite``, ``diff`` or :data:`RECORDER_POLICY` (keeps every payload,
            as ``tensor`` does, with every record's statistics).
        baseline: The baseline (``diff`` only); its records are loaded here, so a missing baseline
            fails when the dumper is entered, before any launch.
    """

    def __init__(self, mode: str, baseline: Baseline | None = None) -> None:
        self.mode = mode
        self._tolerance = None
        self._index: dict[tuple[Any, ...], dict[str, Any]] = {}
        if mode == "diff":
            if baseline is None:
                raise ValueError("mode='diff' requires a baseline dump (tensor_dump wires it from config.baseline)")
            try:
                frame = baseline.records()
            except (OSError, ValueError, KeyError) as error:
                raise ValueError(f"mode='diff' baseline {baseline.url} cannot be read: {error}") from error
            self._index = _baseline_index(frame)
            if not self._index:
                raise ValueError(f"mode='diff' baseline {baseline.url} holds no records")
            self._tolerance = baseline.tolerance

    def expected_digest(
        self, key: tuple[Any, ...], dtype: str | None = None, shape: tuple[int, ...] | None = None
    ) -> int | None:
        """The baseline's digest of a record (None when the baseline has none for it, or when the
        record's dtype or shape differs from the baseline's: the same bytes are then a different tensor,
        so the device must copy it).

        Args:
            key: The record's :func:`record_key`.
            dtype: Its dtype name (None: not checked).
            shape: Its logical shape (None: not checked).
        """
        base = self._index.get(key)
        if base is None or (dtype is not None and _other_layout(base, dtype, shape)):
            return None
        return base["digest"]

    def keep(self, key: tuple[Any, ...], dtype: str, stats: L1Statistics, shape: tuple[int, ...] | None = None) -> bool:
        """Whether a record with these device statistics keeps its payload.

        In ``diff`` mode a payload is dropped only when the baseline proves the bits equal: same dtype,
        same shape, same element count and the same digest. Any other record keeps its payload
        (equal statistics do not mean equal tensors: two swapped elements keep min/max/mean/L2); the
        float tolerance could only add records to those, and every record not proven equal is kept already.

        Args:
            key: The record's :func:`record_key`.
            dtype: Its dtype name.
            stats: Its device statistics.
            shape: Its logical shape (None: not checked).
        """
        if self.mode == "statistics":
            return False
        if self.mode == "nonfinite":
            return stats.nonfinite
        if self.mode != "diff":
            return True
        base = self._index.get(key)
        if base is None or _other_layout(base, dtype, shape):
            return True  # nothing to compare with, or another tensor: keep the evidence
        if base["digest"] is None or base["element_count"] is None:
            return True  # the bits cannot be proven equal
        return base["digest"] != stats.digest or base["element_count"] != stats.element_count


def _other_layout(base: dict[str, Any], dtype: str, shape: tuple[int, ...] | None) -> bool:
    """Whether a record's dtype or shape differs from its baseline's (a missing baseline value differs)."""
    if base["dtype"] != dtype:
        return True
    return shape is not None and base["shape"] != tuple(int(d) for d in shape)


class L0StatisticsCapture:
    """Statistics of one L0 invocation's tensors, reduced on their device.

    In ``statistics`` mode the slots stay on the device until :meth:`finish` copies them in one
    transfer; in ``nonfinite``/``diff`` a tensor's slot is read when it is taken (128 bytes), so its
    payload can be copied while it still holds that value.

    Args:
        policy: The payload policy.
        key_of: ``tensor name -> record_key`` for this invocation.
    """

    def __init__(self, policy: PayloadPolicy, key_of: Callable[[str], tuple[Any, ...]]) -> None:
        self.policy = policy
        self.key_of = key_of
        self.rows: list[StatisticsRow] = []
        self._pending: list[tuple[StatisticsRow, torch.Tensor]] = []

    def add(self, tensor: Any, parameter: torch.Tensor, snapshot: Callable[[], Any]) -> Any:
        """Reduce one tensor; return its snapshot when its payload is kept, else None.

        Args:
            tensor: The ``L0Tensor``.
            parameter: Its ABI parameter (on the device).
            snapshot: Takes the host snapshot (called only when kept).
        """
        if not torch.is_tensor(parameter):
            raise TypeError(f"L0 dump Tensor {tensor.name!r} must map to torch.Tensor, got {type(parameter).__name__}")
        slot = statistics_slot(parameter.detach())
        dtype = dtype_name(parameter.dtype)
        row = StatisticsRow(
            self.key_of(tensor.name),
            "",
            -1,
            -1,
            "",
            -1,
            -1,
            tensor.role,
            -1,
            tensor.name,
            tuple(int(d) for d in parameter.shape),
            dtype,
            _EMPTY,
            False,
            param_position=int(tensor.param_position),
        )
        if self.policy.mode == "statistics":
            self._pending.append((row, slot))
            self.rows.append(row)
            return None
        row.statistics = read_l1_statistics(slot.cpu().numpy())
        row.kept = self.policy.keep(row.key, dtype, row.statistics, row.shape)
        self.rows.append(row)
        return snapshot() if row.kept else None

    def finish(self) -> list[StatisticsRow]:
        """Copy the pending slots to the host in one transfer and return every row."""
        if self._pending:
            host = torch.stack([slot for _, slot in self._pending]).cpu().numpy()
            for (row, _), raw in zip(self._pending, host):
                row.statistics = read_l1_statistics(raw)
            self._pending.clear()
        return self.rows


_EMPTY = L1Statistics(0, 0, 0, 0, None, None, None, None, 0, 0)


def l1_row(plan: Any, statistics: L1Statistics, kept: bool, key: tuple[Any, ...]) -> StatisticsRow:
    """A statistics row for one L1 record plan.

    Args:
        plan: The ``L1RecordPlan``.
        statistics: Its device statistics.
        kept: Whether its payload is stored.
        key: Its :func:`record_key`.
    """
    worker = -1 if plan.worker_id == 0xFFFFFFFF else plan.worker_id
    return StatisticsRow(
        key,
        plan.stage,
        plan.task_id,
        -1 if plan.owner_id is None else plan.owner_id,
        plan.core_type,
        plan.core_id,
        worker,
        plan.io,
        plan.index,
        plan.tensor_name,
        plan.actual_shape,
        _dtype_name(plan.dtype),
        statistics,
        kept,
        "",
        plan,
        plan.parameter_position,
    )


@functools.lru_cache(maxsize=64)
def _dtype_name(dtype: Any) -> str:
    return dtype_name(dtype)


def _strings(values: list[str]) -> np.ndarray:
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


def _float(value: Any) -> float:
    return math.nan if value is None else float(value)


@functools.lru_cache(maxsize=1024)
def _shape_text(shape: tuple[int, ...]) -> str:
    return json.dumps(list(shape))


def statistics_table(rows: list[StatisticsRow], attrs: Mapping[str, Any] | None = None) -> StatisticsTable:
    """The invocation's statistics table: coordinates naming each record, then the statistics.

    Args:
        rows: The invocation's rows, paths set.
        attrs: Extra group attributes.
    """
    coords = {
        "stage": _strings([r.stage for r in rows]),
        "task_id": np.array([r.task_id for r in rows], dtype=np.int64),
        "owner_id": np.array([r.owner_id for r in rows], dtype=np.int64),
        "core_type": _strings([r.core_type for r in rows]),
        "core_id": np.array([r.core_id for r in rows], dtype=np.int64),
        "worker": np.array([r.worker for r in rows], dtype=np.int64),
        "io": _strings([r.io for r in rows]),
        "index": np.array([r.index for r in rows], dtype=np.int64),
        "name": _strings([r.name for r in rows]),
        "param_position": np.array([r.param_position for r in rows], dtype=np.int64),
        "shape": _strings([_shape_text(r.shape) for r in rows]),
        "dtype": _strings([r.dtype for r in rows]),
        "path": _strings([r.path for r in rows]),
        "payload": np.array([r.kept for r in rows], dtype=bool),
    }
    s = [r.statistics for r in rows]
    variables = {
        "element_count": np.array([x.element_count for x in s], dtype=np.int64),
        "nan_count": np.array([x.nan_count for x in s], dtype=np.int64),
        "inf_count": np.array([x.inf_count for x in s], dtype=np.int64),
        "min": np.array([_float(x.min) for x in s], dtype=np.float64),
        "max": np.array([_float(x.max) for x in s], dtype=np.float64),
        "mean": np.array([_float(x.mean) for x in s], dtype=np.float64),
        "l2norm": np.array([_float(x.l2norm) for x in s], dtype=np.float64),
        DIGEST_COLUMN: np.array([x.digest for x in s], dtype=np.uint64),
    }
    return StatisticsTable(coords, variables, dict(attrs or {}))


def payload_policy(config: Any, baseline: Baseline | None) -> PayloadPolicy | None:
    """The config's payload policy (None in ``tensor`` mode); loads a ``diff`` baseline now.

    Args:
        config: The dump config.
        baseline: The injected baseline (``diff`` only).
    """
    if config.mode == "tensor":
        # the flight recorder keeps every payload and needs every record's statistics
        return None if getattr(config, "recorder", None) is None else PayloadPolicy(RECORDER_POLICY)
    return PayloadPolicy(config.mode, baseline)


def _l1_key(invocation: Any, plan: Any) -> tuple[Any, ...]:
    worker = None if plan.worker_id == 0xFFFFFFFF else plan.worker_id
    return record_key(
        invocation.rank,
        invocation.step,
        invocation.kernel_name,
        invocation.direction,
        invocation.occurrence,
        plan.stage,
        plan.task_id,
        worker,
        plan.io,
        plan.index,
        plan.tensor_name,
    )


def l0_key_function(invocation: Any) -> Callable[[str], tuple[Any, ...]]:
    """``tensor name -> record_key`` for one L0 invocation.

    Args:
        invocation: The ``DumpInvocation``.
    """

    def key(name: str) -> tuple[Any, ...]:
        return record_key(
            invocation.rank,
            invocation.step,
            invocation.kernel_name,
            invocation.direction,
            invocation.occurrence,
            None,
            None,
            None,
            None,
            None,
            name,
        )

    return key


def complete_l1_statistics(invocation: Any, prepared: Any, policy: PayloadPolicy | None) -> None:
    """Decode a launch whose buffer holds statistics records into the invocation's snapshots and rows.

    Args:
        invocation: The ``DumpInvocation``.
        prepared: The launch's ``PreparedL1Dump``.
        policy: The payload policy (None in tensor mode: statistics records are budget fallbacks).
    """
    from megadump_zarr.dump.snapshots import payload_snapshot
    from megadump_zarr.dump.statistics_slots import decode_statistics_dump

    def keep(plan: Any, stats: L1Statistics) -> bool:
        return policy is not None and policy.keep(
            _l1_key(invocation, plan), dtype_name(plan.dtype), stats, tuple(plan.actual_shape)
        )

    snapshots, decoded, (_, pool_bytes, pool_used) = decode_statistics_dump(prepared, keep, payload_snapshot)
    invocation.l1_snapshots.extend(snapshots)
    if pool_bytes:  # the conditional modes' tensor pool: how much of it the device used, and what did not fit
        invocation.statistics_attrs.update(
            tensorPoolBytes=pool_bytes, tensorPoolUsed=pool_used, poolFull=sum(d.statistics.pool_full for d in decoded)
        )
    keyed = policy is not None and policy.mode == "diff"  # only a diff needs record identities later
    invocation.statistics.extend(
        l1_row(d.record, d.statistics, d.kept, _l1_key(invocation, d.record) if keyed else ()) for d in decoded
    )


def salvage_l1_statistics(invocation: Any, prepared: Any) -> list[dict[str, Any]]:
    """A failed launch with statistics records: keep what its buffer captured in the invocation's
    snapshots and rows; return the records that were not captured.

    Args:
        invocation: The ``DumpInvocation``.
        prepared: The launch's ``PreparedL1Dump``.
    """
    from megadump_zarr.dump.snapshots import payload_snapshot
    from megadump_zarr.dump.statistics_slots import salvage_statistics_dump

    snapshots, decoded, pending = salvage_statistics_dump(prepared, payload_snapshot)
    invocation.l1_snapshots[:] = snapshots
    invocation.statistics[:] = [l1_row(d.record, d.statistics, d.kept, ()) for d in decoded]
    return pending


def prime_expected_digests(prepared: Any, invocation: Any, policy: PayloadPolicy | None) -> int:
    """``mode="diff"``: write the baseline's digest of each record into its statistics slot before the
    launch, so the device copies only the tensors whose digest differs (kind 4). One host-to-device
    copy of the statistics area. Returns how many records got an expected digest.

    Args:
        prepared: The launch's ``PreparedL1Dump`` (its buffer not launched yet).
        invocation: The ``DumpInvocation`` (for the records' identities).
        policy: The payload policy (nothing happens unless it is a diff).
    """
    from megadump_zarr.l1.format import (
        L1_RECORD_KIND_STATISTICS_TENSOR_IF_CHANGED,
        L1_STAT_EXPECTED_BYTE,
        L1_STAT_EXPECTED_PRESENT_BYTE,
    )

    if policy is None or policy.mode != "diff":
        return 0
    users = [plan for plan in prepared.records if plan.kind == L1_RECORD_KIND_STATISTICS_TENSOR_IF_CHANGED]
    if not users:
        return 0
    start = min(plan.payload_offset for plan in users)
    stop = max(plan.payload_offset + plan.payload_bytes for plan in users)
    area = np.zeros(stop - start, dtype=np.uint8)
    primed = 0
    for plan in users:
        expected = policy.expected_digest(_l1_key(invocation, plan), dtype_name(plan.dtype), tuple(plan.actual_shape))
        if expected is None:
            continue  # no baseline digest: the device copies it (the host decides from the statistics)
        at = plan.payload_offset - start
        area[at + L1_STAT_EXPECTED_BYTE : at + L1_STAT_EXPECTED_BYTE + 8] = np.frombuffer(
            int(expected).to_bytes(8, "little"), dtype=np.uint8
        )
        area[at + L1_STAT_EXPECTED_PRESENT_BYTE] = 1
        primed += 1
    if primed:
        prepared.buffer[start:stop].copy_(torch.from_numpy(area).to(prepared.buffer.device))
    return primed
