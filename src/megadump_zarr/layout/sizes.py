"""The size words the commands print, defined once (``megadump info``, ``demo``, ``upload``, the report).

- *logical* bytes: the tensors' bytes as declared (a record's ``bytes``; a truncated record counts whole).
- *on disk*: the bytes the store holds below a root or window, chunks and metadata documents together
  (measured on local roots; unknown on object stores, where nothing lists sizes for free).
- *compression* = logical bytes / bytes on disk (:func:`compression`): above 1 the dump is smaller than its
  tensors, below 1 it holds more than them (metadata documents and checksums outweigh small tensors).
  The one ratio of sizes the commands print; where the bytes on disk are unknown it is not given (``—``).
- *rate*: bytes moved per second of wall time (:func:`transfer_rate`), in the unit that shows it with
  digits (``0 MiB/s`` is never printed).
"""

from __future__ import annotations

__all__ = ["COMPRESSION", "compression", "compression_text", "human_bytes", "transfer_rate"]

COMPRESSION = "compression = logical bytes / bytes on disk (chunks and metadata documents)"
"""The definition, as the commands' help texts give it."""


def human_bytes(n: float | None) -> str:
    """``1536`` → ``1.5 KiB`` (``—`` for unknown).

    Args:
        n: A byte count, or None.
    """
    if n is None:
        return "—"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def compression(logical_bytes: float, on_disk_bytes: float | None) -> float | None:
    """Logical bytes / bytes on disk; None where the bytes on disk are unknown or zero.

    Args:
        logical_bytes: The tensors' declared bytes.
        on_disk_bytes: The bytes the store holds for them (None: unknown).
    """
    if not on_disk_bytes or on_disk_bytes < 0:
        return None
    return float(logical_bytes) / float(on_disk_bytes)


def compression_text(value: float | None) -> str:
    """``compression 3.21×`` or ``compression —`` (unknown).

    Args:
        value: From :func:`compression`.
    """
    return "compression —" if value is None else f"compression {value:.2f}×"


def transfer_rate(n_bytes: float, seconds: float) -> str | None:
    """``12.3 MiB/s``, ``456 KiB/s`` or ``80 B/s``: three significant digits in the largest unit that keeps
    the number at least 1; None where nothing was moved or no time was measured.

    Args:
        n_bytes: Bytes moved.
        seconds: Wall time.
    """
    if n_bytes <= 0 or seconds <= 0:
        return None
    rate = n_bytes / seconds
    for unit in ("B", "KiB", "MiB", "GiB"):
        if rate < 1024 or unit == "GiB":
            return f"{rate:.3g} {unit}/s"
        rate /= 1024
    return None
