"""A pair with a truncated side (``max_bytes_per_tensor``) compared on the elements both sides stored.

:func:`stored_prefixes` gives both records as flat views of the same length (the first elements in C order)
with a note saying how much is compared (:func:`partial_note`); :func:`as_partial` puts the compared row back in
the logical shape, and a pass there is ``pass_partial``, never ``pass``: what was not stored was not compared.
"""

from __future__ import annotations

from dataclasses import dataclass
import math
from typing import Any

import numpy as np

from megadump_zarr.analyse.verdict import PARTIAL

__all__ = ["Prefixes", "as_partial", "partial_note", "stored_prefixes"]


@dataclass(frozen=True)
class Prefixes:
    """Both sides of a truncated pair as the elements both stored.

    Args:
        a: A's stored elements, flat (the first ``elements`` in C order).
        b: B's, as many.
        note: How much is compared (:func:`partial_note`).
        shape_a: A's logical shape (``actualShape``).
        shape_b: B's logical shape (the pair is a ``shape_mismatch`` when it differs from A's).
        dtype_a: A's stored dtype.
        dtype_b: B's stored dtype.
    """

    a: Any
    b: Any
    note: str
    shape_a: tuple[int, ...]
    shape_b: tuple[int, ...]
    dtype_a: str
    dtype_b: str


def _stored_view(dump: Any, path: str) -> tuple[Any, tuple[int, ...], int, str]:
    """A record's stored array (read through the dump's integrity checks), its logical shape, how many of its
    elements are stored and its stored dtype."""
    from megadump_zarr.read.lazy import RecordArray

    info, rel, doc = dump._record(path)
    attrs = doc.get("attributes") or {}
    array = RecordArray(dump._array(info, rel, doc), f"{info.key}/{rel}", getattr(dump, "root", ""))
    stored = tuple(int(d) for d in array.shape)
    actual = attrs.get("actualShape")
    logical = tuple(int(d) for d in actual) if attrs.get("truncated") and isinstance(actual, list) else stored
    return array, logical, math.prod(stored), str(array.dtype)


def stored_prefixes(dump_a: Any, dump_b: Any, path_a: str, path_b: str | None = None) -> Prefixes | None:
    """Record ``path_a`` of A and ``path_b`` of B (default: ``path_a``) as the elements both stored, or None for
    dumps that are not read from a store (without ``_record``/``_array``: their NaN-padded views are compared).

    Args:
        dump_a: The dump under test (an open ``Dump``).
        dump_b: The reference dump.
        path_a: A's record path.
        path_b: B's record path.
    """
    from megadump_zarr.read.lazy import FlatPrefix

    if not all(hasattr(d, "_record") and hasattr(d, "_array") for d in (dump_a, dump_b)):
        return None
    array_a, shape_a, stored_a, dtype_a = _stored_view(dump_a, path_a)
    array_b, shape_b, stored_b, dtype_b = _stored_view(dump_b, path_b or path_a)
    if shape_a != shape_b:
        return Prefixes(None, None, "", shape_a, shape_b, dtype_a, dtype_b)
    elements = min(stored_a, stored_b, math.prod(shape_a))
    a, b = FlatPrefix(array_a, elements), FlatPrefix(array_b, elements)
    return Prefixes(a, b, partial_note(shape_a, elements), shape_a, shape_b, dtype_a, dtype_b)


def partial_note(shape: tuple[int, ...], elements: int) -> str:
    """How much of a truncated pair is compared: ``compared 32 of 2048 rows (16384 of 1048576 elements); ...``.

    Args:
        shape: The logical shape.
        elements: The elements compared (the first, in C order).
    """
    total = math.prod(shape)
    if elements >= total:
        return "truncated record whose stored prefix holds every element: compared whole"
    per_row = math.prod(shape[1:])
    rows = elements // per_row if per_row else shape[0]
    return (
        f"compared {rows} of {shape[0]} rows ({elements} of {total} elements); "
        "the rest was not stored (max_bytes_per_tensor)"
    )


def as_partial(row: dict[str, Any], logical: tuple[int, ...]) -> None:
    """A row compared on flat prefixes, put back in the logical shape: its shapes, its worst and first mismatch
    index (flat positions made logical indices), and a pass on part of the elements made ``pass_partial``.

    Args:
        row: The compared row (updated in place).
        logical: The logical shape of both sides.
    """
    if row.get("verdict") in ("shape_mismatch", "dtype_mismatch"):
        return
    row.update(shape_a=logical, shape_b=logical)
    for column in ("worst_index", "first_mismatch"):
        value = row.get(column)
        if value is not None and logical:
            flat = value[0] if isinstance(value, tuple | list) else value
            row[column] = tuple(int(i) for i in np.unravel_index(int(flat), logical))
    if row.get("verdict") == "pass" and (row.get("elements") or 0) < math.prod(logical):
        row["verdict"] = PARTIAL
