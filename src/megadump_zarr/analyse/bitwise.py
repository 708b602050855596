"""``compare(a, b, bitwise=True)``: a determinism check, any differing bit fails (no tolerance).

:func:`bitwise_row` gives the result row of one matched record pair of two dumps, under the rules of
:data:`megadump_zarr.analyse.verdict.BITWISE_RULES_TEXT`: metadata first (dtype names, logical shapes),
then the stored bytes when both sides stored a payload (read block by block, compared as unsigned words,
so NaNs with identical bits are equal and ``-0.0`` differs from ``0.0``; the note says "bytes"), else the
record digests of the statistics table (:mod:`megadump_zarr.layout.digest`; a side with a payload is
digested on the host from its stored bytes; the note says "digest"). Nothing else proves bits equal: a
pair without bytes or a digest on a side is an ``error`` row ("cannot be proven equal"), never a pass.

:func:`bitwise_map` folds a bitwise result over windows and steps: per stage and task (or core), how
many records are not reproducible and at which steps, the report of ``megadump compare --bitwise --by``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from megadump_zarr.analyse.matching import holds_payload, scalar
from megadump_zarr.analyse.metrics import DEFAULT_BLOCK_BYTES, iter_blocks, read_native_block, row_chunks, shape_of
from megadump_zarr.analyse.pairs import empty_row
from megadump_zarr.analyse.record_pairs import record_source
from megadump_zarr.analyse.verdict import (
    bitwise_digest_verdict,
    bitwise_md5_verdict,
    bitwise_metadata_verdict,
    bitwise_payload_verdict,
)
from megadump_zarr.layout.digest import DIGEST_ITEMSIZES, digest_of_array
from megadump_zarr.layout.statistics import DIGEST_COLUMN, MD5_COLUMN

__all__ = ["BITWISE_BY_KEYS", "bitwise_map", "bitwise_row"]

BITWISE_BY_KEYS: dict[str, tuple[str, ...]] = {
    "owner": ("owner_id",),
    "core": ("core_type", "core_id"),
    "task": ("task_id", "owner_id", "core_type", "core_id"),
}
"""The key columns of each ``by`` (beside ``kernel`` and ``stage``; windows and steps are folded)."""

_WORDS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def _value(row: Any, name: str) -> Any:
    return scalar(row.get(name)) if hasattr(row, "get") else None


def _shape(row: Any) -> tuple[int, ...] | None:
    value = row.get("shape") if hasattr(row, "get") else None
    if value is None or scalar(value) is None and not isinstance(value, (tuple, list, np.ndarray)):
        return None
    return tuple(int(d) for d in value)


def _words(block: np.ndarray) -> np.ndarray:
    """``block``'s elements as unsigned words of the same width (bit patterns), flattened in C order."""
    flat = np.ascontiguousarray(block).reshape(-1)
    word = _WORDS.get(flat.dtype.itemsize)
    if word is None:  # an unusual width: compare byte groups
        return flat.view(np.uint8).reshape(flat.size, flat.dtype.itemsize)
    return flat.view(word)


def _differing(a: Any, b: Any, shape: tuple[int, ...]) -> tuple[int, int | None, Any, Any]:
    """``(differing elements, first differing flat index, its a value, its b value)`` of two arrays."""
    count, first, value_a, value_b = 0, None, None, None
    offset = 0
    for index in iter_blocks(shape, DEFAULT_BLOCK_BYTES, row_chunks(a) or row_chunks(b)):
        block_a, block_b = read_native_block(a, index), read_native_block(b, index)
        if block_a.dtype.itemsize != block_b.dtype.itemsize:
            raise TypeError(f"stored dtypes differ in width ({block_a.dtype} vs {block_b.dtype})")
        wa, wb = _words(block_a), _words(block_b)
        diff = wa != wb
        if diff.ndim > 1:
            diff = diff.any(axis=1)
        n = int(np.count_nonzero(diff))
        if n and first is None:
            at = int(np.argmax(diff))
            first = offset + at
            value_a, value_b = block_a.reshape(-1)[at], block_b.reshape(-1)[at]
        count += n
        offset += int(block_a.size)
    return count, first, value_a, value_b


def _number(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def _host_digest(x: Any, dtype: str) -> int | None:
    """The record digest of a stored payload, computed on the host from its stored elements (the whole
    array); None when its stored elements are not of ``dtype``'s width (not the device's bytes)."""
    block = np.asarray(read_native_block(x, tuple(slice(None) for _ in shape_of(x))))
    if dtype not in DIGEST_ITEMSIZES or block.dtype.itemsize != DIGEST_ITEMSIZES[dtype]:
        return None
    return digest_of_array(block, dtype)


def payload_digest(dump: Any, row: Any) -> int | None:
    """The record digest of a record's stored payload, computed on the host; ``None`` when the record
    stored no payload, is truncated (the digest covers the whole tensor) or already carries one.

    Args:
        dump: The record's dump (or a source that opens it).
        row: Its records-table row.
    """
    if _value(row, DIGEST_COLUMN) is not None or not holds_payload(row) or _truncated(row):
        return None
    return _host_digest(record_source(_open(dump), str(_value(row, "path")), False), str(_value(row, "dtype")))


def _failure(row: dict[str, Any], exc: BaseException) -> dict[str, Any]:
    try:
        from megadump_zarr.read.errors import DumpIntegrityError
    except ImportError:  # pragma: no cover - the read layer is part of the package
        DumpIntegrityError = LookupError  # type: ignore[assignment,misc]  # noqa: N806
    if isinstance(exc, DumpIntegrityError):
        key = getattr(exc, "key", None)
        row.update(verdict="missing_data", note=f"bitwise: missing or corrupt data{f' at {key}' if key else ''}: {exc}")
    else:
        row.update(verdict="error", note=f"bitwise: {type(exc).__name__}: {exc}")
    return row


def _open(source: Any) -> Any:
    return source.open() if hasattr(source, "open") and not hasattr(source, "records") else source


def bitwise_row(keys: dict[str, Any], dump_a: Any, dump_b: Any, row_a: Any, row_b: Any) -> dict[str, Any]:
    """The ``--bitwise`` result row of one record present in both dumps; never raises.

    Args:
        keys: The key (and lineage) columns of the row.
        dump_a: Dump A (under test), open.
        dump_b: Dump B (reference), open.
        row_a: The record's ``records()`` row in A (dtype, shape, payload, digest, element_count, ...).
        row_b: Its row in B.
    """
    dtype_a, dtype_b = str(_value(row_a, "dtype")), str(_value(row_b, "dtype"))
    shape_a, shape_b = _shape(row_a), _shape(row_b)
    extra = {
        "dtype_a": dtype_a,
        "dtype_b": dtype_b,
        "shape_a": shape_a,
        "shape_b": shape_b,
        "nan_a": _value(row_a, "nan_count"),
        "inf_a": _value(row_a, "inf_count"),
        "nan_b": _value(row_b, "nan_count"),
        "inf_b": _value(row_b, "inf_count"),
    }
    row = empty_row(keys, "error", "", **extra)
    decided = bitwise_metadata_verdict(dtype_a, dtype_b, shape_a, shape_b)
    if decided is not None:
        row.update(verdict=decided[0], note=decided[1])
        return row
    elements = int(np.prod(shape_a)) if shape_a else 1
    row.update(elements=elements, rtol=0.0, atol=0.0)
    try:
        if holds_payload(row_a) and holds_payload(row_b):
            return _payload_row(row, dump_a, dump_b, row_a, row_b, shape_a, elements)
        return _digest_row(row, dump_a, dump_b, row_a, row_b)
    except Exception as exc:  # one unreadable record must not abort the comparison
        return _failure(row, exc)


def _truncated(row: Any) -> bool:
    return bool(_value(row, "truncated"))


def _payload_row(
    row: dict[str, Any], dump_a: Any, dump_b: Any, row_a: Any, row_b: Any, shape: tuple[int, ...], elements: int
) -> dict[str, Any]:
    """Both payloads stored: compare their bytes (a truncated side: by digest when both are known)."""
    path, path_b = str(_value(row_a, "path")), str(_value(row_b, "path"))  # pairs by step: B's path may differ
    if _truncated(row_a) or _truncated(row_b):
        if _value(row_a, DIGEST_COLUMN) is not None and _value(row_b, DIGEST_COLUMN) is not None:
            return _digest_row(row, dump_a, dump_b, row_a, row_b)
        xa, xb = dump_a.record_array(path), dump_b.record_array(path_b)
        count, first, va, vb = _differing(xa, xb, shape)
        if count:
            return _differing_row(row, count, first, va, vb, shape, elements, "in the captured part ")
        row.update(
            verdict="error",
            note="bitwise: truncated record, the captured bytes are equal but the rest was "
            "not captured: the bits cannot be proven equal",
        )
        return row
    xa = record_source(_open(dump_a), path, False)
    xb = record_source(_open(dump_b), path_b, False)
    count, first, va, vb = _differing(xa, xb, shape_of(xa))
    if count:
        return _differing_row(row, count, first, va, vb, shape, elements)
    verdict_, note = bitwise_payload_verdict(0, elements, None)
    row.update(verdict=verdict_, note=note, mismatches=0, allclose=True, max_abs=0.0, max_rel=0.0)
    return row


def _differing_row(
    row: dict[str, Any],
    count: int,
    first: int | None,
    va: Any,
    vb: Any,
    shape: tuple[int, ...],
    elements: int,
    where: str = "",
) -> dict[str, Any]:
    index = tuple(int(i) for i in np.unravel_index(first, shape)) if shape and first is not None else ()
    verdict_, note = bitwise_payload_verdict(count, elements, index)
    if where:
        note = note.replace("bytes differ ", f"bytes differ {where}", 1)
    a, b = _number(va), _number(vb)
    exact = _integer_gap(va, vb)
    row.update(
        verdict=verdict_,
        note=note,
        mismatches=count,
        first_mismatch=index,
        worst_index=index,
        worst_a=a,
        worst_b=b,
        allclose=False,
    )
    if exact is not None:
        row.update(max_abs=float(exact))
    elif a is not None and b is not None and np.isfinite(a) and np.isfinite(b):
        row.update(max_abs=abs(a - b))
    if row.get("level") == "L1" or row.get("task_id") is not None:
        row.update(
            worst_task_id=row.get("task_id"),
            worst_owner_id=row.get("owner_id"),
            worst_core_type=row.get("core_type"),
            worst_core_id=row.get("core_id"),
        )
    return row


def _integer_gap(va: Any, vb: Any) -> int | None:
    """``|a - b|`` of two integer (or bool) values in integer arithmetic; None for other values."""
    if isinstance(va, (int, np.integer, np.bool_)) and isinstance(vb, (int, np.integer, np.bool_)):
        return abs(int(va) - int(vb))
    return None


def _digest_row(row: dict[str, Any], dump_a: Any, dump_b: Any, row_a: Any, row_b: Any) -> dict[str, Any]:
    """A side stored statistics only: compare record digests (a payload side is digested here)."""
    only = [side for side, r in (("a", row_a), ("b", row_b)) if not holds_payload(r)]
    sides = f"statistics only in {' and '.join(only)}" if only else "truncated record"
    md5_a, md5_b = _value(row_a, MD5_COLUMN), _value(row_b, MD5_COLUMN)
    if isinstance(md5_a, str) and isinstance(md5_b, str):  # msprobe summary_mode "md5" on both sides
        verdict_, note = bitwise_md5_verdict(md5_a, md5_b, sides)
        row.update(verdict=verdict_, note=note, allclose=verdict_ == "pass")
        if verdict_ == "pass":
            row.update(mismatches=0, max_abs=0.0, max_rel=0.0)
        return row
    digests, counts = [], []
    for dump, r in ((dump_a, row_a), (dump_b, row_b)):
        digest = _value(r, DIGEST_COLUMN)
        if digest is None:
            digest = payload_digest(dump, r)
        count = _value(r, "element_count")
        digests.append(None if digest is None else int(digest))
        counts.append(int(count) if count is not None else row["elements"])
    verdict_, note = bitwise_digest_verdict(digests[0], digests[1], counts[0], counts[1], sides)
    row.update(verdict=verdict_, note=note, allclose=verdict_ == "pass" if verdict_ != "error" else None)
    if verdict_ == "pass":
        row.update(mismatches=0, max_abs=0.0, max_rel=0.0)
    return row


def _steps_text(steps: list[int]) -> str:
    """Sorted steps as ranges: ``0-3, 7, 9-10``."""
    parts: list[str] = []
    start = prev = None
    for step in steps:
        if prev is not None and step == prev + 1:
            prev = step
            continue
        if start is not None:
            parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = step
    if start is not None:
        parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ", ".join(parts)


def bitwise_map(result: pd.DataFrame, by: str = "task") -> pd.DataFrame:
    """Which tasks (cores, owners) are not reproducible: a ``compare(..., bitwise=True)`` result folded over
    ranks, windows, invocations and steps, per kernel, stage and ``by`` keys.

    Columns: ``kernel``, ``stage``, the :data:`BITWISE_BY_KEYS` of ``by``, ``records`` (compared),
    ``differing`` (records that do not pass: bytes, digest, shape or dtype differ, or not provable),
    ``steps_differing`` (how many distinct steps hold one), ``steps`` (those steps as ranges, ``0-3, 7``),
    ``first_step`` and ``worst_name`` (a differing tensor's name). Rows with a differing record come
    first (most differing first), then the reproducible ones, each in execution order.

    Args:
        result: A ``compare(a, b, bitwise=True)`` result.
        by: ``"task"``, ``"core"`` or ``"owner"``.

    Raises:
        ValueError: An unknown ``by`` (the message names it and the choices).
    """
    if by not in BITWISE_BY_KEYS:
        raise ValueError(f"by must be one of {sorted(BITWISE_BY_KEYS)}, got {by!r}")
    keys = ["kernel", "stage", *BITWISE_BY_KEYS[by]]
    columns = [*keys, "records", "differing", "steps_differing", "steps", "first_step", "worst_name"]
    if result.empty:
        return pd.DataFrame(columns=columns)
    frame = result.assign(_order=range(len(result)), _bad=result["verdict"] != "pass")
    rows = []
    for group_keys, part in frame.groupby(keys, dropna=False, sort=False):
        bad = part[part["_bad"]]
        steps = sorted({int(s) for s in bad["step"] if scalar(s) is not None})
        rows.append(
            {
                **{k: scalar(v) for k, v in zip(keys, group_keys)},
                "records": len(part),
                "differing": len(bad),
                "steps_differing": len(steps),
                "steps": _steps_text(steps),
                "first_step": steps[0] if steps else None,
                "worst_name": str(bad["name"].iloc[0]) if len(bad) else None,
                "_order": int(part["_order"].min()),
            }
        )
    table = pd.DataFrame(rows)
    table = table.sort_values(["differing", "_order"], ascending=[False, True], kind="stable")
    return table.drop(columns="_order").reset_index(drop=True)[columns]
