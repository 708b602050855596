"""The record digest (:mod:`megadump_zarr.layout.digest`) with torch integer ops, where the tensor lives.

Three steps, each exact in int64 arithmetic mod ``2**64`` on every torch device (``>>`` of an int64 is
arithmetic in torch, so a logical shift is a shift then a mask):

* :class:`RowDigests` — per staging row, the wrapping sum of ``fmix64(w_j + (j + 1) * GOLDEN)`` over its
  u64 words (fused into the statistics pass over the same rows, a chunk at a time, into buffers
  allocated once per pass); :meth:`RowDigests.unpad` then removes the padding words' terms from the rows
  that end a record;
* :func:`record_sums` — per record, the wrapping sum of ``fmix64(row_sum + (t + 1) * GOLDEN)`` over its
  rows ``t``;
* :func:`finish` — ``fmix64(S + fmix64(n ^ (dtype_code << 56)))``.
"""

from __future__ import annotations

import torch

from megadump_zarr.layout.digest import FMIX_1, FMIX_2, GOLDEN

__all__ = ["RowDigests", "finish", "fmix64_", "record_sums", "signed"]

_LOW31 = (1 << 31) - 1
"""Mask of the low 31 bits: ``(x >> 33) & _LOW31`` is the logical shift of an int64 by 33."""


def signed(value: int) -> int:
    """A u64 constant as the int64 with the same bits.

    Args:
        value: 0 <= value < 2**64.
    """
    return value - (1 << 64) if value >= 1 << 63 else value


_C1, _C2, _GOLDEN = signed(FMIX_1), signed(FMIX_2), signed(GOLDEN)


def fmix64_(x: torch.Tensor, tmp: torch.Tensor | None = None) -> torch.Tensor:
    """fmix64 of every element of the int64 tensor ``x``, in place (returns ``x``).

    Args:
        x: int64 values (their bits are the u64 words).
        tmp: A scratch int64 tensor of ``x``'s shape (default: a new one).
    """
    tmp = torch.empty_like(x) if tmp is None else tmp
    for multiplier in (_C1, _C2, None):
        torch.bitwise_right_shift(x, 33, out=tmp)
        tmp.bitwise_and_(_LOW31)
        x.bitwise_xor_(tmp)
        if multiplier is not None:
            x.mul_(multiplier)
    return x


def _keys(count: int, device: torch.device) -> torch.Tensor:
    """``(j + 1) * GOLDEN`` mod 2**64 for j < count (int64)."""
    return torch.arange(1, count + 1, dtype=torch.int64, device=device) * _GOLDEN


class RowDigests:
    """Per-row digest sums of ``[R, words_per_row]`` u64 staging words, filled a chunk of rows at a time.

    Args:
        rows: Staging rows, ``R`` of them.
        words_per_row: u64 words in one row.
        chunk: Rows per :meth:`add` call at most (the scratch buffers' size).
        device: Where the rows live.
    """

    def __init__(self, rows: int, words_per_row: int, chunk: int, device: torch.device) -> None:
        self.words_per_row = words_per_row
        self.sums = torch.empty(rows, dtype=torch.int64, device=device)
        self.keys = _keys(words_per_row, device)
        self._work = torch.empty(min(chunk, max(rows, 1)), words_per_row, dtype=torch.int64, device=device)
        self._tmp = torch.empty_like(self._work)

    def add(self, start: int, stop: int, words: torch.Tensor) -> None:
        """The sums of rows ``start:stop``.

        Args:
            start: First row.
            stop: One past the last.
            words: Their u64 words as int64, ``[stop - start, words_per_row]``.
        """
        count = stop - start
        work, tmp = self._work[:count], self._tmp[:count]
        torch.add(words, self.keys, out=work)
        fmix64_(work, tmp)
        torch.sum(work, 1, out=self.sums[start:stop])  # int64 sums wrap: mod 2**64

    def unpad(self, padded: torch.Tensor, valid: torch.Tensor, itemsize: int) -> None:
        """Remove the padding words' terms from the rows that end a record (their padding is zero bytes).

        Args:
            padded: Indices of the rows with padding (int64).
            valid: Valid elements per row (int64, every row).
            itemsize: Bytes per element.
        """
        if padded.numel() == 0:
            return
        terms = fmix64_(self.keys.clone())
        # beyond[u] = sum of the zero words' terms j >= u (u = words that hold record bytes)
        beyond = torch.cat([terms.flip(0).cumsum(0).flip(0), terms.new_zeros(1)])
        used = (valid.index_select(0, padded) * itemsize + 7) // 8
        self.sums.index_put_((padded,), -beyond.index_select(0, used), accumulate=True)


def record_sums(row_sums: torch.Tensor, local: torch.Tensor, owner: torch.Tensor | None, records: int) -> torch.Tensor:
    """Per record, the wrapping sum of ``fmix64(row_sum + (t + 1) * GOLDEN)`` over its rows.

    Args:
        row_sums: Every row's sum (from :class:`RowDigests`), records one after another.
        local: Each row's index ``t`` within its record (int64, the rows' shape).
        owner: Each row's record (int64), or None when every record has ``len(row_sums) / records`` rows.
        records: How many records.
    """
    terms = fmix64_((local + 1) * _GOLDEN + row_sums)
    if owner is None:
        return terms.view(records, -1).sum(1) if records else terms.new_zeros(0)
    return torch.zeros(records, dtype=torch.int64, device=terms.device).index_add_(0, owner, terms)


def finish(sums: torch.Tensor, counts: torch.Tensor, dtype_code: int) -> torch.Tensor:
    """The records' digests from their sums (:func:`record_sums`), element counts and dtype code.

    Args:
        sums: ``[records]`` int64.
        counts: ``[records]`` int64 element counts, on the same device.
        dtype_code: The records' L1 dtype code.
    """
    meta = fmix64_(counts.bitwise_xor(signed(dtype_code << 56)))
    return fmix64_(sums + meta)
