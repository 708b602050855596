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


def safe_name(name: str, *, hashed: bool = False) -> str:
    """A path component for ``name``: itself when already safe, else a sanitised form plus a hash.

    Safe means ASCII letters, digits, ``.``, ``_`` and ``-``, at most 96 characters, not ``.``/``..``
    not starting with ``__`` (reserved by Zarr) or ``.``, and not a Zarr metadata file name. Anything else keeps a readable prefix
    and gains ``~`` and 10 hex digits of the name's SHA-256, so two different names never map to one
    component unless their hashes collide (the store refuses a collision anyway).

    Args:
        name: The original (logical) name.
        hashed: Always add the hash (used when the plain form is taken by another name in a scope).
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a string, got {type(name).__name__}")
    cleaned = _UNSAFE.sub("_", name)
    reserved = name.lower() in _RESERVED
    plain = name and len(name) <= _MAX_LENGTH and not name.startswith((".", "__")) and "~" not in name and not reserved
    if cleaned == name and plain and not hashed:
        return name
    prefix = cleaned.lstrip("._")[: _MAX_LENGTH - 11] or "x"
    return f"{prefix}~{_digest(name)}"


class NameTable:
    """Components of the names within one scope, distinct even on case-insensitive file systems.

    A name whose component equals another's up to letter case ("Ab" and "ab") gets the hashed form; if
    even that is taken (a hash collision), adding it fails rather than overwrite anything.

    Args:
        scope: Where the names live, for messages.
    """

    def __init__(self, scope: str) -> None:
        self.scope = scope
        self._owners: dict[str, str] = {}
        self._components: dict[str, str] = {}

    def add(self, name: str, component: str | None = None) -> str:
        """Claim a component for ``name`` (idempotent for the same name).

        Args:
            name: The original name.
            component: A prepared component (defaults to ``safe_name(name)``).
        """
        if name in self._components:
            return self._components[name]
        candidates = [safe_name(name) if component is None else component]
        if component is None:
            candidates.append(safe_name(name, hashed=True))
        for candidate in candidates:
            owner = self._owners.get(candidate.casefold())
            if owner is None:
                self._owners[candidate.casefold()] = name
                self._components[name] = candidate
                return candidate
        raise ValueError(f"names {owner!r} and {name!r} both map to {candidates[-1]!r} in {self.scope}")
