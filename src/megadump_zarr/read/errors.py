"""Errors the read layer raises for damaged dumps."""

from __future__ import annotations

__all__ = ["DumpIntegrityError", "FormatVersionError"]


class DumpIntegrityError(ValueError):
    """A committed window's chunk is missing or corrupt.

    Raised while reading a chunk that a committed (complete) window should hold
    (each array's chunk count follows from its ``shape`` and ``chunk_shape``)
    but that the store does not have, or whose bytes fail to decode or fail
    their checksum. The message names the store key and, for a checksum
    failure, the checksum (e.g. ``crc32c``).

    Args:
        message: Human readable description naming the key.
        key: The store key of the chunk (relative to the dump root), if known.
    """

    exit_code = 1
    """The command line's exit status for it: a failed check (the dump is damaged), not bad input."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class FormatVersionError(ValueError):
    """A window of a format this version does not read (the message names the window, the version found and the
    one supported); the command line exits 2."""

    exit_code = 2
