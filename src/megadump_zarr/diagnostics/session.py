"""The process-local registry holding the one active diagnostic session."""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["activate_session", "active_session", "deactivate_session"]

_lock = threading.Lock()
_active: tuple[str, Any] | None = None


def activate_session(kind: str, session: Any) -> None:
    """Make ``session`` the active diagnostic session of this process.

    Args:
        kind: Short name of the session kind (for example ``"tensor_dump"``), used in messages.
        session: Object with ``prepare_call(context) -> DiagnosticCall``.

    Raises:
        RuntimeError: Another session is already active; the message names it.
    """
    global _active
    with _lock:
        if _active is not None:
            active_kind, active = _active
            raise RuntimeError(
                f"a diagnostic session is already active: {active_kind} ({type(active).__name__}); "
                f"exit it before entering {kind}"
            )
        _active = (kind, session)


def deactivate_session(session: Any) -> None:
    """Clear the active session if it is ``session`` (a no-op otherwise).

    Args:
        session: The session that is leaving.
    """
    global _active
    with _lock:
        if _active is not None and _active[1] is session:
            _active = None


def active_session() -> Any | None:
    """Return the active diagnostic session, or None."""
    active = _active
    return None if active is None else active[1]
