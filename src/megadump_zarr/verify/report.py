"""What a verification finds: :class:`Problem`, :class:`WindowCheck`, and the state a window's checks fill.

The window's checks (:mod:`~megadump_zarr.verify.documents`, :mod:`~megadump_zarr.read.inventory`,
:mod:`~megadump_zarr.verify.chunks`, :mod:`~megadump_zarr.verify.bindings`) each add problems to one
:class:`CheckState`; :func:`megadump_zarr.verify.window.verify_window` turns it into a :class:`WindowCheck`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import json
from collections.abc import Iterable
from typing import Any


__all__ = ["CheckState", "Problem", "WindowCheck", "short"]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a window.

    Args:
        window: The window key (``rank_0/window_0000``).
        key: The store key at fault (a ``zarr.json`` or a chunk), relative to the root.
        what: What is wrong.
    """

    window: str
    key: str
    what: str

    def __str__(self) -> str:
        return f"{self.key}: {self.what}"


@dataclass(frozen=True)
class WindowCheck:
    """The verification of one window.

    Args:
        window: The window key.
        status: Its status (``complete``, ``aborted``, ``writing``; ``unknown`` when unreadable).
        checked: Whether it was verified (torn ``writing`` windows are listed, not verified).
        arrays: Arrays checked.
        chunks: Chunks checked.
        stored_bytes: Bytes of the chunks read.
        problems: What is wrong (empty: the window is whole).
        partial_launches: The window's ``partialLaunches`` attribute (salvaged failed launches).
        partial_records: Records flagged ``partial: true``.
        deep: Whether statistics were recomputed.
        notes: What was not checked and why (``N array(s) carry no checksum: ...``); never a problem.
    """

    window: str
    status: str
    checked: bool
    arrays: int = 0
    chunks: int = 0
    stored_bytes: int = 0
    problems: tuple[Problem, ...] = ()
    partial_launches: tuple[Any, ...] = ()
    partial_records: int = 0
    deep: bool = False
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """No problem found."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        return {
            "window": self.window,
            "status": self.status,
            "checked": self.checked,
            "ok": self.ok,
            "arrays": self.arrays,
            "chunks": self.chunks,
            "stored_bytes": self.stored_bytes,
            "deep": self.deep,
            "partial_launches": list(self.partial_launches),
            "partial_records": self.partial_records,
            "notes": list(self.notes),
            "problems": [{"key": p.key, "what": p.what} for p in self.problems],
        }


@dataclass
class CheckState:
    """What the checks of one window found so far (mutable: each check adds to it).

    Args:
        window: The window key.
        problems: The problems found.
        arrays: Arrays checked.
        chunks: Chunks checked.
        stored_bytes: Bytes of the chunks read.
        partial_records: Records flagged ``partial: true``.
        unchecked: Arrays with chunks but no checksum: decoded only (a note, not a problem).
        digested: Window-inventory digests of the chunks the pack checks read whole (``verify.chunks.read_shards``), by key,
            so that the chunk check reads none of them again.
        damaged: Pack shards whose rows the pack checks found damaged (named there, not again as moved).
        keep: Paths of the arrays whose chunks' bytes the chunk check keeps in ``kept`` (row coordinates,
            ``verify.bindings``).
        kept: Those chunks' bytes in grid order, by array path.
        inventory: The window inventory's entries by array path (``read.inventory.read_inventory``; ``None``: not loaded).
        read_chunks: The packed records' chunks already read with their whole pack shard (``verify.chunks.read_shards``), by key:
            what the chunk check needs of each (``verify.chunks.ChunkRead``), so no shard is read twice.
    """

    window: str
    problems: list[Problem] = field(default_factory=list)
    arrays: int = 0
    chunks: int = 0
    stored_bytes: int = 0
    partial_records: int = 0
    unchecked: int = 0
    read_chunks: dict[str, Any] = field(default_factory=dict)
    inventory: dict[str, Any] | None = None
    digested: dict[str, int] = field(default_factory=dict)
    damaged: set[str] = field(default_factory=set)
    keep: set[str] = field(default_factory=set)
    kept: dict[str, Any] = field(default_factory=dict)

    def add(self, key: str, what: str) -> None:
        """Add the problem ``what`` at store key ``key``."""
        self.problems.append(Problem(self.window, key, what))

    def extend(self, found: Iterable[Any]) -> bool:
        """Add each :class:`~megadump_zarr.read.inventory.InventoryProblem` found; returns whether there was one."""
        count = len(self.problems)
        self.problems += [Problem(self.window, p.key, p.described) for p in found]
        return len(self.problems) > count


def short(value: Any) -> str:
    """``value`` for a message: a string quoted, anything else as JSON, cut to 80 characters."""
    text = json.dumps(value, default=str) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
