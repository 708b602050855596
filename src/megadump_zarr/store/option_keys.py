"""Which ``storage_options`` keys an object-store URL takes, so a misspelt key is named before any I/O.

s3fs passes keys it does not name on to the botocore session, which fails on them with a bare
``TypeError``; :func:`check_storage_options` names the key, the file system and the closest known key
instead. Keys are checked for the schemes whose file system refuses unknown keys (``s3://``, ``s3a://``);
other file systems pass unknown keys on as request options, so they are left to them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
import difflib
import inspect
from typing import Any

__all__ = ["accepted_storage_options", "check_storage_options"]

_STRICT_SCHEMES = frozenset({"s3", "s3a"})
_FSSPEC_KEYS = frozenset({"skip_instance_cache", "use_listings_cache", "listings_expiry_time", "max_paths"})
"""Keys every fsspec file system takes (its instance cache and directory listing cache)."""
_OBJECT_STORE_KEYS = frozenset(
    {"aws_access_key_id", "aws_secret_access_key", "aws_session_token", "region", "region_name", "profile"}
)
"""Keys the object-store client takes beside s3fs's (``store.object_clients.s3_config``)."""


def _named(function: Callable[..., Any]) -> set[str]:
    """The keyword parameters a function names (not ``self``, ``*args`` or ``**kwargs``)."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {n for n, p in inspect.signature(function).parameters.items() if p.kind in kinds and n != "self"}


def accepted_storage_options(url: str) -> tuple[str, frozenset[str]] | None:
    """The file system that takes ``url``'s options and the keys it accepts; None where keys are not checked.

    Args:
        url: A dump root (path or URL).
    """
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme not in _STRICT_SCHEMES:
        return None
    try:
        from aiobotocore.session import AioSession
        from fsspec.asyn import AsyncFileSystem
        import s3fs
    except ImportError:  # s3fs missing: opening the URL says so
        return None
    names = _named(s3fs.S3FileSystem.__init__) | _named(AsyncFileSystem.__init__) | _named(AioSession.__init__)
    return "s3fs.S3FileSystem", frozenset(names | _FSSPEC_KEYS | _OBJECT_STORE_KEYS)


def check_storage_options(url: str, options: Mapping[str, Any] | None) -> None:
    """Refuse a ``storage_options`` key the file system of ``url`` does not take.

    Args:
        url: A dump root (path or URL).
        options: The storage options (keys only are looked at: values may be secrets).

    Raises:
        ValueError: An unknown key, named with the closest known key ("did you mean ...").
    """
    if not options:
        return
    known = accepted_storage_options(url)
    if known is None:
        return
    system, keys = known
    for key in options:
        if key in keys:
            continue
        close = difflib.get_close_matches(key, sorted(keys), n=1, cutoff=0.75)
        hint = f"did you mean {close[0]}?" if close else "options it takes: " + ", ".join(sorted(keys))
        raise ValueError(f"storage option {key!r} is not an option of {system} ({url}); {hint}")
