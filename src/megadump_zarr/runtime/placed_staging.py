"""Statistics staging laid out when the device worker is built: every record's rows are known in advance.

The device worker knows every statistics record of a launch (kinds 1 and 2: their dtype and element
count) before the first task runs. :class:`PlacedStager` gives each its own rows in its dtype's staging
buffer then (records in the order given, each from a row boundary; the last row of a record whose
count is not a multiple of :data:`~megadump_zarr.runtime.reductions.BLOCK` is zeroed once, and staging
writes the record's bytes only, so its padding stays zero): staging a record is one device copy into its
range and a flag, and :meth:`PlacedStager.flush` reduces each dtype's buffer in one
:func:`~megadump_zarr.runtime.reductions.segment_slots` pass (the whole buffer when every record was
staged, else the staged records' rows gathered). A record staged twice before a flush is reduced once,
with the bytes of its last staging (the slot it would end with either way). The slots are the same
bits as :class:`~megadump_zarr.runtime.reductions.StatisticsStager`'s: the definition is per record.

A dtype whose records need more than ``capacity`` bytes of staging is not placed (:meth:`place` answers
None): the worker stages those through :class:`~megadump_zarr.runtime.reductions.StatisticsStager`,
which reduces whenever its buffer fills.
"""

from __future__ import annotations

from collections.abc import Sequence
import itertools

import torch

from megadump_zarr.runtime.reductions import (
    BLOCK,
    STAGING_BYTES,
    give_back_staging,
    itemsize,
    rows_of,
    segment_slots,
    take_staging,
)

__all__ = ["PlacedStager", "Place"]

Place = tuple[list[bool], int, torch.Tensor, int, int]
"""Where one record is staged: its dtype group's flags, its index there, the group's buffer and the
byte range its bytes go to (no tensor is made per record until it is staged)."""


class _Placed:
    """One dtype's buffer, laid out for its records."""

    __slots__ = ("buffer", "rows", "counts", "tags", "first_rows", "staged", "places")

    def __init__(
        self, dtype: torch.dtype, counts: list[int], blocks: list[int], tags: list[object], device: torch.device
    ) -> None:
        size = itemsize(dtype)
        row_bytes = BLOCK * size
        self.buffer = take_staging(sum(blocks) * row_bytes, device)
        self.rows = self.buffer.view(dtype).view(-1, BLOCK)
        self.counts = counts
        self.tags = tags
        self.first_rows = list(itertools.accumulate(blocks, initial=0))
        self.staged = [False] * len(counts)
        # each record's bytes start at its first row; a record with padding has its last row zeroed now
        # (a reused buffer holds stale bytes) and never written again
        padded = [k for k, n in enumerate(counts) if n % BLOCK]
        if padded:
            last = torch.tensor([self.first_rows[k + 1] - 1 for k in padded], device=device)
            self.buffer.view(-1, row_bytes).index_fill_(0, last, 0)
        flags, buffer = self.staged, self.buffer
        self.places: list[Place] = [
            (flags, k, buffer, first * row_bytes, first * row_bytes + n * size)
            for k, (first, n) in enumerate(zip(self.first_rows, counts))
        ]

    def reduce(self) -> tuple[list[object], torch.Tensor] | None:
        """The staged records' ``(tags, slots)`` (None when none is staged); clears the flags."""
        flags = self.staged
        if True not in flags:
            return None
        if False not in flags:
            tags, rows, counts = self.tags, self.rows, self.counts
        else:
            picked = [k for k, staged in enumerate(flags) if staged]
            tags = [self.tags[k] for k in picked]
            counts = [self.counts[k] for k in picked]
            rows = self.rows.index_select(0, self._row_index(picked))
        slots = segment_slots(rows, counts)
        flags[:] = [False] * len(flags)  # the same list: the places hold it
        return tags, slots

    def _row_index(self, picked: list[int]) -> torch.Tensor:
        """The staging rows of records ``picked``, in order (on the buffer's device)."""
        starts = torch.tensor([self.first_rows[k] for k in picked], dtype=torch.int64)
        lengths = torch.tensor([self.first_rows[k + 1] - self.first_rows[k] for k in picked], dtype=torch.int64)
        before = lengths.cumsum(0) - lengths
        index = torch.arange(int(lengths.sum()), dtype=torch.int64) + torch.repeat_interleave(starts - before, lengths)
        return index.to(self.buffer.device)


class PlacedStager:
    """Staging rows for records known in advance, laid out once (see the module docstring).

    Args:
        device: Where the staging buffers live (the Device buffer's device).
        records: ``(dtype, element count, tag)`` of each record, in the order their rows are laid out.
        capacity: Staging bytes per dtype at most: a dtype needing more is not placed.
    """

    def __init__(
        self,
        device: torch.device,
        records: Sequence[tuple[torch.dtype, int, object]],
        capacity: int = STAGING_BYTES,
    ) -> None:
        self.device = torch.device(device)
        self.capacity = int(capacity)
        by_dtype: dict[torch.dtype, list[int]] = {}
        for position, (dtype, count, _) in enumerate(records):
            if count < 0:
                raise ValueError(f"placed staging: record {position} has {count} elements")
            by_dtype.setdefault(dtype, []).append(position)
        self._groups: list[_Placed] = []
        self._places: list[Place | None] = [None] * len(records)
        self.dtypes: frozenset[torch.dtype] = frozenset()
        """The dtypes whose records are placed."""
        placed = []
        for dtype, positions in by_dtype.items():
            counts = [int(records[p][1]) for p in positions]
            blocks = [rows_of(n) for n in counts]
            if sum(blocks) * BLOCK * itemsize(dtype) > self.capacity:
                continue  # too large to place: staged (and reduced as its buffer fills) elsewhere
            group = _Placed(dtype, counts, blocks, [records[p][2] for p in positions], self.device)
            self._groups.append(group)
            placed.append(dtype)
            for position, place in zip(positions, group.places):
                self._places[position] = place
        self.dtypes = frozenset(placed)

    def place(self, position: int) -> Place | None:
        """Record ``position``'s :data:`Place`, or None when its dtype is not placed (or after :meth:`release`).

        Args:
            position: Its index in the constructor's ``records``.
        """
        return self._places[position]

    @staticmethod
    def stage(place: Place, source: torch.Tensor) -> None:
        """Copy a record's bytes into its rows (a copy on the device; nothing is reduced yet).

        Args:
            place: Its :data:`Place`, from :meth:`place`.
            source: Its bytes (1-D uint8 on the stager's device, exactly the record's bytes).
        """
        flags, index, buffer, start, stop = place
        if stop > start:
            buffer[start:stop].copy_(source)
        flags[index] = True

    def pending(self) -> int:
        """How many records wait to be reduced."""
        return sum(group.staged.count(True) for group in self._groups)

    def flush(self) -> list[tuple[list[object], torch.Tensor]]:
        """Reduce every staged record: ``(tags, slots)`` per dtype, slots ``[len(tags), 128]`` uint8, the
        tags in layout order."""
        return [done for done in (group.reduce() for group in self._groups) if done is not None]

    def release(self) -> None:
        """Hand the staging buffers back for the next stager (after the last :meth:`flush`); every
        :meth:`place` answers None from now on. Refuses while records wait."""
        if self.pending():
            raise RuntimeError(f"placed statistics staging released with {self.pending()} records not reduced")
        for group in self._groups:
            give_back_staging(group.buffer)
        self._groups = []
        self._places = [None] * len(self._places)
        self.dtypes = frozenset()
