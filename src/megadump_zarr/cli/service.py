"""Object-store (S3) errors in one line: the service's XML error body condensed to code, message, bucket, key."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["INPUT_CODES", "condense", "missing_bucket", "service_code"]

INPUT_CODES = frozenset(
    {
        "NoSuchBucket",
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "InvalidBucketName",
        "AllAccessDisabled",
    }
)
"""S3 error codes that mean the URL or the credentials are wrong (bad input, exit 2), not a failed check."""

_XML = re.compile(r"<\?xml.*?</Error>|<Error>.*?</Error>", re.S)


def _tag(body: str, name: str) -> str | None:
    match = re.search(rf"<{name}>(.*?)</{name}>", body, re.S)
    return " ".join(match[1].split()) if match else None


def service_code(text: str) -> str | None:
    """The ``<Code>`` of an S3 XML error body inside ``text`` (None when there is none)."""
    match = _XML.search(text)
    return _tag(match[0], "Code") if match else None


def condense(text: str) -> str:
    """``text`` on one line, an S3 XML error body in it replaced by ``Code: Message (bucket B, key K)``.

    Args:
        text: An exception message, possibly holding the raw XML the service answered.
    """
    match = _XML.search(text)
    if not match:
        return " ".join(text.split())
    body = match[0]
    segments = " ".join(text[: match.start()].split()).split(": ")
    while len(segments) > 1 and re.fullmatch(r"\w*(Error|Exception)", segments[0]):
        segments.pop(0)  # a leading exception class name says nothing the code does not
    head = segments[0].rstrip(" :")
    code, message = _tag(body, "Code") or "error", _tag(body, "Message") or ""
    named = [
        f"{what} {value}" for what, tag in (("bucket", "BucketName"), ("key", "Key")) if (value := _tag(body, tag))
    ]
    where = f" ({', '.join(named)})" if named else ""
    return f"{head + ': ' if head else ''}{code}: {message}{where}".rstrip(": ")


def missing_bucket(url: str, options: dict[str, Any] | None) -> str | None:
    """The bucket of an ``s3://`` URL when the store says it does not exist (None otherwise or when unsure).

    Args:
        url: The dump root URL.
        options: The ``-S`` storage options.
    """
    if not isinstance(url, str) or not url.lower().startswith(("s3://", "s3a://")):
        return None
    bucket = url.split("://", 1)[1].split("/", 1)[0]
    if not bucket:
        return None
    try:
        import fsspec

        fs = fsspec.filesystem("s3", **(options or {}))
        fs.info(bucket)
    except FileNotFoundError:
        return bucket
    except Exception:  # noqa: BLE001 - unsure (no access, no network): say nothing more than the caller did
        return None
    return None
