"""Checks of the documents a reader trusts: every field is the type it must be, every size fits int64.

The catalogue (records table, data groups) reads window, invocation, task and array documents written by
a dumper, or by anyone: a damaged or crafted document must end as one ``ValueError`` naming the document
and the field (``rank_0/window_0000/invocation_000000_forward/x/zarr.json: shape [1.5, 16] is not a list
of non-negative integers``), never as a ``TypeError`` deep inside pandas or an allocation of 2**62 bytes.

Only cheap checks live here (they run for every record of ``records()``); the full Zarr v3 parse of an
array document happens when the array is opened (:func:`open_array_checked`).
"""

from __future__ import annotations

from collections.abc import Mapping
import copy
import json
import math
from typing import Any

from megadump_zarr.layout.dtypes import itemsize
from megadump_zarr.layout.limits import INT64_LIMIT

__all__ = [
    "INT64_MAX",
    "MAX_NDIM",
    "check_array_doc",
    "check_attributes",
    "count_field",
    "int_field",
    "itemsize",
    "open_array_checked",
    "optional_str",
    "shape_field",
]

INT64_MAX = INT64_LIMIT - 1
MAX_NDIM = 32
"""Most dimensions an array may have (numpy's own limit is 64; no dumped tensor has more than a few)."""


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_attributes(doc: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A node's ``attributes`` (``{}`` when absent); refuse anything but a JSON object.

    Args:
        doc: The node document.
        where: The document's key, for messages.
    """
    attrs = doc.get("attributes")
    if attrs is None:
        return {}
    if not isinstance(attrs, dict):
        raise ValueError(f"{where}: attributes {_show(attrs)} is not a JSON object")
    return attrs


def int_field(value: Any, where: str, field: str, *, optional: bool = True, minimum: int | None = None) -> int | None:
    """An integer field (never a bool, a float, a string or a container), within int64.

    Args:
        value: The field's value.
        where: The document's key.
        field: The field's name (``attributes.invocationId``).
        optional: ``None`` is allowed.
        minimum: Smallest allowed value.
    """
    if value is None and optional:
        return None
    if type(value) is not int or not -INT64_MAX - 1 <= value <= INT64_MAX or (minimum is not None and value < minimum):
        bound = f" >= {minimum}" if minimum is not None else ""
        raise ValueError(f"{where}: {field} {_show(value)} is not an integer{bound} within int64")
    return value


def count_field(value: Any, where: str, field: str) -> int | None:
    """A non-negative int64 count (``None`` allowed)."""
    return int_field(value, where, field, minimum=0)


def optional_str(value: Any, where: str, field: str) -> str | None:
    """A string field (``None`` allowed)."""
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"{where}: {field} {_show(value)} is not a string")


def shape_field(value: Any, where: str, field: str, itemsize: int = 1) -> tuple[int, ...]:
    """A shape: a list of non-negative integers whose byte size (× ``itemsize``) fits int64.

    Args:
        value: The field's value.
        where: The document's key.
        field: ``shape``, ``attributes.actualShape``, ...
        itemsize: Bytes per element (the product times it must fit int64).
    """
    if type(value) is list and len(value) <= MAX_NDIM:  # fast path: one pass, no generator
        size = itemsize if itemsize > 1 else 1
        for d in value:
            if type(d) is not int or d < 0:
                break
            size *= d
        else:
            if size <= INT64_MAX:
                return tuple(value)
    if (
        not isinstance(value, (list, tuple))
        or len(value) > MAX_NDIM
        or not all(type(d) is int and 0 <= d <= INT64_MAX for d in value)
    ):
        raise ValueError(f"{where}: {field} {_show(value)} is not a list of at most {MAX_NDIM} non-negative integers")
    size = math.prod(value) * max(1, itemsize)
    if size > INT64_MAX:
        raise ValueError(f"{where}: {field} {_show(list(value))} describes {size} bytes, more than int64 can count")
    return tuple(value)


def check_array_doc(doc: Mapping[str, Any], where: str) -> tuple[int, ...]:
    """The cheap checks of an array document: ``shape``, the chunk grid, ``dimension_names``; its shape.

    Args:
        doc: The array's ``zarr.json`` document.
        where: Its key.
    """
    shape = shape_field(doc.get("shape"), where, "shape")
    grid = doc.get("chunk_grid")
    if grid is not None:
        config = grid.get("configuration") if isinstance(grid, dict) else None
        chunks = config.get("chunk_shape") if isinstance(config, dict) else None
        if (
            not isinstance(chunks, list)
            or len(chunks) != len(shape)
            or not all(type(c) is int and 0 < c <= INT64_MAX for c in chunks)
        ):
            raise ValueError(f"{where}: chunk_grid {_show(grid)} has no chunk_shape of {len(shape)} positive integers")
        count = math.prod(-(-s // c) for s, c in zip(shape, chunks))
        if count > INT64_MAX:
            raise ValueError(f"{where}: chunk_grid {_show(grid)} gives more chunks than int64 can count")
    names = doc.get("dimension_names")
    if names is not None and (
        not isinstance(names, list)
        or len(names) != len(shape)
        or not all(n is None or isinstance(n, str) for n in names)
    ):
        raise ValueError(f"{where}: dimension_names {_show(names)} is not a list of {len(shape)} names")
    codecs = doc.get("codecs")
    if codecs is not None and not (isinstance(codecs, list) and all(isinstance(c, (dict, str)) for c in codecs)):
        raise ValueError(f"{where}: codecs {_show(codecs)} is not a list of codec documents")
    return shape


_PARSED: dict[str, Any] = {}
"""zarr's parsed metadata by array document less its ``attributes`` (:func:`_structure`): the records of a window
share a few layouts, and zarr's parse of a document (about 76 us) costs more than reading a small record."""
_PARSED_MAX = 1024


def _structure(doc: Mapping[str, Any]) -> str | None:
    """A document's fields other than ``attributes``, as canonical JSON (``None``: not a plain document)."""
    if not isinstance(doc.get("attributes", {}), dict):
        return None
    try:
        return json.dumps({k: v for k, v in doc.items() if k != "attributes"}, sort_keys=True, allow_nan=True)
    except (TypeError, ValueError):
        return None


def open_array_checked(store: Any, key: str, doc: Mapping[str, Any]) -> Any:
    """``zarr.Array.from_dict`` of a document, any parse failure turned into one ``ValueError`` naming the key.

    A document whose fields other than ``attributes`` equal those of one zarr parsed before takes that parse,
    with its own attributes (zarr's metadata is immutable); the document's own checks run every time.

    Args:
        store: The dump store.
        key: The array's key relative to the root.
        doc: Its ``zarr.json`` document.
    """
    import zarr
    from zarr.core.array import AsyncArray

    from megadump_zarr.read.location import store_path

    if not isinstance(doc, dict):
        raise ValueError(f"{key}/zarr.json is not a JSON object")
    check_array_doc(doc, f"{key}/zarr.json")
    structure = _structure(doc)
    parsed = _PARSED.get(structure) if structure is not None else None
    if parsed is not None:
        metadata = copy.copy(parsed)
        object.__setattr__(metadata, "attributes", doc.get("attributes") or {})  # as zarr's own parse sets it
        return zarr.Array(AsyncArray(metadata=metadata, store_path=store_path(store, key)))
    try:
        array = zarr.Array.from_dict(store_path(store, key), dict(doc))
    except Exception as error:  # zarr raises ValueError, TypeError, KeyError, ... for a malformed document
        text = " ".join(str(error).split())[:300] or type(error).__name__
        raise ValueError(f"{key}/zarr.json is not a valid Zarr v3 array document: {text}") from None
    if structure is not None and len(_PARSED) < _PARSED_MAX:
        _PARSED[structure] = array.metadata
    return array
