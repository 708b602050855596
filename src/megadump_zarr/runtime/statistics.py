"""Statistics of a tensor computed where it lives: torch reductions on its device, no payload to the host.

:func:`statistics_slot` reduces a tensor (or the raw bytes of an operand view) into the 128-byte
statistics slot of the L1 Device buffer ABI (layout version 1, see :mod:`megadump_zarr.l1.format`),
as a ``uint8`` tensor on the same device. It never synchronises with the host: every value, flags
included, is assembled with tensor operations, so the device worker can write it into its slot at a
task boundary and the L0 dumper can stack the slots of a launch and copy 128 bytes per tensor.

Definitions match the store's host statistics (:mod:`megadump_zarr.store.stats`): NaN and Inf are
counted; min, max, mean and L2 norm are over the finite elements; integers and bools give exact
``int64`` min/max. Sums accumulate in float64 (float32 on devices without float64: NPU, MPS).
The checksum is ``sum_i w_i * (2 i + 1) mod 2**64`` over the little-endian u32 words ``w_i`` of the raw
bytes (zero-padded to a multiple of 4): integer arithmetic, so it is the same on every device and in
every reduction order; changing any single word changes it.
"""

from __future__ import annotations

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

__all__ = ["dtype_code", "statistics_slot", "torch_dtype"]

_WORDS_PER_PIECE = 1 << 20  # u32 words reduced at once: bounds the int64 temporaries to 16 MiB
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


def _checksum(raw: torch.Tensor) -> torch.Tensor:
    """The u64 checksum (as an int64 tensor) of a 1-D uint8 tensor."""
    device = raw.device
    nbytes = raw.numel()
    if nbytes % 4 or raw.storage_offset() % 4:
        padded = torch.zeros((nbytes + 3) // 4 * 4, dtype=torch.uint8, device=device)
        padded[:nbytes].copy_(raw)
        raw = padded
    words = raw.view(torch.int32)
    total = torch.zeros((), dtype=torch.int64, device=device)
    for start in range(0, words.numel(), _WORDS_PER_PIECE):
        piece = words[start:start + _WORDS_PER_PIECE].to(torch.int64) & 0xFFFFFFFF
        weights = torch.arange(start, start + piece.numel(), dtype=torch.int64, device=device) * 2 + 1
        total = total + (piece * weights).sum()  # int64 arithmetic wraps: the sum is mod 2**64
    return total


def _pack(values: list[torch.Tensor]) -> torch.Tensor:
    """Sixteen int64 words → the 128-byte slot (little-endian devices)."""
    return torch.stack([v.reshape(()) for v in values]).view(torch.uint8)


def _has_float64(device: torch.device) -> bool:
    """Whether float64 reductions run on ``device`` (not on NPU or MPS)."""
    return device.type not in _NO_FLOAT64


def _words(is_float: bool, count: int, nbytes: int, flags: int, nan: torch.Tensor, inf: torch.Tensor,
           n_finite: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor, total: torch.Tensor, sumsq: torch.Tensor,
           checksum: torch.Tensor, device: torch.device) -> torch.Tensor:
    """Assemble the slot from the reductions' 0-d results (all on ``device``)."""
    def word(value: int) -> torch.Tensor:
        return torch.tensor(value, dtype=torch.int64, device=device)

    zero = word(0)
    has_finite = n_finite > 0
    total, sumsq = total.to(torch.float64), sumsq.to(torch.float64)
    mean = torch.where(has_finite, total / n_finite.clamp(min=1).to(torch.float64), torch.nan)
    l2 = torch.sqrt(sumsq)
    if is_float:
        lo_word, hi_word = lo.to(torch.float64).view(torch.int64), hi.to(torch.float64).view(torch.int64)
    else:
        lo_word, hi_word = lo.to(torch.int64), hi.to(torch.int64)
    head = word(L1_STATISTICS_LAYOUT_VERSION | (flags << 32)) + has_finite.to(torch.int64) * (L1_STAT_HAS_FINITE << 32)
    words = [head, word(count), nan.to(torch.int64), inf.to(torch.int64), torch.where(has_finite, lo_word, zero),
             torch.where(has_finite, hi_word, zero), mean.view(torch.int64), l2.view(torch.int64), checksum,
             word(nbytes)]
    return _pack(words + [zero] * 6)


def statistics_slot(values: torch.Tensor, raw: torch.Tensor | None = None) -> torch.Tensor:
    """The statistics slot of ``values`` as a 128-byte uint8 tensor on the same device.

    Args:
        values: The tensor (any shape, contiguous or not; bool, integer or float incl. bf16/float8).
        raw: Its bytes as a 1-D uint8 tensor, when the caller already has them (the device worker's
            operand view); made from ``values`` otherwise.
    """
    device = values.device
    flat = values.reshape(-1)
    if raw is None:
        raw = flat.contiguous().view(torch.uint8) if flat.numel() else torch.zeros(0, dtype=torch.uint8, device=device)
    dtype_code(values.dtype)  # refuse what the ABI cannot name
    count = flat.numel()

    def word(value: int) -> torch.Tensor:
        return torch.tensor(value, dtype=torch.int64, device=device)

    zero = word(0)
    is_float = values.dtype.is_floating_point
    flags = L1_STAT_VALID | (0 if is_float else L1_STAT_INTEGER)
    head = word(L1_STATISTICS_LAYOUT_VERSION | (flags << 32))
    checksum = _checksum(raw)
    if count == 0:
        words = [head, zero, zero, zero, zero, zero, zero, zero, checksum, word(raw.numel())]
        return _pack(words + [zero] * 6)
    has64 = _has_float64(device)
    accumulate = torch.float64 if has64 else torch.float32
    if is_float:
        x = flat.to(accumulate)
        finite = torch.isfinite(x)
        nan = torch.isnan(x).sum()
        inf = torch.isinf(x).sum()
        n_finite = finite.sum()
        lo = torch.where(finite, x, torch.inf).min()
        hi = torch.where(finite, x, -torch.inf).max()
        kept = torch.where(finite, x, 0)
    else:
        ints = flat.to(torch.int64)
        nan = inf = zero
        n_finite = word(count)
        lo, hi = ints.min(), ints.max()
        kept = ints.to(accumulate)
    total = kept.sum()
    sumsq = (kept * kept).sum()
    if not has64:  # the reductions ran on the device; only these scalars come over to be packed in float64
        nan, inf, n_finite, lo, hi, total, sumsq, checksum = (
            t.cpu() for t in (nan, inf, n_finite, lo, hi, total, sumsq, checksum))
        pack_device = torch.device("cpu")
    else:
        pack_device = device
    slot = _words(is_float, count, raw.numel(), flags, nan, inf, n_finite, lo, hi, total, sumsq, checksum, pack_device)
    if pack_device != device:
        slot = slot.to(device)
    assert slot.numel() == L1_STATISTICS_SLOT_SIZE
    return slot
