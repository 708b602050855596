"""The path grammar of a dump: ``rank_{r}/window_{wwww}/invocation_{iiiiii}_{direction}/.../task_{tttttt}``.

The regexes that parse the components and the builders that write them, in one place. A parser's groups are the numbers (and the direction) as text.
Every pattern is anchored with ``\\Z`` and takes ASCII digits only (``[0-9]``): ``$`` would let a trailing
newline through (a directory ``window_0001\\n`` read as window 1) and ``\\d`` other scripts' digits.
"""

from __future__ import annotations

import operator
import re

__all__ = [
    "INVOCATION_DIR",
    "PACK_DIR",
    "RANK_DIR",
    "SESSION_MARKER",
    "TASK_DIR",
    "WINDOW_DIR",
    "WINDOW_KEY",
    "WINDOW_PATH",
    "invocation_name",
    "rank_dir",
    "task_dir",
    "window_dir",
    "window_path",
]

RANK_DIR = re.compile(r"^rank_([0-9]+)\Z")
"""A rank group's name; group 1 is the rank."""
WINDOW_DIR = re.compile(r"^window_([0-9]+)\Z")
"""A window group's name below its rank; group 1 is the window index."""
WINDOW_PATH = re.compile(r"^rank_([0-9]+)/window_([0-9]+)\Z")
"""A window's path below the dump root; groups: rank, window index."""
WINDOW_KEY = re.compile(r"^(rank_[0-9]+/window_[0-9]+)/(.+)\Z")
"""A key below a window (a record path, a chunk key); groups: the window's path, the rest of the key."""
INVOCATION_DIR = re.compile(r"^invocation_([0-9]+)_(.+)\Z")
"""An invocation group's name; groups: invocation id, direction."""
TASK_DIR = re.compile(r"^task_([0-9]+)(?:_worker_([0-9]+))?\Z")
"""An L1 task group's name; groups: task id, worker (core) id or ``None``."""
PACK_DIR = re.compile(r"^pack_([0-9]+)\Z")
"""A task-record pack's name (the packs layout); group 1 is the pack number."""
SESSION_MARKER = re.compile(r"^\.session-[A-Za-z0-9._-]+\.json\Z")
"""A writing session's marker at the dump root (hidden; a small JSON ``{"host", "pid", "startedAt"}``);
while one is there the root carries no consolidated index."""


def _index(value: int, what: str) -> int:
    """``value`` as an int >= 0 (an int or numpy integer, never a bool or a float), else a ValueError."""
    try:
        number = operator.index(value) if not isinstance(value, bool) else None
    except TypeError:
        number = None
    if number is None:
        raise ValueError(f"{what} must be an integer, got {value!r}")
    if number < 0:
        raise ValueError(f"{what} must be >= 0, got {number}")
    return number


def rank_dir(rank: int) -> str:
    """``rank_{rank}``.

    Args:
        rank: The job-global rank (an integer >= 0).
    """
    return f"rank_{_index(rank, 'rank')}"


def window_dir(window_index: int) -> str:
    """``window_{wwww}`` (four digits at least).

    Args:
        window_index: The window's index (an integer >= 0).
    """
    return f"window_{_index(window_index, 'window index'):04d}"


def window_path(rank: int, window_index: int) -> str:
    """``rank_{rank}/window_{wwww}``: a window's path below the dump root.

    Args:
        rank: The job-global rank.
        window_index: The window's index.
    """
    return f"{rank_dir(rank)}/{window_dir(window_index)}"


def invocation_name(invocation_id: int, direction: str) -> str:
    """``invocation_{iiiiii}_{direction}`` (six digits at least).

    Args:
        invocation_id: The invocation's id (an integer >= 0).
        direction: ``forward`` or ``backward`` (any non-empty text without ``/``).
    """
    if not isinstance(direction, str) or not direction or "/" in direction:
        raise ValueError(f"direction must be non-empty text without '/', got {direction!r}")
    return f"invocation_{_index(invocation_id, 'invocation id'):06d}_{direction}"


def task_dir(task_id: int, worker: int | None = None) -> str:
    """``task_{tttttt}``, or ``task_{tttttt}_worker_{www}`` when a task's records are split by worker.

    Args:
        task_id: The task's id (an integer >= 0).
        worker: The worker (core) id, or ``None``.
    """
    name = f"task_{_index(task_id, 'task id'):06d}"
    return name if worker is None else f"{name}_worker_{_index(worker, 'worker'):03d}"
