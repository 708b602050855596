"""What every writer refuses before it writes: indices the reader cannot represent, and window paths
that a planted link would lead out of the dump root.

Windows are stored as ``rank_{r}/window_{wwww}``; a reader parses both numbers back into int64
columns. Ranks and window indices are kept below ``INDEX_LIMIT`` (10**6: six digits, far inside
int64, and the most windows one rank can sensibly hold); invocation ids, steps and task ids below
2**63 (int64). Anything else — a bool, a float such as 1.5, a string, a negative number — is refused
with a message naming the field and the value.
"""

from __future__ import annotations

import numbers
import os
from pathlib import Path
from typing import Any

__all__ = ["INDEX_LIMIT", "INT64_LIMIT", "check_inside_root", "check_index"]

INDEX_LIMIT = 10**6
"""Ranks and window indices are below this."""
INT64_LIMIT = 1 << 63
"""Invocation ids, steps and task ids are below this."""


def check_index(value: Any, what: str, *, limit: int = INDEX_LIMIT) -> int:
    """``value`` as an int in ``[0, limit)``, else a ValueError naming ``what``.

    Args:
        value: The candidate (an int or numpy integer; never a bool or a float, even 1.0).
        what: Field name for the message (``"window index"``, ``"plan field 'rank'"``, ...).
        limit: Exclusive upper bound.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{what} must be an integer, got {value!r}")
    number = int(value)
    if not 0 <= number < limit:
        raise ValueError(f"{what} must be in [0, {limit}) so that readers can represent it, got {number}")
    return number


def check_inside_root(root: str | os.PathLike[str], relative: str) -> None:
    """Refuse a window (or rank) path that resolves outside the local dump root.

    A planted symlink (``rank_0 -> /elsewhere``) would otherwise make the writer write through it.

    Args:
        root: The local dump root.
        relative: Slash-separated path below it (``rank_0/window_0000``).

    Raises:
        ValueError: Naming the path, the link and where it leads; nothing has been written.
    """
    base = os.path.realpath(os.fspath(root))
    node = base
    for part in relative.split("/"):
        node = os.path.join(node, part)
        if os.path.islink(node):
            target = os.path.realpath(node)
            if target != base and not target.startswith(base + os.sep):
                raise ValueError(
                    f"refusing to write {Path(root) / relative}: {Path(root) / os.path.relpath(node, base)} is a "
                    f"link to {target}, outside the dump root {base}"
                )
    resolved = os.path.realpath(os.path.join(base, *relative.split("/")))
    if resolved != base and not resolved.startswith(base + os.sep):
        raise ValueError(
            f"refusing to write {Path(root) / relative}: it resolves to {resolved}, outside the dump root {base}"
        )
