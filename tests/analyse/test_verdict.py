"""Verdict rules: exact integers, tolerances by dtype, msprobe's cosine rules, kind and shape verdicts,
tolerance validation. Each rule fails just past its boundary and passes exactly at it."""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest
import torch

from megadump_zarr.analyse import compare
from megadump_zarr.analyse.metrics import TensorMetrics
from megadump_zarr.analyse.verdict import (
    COSINE_FLOOR,
    COSINE_MIN,
    MAX_ABS_SMALL,
    RULES_TEXT,
    TOLERANCES,
    check_tolerance,
    dtype_kind,
    resolve_tolerance,
    tolerance_for,
    verdict,
)

GOOD = TensorMetrics(
    elements=10,
    finite_pairs=10,
    cosine=1.0,
    max_abs=0.0,
    max_rel=0.0,
    rmse=0.0,
    within_0_1pct=1.0,
    within_0_5pct=1.0,
    nan_a=0,
    inf_a=0,
    nan_b=0,
    inf_b=0,
    nonfinite_mismatch=0,
    rtol=1e-3,
    atol=1e-3,
)


def below(x: float) -> float:
    return float(np.nextafter(x, -np.inf))


def above(x: float) -> float:
    return float(np.nextafter(x, np.inf))


def judge(**changes) -> str:
    return verdict(dataclasses.replace(GOOD, **changes))[0]


# ---------------------------------------------------------------------------------------------------- the table
def test_tolerance_table_exact_values():
    assert TOLERANCES == {
        "float64": (1e-7, 1e-7),
        "float32": (1.3e-6, 1e-5),
        "float16": (1e-3, 1e-3),
        "bfloat16": (1.6e-2, 1.6e-2),
        "float8_e4m3fn": (1.25e-1, 1.25e-1),
        "float8_e5m2": (2.5e-1, 2.5e-1),
    }
    assert tolerance_for("torch.bfloat16") == (1.6e-2, 1.6e-2)
    assert tolerance_for("int64") == (0.0, 0.0) and tolerance_for("bool") == (0.0, 0.0)
    with pytest.raises(ValueError, match="no default tolerance for dtype 'float8_e4m3fnuz'"):
        tolerance_for("float8_e4m3fnuz")
    assert (COSINE_MIN, MAX_ABS_SMALL, COSINE_FLOOR) == (0.99, 0.001, 0.9)


def test_rules_text_lists_every_dtype_row():
    lines = RULES_TEXT.splitlines()
    assert lines[0] == "verdict rules (A under test, B reference):"
    assert "  bfloat16         0.016     0.016" in lines
    assert "  float32          1.3e-06   1e-05" in lines
    assert "  float8_e5m2      0.25      0.25" in lines
    assert max(len(line) for line in lines) <= 100


def test_mixed_precision_uses_the_looser_dtype():
    assert resolve_tolerance("bfloat16", "float32") == (1.6e-2, 1.6e-2, False)
    assert resolve_tolerance("float32", "float16") == (1e-3, 1e-3, False)
    assert resolve_tolerance("bfloat16", "float32", rtol=1e-4) == (1e-4, 1.6e-2, False)
    assert resolve_tolerance("int32", "int64", rtol=0.5, atol=0.5) == (0.0, 0.0, True)


@pytest.mark.parametrize(
    "name, kind",
    [
        ("int64", "integer"),
        ("uint8", "integer"),
        ("bool", "bool"),
        ("float8_e4m3fn", "float"),
        ("bfloat16", "float"),
        ("torch.float16", "float"),
        ("complex64", "complex"),
    ],
)
def test_dtype_kinds(name, kind):
    assert dtype_kind(name) == kind


# ---------------------------------------------------------------------------------------------------- validation
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), -1e-9, "x", True])
@pytest.mark.parametrize("name", ["rtol", "atol"])
def test_bad_tolerances_are_refused(name, value):
    with pytest.raises(ValueError) as info:
        check_tolerance(name, value)
    assert str(info.value) == f"{name} must be a finite number >= 0, got {value!r}"
    with pytest.raises(ValueError, match=f"^{name} must be a finite number >= 0"):
        compare(np.ones(3), np.ones(3), **{name: value})


def test_good_tolerances_pass_through():
    assert check_tolerance("rtol", 0) == 0.0 and check_tolerance("atol", None) is None
    assert check_tolerance("atol", np.float32(0.5)) == 0.5


# ---------------------------------------------------------------------------------------------------- exact kinds
def test_integers_compare_exactly():
    row = compare(np.array([8, 13, 7, 9]), np.array([8, 12, 8, 9]), rtol=1.0, atol=10.0).iloc[0]
    assert row.verdict == "fail" and row.mismatches == 2 and row.first_mismatch == (1,)
    assert row.note == "2 of 4 elements differ, first at (1,)"
    assert row.worst_index == (1,) and (row.worst_a, row.worst_b) == (13.0, 12.0)
    assert pd_isna(row.rtol) and pd_isna(row.atol)
    same = compare(np.array([8, 13, 7, 9]), np.array([8, 13, 7, 9], dtype=np.int32)).iloc[0]
    assert same.verdict == "pass" and same.mismatches == 0 and same.first_mismatch is None and same.worst_index is None


def test_large_integers_differing_by_one_fail():
    big = np.array([2**62, 5], dtype=np.int64)
    row = compare(big + np.array([1, 0]), big).iloc[0]  # equal as float64, different as int64
    assert row.verdict == "fail" and row.mismatches == 1 and row.first_mismatch == (0,)


def test_bool_and_multidimensional_index():
    a = np.zeros((3, 4), dtype=bool)
    b = a.copy()
    b[2, 1] = True
    row = compare(a, b).iloc[0]
    assert row.verdict == "fail" and row.first_mismatch == (2, 1) and row.mismatches == 1


def test_kind_mismatch_is_its_own_verdict():
    for a, b, text in (
        (np.ones(3, np.int64), np.ones(3, np.float32), "int64 (integer) vs float32 (float)"),
        (np.ones(3, bool), np.ones(3, np.int32), "bool (bool) vs int32 (integer)"),
    ):
        row = compare(a, b).iloc[0]
        assert row.verdict == "dtype_mismatch" and row.note == f"dtype kinds differ: {text}; not compared"
        assert pd_isna(row.cosine)


def test_shape_mismatch_wins_over_nothing_but_kind():
    row = compare(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32)).iloc[0]
    assert row.verdict == "shape_mismatch" and row.note == "shape 2×3 vs 3×2; not compared"
    row = compare(np.ones((2, 3), np.int64), np.ones((3, 2), np.float32)).iloc[0]
    assert row.verdict == "dtype_mismatch"


# ---------------------------------------------------------------------------------------------------- float rules
def test_cosine_below_099_with_visible_abs_error():
    assert judge(cosine=0.99, max_abs=0.5) == "pass"
    assert judge(cosine=below(0.99), max_abs=0.5) == "fail"
    assert judge(cosine=0.95, max_abs=0.001) == "pass"
    assert judge(cosine=0.95, max_abs=above(0.001)) == "fail"


def test_cosine_floor():
    assert judge(cosine=0.9, max_abs=0.0) == "pass"
    assert judge(cosine=below(0.9), max_abs=0.0) == "fail"


def test_nonfinite_mismatch_and_mismatches():
    assert judge(nonfinite_mismatch=1, mismatches=1) == "fail"
    assert judge(nan_a=3, nan_b=3) == "pass"  # same NaN pattern on both sides
    result, reasons = verdict(dataclasses.replace(GOOD, mismatches=3, first_mismatch=(0, 2), max_abs=0.5))
    assert result == "fail" and reasons == [
        "3 of 10 not within rtol 0.001 atol 0.001 (max_abs 0.5), first mismatch at (0, 2)"
    ]


def test_float32_default_tolerance_boundary():
    b = np.full(8, 1000.0, np.float32)
    rtol, atol = TOLERANCES["float32"]
    limit = np.float32(atol + rtol * 1000.0)  # 0.00131 (float32 spacing at 1000 is 6.1e-5)
    a = b.copy()
    a[5] = np.float32(1000.0) + np.float32(0.00122)  # two ulps: within
    assert compare(a, b).verdict[0] == "pass"
    a[5] = np.float32(1000.0) + np.float32(0.0014)
    assert float(a[5]) - 1000.0 > limit
    row = compare(a, b).iloc[0]
    assert row.verdict == "fail" and row.mismatches == 1 and row.first_mismatch == (5,) and row.worst_index == (5,)


def test_bfloat16_against_float32_passes_rounding_and_fails_a_real_error():
    rng = np.random.default_rng(5)
    ref = rng.standard_normal((64, 16)).astype(np.float32)
    bf = ref.astype(ml_dtypes.bfloat16)
    row = compare(bf, ref).iloc[0]
    assert row.verdict == "pass" and (row.rtol, row.atol) == (1.6e-2, 1.6e-2)
    assert "dtype bfloat16 vs float32" in row.note
    bad = ref.copy()
    bad[40, 3] += 0.1
    row = compare(bf, bad).iloc[0]
    assert row.verdict == "fail" and row.worst_index == (40, 3) and row.first_mismatch == (40, 3)
    assert row.worst_b == pytest.approx(float(bad[40, 3]))
    t = compare(torch.from_numpy(ref).to(torch.bfloat16), torch.from_numpy(ref)).iloc[0]
    assert t.verdict == "pass" and t.dtype_a == "bfloat16"


def test_user_tolerance_boundary_with_arrays():
    b = np.array([1.0, 2.0, 4.0])
    a = b + np.array([0.0, 0.5, 0.0])  # |d| = 0.5 exactly
    row = compare(a, b, atol=0.5, rtol=0).iloc[0]
    assert row.allclose == True and row.verdict == "pass"  # noqa: E712 - pandas boolean
    row = compare(a, b, atol=below(0.5), rtol=0).iloc[0]
    assert row.allclose == False and row.verdict == "fail" and row.first_mismatch == (1,)  # noqa: E712
    row = compare(a, b, rtol=0.25, atol=0).iloc[0]  # 0.25 * 2 == 0.5
    assert row.allclose == True  # noqa: E712
    assert compare(a, b, rtol=below(0.25), atol=0).verdict[0] == "fail"


def test_cosine_floor_with_arrays():
    b = np.array([1.0, 0.0])
    for angle, expected in ((np.arccos(0.9) * 0.999, "pass"), (np.arccos(0.9) * 1.001, "fail")):
        a = np.array([np.cos(angle), np.sin(angle)]) * 1e-4
        row = compare(a, b * 1e-4, atol=1.0).iloc[0]  # within the loose tolerance: only the cosine decides
        assert row.verdict == expected, row.note


def pd_isna(x) -> bool:
    import pandas as pd

    return x is None or bool(pd.isna(x))


@pytest.mark.parametrize("nan_side", ["a", "b"])
def test_nan_either_side_fails_through_compare(nan_side):
    a, b = np.ones(6), np.ones(6)
    (a if nan_side == "a" else b)[2] = np.nan
    row = compare(a, b).iloc[0]
    assert row.verdict == "fail" and row[f"nan_{nan_side}"] == 1 and row.nonfinite_mismatch == 1
    assert row.first_mismatch == (2,) and "NaN/Inf differ at 1 position(s)" in row.note


def test_compare_docstring_states_the_rule_table():
    doc = [line.strip() for line in compare.__doc__.splitlines()]
    for line in RULES_TEXT.splitlines():
        assert line.strip() in doc, line


def test_a_failing_row_names_its_worst_element_when_no_finite_pair_differs():
    """A NaN/Inf mismatch (finite pairs equal) or integers equal as float64 still name the worst element:
    the first mismatching one, with its two values (QA: these rows had worst_index None)."""
    a, b = np.ones((3, 4), np.float32), np.ones((3, 4), np.float32)
    a[1, 2] = np.nan
    a[2, 0] = np.inf
    row = compare(a, b).iloc[0]
    assert row.verdict == "fail" and row.worst_index == (1, 2) and np.isnan(row.worst_a) and row.worst_b == 1.0
    inf = compare(np.array([1.0, np.inf]), np.array([1.0, -np.inf])).iloc[0]
    assert inf.worst_index == (1,) and (inf.worst_a, inf.worst_b) == (np.inf, -np.inf)
    big = np.array([5, 2**62], dtype=np.int64)
    ints = compare(big + np.array([0, 1]), big).iloc[0]
    assert ints.verdict == "fail" and ints.worst_index == (1,) and ints.worst_a == float(2**62)
    mixed = a.copy()
    mixed[0, 3] = 3.0  # a finite pair differs: that is the worst element, not the NaN
    assert compare(mixed, b).iloc[0].worst_index == (0, 3)
