"""Pass/fail thresholds of one tensor comparison (msprobe's accuracy rules).

A comparison **fails** when any of these holds (strict inequalities: a value exactly at a threshold
passes):

* ``cosine < 0.99`` and ``max_abs > 0.001`` (a small angle error with a visible absolute error);
* ``cosine < 0.9``;
* ``max_abs > 1``;
* the NaN/Inf patterns differ (``nonfinite_mismatch > 0``): a NaN or Inf at a position where the other
  side holds something else. The rule is symmetric and position-wise: a NaN/Inf present on *both*
  sides at the same positions (e.g. ``-inf`` attention masks) is agreement, not divergence, while a
  NaN appearing on either side alone fails. Use ``first_nonfinite`` to find where NaNs first appear
  in a single dump;
* a user tolerance was given (``rtol``/``atol``) and some finite pair is not close.

Otherwise it **passes**. The other verdicts, set by :mod:`megadump_zarr.analyse.compare`, are
``"error"`` (the pair could not be compared: shape mismatch, unreadable array) and ``"missing"``
(present on one side only).
"""

from __future__ import annotations

from megadump_zarr.analyse.metrics import TensorMetrics

__all__ = ["COSINE_FLOOR", "COSINE_MIN", "MAX_ABS_LIMIT", "MAX_ABS_SMALL", "VERDICTS", "verdict"]

COSINE_MIN = 0.99
"""Below this cosine, a max abs error above ``MAX_ABS_SMALL`` fails."""
MAX_ABS_SMALL = 1e-3
COSINE_FLOOR = 0.9
"""Below this cosine the comparison always fails."""
MAX_ABS_LIMIT = 1.0
"""Above this max abs error the comparison always fails."""

VERDICTS = ("pass", "fail", "error", "missing")


def verdict(m: TensorMetrics) -> tuple[str, list[str]]:
    """The verdict of one comparison and the reasons of a failure.

    Args:
        m: The pair's metrics.

    Returns:
        ``("pass", [])`` or ``("fail", [reason, ...])``.
    """
    reasons: list[str] = []
    if m.cosine < COSINE_MIN and m.max_abs > MAX_ABS_SMALL:
        reasons.append(f"cosine {m.cosine:.6g} < {COSINE_MIN} with max_abs {m.max_abs:.6g} > {MAX_ABS_SMALL}")
    if m.cosine < COSINE_FLOOR:
        reasons.append(f"cosine {m.cosine:.6g} < {COSINE_FLOOR}")
    if m.max_abs > MAX_ABS_LIMIT:
        reasons.append(f"max_abs {m.max_abs:.6g} > {MAX_ABS_LIMIT}")
    if m.nonfinite_mismatch:
        reasons.append(f"NaN/Inf differ at {m.nonfinite_mismatch} position(s)")
    if m.allclose is False:
        reasons.append("not allclose")
    return ("fail" if reasons else "pass"), reasons
