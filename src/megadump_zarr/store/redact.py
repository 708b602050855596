"""Keeping credentials out of messages: :func:`redact_options` for options shown to people, :class:`Scrubber`
for error texts (it removes the secret values themselves, and signature query parameters of presigned URLs).
"""

from __future__ import annotations

from collections.abc import Mapping
import re
from typing import Any

__all__ = ["Scrubber", "redact_options"]

_SECRET_KEY = re.compile(
    r"secret|token|password|passwd|credential|signature|sas|(^|_)key$|account_key|private", re.IGNORECASE
)


def _secret_values(options: Any, key: str = "") -> list[str]:
    if isinstance(options, Mapping):
        found: list[str] = []
        for k, v in options.items():
            found.extend(_secret_values(v, str(k)))
        return found
    if isinstance(options, (list, tuple)):
        return [s for item in options for s in _secret_values(item, key)]
    if key and _SECRET_KEY.search(key) and isinstance(options, str) and options:
        return [options]
    return []


def redact_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """A copy of ``storage_options`` with every credential value replaced by ``"***"`` (for messages).

    Args:
        options: fsspec-style storage options.
    """

    def walk(value: Any, key: str = "") -> Any:
        if isinstance(value, Mapping):
            return {k: walk(v, str(k)) for k, v in value.items()}
        if key and _SECRET_KEY.search(key) and value not in (None, "", False, True):
            return "***"
        return value

    return walk(dict(options or {}))


class Scrubber:
    """Removes secret values (and signature query parameters) from text."""

    _SIGNED = re.compile(r"(X-Amz-(?:Signature|Credential|Security-Token)=)[^&\s\"']+", re.IGNORECASE)

    def __init__(self, options: Mapping[str, Any] | None) -> None:
        self._secrets = sorted({s for s in _secret_values(dict(options or {})) if len(s) >= 3}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return self._SIGNED.sub(r"\1***", text)
