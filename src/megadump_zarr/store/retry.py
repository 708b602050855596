"""Retries for object-store requests: the policy, the process default, the final error, error classification.

:class:`RetryPolicy` says how often and how long to back off; :func:`default_retry_policy` is what new
backends get when none is passed (:func:`set_default_retry_policy`, or ``with retry_policy(...)`` for a
block). :func:`status_kind` classifies an error message by the HTTP status it names, which is shared by
every client library (see :mod:`megadump_zarr.store.object_clients`); the retry loop itself lives in
:class:`~megadump_zarr.store.object_backend.ObjectStoreBackend`.
"""

from __future__ import annotations

from collections.abc import Iterator
import contextlib
from dataclasses import dataclass, replace
import random
import re
import threading
from typing import Any

__all__ = ["ObjectStoreError", "RetryPolicy", "default_retry_policy", "retry_policy", "set_default_retry_policy"]

_STATUS = re.compile(
    r"status code:? (\d{3})|\b(\d{3}) (?:Service Unavailable|Internal Server Error|Bad Gateway|"
    r"Gateway Timeout|Too Many Requests|Forbidden|Not Found|Precondition Failed|Not Implemented)"
)
TRANSIENT_CODES = (
    "SlowDown",
    "Throttl",
    "RequestTimeout",
    "RequestLimitExceeded",
    "InternalError",
    "ServiceUnavailable",
    "TooManyRequests",
    "Busy",
)


class ObjectStoreError(OSError):
    """A request to the object store failed for good (after retries, or at once for a permanent error).

    Attributes:
        operation: ``PUT``, ``GET``, ``HEAD``, ``LIST`` or ``DELETE``.
        location: URL of the object (or prefix).
        attempts: How many tries were made.
        transient: Whether the last error was of a retryable kind (the retries ran out).
    """

    def __init__(self, message: str, *, operation: str, location: str, attempts: int, transient: bool) -> None:
        super().__init__(message)
        self.operation = operation
        self.location = location
        self.attempts = attempts
        self.transient = transient


@dataclass(frozen=True)
class RetryPolicy:
    """How requests are retried.

    Args:
        attempts: Tries per request, the first included (>= 1).
        base_delay: Backoff before the second try, seconds (doubles per try, with jitter).
        max_delay: Upper bound of one backoff, seconds.
        timeout: Per-request timeout, seconds (connect timeout is ``min(timeout, 10)``).
    """

    attempts: int = 8
    base_delay: float = 0.1
    max_delay: float = 10.0
    timeout: float = 120.0

    def __post_init__(self) -> None:
        if not isinstance(self.attempts, int) or isinstance(self.attempts, bool) or self.attempts < 1:
            raise ValueError(f"attempts must be a positive integer, got {self.attempts!r}")
        for name in ("base_delay", "max_delay", "timeout"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value < 0 or (name == "timeout" and value == 0):
                raise ValueError(f"{name} must be a non-negative number (timeout positive), got {value!r}")

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed try number ``attempt`` (1-based): equal jitter.

        Args:
            attempt: The try that just failed.
            rng: Random source (default: the module's).
        """
        ceiling = min(self.max_delay, self.base_delay * 2.0 ** (attempt - 1))
        return (rng or random).uniform(ceiling / 2, ceiling)


_default_policy = RetryPolicy()
_policy_lock = threading.Lock()


def default_retry_policy() -> RetryPolicy:
    """The policy new backends get when none is passed (see :func:`set_default_retry_policy`)."""
    return _default_policy


def set_default_retry_policy(policy: RetryPolicy) -> RetryPolicy:
    """Set the policy of backends created from now on (for example by ``tensor_dump``); returns the old one.

    Args:
        policy: The new default.
    """
    global _default_policy
    if not isinstance(policy, RetryPolicy):
        raise TypeError(f"policy must be a RetryPolicy, got {type(policy).__name__}")
    with _policy_lock:
        old, _default_policy = _default_policy, policy
    return old


@contextlib.contextmanager
def retry_policy(policy: RetryPolicy | None = None, **changes: Any) -> Iterator[RetryPolicy]:
    """Temporarily change the default retry policy (``retry_policy(attempts=3, base_delay=0.001)``).

    Args:
        policy: The policy to use (default: the current default).
        changes: Fields to change in it.
    """
    new = replace(policy or default_retry_policy(), **changes)
    old = set_default_retry_policy(new)
    try:
        yield new
    finally:
        set_default_retry_policy(old)


# ------------------------------------------------------------------------------------------- classification
class FailureKind:
    TRANSIENT = "transient"
    PERMANENT = "permanent"
    NOT_FOUND = "not found"
    EXISTS = "exists"
    UNSUPPORTED = "unsupported"


def status_kind(text: str) -> str | None:
    """Classify by an HTTP status code found in an error message (None: no status in it)."""
    match = _STATUS.search(text)
    if match is None:
        return None
    status = int(match.group(1) or match.group(2))
    if status >= 500:
        return FailureKind.UNSUPPORTED if status == 501 else FailureKind.TRANSIENT
    if status in (408, 429) or any(code in text for code in TRANSIENT_CODES):
        return FailureKind.TRANSIENT
    if status == 404:
        return FailureKind.NOT_FOUND
    if status == 412:
        return FailureKind.EXISTS
    return FailureKind.PERMANENT
