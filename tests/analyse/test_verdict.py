"""msprobe thresholds: each rule fails just past its boundary and passes exactly at it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from megadump_zarr.analyse import compare
from megadump_zarr.analyse.metrics import TensorMetrics
from megadump_zarr.analyse.verdict import COSINE_FLOOR, COSINE_MIN, MAX_ABS_LIMIT, MAX_ABS_SMALL, verdict

GOOD = TensorMetrics(elements=10, finite_pairs=10, cosine=1.0, max_abs=0.0, max_rel=0.0, rmse=0.0, within_0_1pct=1.0,
                     within_0_5pct=1.0, nan_a=0, inf_a=0, nan_b=0, inf_b=0, nonfinite_mismatch=0)


def below(x: float) -> float:
    return float(np.nextafter(x, -np.inf))


def above(x: float) -> float:
    return float(np.nextafter(x, np.inf))


def judge(**changes) -> str:
    return verdict(dataclasses.replace(GOOD, **changes))[0]


def test_thresholds_are_msprobe_values():
    assert (COSINE_MIN, MAX_ABS_SMALL, COSINE_FLOOR, MAX_ABS_LIMIT) == (0.99, 0.001, 0.9, 1.0)


def test_cosine_below_099_with_visible_abs_error():
    assert judge(cosine=0.99, max_abs=0.5) == "pass"
    assert judge(cosine=below(0.99), max_abs=0.5) == "fail"
    # the abs error side of the same rule
    assert judge(cosine=0.95, max_abs=0.001) == "pass"
    assert judge(cosine=0.95, max_abs=above(0.001)) == "fail"


def test_cosine_floor():
    assert judge(cosine=0.9, max_abs=0.0) == "pass"
    assert judge(cosine=below(0.9), max_abs=0.0) == "fail"


def test_max_abs_limit():
    assert judge(max_abs=1.0) == "pass"
    assert judge(max_abs=above(1.0)) == "fail"


def test_nonfinite_mismatch_and_allclose():
    assert judge(nonfinite_mismatch=1) == "fail"
    assert judge(nan_a=3, nan_b=3) == "pass"  # same NaN pattern on both sides
    assert judge(allclose=True) == "pass"
    assert judge(allclose=False) == "fail"


def test_reasons_are_reported():
    result, reasons = verdict(dataclasses.replace(GOOD, cosine=0.5, max_abs=2.0))
    assert result == "fail" and len(reasons) == 3


# ---------------------------------------------------------------------------------------------------- through arrays
def test_max_abs_boundary_with_arrays():
    b = np.full(1000, 1000.0)
    a = b.copy()
    a[0] = 1001.0  # |a - b| == 1 exactly
    assert compare(a, b).verdict[0] == "pass"
    a[0] = above(1001.0)
    row = compare(a, b).iloc[0]
    assert row.verdict == "fail" and "max_abs" in row.note


def test_cosine_floor_with_arrays():
    # orthogonal-ish vectors: cosine exactly 0.9 is hard to build; check both sides of the floor
    b = np.array([1.0, 0.0])
    for angle, expected in ((np.arccos(0.9) * 0.999, "pass"), (np.arccos(0.9) * 1.001, "fail")):
        a = np.array([np.cos(angle), np.sin(angle)]) * 1e-4  # tiny values: max_abs stays far below 0.001
        # keep |a - b| small by comparing against a scaled reference too
        row = compare(a, b * 1e-4).iloc[0]
        assert row.verdict == expected, row.note


def test_allclose_boundary_with_arrays():
    b = np.array([1.0, 2.0, 4.0])
    a = b + np.array([0.0, 0.5, 0.0])  # |d| = 0.5 exactly
    row = compare(a, b, atol=0.5).iloc[0]
    assert row.allclose == True and row.verdict == "pass"  # noqa: E712 - pandas boolean
    row = compare(a, b, atol=below(0.5)).iloc[0]
    assert row.allclose == False and row.verdict == "fail" and "not allclose" in row.note  # noqa: E712
    row = compare(a, b, rtol=0.25).iloc[0]  # 0.25 * 2 == 0.5
    assert row.allclose == True  # noqa: E712
    row = compare(a, b, rtol=below(0.25)).iloc[0]
    assert row.verdict == "fail"
    assert pd_isna(compare(a, b).allclose[0])


def pd_isna(x) -> bool:
    import pandas as pd

    return bool(pd.isna(x))


@pytest.mark.parametrize("nan_side", ["a", "b"])
def test_nan_either_side_fails_through_compare(nan_side):
    a, b = np.ones(6), np.ones(6)
    (a if nan_side == "a" else b)[2] = np.nan
    row = compare(a, b).iloc[0]
    assert row.verdict == "fail" and row[f"nan_{nan_side}"] == 1 and row.nonfinite_mismatch == 1
