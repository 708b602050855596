"""The compare lanes: every block of many pairs in one queue for a few threads, each pair's blocks merged in
block order.

:func:`run_lanes` takes pairs planned by :func:`plan_job` (the block plan of
:func:`~megadump_zarr.analyse.metrics.compute_metrics`); ``threads`` lanes take the next blocks, read them from
both sides and fold each into an accumulator of its own (:func:`block_metrics`); each pair's accumulators are
merged in block order at the end (:func:`merge_in_order`), so the result does not depend on the lanes. A lane
fetches the chunks of consecutive small block pairs read through :class:`~megadump_zarr.read.lazy.RecordArray`
in one round trip to zarr's event loop (:func:`read_batch`, at most :data:`_BATCH_BYTES`): a record of a few
hundred bytes costs less to read and fold than one round trip.

:func:`compare_arrays` runs pairs of array-likes (:class:`ArrayPair`: a dump's tensors against an eager
reference, two collections' tensors) through the lanes: row ``k`` has the bits of
:func:`~megadump_zarr.analyse.pairs.compare_pair` of pair ``k``, whatever the number of lanes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
import contextlib
from dataclasses import dataclass, field
import math
import os
import threading
from typing import Any

from megadump_zarr.analyse.metrics import (
    DEFAULT_BLOCK_BYTES,
    MetricAccumulator,
    block_offset,
    iter_blocks,
    read_native_block,
    row_chunks,
    shape_of,
)
from megadump_zarr.analyse.pairs import Locator, PairPlan, failed_row, metrics_row, prepare_pair

__all__ = [
    "ArrayPair",
    "Job",
    "block_bytes",
    "block_metrics",
    "compare_arrays",
    "merge_in_order",
    "plan_job",
    "read_batch",
    "run_lanes",
    "single_threaded_blas",
]

_THREADS = max(1, min(4, os.cpu_count() or 1))
"""Lanes of a comparison (one per core, at most 4)."""
_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


_BLAS: Any = None
_BLAS_LOCK = threading.Lock()
_BLAS_USERS = 0
_BLAS_LIMIT: Any = None


@contextlib.contextmanager
def single_threaded_blas() -> Any:
    """BLAS limited to one thread while comparisons run (a multi-threaded ``dot`` of 32 Ki elements that
    waits for a busy core costs milliseconds, and our own threads use the cores). Re-entrant and safe
    across threads: the first user sets the limit, the last one restores it. A no-op without threadpoolctl."""
    global _BLAS, _BLAS_USERS, _BLAS_LIMIT
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover - threadpoolctl is a dependency
        yield
        return
    with _BLAS_LOCK:
        if _BLAS is None:
            _BLAS = ThreadpoolController()
        if _BLAS_USERS == 0:
            _BLAS_LIMIT = _BLAS.limit(limits=1, user_api="blas")
        _BLAS_USERS += 1
    try:
        yield
    finally:
        with _BLAS_LOCK:
            _BLAS_USERS -= 1
            if _BLAS_USERS == 0 and _BLAS_LIMIT is not None:
                _BLAS_LIMIT.restore_original_limits()
                _BLAS_LIMIT = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=_THREADS, thread_name_prefix="megadump-compare")
        return _POOL


@dataclass
class ArrayPair:
    """Two array-likes to compare in the lanes of :func:`compare_arrays`: what
    :func:`~megadump_zarr.analyse.pairs.compare_pair` takes.

    Args:
        keys: The key columns of its result row.
        a: The tensor under test (any array-like :mod:`megadump_zarr.analyse.metrics` reads; a dump's lazy
            DataArray is read block by block, chunk-aligned).
        b: The reference.
        rtol: User relative tolerance (floats; None: the dtype default).
        atol: User absolute tolerance (floats; None: the dtype default).
        notes: Notes to add (truncation, row alignment).
        locate: Maps the worst element's logical index to its producing task/owner/core columns.
        block_bytes: Float64 bytes of one block of one side.
    """

    keys: dict[str, Any]
    a: Any
    b: Any
    rtol: float | None = None
    atol: float | None = None
    notes: tuple[str, ...] = ()
    locate: Locator | None = None
    block_bytes: int = DEFAULT_BLOCK_BYTES


@dataclass
class Job:
    """One pair in the lanes: its two sides, its plan and blocks, and what its blocks gave so far.

    Args:
        a: The tensor under test.
        b: The reference.
        plan: How it is compared (:func:`~megadump_zarr.analyse.pairs.prepare_pair`).
        shape: Its shape.
        blocks: Its blocks' index tuples, in block order.
        locate: Maps the worst element's logical index to its producing task/owner/core columns.
        left: Blocks not folded yet.
        failed_at: The first block (in block order) that raised so far.
        error: That block's exception.
        partials: Block -> its accumulator.
    """

    a: Any
    b: Any
    plan: PairPlan
    shape: tuple[int, ...]
    blocks: list[tuple[slice, ...]]
    locate: Locator | None = None
    left: int = 0
    failed_at: int | None = None
    error: BaseException | None = None
    partials: dict[int, MetricAccumulator] = field(default_factory=dict)


def block_metrics(job: Job, i: int, stored: tuple[Any, Any] | None = None) -> MetricAccumulator:
    """Block ``i`` of a pair read from both sides and folded into its own accumulator (any thread).

    Args:
        job: The pair.
        i: The block.
        stored: Both sides' stored blocks, already fetched (:func:`read_batch`); None: read here.
    """
    from megadump_zarr.read.lazy import read_many

    index = job.blocks[i]
    if stored is not None:
        block_a, block_b = read_native_block(stored[0], ()), read_native_block(stored[1], ())
    elif _batchable(job):  # both sides' chunks fetched in one go
        stored_a, stored_b = read_many([(job.a, index), (job.b, index)])
        block_a, block_b = read_native_block(stored_a, ()), read_native_block(stored_b, ())
    else:
        block_a, block_b = read_native_block(job.a, index), read_native_block(job.b, index)
    acc = MetricAccumulator(job.shape, rtol=job.plan.rtol, atol=job.plan.atol, exact=job.plan.exact)
    acc.update(block_a, block_b, block_offset(job.shape, index))
    return acc


_BATCH_BYTES = 1 << 20
"""Stored bytes of the block pairs one lane fetches in one round trip to zarr's event loop (small records:
one round trip per block would cost more than reading and folding it)."""
_BATCH_BLOCKS = 256
"""Block pairs one lane fetches in one round trip, at most."""


def _batchable(job: Job) -> bool:
    """Whether both sides of a pair are read by the fast path, their chunks fetchable together."""
    from megadump_zarr.read.lazy import RecordArray

    return all(isinstance(x, RecordArray) and x.batchable for x in (job.a, job.b))


def block_bytes(job: Job, i: int) -> int | None:
    """Stored bytes of block ``i`` of both sides, or None when it is not read by the fast path of a
    :class:`~megadump_zarr.read.lazy.RecordArray` on both sides (then it is read on its own).

    Args:
        job: The pair.
        i: The block.
    """
    if not _batchable(job):
        return None
    start, stop, _ = job.blocks[i][0].indices(job.shape[0]) if job.shape else (0, 1, 1)
    return (stop - start) * math.prod(job.shape[1:]) * (job.a.dtype.itemsize + job.b.dtype.itemsize)


def read_batch(items: list[tuple[Job, int]]) -> list[tuple[Any, Any]] | None:
    """Both sides' stored blocks of several block pairs, their chunks fetched together (one round trip:
    :func:`~megadump_zarr.read.lazy.read_many`), or None when any of them raises (each is then read on its
    own, so that each gets its own error).

    Args:
        items: ``(job, block)`` pairs whose sides are both batchable (:func:`block_bytes` not None).
    """
    from megadump_zarr.read.lazy import read_many

    try:
        stored = read_many([(x, job.blocks[i]) for job, i in items for x in (job.a, job.b)])
    except Exception:
        return None
    return [(stored[2 * n], stored[2 * n + 1]) for n in range(len(items))]


def _take(work: list[tuple[int, int]], at: int, jobs: dict[int, Job]) -> int:
    """The end of the batch of ``work`` starting at ``at``: consecutive small block pairs read through
    the fast path, at most :data:`_BATCH_BYTES` and :data:`_BATCH_BLOCKS` of them (at least one item)."""
    end, size = at + 1, block_bytes(jobs[work[at][0]], work[at][1])
    if size is None:
        return end
    while end < len(work) and end - at < _BATCH_BLOCKS:
        more = block_bytes(jobs[work[end][0]], work[end][1])
        if more is None or size + more > _BATCH_BYTES:
            break
        end, size = end + 1, size + more
    return end


def merge_in_order(shape: tuple[int, ...], plan: PairPlan, partials: list[MetricAccumulator]) -> MetricAccumulator:
    """The pair's accumulator: its block partials merged in block order, whichever thread folded which
    block, so the float sums add up in one order and every run gives the same bits (the same fold as
    :func:`~megadump_zarr.analyse.metrics.compute_metrics`).

    Args:
        shape: The pair's shape.
        plan: Its tolerances.
        partials: Its blocks' accumulators, in block order.
    """
    total = MetricAccumulator(shape, rtol=plan.rtol, atol=plan.atol, exact=plan.exact)
    for part in partials:
        total.merge(part)
    return total


def plan_job(plan: PairPlan, a: Any, b: Any, block_bytes: int, locate: Locator | None) -> Job | dict[str, Any]:
    """The blocks of a pair to compute (the block plan of :func:`~megadump_zarr.analyse.metrics.compute_metrics`),
    or its row when they cannot be planned.

    Args:
        plan: How the pair is compared (``plan.compute`` True).
        a: The tensor under test.
        b: The reference.
        block_bytes: Float64 bytes of one block of one side.
        locate: Maps the worst element's logical index to its producing task/owner/core columns.
    """
    try:
        shape = shape_of(a)
        blocks = list(iter_blocks(shape, block_bytes, row_chunks(a) or row_chunks(b)))
    except Exception as exc:
        return failed_row(plan.row, exc, plan.notes)
    return Job(a, b, plan, shape, blocks, locate, left=len(blocks))


def run_lanes(
    rows: list[dict[str, Any] | Job], advance: Callable[[], None] | None, threads: int | None, one_blas_thread: bool
) -> list[dict[str, Any]]:
    """Rows and jobs made rows: every block of every job in one queue for ``threads`` lanes, each job's
    block accumulators merged in block order (:func:`merge_in_order`); a job whose blocks raise gets the
    error of its first failing block in block order, as a one-lane run would. ``advance`` is called once
    per row (from a lane thread for a job).

    Args:
        rows: Rows already made and jobs (:func:`plan_job`), in result order.
        advance: Called once per row.
        threads: Lanes (default :data:`_THREADS`).
        one_blas_thread: BLAS limited to one thread meanwhile (:func:`single_threaded_blas`), else left as
            configured.
    """
    jobs = {k: job for k, job in enumerate(rows) if isinstance(job, Job)}
    work = [(k, i) for k, job in jobs.items() for i in range(len(job.blocks))]
    if advance is not None:
        for k, slot in enumerate(rows):
            if not isinstance(slot, Job) or not slot.blocks:
                advance()
    lock = threading.Lock()
    cursor = [0]  # the next item of ``work``

    def fold(k: int, i: int, stored: tuple[Any, Any] | None) -> None:
        job = jobs[k]
        if job.failed_at is None or i < job.failed_at:  # blocks after a failed one are not needed
            try:
                job.partials[i] = block_metrics(job, i, stored)
            except Exception as exc:
                with lock:
                    if job.failed_at is None or i < job.failed_at:
                        job.failed_at, job.error = i, exc
        with lock:
            job.left -= 1
            finished = job.left == 0
        if finished and advance is not None:
            advance()

    def lane() -> None:
        while True:
            with lock:
                at = cursor[0]
                if at >= len(work):
                    break
                cursor[0] = end = _take(work, at, jobs)
            batch = work[at:end]
            stored = read_batch([(jobs[k], i) for k, i in batch]) if len(batch) > 1 else None
            for n, (k, i) in enumerate(batch):
                fold(k, i, None if stored is None else stored[n])

    lanes = max(1, min(threads or _THREADS, len(work)))
    with single_threaded_blas() if one_blas_thread else contextlib.nullcontext():
        if lanes == 1 or threading.current_thread().name.startswith("megadump-compare"):
            lane()
        else:
            for future in [_pool().submit(lane) for _ in range(lanes)]:
                future.result()
    out: list[dict[str, Any]] = []
    for slot in rows:
        if not isinstance(slot, Job):
            out.append(slot)
            continue
        job = slot
        if job.error is not None:
            out.append(failed_row(job.plan.row, job.error, job.plan.notes))
            continue
        try:
            total = merge_in_order(job.shape, job.plan, [job.partials[i] for i in range(len(job.blocks))])
            out.append(metrics_row(job.plan.row, total.result(), job.plan.notes, job.locate))
        except Exception as exc:
            out.append(failed_row(job.plan.row, exc, job.plan.notes))
    return out


def compare_arrays(
    pairs: Sequence[ArrayPair | dict[str, Any]],
    advance: Callable[[], None] | None = None,
    *,
    threads: int | None = None,
) -> list[dict[str, Any]]:
    """The result rows of many pairs of array-likes, in order, through the lanes (:func:`run_lanes`); never
    raises.

    Row ``k`` is :func:`~megadump_zarr.analyse.pairs.compare_pair` of ``pairs[k]`` (the same bits: the same
    blocks, folded on their own and merged in block order; ``threads=1`` gives the same bits as any other number
    of lanes), but every block of every pair is read and folded by the next free lane. A dict in ``pairs`` is a
    row already made (a missing name): it is returned as it is.

    BLAS keeps the threads it is configured with (:func:`~megadump_zarr.analyse.record_pairs.compare_records`
    limits it to one), as :func:`~megadump_zarr.analyse.pairs.compare_pair` on the calling thread does: a float64
    ``dot`` of more than 10 000 elements is split over the BLAS threads, and the split shows in the last bits of
    the sums (cosine, rmse, euc_dist), so one BLAS thread would change them. Concurrent calls from the lanes split
    the same way.

    Args:
        pairs: The pairs (a dump's tensors against a reference, two collections' tensors), or rows.
        advance: Called once per row (for a compared pair when it is finished, from a lane thread).
        threads: Lanes (default: one per core, at most 4).
    """
    rows: list[dict[str, Any] | Job] = []
    for pair in pairs:
        if isinstance(pair, dict):
            rows.append(pair)
            continue
        plan = prepare_pair(pair.keys, pair.a, pair.b, rtol=pair.rtol, atol=pair.atol, notes=pair.notes)
        rows.append(plan_job(plan, pair.a, pair.b, pair.block_bytes, pair.locate) if plan.compute else plan.row)
    return run_lanes(rows, advance, threads, one_blas_thread=False)
