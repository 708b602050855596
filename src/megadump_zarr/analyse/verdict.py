"""Pass/fail rules of one tensor comparison: exact for integers, tolerances by dtype for floats.

The rules, by the kind of the two dtypes (``a`` = the tensor under test, ``b`` = the reference):

* **integer, bool and index tensors** compare **exactly**: one differing element fails. The row
  reports ``mismatches`` (how many elements differ) and ``first_mismatch`` (the logical index of the
  first, in C order).
* **floating tensors** (float64, float32, float16, bfloat16, float8_e4m3fn, float8_e5m2) fail when
  any finite pair is not close, ``|a - b| > atol + rtol * |b|`` (``mismatches`` counts those pairs,
  ``first_mismatch`` is the first), when the NaN/Inf patterns differ (a NaN or Inf at a position
  where the other side holds something else; the same NaN/Inf on both sides, e.g. ``-inf`` masks,
  is agreement), or, msprobe's scale-free rules, when ``cosine < 0.9`` or ``cosine < 0.99`` with
  ``max_abs > 0.001``. Strict inequalities: a value exactly at a threshold passes. The default
  ``(rtol, atol)`` per dtype is :data:`TOLERANCES` (:func:`tolerance_for`); when the two sides'
  dtypes differ (a bfloat16 run against a float32 golden, the normal case) the looser dtype's
  tolerances apply and the note names both dtypes. A user's ``rtol``/``atol`` replaces the
  default (the one not given keeps its default); it never loosens integer comparisons.
* **kinds differ** (integer vs float, bool vs integer): verdict ``dtype_mismatch``, not compared.
* **shapes differ**: verdict ``shape_mismatch``, not compared.

Other verdicts: ``missing`` (the record is in one dump only), ``missing_data`` (a chunk of a
committed window is missing or corrupt, :class:`megadump_zarr.read.errors.DumpIntegrityError`; the
note names the store key) and ``error`` (anything else that prevented the comparison; see ``note``).
"""

from __future__ import annotations

import math
from typing import Any

from megadump_zarr.analyse.metrics import TensorMetrics

__all__ = [
    "COSINE_FLOOR",
    "BITWISE_RULES_TEXT",
    "COSINE_MIN",
    "FAILING",
    "WITHIN_STATS",
    "MAX_ABS_SMALL",
    "PARTIAL",
    "RULES_TEXT",
    "TOLERANCES",
    "VERDICTS",
    "bitwise_digest_verdict",
    "bitwise_md5_verdict",
    "bitwise_metadata_verdict",
    "bitwise_payload_verdict",
    "check_tolerance",
    "dtype_kind",
    "kinds_compatible",
    "resolve_tolerance",
    "tolerance_for",
    "verdict",
]

COSINE_MIN = 0.99
"""Below this cosine, a max abs error above ``MAX_ABS_SMALL`` fails."""
MAX_ABS_SMALL = 1e-3
COSINE_FLOOR = 0.9
"""Below this cosine the comparison always fails."""

TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-7),
    "float32": (1.3e-6, 1e-5),
    "float16": (1e-3, 1e-3),
    "bfloat16": (1.6e-2, 1.6e-2),
    "float8_e4m3fn": (1.25e-1, 1.25e-1),
    "float8_e5m2": (2.5e-1, 2.5e-1),
}
"""Default ``(rtol, atol)`` per floating dtype. rtol: ``torch.testing.assert_close``'s for float64,
float32, float16 and bfloat16, one unit in the last place (machine epsilon) for the float8 formats.
atol: torch's for float64 and float32; for the 16- and 8-bit formats equal to rtol, the error a value
of magnitude 1 may carry, so that an element that cancels to near zero after a few operations is
judged on the scale of the activations it came from (a bfloat16 run's ``x + gate * ws`` against a
float32 golden errs by up to 0.015 where the result is near 0)."""

VERDICTS = (
    "pass",
    "pass_partial",
    "fail",
    "differs_within_stats",
    "shape_mismatch",
    "dtype_mismatch",
    "missing_data",
    "error",
    "missing",
)
FAILING = ("fail", "differs_within_stats", "shape_mismatch", "dtype_mismatch", "missing_data", "error")
PARTIAL = "pass_partial"
"""A pair compared on part of its elements only (a truncated record: the stored prefix of both sides) that
passes there: not a pass, what was not stored was not compared; its note says how much was compared
(``compared 128 of 8192 rows``). ``megadump compare`` exits 1 on it unless ``--accept-partial``
(``compare(..., accept_partial=True)`` makes it ``pass``)."""
WITHIN_STATS = "differs_within_stats"
"""A statistics-only float pair whose digests differ (the bits differ) while every element is finite on
both sides and every statistic is within tolerance: not a pass (swapped elements keep every statistic),
not a proven failure either; ``megadump compare`` exits 1 on it unless ``--accept-within-stats``. A pair
holding NaN or Inf is never this (the statistics cover finite elements only: ``+inf`` against ``-inf``
keeps all of them), it fails."""
"""Verdicts of a pair that was found on both sides and does not pass (``missing`` is separate)."""

_KIND_NAMES = {"b": "bool", "i": "integer", "u": "integer", "f": "float", "c": "complex"}


def _rules_text() -> str:
    lines = [
        "verdict rules (A under test, B reference):",
        "  integer, bool, index   exact: one differing element fails (mismatches, first_mismatch)",
        "  floating               fail if |a-b| > atol + rtol*|b| at a finite pair, NaN/Inf positions",
        "                         differ, cosine < 0.9, or cosine < 0.99 with max_abs > 0.001",
        "  kinds differ           dtype_mismatch (int vs float, bool vs int); not compared",
        "  shapes differ          shape_mismatch; not compared",
        "  one side only          missing;   unreadable chunk: missing_data (note names the key)",
        "  statistics only        digests equal: pass; digests differ: fail (integer, bool; floats holding",
        "                         NaN/Inf), or for finite floats differs_within_stats when every statistic",
        "                         is within tolerance (exit 1 unless --accept-within-stats), else fail;",
        "                         msprobe md5 on both sides: equal pass, differing fail; no digest on a",
        "                         side (msprobe without md5): judged by the statistics alone",
        "  truncated record       compared on the elements both sides stored (max_bytes_per_tensor):",
        "                         pass_partial (note: compared N of M rows; exit 1 unless",
        "                         --accept-partial), or fail",
        "default tolerances (two float dtypes: the looser one's; --rtol/--atol replace them):",
        "  dtype            rtol      atol",
    ]
    for name, (rtol, atol) in TOLERANCES.items():
        lines.append(f"  {name:<15}  {rtol:<8.3g}  {atol:.3g}")
    return "\n".join(lines)


def dtype_kind(name: str) -> str:
    """The comparison kind of a dtype name: ``bool``, ``integer``, ``float``, ``complex`` or ``other``.

    Args:
        name: A dtype name (``float32``, ``bfloat16``, ``torch.int64``, ``uint8``, ``bool``).
    """
    text = str(name).removeprefix("torch.")
    if text in TOLERANCES or text.startswith(("float", "bfloat")):
        return "float"
    if text == "bool":
        return "bool"
    if text.startswith(("int", "uint")):
        return "integer"
    if text.startswith("complex"):
        return "complex"
    try:
        import numpy as np

        return _KIND_NAMES.get(np.dtype(text).kind, "other")
    except TypeError:
        return "other"


def kinds_compatible(dtype_a: str, dtype_b: str) -> bool:
    """Whether two dtypes can be compared element by element (same kind: both float, both integer, ...)."""
    return dtype_kind(dtype_a) == dtype_kind(dtype_b)


def tolerance_for(dtype_name: str) -> tuple[float, float]:
    """The default ``(rtol, atol)`` of a floating dtype (see :data:`TOLERANCES`); ``(0, 0)`` for exact kinds.

    Args:
        dtype_name: ``float32``, ``bfloat16``, ``float8_e4m3fn``, ... (a ``torch.`` prefix is ignored),
            or an integer/bool dtype (compared exactly).

    Raises:
        ValueError: A floating (or other) dtype with no entry in the table.
    """
    text = str(dtype_name).removeprefix("torch.")
    if text in TOLERANCES:
        return TOLERANCES[text]
    if dtype_kind(text) in ("integer", "bool"):
        return (0.0, 0.0)
    raise ValueError(
        f"no default tolerance for dtype {text!r}; known: {', '.join(TOLERANCES)} "
        "(integer and bool dtypes compare exactly); pass rtol and atol"
    )


def check_tolerance(name: str, value: Any) -> float | None:
    """``value`` as a float, or None; refuses NaN, infinite and negative tolerances.

    Args:
        name: The parameter's name, for the message (``rtol``, ``atol``).
        value: The given value (None: use the default).

    Raises:
        ValueError: Not a number, NaN, infinite or negative; the message names ``name`` and ``value``.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}") from None
    if math.isnan(number) or math.isinf(number) or number < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return number


def resolve_tolerance(
    dtype_a: str, dtype_b: str, rtol: float | None = None, atol: float | None = None
) -> tuple[float, float, bool]:
    """``(rtol, atol, exact)`` for comparing ``dtype_a`` with ``dtype_b``.

    Integer and bool pairs are exact (``(0, 0, True)``); float pairs take the looser dtype's default
    for each tolerance not given. Call only for compatible kinds (:func:`kinds_compatible`).

    Raises:
        ValueError: An unknown floating dtype without both tolerances given.
    """
    kind = dtype_kind(dtype_a)
    if kind in ("integer", "bool"):
        return 0.0, 0.0, True
    if rtol is not None and atol is not None:
        return float(rtol), float(atol), False
    defaults = [tolerance_for(d) for d in (dtype_a, dtype_b)]
    default_rtol = max(d[0] for d in defaults)
    default_atol = max(d[1] for d in defaults)
    return (default_rtol if rtol is None else float(rtol)), (default_atol if atol is None else float(atol)), False


def _index_text(index: Any) -> str:
    if index is None:
        return "?"
    return "(" + ", ".join(str(int(i)) for i in index) + ("," if len(index) == 1 else "") + ")"


def verdict(m: TensorMetrics) -> tuple[str, list[str]]:
    """The verdict of one comparison of compatible dtypes and the reasons of a failure.

    Args:
        m: The pair's metrics (``m.exact``: integer/bool rules; else float rules with ``m.rtol``/``m.atol``).

    Returns:
        ``("pass", [])`` or ``("fail", [reason, ...])``.
    """
    reasons: list[str] = []
    if m.exact:
        if m.mismatches:
            reasons.append(f"{m.mismatches} of {m.elements} elements differ, first at {_index_text(m.first_mismatch)}")
        return ("fail" if reasons else "pass"), reasons
    if m.nonfinite_mismatch:
        reasons.append(f"NaN/Inf differ at {m.nonfinite_mismatch} position(s)")
    not_close = m.mismatches - m.nonfinite_mismatch
    if not_close > 0:
        reasons.append(
            f"{not_close} of {m.finite_pairs} not within rtol {m.rtol or 0:.3g} atol {m.atol or 0:.3g}"
            f" (max_abs {m.max_abs:.4g}), first mismatch at {_index_text(m.first_mismatch)}"
        )
    if m.cosine < COSINE_MIN and m.max_abs > MAX_ABS_SMALL:
        reasons.append(f"cosine {m.cosine:.6g} < {COSINE_MIN} with max_abs {m.max_abs:.4g} > {MAX_ABS_SMALL}")
    elif m.cosine < COSINE_FLOOR:
        reasons.append(f"cosine {m.cosine:.6g} < {COSINE_FLOOR}")
    return ("fail" if reasons else "pass"), reasons


RULES_TEXT = _rules_text()
"""The rule table as printed by ``megadump compare --help``."""


# ---------------------------------------------------------------------------------------------------- --bitwise
BITWISE_RULES_TEXT = """\
--bitwise rules (a determinism check: any differing bit fails, no tolerance):
  dtype names differ     dtype_mismatch (float32 vs bfloat16 too);  shapes differ: shape_mismatch
  both payloads stored   the stored bytes are compared: one differing bit fails ("bytes differ in k
                         of n elements"), NaN with the same bits is equal; equal bytes pass
                         ("bytes equal")
  no payload on a side   the record digests (a 64-bit position-sensitive hash of the bytes, dtype and
                         element count): equal digests pass ("digests equal"), else fail ("digest
                         differs (0x... vs 0x...)"); a side with a payload is digested on the host
  nothing to prove it    no payload and no digest on a side, or a truncated record without
                         digests: error ("cannot be proven equal"), never a pass"""
"""The ``--bitwise`` rule table of ``megadump compare --help``."""


def bitwise_metadata_verdict(dtype_a: str, dtype_b: str, shape_a: Any, shape_b: Any) -> tuple[str, str] | None:
    """The ``--bitwise`` verdict decided by metadata alone, or None when the bits must be looked at.

    Args:
        dtype_a: Dtype name of A's record.
        dtype_b: Dtype name of B's record.
        shape_a: Logical shape of A's record (a tuple, or None when unknown).
        shape_b: Logical shape of B's record.

    Returns:
        ``("dtype_mismatch", note)``, ``("shape_mismatch", note)`` or None.
    """
    if str(dtype_a) != str(dtype_b):
        return "dtype_mismatch", f"bitwise: dtype {dtype_a} vs {dtype_b}"
    if shape_a is None or shape_b is None or tuple(shape_a) != tuple(shape_b):
        return "shape_mismatch", f"bitwise: shape {shape_a} vs {shape_b}"
    return None


def bitwise_digest_verdict(
    digest_a: int | None, digest_b: int | None, count_a: int | None, count_b: int | None, sides: str
) -> tuple[str, str]:
    """The ``--bitwise`` verdict of a pair compared by record digest (a side stored no payload).

    Args:
        digest_a: A's record digest (:mod:`megadump_zarr.layout.digest`; None: not known).
        digest_b: B's.
        count_a: A's element count (None: not known).
        count_b: B's.
        sides: What the note says about the sides (``"statistics only in a"``).

    Returns:
        ``("pass", note)`` for equal digests and counts, ``("fail", note)`` when they differ, and
        ``("error", note)`` when a digest is missing: equality cannot be proven, so never a pass.
    """
    missing = [side for side, value in (("a", digest_a), ("b", digest_b)) if value is None]
    if missing:
        return "error", (f"bitwise: {sides}; no digest in {' and '.join(missing)}: the bits cannot be proven equal")
    if count_a != count_b:
        return "fail", f"bitwise: {sides}; element counts differ ({count_a} vs {count_b})"
    if int(digest_a) != int(digest_b):  # type: ignore[arg-type]
        return "fail", f"bitwise: {sides}; digest differs ({int(digest_a):#018x} vs {int(digest_b):#018x})"  # type: ignore[arg-type]
    return "pass", f"bitwise: {sides}; digests equal"


def bitwise_md5_verdict(md5_a: str, md5_b: str, sides: str) -> tuple[str, str]:
    """The ``--bitwise`` verdict of a pair whose two sides carry msprobe's ``md5`` digest (``summary_mode:
    "md5"``: the CRC32 of the tensor's bytes).

    Args:
        md5_a: A's digest.
        md5_b: B's.
        sides: What the note says about the sides (``"statistics only in a and b"``).

    Returns:
        ``("pass", note)`` when the digests are equal ("md5 equal"), ``("fail", note)`` when they differ.
    """
    if md5_a == md5_b:
        return "pass", f"bitwise: {sides}; md5 equal (msprobe's digest of the bytes)"
    return "fail", f"bitwise: {sides}; md5 differs (msprobe's digest of the bytes)"


def bitwise_payload_verdict(differing: int, elements: int, first: Any) -> tuple[str, str]:
    """The ``--bitwise`` verdict of two stored payloads of one dtype and shape.

    Args:
        differing: Elements whose bits differ.
        elements: Elements compared.
        first: Logical index of the first differing element (C order), or None.

    Returns:
        ``("pass", "bitwise: bytes equal ...")`` or ``("fail", "bitwise: bytes differ in k of n ...")``.
    """
    if differing:
        return "fail", f"bitwise: bytes differ in {differing} of {elements} elements, first at {_index_text(first)}"
    return "pass", f"bitwise: bytes equal ({elements} elements)"
