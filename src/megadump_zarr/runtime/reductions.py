"""Statistics of tensors computed where they live: torch reductions on their device, no payload to the host.

:func:`segment_slots` reduces MANY records at once: their bytes lie in one staging buffer of one dtype,
each record starting at a row of :data:`BLOCK` elements (its last row zero-padded), and one segmented
pass (row partials, :mod:`megadump_zarr.runtime.reduction_rows`, then a fold of each record's rows: a
reshape when the records share a size, else ``index_add``/``scatter_reduce``) gives every
record's 128-byte statistics slot of the L1 Device buffer ABI (layout version 2, see
:mod:`megadump_zarr.l1.format`) as a ``[records, 128]`` uint8 tensor on the same device.
:func:`statistics_slot` is the same pass over one record, and :class:`StatisticsStager` collects the
records of a launch for the device worker. Nothing synchronises with the host.

Definitions (statistics layout 2; the sums' order is defined, so a record's slot is the same bit for bit
whether it is reduced alone or with others, on any device with float64):

- NaN and Inf are counted; min, max, mean and L2 norm are over the finite elements; integers and bools
  give exact ``int64`` min/max (unsigned 64-bit values wrap as ``int64``, as before). A zero extreme is
  ``+0.0`` (``-0.0`` and ``+0.0`` compare equal; its sign would depend on the reduction order).
- ``sum`` and ``sumsq`` accumulate in float64 (float32 on devices without float64: NPU, MPS) in a fixed
  order: the values (non-finite ones as ``+0.0``; squares ``x*x``) are cut into blocks of :data:`BLOCK`
  elements, the last one padded with ``+0.0``; a block sums pairwise (element ``j`` + element ``j + h``
  for ``h`` = 128, 64, ..., 1); the sequence of block sums is summed by the same rule until one value
  is left (an empty record sums to 0); a zero sum is ``+0.0``. ``mean = sum / n_finite``,
  ``l2 = torch.sqrt(sumsq)`` (the device's float64 sqrt, not necessarily correctly rounded). :func:`reference_sum` spells the rule out in Python. Earlier builds summed in
  torch's own order: their slots read the same; their mean and L2 may differ in the last bits.
- The digest is :mod:`megadump_zarr.layout.digest`'s (a position-sensitive 64-bit hash of the raw bytes,
  the dtype and the element count, computed by :mod:`megadump_zarr.runtime.digest` in the same pass):
  integer arithmetic mod ``2**64``, the same on every device and in every reduction order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
import functools
import threading

import torch

from megadump_zarr.l1.format import (
    L1_DTYPE_CODE_OF,
    L1_DTYPE_CODES,
    L1_STAT_HAS_FINITE,
    L1_STAT_INTEGER,
    L1_STAT_VALID,
    L1_STATISTICS_LAYOUT_VERSION,
    L1_STATISTICS_SLOT_SIZE,
)
from megadump_zarr.runtime.digest import finish
from megadump_zarr.runtime.reduction_rows import BLOCK, combine_rows, one_thread, row_partials

__all__ = [
    "BLOCK",
    "StatisticsStager",
    "dtype_code",
    "give_back_staging",
    "reference_sum",
    "segment_slots",
    "statistics_slot",
    "take_staging",
    "torch_dtype",
]

_NO_FLOAT64 = frozenset(("npu", "mps"))


def dtype_code(dtype: torch.dtype) -> int:
    """The ABI's ``dtype_code`` of a torch dtype.

    Args:
        dtype: A torch dtype.

    Raises:
        TypeError: No code exists for it (complex, quantised, ...).
    """
    code = L1_DTYPE_CODE_OF.get(str(dtype).removeprefix("torch."))
    if code is None:
        raise TypeError(f"statistics are not defined for dtype {dtype}")
    return code


def torch_dtype(code: int) -> torch.dtype:
    """The torch dtype of an ABI ``dtype_code``.

    Args:
        code: A code of :data:`megadump_zarr.l1.format.L1_DTYPE_CODES`.
    """
    return getattr(torch, L1_DTYPE_CODES[code])


@functools.lru_cache(maxsize=32)
def itemsize(dtype: torch.dtype) -> int:
    """Bytes per element of ``dtype``.

    Args:
        dtype: A torch dtype.
    """
    return torch.empty((), dtype=dtype).element_size()


def reference_sum(values: Sequence[float]) -> float:
    """The defined summation order in plain Python floats (float64): the specification of the device sums.

    Args:
        values: The (finite) values in record order.
    """
    sequence = [float(v) for v in values]
    if not sequence:
        return 0.0
    while True:
        blocks = []
        for start in range(0, len(sequence), BLOCK):
            block = sequence[start : start + BLOCK] + [0.0] * (BLOCK - len(sequence[start : start + BLOCK]))
            while len(block) > 1:
                half = len(block) // 2
                block = [block[j] + block[j + half] for j in range(half)]
            blocks.append(block[0])
        sequence = blocks
        if len(sequence) == 1:
            return sequence[0] + 0.0


def _has_float64(device: torch.device) -> bool:
    """Whether float64 reductions run on ``device`` (not on NPU or MPS)."""
    return device.type not in _NO_FLOAT64


def rows_of(count: int) -> int:
    """Staging rows a record of ``count`` elements takes.

    Args:
        count: Its element count.
    """
    return -(-count // BLOCK)


def _row_geometry(counts: list[int]) -> tuple[list[int], torch.Tensor, torch.Tensor]:
    """(staging rows of each record, elements in each staging row, indices of the padded last rows);
    the tensors on the host."""
    count = torch.tensor(counts, dtype=torch.int64)
    blocks = (count + BLOCK - 1) // BLOCK
    valid = torch.full((int(blocks.sum()),), BLOCK, dtype=torch.int64)
    used = blocks > 0
    valid[blocks.cumsum(0)[used] - 1] = count[used] - (blocks[used] - 1) * BLOCK
    return blocks.tolist(), valid, torch.nonzero(valid < BLOCK).view(-1)


def segment_slots(rows: torch.Tensor, counts: Sequence[int], *, masked: bool | None = None) -> torch.Tensor:
    """The statistics slots of many records of one dtype, in one segmented pass.

    Args:
        rows: ``[R, BLOCK]`` values of the records' dtype (a view of the staging buffer): record ``i``
            takes the next ``rows_of(counts[i])`` rows, its elements first, then zero bytes.
        counts: Each record's element count.
        masked: :func:`~megadump_zarr.runtime.reduction_rows.row_partials`' path (default: by device;
            both give the same bits).

    Returns:
        ``[len(counts), 128]`` uint8 slots on ``rows``' device.
    """
    with one_thread(rows.device):
        return _segment_slots(rows, [int(n) for n in counts], masked)


def _segment_slots(rows: torch.Tensor, counts: list[int], masked: bool | None) -> torch.Tensor:
    """:func:`segment_slots` (on the calling thread)."""
    device = rows.device
    records = len(counts)
    blocks, valid, padded = _row_geometry(counts)
    if rows.dim() != 2 or rows.shape[0] != sum(blocks) or rows.shape[1] != BLOCK:
        raise ValueError(
            f"statistics staging holds {tuple(rows.shape)} values, the records need [{sum(blocks)}, {BLOCK}]"
        )
    dtype_code(rows.dtype)  # refuse what the ABI cannot name
    is_float = rows.dtype.is_floating_point
    has64 = _has_float64(device)
    accumulate = torch.float64 if has64 else torch.float32
    itembytes = itemsize(rows.dtype)
    partials = row_partials(rows, valid.to(device), padded.to(device), accumulate, masked=masked)
    nan, inf, lo, hi, total, sumsq, digest_sum = combine_rows(partials, blocks)
    digest = finish(digest_sum, torch.tensor(counts, dtype=torch.int64, device=device), dtype_code(rows.dtype))
    if not has64:  # only these [records] results come over to be packed in float64
        nan, inf, lo, hi, total, sumsq, digest = (t.cpu() for t in (nan, inf, lo, hi, total, sumsq, digest))
    pack = nan.device
    count = torch.tensor(counts, dtype=torch.int64, device=pack)
    n_finite = count - nan - inf
    flags = L1_STAT_VALID | (0 if is_float else L1_STAT_INTEGER)
    has_finite = n_finite > 0
    mean = torch.where(has_finite, total.to(torch.float64) / n_finite.clamp(min=1).to(torch.float64), torch.nan)
    l2 = torch.sqrt(sumsq.to(torch.float64))
    if is_float:
        lo_word, hi_word = lo.to(torch.float64).view(torch.int64), hi.to(torch.float64).view(torch.int64)
    else:
        lo_word, hi_word = lo.to(torch.int64), hi.to(torch.int64)
    zero = torch.zeros(records, dtype=torch.int64, device=pack)
    head = (L1_STATISTICS_LAYOUT_VERSION | (flags << 32)) + has_finite.to(torch.int64) * (L1_STAT_HAS_FINITE << 32)
    empty = count == 0
    words = [
        head,
        count,
        nan,
        inf,
        torch.where(has_finite, lo_word, zero),
        torch.where(has_finite, hi_word, zero),
        torch.where(empty, zero, mean.view(torch.int64)),
        torch.where(empty, zero, l2.view(torch.int64)),
        digest,
        count * itembytes,
    ]
    slots = torch.stack(words + [zero] * 6, dim=1).view(torch.uint8)
    assert slots.shape == (records, L1_STATISTICS_SLOT_SIZE)
    return slots if slots.device == device else slots.to(device)


def staged(values: torch.Tensor) -> torch.Tensor:
    """One record's values as staging rows ``[rows_of(n), BLOCK]`` (a zero-padded copy).

    Args:
        values: The tensor (any shape, contiguous or not).
    """
    flat = values.reshape(-1)
    rows = rows_of(flat.numel())
    out = torch.zeros(rows * BLOCK * values.element_size(), dtype=torch.uint8, device=values.device).view(values.dtype)
    out[: flat.numel()].copy_(flat)
    return out.view(rows, BLOCK)


def statistics_slot(values: torch.Tensor, raw: torch.Tensor | None = None) -> torch.Tensor:
    """The statistics slot of ``values`` as a 128-byte uint8 tensor on the same device
    (:func:`segment_slots` over this one record: the same bits as when it is reduced with others).

    Args:
        values: The tensor (any shape, contiguous or not; bool, integer or float incl. bf16/float8).
        raw: Its bytes as a 1-D uint8 tensor (accepted for the device worker; they are ``values``' bytes).
    """
    del raw
    dtype_code(values.dtype)
    return segment_slots(staged(values), [values.numel()])[0]


STAGING_BYTES = 64 << 20
"""Default staging capacity of a :class:`StatisticsStager` per dtype (bytes on the device)."""
_SPARE_BYTES = 2 * STAGING_BYTES
"""CPU staging memory kept for the next launch at most (see :func:`take_staging`)."""
_SPARE: dict[int, list[torch.Tensor]] = {}
_SPARE_LOCK = threading.Lock()


def take_staging(nbytes: int, device: torch.device) -> torch.Tensor:
    """A staging buffer of ``nbytes``: on CPU one a finished stager handed back when there is one (a fresh
    one of tens of MiB costs a page fault per 4 KiB on first touch, every launch), else a new one.

    Args:
        nbytes: Its size (a spare is reused for this exact size only).
        device: Where it lives.
    """
    if device.type == "cpu":
        with _SPARE_LOCK:
            spares = _SPARE.get(nbytes)
            if spares:
                return spares.pop()
    return torch.empty(nbytes, dtype=torch.uint8, device=device)


def give_back_staging(buffer: torch.Tensor) -> None:
    """Keep a CPU staging buffer for the next stager, within :data:`_SPARE_BYTES` (the oldest go first).

    Args:
        buffer: A buffer of :func:`take_staging` that nothing uses any more.
    """
    if buffer.device.type != "cpu":
        return  # the device's caching allocator reuses its memory already
    with _SPARE_LOCK:
        _SPARE.setdefault(buffer.numel(), []).append(buffer)
        while sum(b.numel() for spares in _SPARE.values() for b in spares) > _SPARE_BYTES:
            oldest = next(size for size, spares in _SPARE.items() if spares)
            _SPARE[oldest].pop(0)
            if not _SPARE[oldest]:
                del _SPARE[oldest]


class _Group:
    """One dtype's staging buffer and the records waiting in it."""

    __slots__ = ("buffer", "itemsize", "row_bytes", "used", "counts", "tags")

    def __init__(self, buffer: torch.Tensor, itemsize: int) -> None:
        self.buffer = buffer
        self.itemsize = itemsize
        self.row_bytes = BLOCK * itemsize
        self.used = 0
        self.counts: list[int] = []
        self.tags: list[object] = []


class StatisticsStager:
    """Collects records of a launch and reduces them in one segmented pass per dtype.

    ``stage`` copies a record's bytes (a device-to-device copy, like a tensor record's) into its dtype's
    staging buffer, at the next row, and zeroes the rest of its last row; ``flush`` reduces every staged
    record (:func:`segment_slots`) and empties the buffers (they are reused: every staged row is written
    in full, so nothing needs clearing). A record that would overflow its buffer flushes that dtype
    first; one larger than the buffer is reduced on its own.

    Args:
        device: Where the staging buffers live (the Device buffer's device).
        capacity: Staging bytes per dtype at most.
        expected: ``dtype -> element counts`` of the records to come, when known: a dtype's buffer is
            then no larger than they need.
    """

    def __init__(
        self,
        device: torch.device,
        capacity: int = STAGING_BYTES,
        expected: Mapping[torch.dtype, Sequence[int]] | None = None,
    ) -> None:
        if capacity < BLOCK * 8:
            raise ValueError(f"statistics staging capacity must be at least {BLOCK * 8} bytes, got {capacity}")
        self.device = torch.device(device)
        self.capacity = int(capacity)
        self._sizes = {
            dtype: min(self.capacity, sum(rows_of(n) for n in counts) * BLOCK * itemsize(dtype))
            for dtype, counts in (expected or {}).items()
        }
        self._groups: dict[torch.dtype, _Group] = {}

    def _group(self, dtype: torch.dtype) -> _Group:
        """The dtype's group, its buffer allocated on first use (uninitialised: staging writes every row)."""
        size = itemsize(dtype)
        rows = self._sizes.get(dtype, self.capacity) // (BLOCK * size)
        group = self._groups[dtype] = _Group(take_staging(rows * BLOCK * size, self.device), size)
        return group

    def stage(self, dtype: torch.dtype, source: torch.Tensor, tag: object) -> list[tuple[list[object], torch.Tensor]]:
        """Stage one record; returns what had to be reduced to make room (``(tags, slots)`` pairs).

        Args:
            dtype: The record's element type.
            source: Its bytes (1-D uint8 on the stager's device, whole elements).
            tag: Handed back with its slot.
        """
        group = self._groups.get(dtype) or self._group(dtype)
        nbytes = source.numel()
        count = nbytes // group.itemsize
        need = -(-count // BLOCK) * group.row_bytes
        buffer = group.buffer
        if need > buffer.numel():
            values = source.view(dtype) if count else torch.empty(0, dtype=dtype, device=source.device)
            return [([tag], segment_slots(staged(values), [count]))]
        done = []
        if group.used + need > buffer.numel():
            done.append(self._reduce(dtype, group))
        start = group.used
        if count:
            buffer[start : start + nbytes].copy_(source)
            if need > nbytes:  # the last row's padding must read as zeros
                buffer[start + nbytes : start + need].zero_()
        group.used = start + need
        group.counts.append(count)
        group.tags.append(tag)
        return done

    def flush(self) -> list[tuple[list[object], torch.Tensor]]:
        """Reduce every staged record: ``(tags, slots)`` per dtype, slots ``[len(tags), 128]`` uint8."""
        return [self._reduce(dtype, group) for dtype, group in self._groups.items() if group.tags]

    def release(self) -> None:
        """Hand the staging buffers back for the next stager (call after the last :meth:`flush`; a later
        :meth:`stage` takes new ones). Refuses while records wait."""
        if self.pending():
            raise RuntimeError(f"statistics stager released with {self.pending()} records not reduced")
        for group in self._groups.values():
            give_back_staging(group.buffer)
        self._groups = {}

    def pending(self) -> int:
        """How many records wait to be reduced."""
        return sum(len(group.tags) for group in self._groups.values())

    @staticmethod
    def _reduce(dtype: torch.dtype, group: _Group) -> tuple[list[object], torch.Tensor]:
        """Reduce one dtype's staged records and empty its buffer."""
        rows = group.buffer[: group.used].view(dtype).view(-1, BLOCK)
        slots = segment_slots(rows, group.counts)
        tags = group.tags
        group.used, group.counts, group.tags = 0, [], []
        return tags, slots
