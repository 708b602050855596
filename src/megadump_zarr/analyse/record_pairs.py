"""The picklable per-record unit of a dump-against-dump comparison (:class:`RecordPair`,
:func:`compare_record`) and the records of two dumps compared in this process (:func:`compare_records`).

:func:`compare_record` is what :func:`megadump_zarr.analyse.compare` runs per record pair of two dumps,
through :func:`megadump_zarr.analyse.parallel.map_ordered`: its argument carries the two dumps as
:class:`~megadump_zarr.read.source.DumpSource` (URL + storage options), the record path and the
tolerances, so it runs on a dask worker as well as in this process. :func:`record_source` reads a record
chunk-aligned, straight from its zarr array (or its pack row), through the dump's integrity checks; the blocks
of both sides are read and folded in the lanes of :mod:`megadump_zarr.analyse.lanes`: at most a few blocks per
lane are in memory. A truncated pair is compared on what both sides stored (:mod:`megadump_zarr.analyse.prefixes`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from megadump_zarr.analyse.lanes import Job, plan_job, run_lanes
from megadump_zarr.analyse.metrics import DEFAULT_BLOCK_BYTES
from megadump_zarr.analyse.pairs import Locator, empty_row, failed_row, prepare_pair, shape_text
from megadump_zarr.analyse.prefixes import as_partial, stored_prefixes

__all__ = ["RecordPair", "compare_record", "compare_records", "record_source"]


@dataclass(frozen=True)
class RecordPair:
    """One record of two dumps to compare: what :func:`compare_record` needs, picklable.

    Args:
        a: Where dump A (under test) lives.
        b: Where dump B (the reference) lives.
        path: A's record path relative to its root.
        keys: The key columns of its result row.
        rtol: User relative tolerance (None: dtype default).
        atol: User absolute tolerance (None: dtype default).
        truncated: Either side's record is truncated (read through its logical-shape view).
        block_bytes: Float64 bytes of one block of one side.
        path_b: B's record path (None: the same as ``path``); records pair by step, so it differs from A's
            when the dumps number their windows or invocations differently, or steps are paired explicitly.
    """

    a: Any
    b: Any
    path: str
    keys: dict[str, Any] = field(default_factory=dict)
    rtol: float | None = None
    atol: float | None = None
    truncated: bool = False
    block_bytes: int = DEFAULT_BLOCK_BYTES
    path_b: str | None = None

    @property
    def label(self) -> str:
        """The record path (names a failing item in :func:`~megadump_zarr.analyse.parallel.map_ordered`)."""
        return self.path


def _open(source: Any) -> Any:
    return source.open() if hasattr(source, "open") and not hasattr(source, "records") else source


def record_source(dump: Any, path: str, truncated: bool) -> Any:
    """Record ``path`` of ``dump`` as an array-like for :func:`~megadump_zarr.analyse.pairs.compare_pair`: its stored
    values as a :class:`~megadump_zarr.read.lazy.RecordArray` (read chunk by chunk through the dump's integrity
    checks, row blocks of a plain layout decoded in the calling thread), or the logical-shape view of a truncated
    record.

    Args:
        dump: An open ``Dump`` (or anything with ``record_array``).
        path: The record path.
        truncated: The record is truncated.
    """
    if not truncated and hasattr(dump, "_record") and hasattr(dump, "store"):
        from megadump_zarr.read.lazy import RecordArray

        info, rel, doc = dump._record(path)
        attrs = doc.get("attributes") or {}
        if not attrs.get("truncated"):
            return RecordArray(dump._array(info, rel, doc), f"{info.key}/{rel}", getattr(dump, "root", ""))
    return dump.record_array(path)


def _locator(keys: dict[str, Any], dump: Any = None, path: str | None = None) -> Locator:
    """An L1 record comes from one task: its worst element's producer is the record's own task/owner/core,
    and its ``worst_index`` is given in the whole tensor's coordinates (the record's global row along
    axis 0, read from its row coordinate when ``dump`` and ``path`` are given and it has one).

    Args:
        keys: The record's key columns.
        dump: Dump A (under test), to read the record's row coordinate.
        path: The record's path.
    """

    def locate(index: tuple[int, ...]) -> dict[str, Any]:
        if keys.get("level") != "L1":
            return {}
        out = {
            "worst_task_id": keys.get("task_id"),
            "worst_owner_id": keys.get("owner_id"),
            "worst_core_type": keys.get("core_type"),
            "worst_core_id": keys.get("core_id"),
        }
        rows = _global_rows(dump, path) if dump is not None and path and index else None
        if rows is not None and 0 <= index[0] < len(rows):
            out["worst_index"] = (int(rows[index[0]]), *index[1:])
        return out

    return locate


def _global_rows(dump: Any, path: str) -> np.ndarray | None:
    """The whole tensor's row of each row of record ``path`` (its integer coordinate along its first
    dimension), or None where it has none (an L0 record, or an L1 record read whole: rows are their own).

    Args:
        dump: An open ``Dump``.
        path: The record's path.
    """
    array = dump.record_array(path)
    if not array.dims:
        return None
    coord = array.coords.get(array.dims[0])
    if coord is None or coord.ndim != 1 or np.asarray(coord.values).dtype.kind not in "iu":
        return None
    return np.asarray(coord.values)


def compare_record(pair: RecordPair) -> dict[str, Any]:
    """The result row of one record pair of two dumps (see :class:`RecordPair`); never raises.

    This is the unit :func:`megadump_zarr.analyse.parallel.map_ordered` runs on a worker; its blocks are
    read and folded by this process's threads (:func:`compare_records`).

    Args:
        pair: The record, its two dumps and the tolerances.
    """
    return compare_records([pair])[0]


def compare_records(
    pairs: list[RecordPair], advance: Callable[[], None] | None = None, *, threads: int | None = None
) -> list[dict[str, Any]]:
    """The result rows of many record pairs, in order, compared in this process; never raises.

    Every chunk-aligned block of every record goes into one queue, in execution order; ``threads``
    lanes take the next block, read it from both dumps (decoded in the lane, in C with the GIL released:
    :mod:`megadump_zarr.read.chunks`) and fold it into an accumulator of its own; each record's block
    accumulators are merged in block order at the end (:func:`~megadump_zarr.analyse.lanes.merge_in_order`), so
    the result does not depend on the lanes (``threads=1`` gives the same bits). Each lane holds one block pair at
    a time (a few chunks; consecutive small ones fetched together, at most 1 MiB), whatever the tensor sizes, and
    no lane waits for another at a record boundary.

    Args:
        pairs: The record pairs (their ``a``/``b``: open dumps or ``DumpSource``).
        advance: Called once per record (for a compared one when it is finished, from a lane thread).
        threads: Lanes (default: one per core, at most 4).
    """
    rows: list[dict[str, Any] | Job] = []
    partial: dict[int, tuple[int, ...]] = {}  # row -> logical shape of a pair compared on its stored prefix
    for pair in pairs:
        note = "truncated record: NaN where not captured" if pair.truncated else ""
        try:
            dump_a = _open(pair.a)
            prefixes = stored_prefixes(dump_a, _open(pair.b), pair.path, pair.path_b) if pair.truncated else None
            if prefixes is None:
                xa = record_source(dump_a, pair.path, pair.truncated)
                xb = record_source(_open(pair.b), pair.path_b or pair.path, pair.truncated)
            else:
                xa, xb, note = prefixes.a, prefixes.b, prefixes.note
        except Exception as exc:
            rows.append(failed_row(empty_row(pair.keys, "error", ""), exc, []))
            continue
        if prefixes is not None and prefixes.shape_a != prefixes.shape_b:  # logical shapes differ: not compared
            text = f"shape {shape_text(prefixes.shape_a)} vs {shape_text(prefixes.shape_b)}; not compared"
            shapes = dict(shape_a=prefixes.shape_a, shape_b=prefixes.shape_b)
            rows.append(
                empty_row(
                    pair.keys, "shape_mismatch", text, **shapes, dtype_a=prefixes.dtype_a, dtype_b=prefixes.dtype_b
                )
            )
            continue
        if prefixes is not None:
            partial[len(rows)] = prefixes.shape_a
        plan = prepare_pair(pair.keys, xa, xb, rtol=pair.rtol, atol=pair.atol, notes=[note])
        locate = _locator(pair.keys, dump_a, pair.path)
        rows.append(plan_job(plan, xa, xb, pair.block_bytes, locate) if plan.compute else plan.row)
    out = run_lanes(rows, advance, threads, one_blas_thread=True)
    for k, logical in partial.items():
        as_partial(out[k], logical)
    return out
