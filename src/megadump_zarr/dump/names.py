"""Store-safe names: deterministic, collision-free, reversible through attributes."""

from __future__ import annotations

import hashlib
import re

__all__ = ["NameTable", "safe_name"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_MAX_LENGTH = 96
_RESERVED = frozenset(("zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"))  # Zarr's own file names


def _digest(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:10]


def safe_name(name: str) -> str:
    """A path component for ``name``: itself when already safe, else a sanitised form plus a hash.

    Safe means ASCII letters, digits, ``.``, ``_`` and ``-``, at most 96 characters, not ``.``/``..``
    not starting with ``__`` (reserved by Zarr) or ``.``, and not a Zarr metadata file name. Anything else keeps a readable prefix
    and gains ``~`` and 10 hex digits of the name's SHA-256, so two different names never map to one
    component unless their hashes collide (the store refuses a collision anyway).

    Args:
        name: The original (logical) name.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a string, got {type(name).__name__}")
    cleaned = _UNSAFE.sub("_", name)
    reserved = name.lower() in _RESERVED
    if cleaned == name and name and len(name) <= _MAX_LENGTH and not name.startswith((".", "__")) and "~" not in name and not reserved:
        return name
    prefix = cleaned.lstrip("._")[: _MAX_LENGTH - 11] or "x"
    return f"{prefix}~{_digest(name)}"


class NameTable:
    """Sanitised names within one scope; a second different name mapping to a taken component fails.

    Args:
        scope: Where the names live, for messages.
    """

    def __init__(self, scope: str) -> None:
        self.scope = scope
        self._owners: dict[str, str] = {}

    def add(self, name: str, component: str | None = None) -> str:
        """Claim a component for ``name`` (idempotent for the same name).

        Args:
            name: The original name.
            component: A prepared component (defaults to ``safe_name(name)``).
        """
        component = safe_name(name) if component is None else component
        owner = self._owners.setdefault(component, name)
        if owner != name:
            raise ValueError(f"names {owner!r} and {name!r} both map to {component!r} in {self.scope}")
        return component
