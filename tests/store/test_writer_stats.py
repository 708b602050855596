"""Statistics: finite-only min/max/mean/l2norm in float64, NaN/Inf counts, JSON-safe values."""

from __future__ import annotations

import json
import math

import ml_dtypes
import numpy as np
import pytest

from megadump_zarr.store import tensor_stats as stats_mod
from megadump_zarr.store.tensor_stats import StatsAccumulator, compute_stats


def _expected(values: np.ndarray) -> dict:
    x = np.asarray(values).astype(np.float64).ravel()
    finite = x[np.isfinite(x)]
    return {
        "min": float(finite.min()),
        "max": float(finite.max()),
        "mean": float(finite.mean()),
        "l2norm": float(np.sqrt(np.sum(finite * finite))),
        "nanCount": int(np.isnan(x).sum()),
        "infCount": int(np.isinf(x).sum()),
    }


def _assert_close(got: dict, expected: dict) -> None:
    assert set(got) == {"min", "max", "mean", "l2norm", "nanCount", "infCount"}
    assert got["min"] == expected["min"] and got["max"] == expected["max"]
    assert got["nanCount"] == expected["nanCount"] and got["infCount"] == expected["infCount"]
    assert got["mean"] == pytest.approx(expected["mean"], rel=1e-12, abs=1e-300)
    assert got["l2norm"] == pytest.approx(expected["l2norm"], rel=1e-12)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, ml_dtypes.bfloat16, ml_dtypes.float8_e5m2])
def test_float_stats_with_nan_and_inf(dtype):
    rng = np.random.default_rng(0)
    data = (rng.standard_normal((40, 7)) * 3).astype(dtype)
    data[0, 0] = np.nan
    data[3, 4] = np.nan
    data[10, 1] = np.inf
    data[11, 2] = -np.inf
    got = compute_stats(data)
    _assert_close(got, _expected(data))
    assert got["nanCount"] == 2 and got["infCount"] == 2
    assert all(type(got[k]) is float for k in ("min", "max", "mean", "l2norm"))
    json.dumps(got, allow_nan=False)  # strict JSON


def test_float8_e4m3fn_has_nan_but_no_inf():
    data = np.array([1.0, -2.0, np.nan, 0.5], dtype=np.float32).astype(ml_dtypes.float8_e4m3fn)
    got = compute_stats(data)
    assert got == {
        "min": -2.0,
        "max": 1.0,
        "mean": pytest.approx(-0.5 / 3),
        "l2norm": pytest.approx(math.sqrt(5.25)),
        "nanCount": 1,
        "infCount": 0,
    }


@pytest.mark.parametrize("fill", [np.nan, np.inf])
def test_no_finite_values(fill):
    got = compute_stats(np.full((3, 2), fill, dtype=np.float32))
    assert got["min"] is None and got["max"] is None and got["mean"] is None and got["l2norm"] is None
    assert (got["nanCount"], got["infCount"]) == ((6, 0) if np.isnan(fill) else (0, 6))


def test_empty():
    assert compute_stats(np.zeros((0, 4), np.float32)) == {
        "min": None,
        "max": None,
        "mean": None,
        "l2norm": None,
        "nanCount": 0,
        "infCount": 0,
    }
    assert compute_stats(np.zeros(0, np.int64))["min"] is None


def test_bool_counts_as_zero_one():
    data = np.array([True, False, True, True])
    got = compute_stats(data)
    assert got == {
        "min": 0,
        "max": 1,
        "mean": 0.75,
        "l2norm": pytest.approx(math.sqrt(3)),
        "nanCount": 0,
        "infCount": 0,
    }
    assert type(got["min"]) is int


def test_integers_exact_min_max():
    data = np.array([2**62 + 1, -(2**62) - 3, 5], dtype=np.int64)
    got = compute_stats(data)
    assert got["min"] == -(2**62) - 3 and got["max"] == 2**62 + 1
    assert type(got["min"]) is int and type(got["max"]) is int
    assert got["mean"] == pytest.approx(float(data.astype(np.float64).mean()))
    u = np.array([0, 2**64 - 1], dtype=np.uint64)
    assert compute_stats(u)["max"] == 2**64 - 1
    small = np.arange(-5, 6, dtype=np.int8)
    _assert_close(compute_stats(small), _expected(small))


def test_scalar():
    assert compute_stats(np.array(-3.5, np.float32))["min"] == -3.5


def test_slicing_and_non_contiguous_inputs(monkeypatch):
    monkeypatch.setattr(stats_mod, "SLICE_ELEMENTS", 7)  # force many slices
    rng = np.random.default_rng(1)
    data = rng.standard_normal((23, 9)).astype(np.float32)
    data[4, 4] = np.nan
    _assert_close(compute_stats(data), _expected(data))
    strided = data[:, ::2]
    assert not strided.flags.c_contiguous
    _assert_close(compute_stats(strided), _expected(strided))
    wide = data.T  # rows of 23 elements > SLICE_ELEMENTS
    _assert_close(compute_stats(wide), _expected(wide))


def test_merge_equals_whole():
    rng = np.random.default_rng(2)
    data = rng.standard_normal(1000).astype(np.float32)
    data[::97] = np.inf
    parts = [StatsAccumulator(data.dtype).update(data[i : i + 128]) for i in range(0, 1000, 128)]
    merged = StatsAccumulator(data.dtype)
    for part in parts:
        merged.merge(part)
    _assert_close(merged.result(), _expected(data))
    assert StatsAccumulator(np.dtype(np.int16)).merge(StatsAccumulator(np.dtype(np.int16))).result()["min"] is None


def test_float64_overflow_gives_none_not_infinity():
    got = compute_stats(np.array([1e300, 1e300], dtype=np.float64))
    assert got["max"] == 1e300 and got["l2norm"] is None and got["mean"] == 1e300
    json.dumps(got, allow_nan=False)


def test_unsupported_dtype():
    with pytest.raises(TypeError, match="statistics are not defined"):
        compute_stats(np.zeros(2, complex))
