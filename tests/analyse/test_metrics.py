"""The numeric core: chunked metrics on array-like pairs (numpy, ml_dtypes, torch, dask, xarray, zarr)."""

from __future__ import annotations

import math
from math import prod

import dask.array as da
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
import ml_dtypes
import numpy as np
import pytest
import torch
import xarray as xr
import zarr

from megadump_zarr.analyse import compare
from megadump_zarr.analyse.metrics import REL_EPS, compute_metrics, iter_blocks, read_block, row_chunks
from megadump_zarr.analyse.verdict import verdict

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

shapes = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=7)
finite_floats = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False, width=64)
any_floats = st.one_of(finite_floats, st.sampled_from([np.nan, np.inf, -np.inf, 0.0]))
block_sizes = st.integers(8, 4096)


def oneshot(a: np.ndarray, b: np.ndarray, rtol: float | None = None, atol: float | None = None) -> dict:
    """The metric definitions computed in one go with plain numpy float64 (the test oracle)."""
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    finite = np.isfinite(a) & np.isfinite(b)
    same_nonfinite = (np.isnan(a) & np.isnan(b)) | (np.isinf(a) & np.isinf(b) & (a == b))
    fa, fb = a[finite], b[finite]
    d = np.abs(fa - fb)
    # normalise first (as LAPACK's nrm2 does) so tiny/huge values neither underflow nor overflow
    sa = float(np.abs(fa).max()) if fa.size else 0.0
    sb = float(np.abs(fb).max()) if fb.size else 0.0
    if sa > 0 and sb > 0:
        ua, ub = fa / sa, fb / sb
        cosine = float(np.dot(ua, ub) / (np.linalg.norm(ua) * np.linalg.norm(ub)))
    na, nb = sa, sb
    if na > 0 and nb > 0:
        pass
    else:
        cosine = 1.0 if na == 0 and nb == 0 else 0.0
    rel = d / np.maximum(np.abs(fb), REL_EPS)
    n = fa.size
    out = dict(
        elements=a.size,
        finite_pairs=n,
        cosine=min(1.0, max(-1.0, cosine)),
        max_abs=float(d.max()) if n else 0.0,
        max_rel=float(rel.max()) if n else 0.0,
        rmse=float(np.sqrt(np.mean(d**2))) if n else 0.0,
        within_0_1pct=float(np.mean(rel <= 1e-3)) if n else 1.0,
        within_0_5pct=float(np.mean(rel <= 5e-3)) if n else 1.0,
        nan_a=int(np.isnan(a).sum()),
        inf_a=int(np.isinf(a).sum()),
        nan_b=int(np.isnan(b).sum()),
        inf_b=int(np.isinf(b).sum()),
        nonfinite_mismatch=int((~finite & ~same_nonfinite).sum()),
    )
    if out["nonfinite_mismatch"]:  # NaN/Inf patterns differ: no metric over the finite pairs alone
        for key in ("cosine", "max_abs", "max_rel", "rmse", "within_0_1pct", "within_0_5pct"):
            out[key] = math.nan
    if rtol is not None or atol is not None:
        out["allclose"] = bool(np.all(d <= (atol or 0.0) + (rtol or 0.0) * np.abs(fb)))
    return out


NARROW_REL = 1e-6
"""Inputs of at most 32 bits: the elementwise metrics (max_rel, shares) are float32 on |a - b| rounded to
float32 (relative error 6e-8); sums stay float64."""


def assert_matches(m, expected: dict, rel: float = 1e-9) -> None:
    for key, value in expected.items():
        got = getattr(m, key)
        if isinstance(value, float) and math.isnan(value):
            assert math.isnan(got), key
        elif isinstance(value, float):
            assert got == pytest.approx(value, rel=rel, abs=1e-12), key
        else:
            assert got == value, key


# ---------------------------------------------------------------------------------------------------- blocks
@SETTINGS
@given(shape=shapes, block_bytes=block_sizes)
def test_blocks_cover_every_element_once_within_budget(shape, block_bytes):
    seen = np.zeros(shape, dtype=np.int64)
    for index in iter_blocks(shape, block_bytes):
        assert np.asarray(seen[index]).size <= max(1, block_bytes // 8)
        seen[index] += 1
    assert (seen == 1).all()


@SETTINGS
@given(data=st.data(), shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=12), block_bytes=block_sizes)
def test_chunk_aligned_blocks_cover_every_element_once_within_budget(data, shape, block_bytes):
    sizes = data.draw(st.lists(st.integers(1, 12), min_size=0, max_size=12))
    chunks, total = [], 0
    for size in sizes:  # chunk sizes summing to shape[0]
        size = min(size, shape[0] - total)
        if size > 0:
            chunks.append(size)
            total += size
    if total < shape[0]:
        chunks.append(shape[0] - total)
    seen = np.zeros(shape, dtype=np.int64)
    boundaries = set(np.cumsum([0, *chunks]).tolist())
    for index in iter_blocks(shape, block_bytes, tuple(chunks)):
        assert np.asarray(seen[index]).size <= max(1, block_bytes // 8)
        seen[index] += 1
        rows = max(1, (block_bytes // 8) // max(prod(shape[1:]), 1))
        if prod(shape[1:]) <= block_bytes // 8 and index[0].stop - index[0].start < rows:
            # a block shorter than the row budget ends at a chunk boundary (or the array's end)
            assert index[0].stop in boundaries or index[0].stop == shape[0]
    assert (seen == 1).all()


def test_blocks_follow_dask_and_zarr_chunks(tmp_path):
    assert list(iter_blocks((10, 2), 8 * 8, chunks=(3, 3, 4))) == [(slice(0, 3),), (slice(3, 6),), (slice(6, 10),)]
    assert list(iter_blocks((10, 1), 8 * 7, chunks=(3, 3, 4))) == [(slice(0, 6),), (slice(6, 10),)]
    assert list(iter_blocks((10, 1), 8 * 3, chunks=(10,))) == [
        (slice(0, 3),),
        (slice(3, 6),),
        (slice(6, 9),),
        (slice(9, 10),),
    ]
    assert row_chunks(da.zeros((10, 2), chunks=(4, 2))) == (4, 4, 2)
    assert row_chunks(xr.DataArray(da.zeros((10, 2), chunks=(3, 2)))) == (3, 3, 3, 1)
    assert row_chunks(zarr.create_array(tmp_path / "z.zarr", shape=(10, 2), chunks=(4, 2), dtype="f4")) == (4, 4, 2)
    assert (
        row_chunks(np.zeros(3)) is None and row_chunks(torch.zeros(3)) is None and row_chunks(xr.DataArray([1])) is None
    )


def test_block_budget_default_is_8_mib_of_float64():
    blocks = list(iter_blocks((3000, 1000)))
    assert all((s.stop - s.start) * 1000 * 8 <= 8 << 20 for (s,) in blocks)
    assert len(blocks) == 3  # 1048 rows per block
    # a single row larger than the budget is split along the next axis
    assert all(prod(sl.stop - sl.start for sl in idx) * 8 <= 8 << 20 for idx in iter_blocks((2, 3, 1 << 20)))


# ---------------------------------------------------------------------------------------------------- identities
@SETTINGS
@given(a=hnp.arrays(np.float64, shapes, elements=finite_floats), block_bytes=block_sizes)
def test_identical_arrays_pass_with_zero_error(a, block_bytes):
    m = compute_metrics(a, a.copy(), block_bytes=block_bytes)
    assert m.cosine == 1.0
    assert m.max_abs == 0.0 and m.max_rel == 0.0 and m.rmse == 0.0
    assert m.within_0_1pct == 1.0 and m.within_0_5pct == 1.0
    assert m.elements == a.size and m.nonfinite_mismatch == 0
    assert verdict(m) == ("pass", [])


@SETTINGS
@given(
    b=hnp.arrays(
        np.float64,
        hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=9),
        elements=st.floats(-100, 100, allow_nan=False, width=64),
    ),
    scale=st.floats(0.5, 2.0),
    shift=st.floats(-1.0, 1.0),
    block_bytes=block_sizes,
)
def test_scaling_and_shift_match_numpy(b, scale, shift, block_bytes):
    a = b * scale + shift
    m = compute_metrics(a, b, block_bytes=block_bytes)
    d = np.abs(a - b)
    assert m.max_abs == pytest.approx(float(d.max()), rel=1e-12, abs=1e-15)
    assert m.rmse == pytest.approx(float(np.sqrt(np.mean(d**2))), rel=1e-9, abs=1e-15)
    assert_matches(m, oneshot(a, b))


@SETTINGS
@given(
    data=st.data(),
    shape=shapes,
    block_bytes=block_sizes,
    tol=st.sampled_from([(None, None), (1e-3, None), (None, 0.5), (1e-2, 1e-3)]),
)
def test_chunked_equals_oneshot(data, shape, block_bytes, tol):
    a = data.draw(hnp.arrays(np.float64, shape, elements=any_floats))
    noise = data.draw(hnp.arrays(np.float64, shape, elements=st.floats(-1e-2, 1e-2, width=64)))
    b = data.draw(st.sampled_from(["copy", "noise", "independent"]))
    if b == "copy":
        b = a.copy()
    elif b == "noise":
        b = a * (1 + noise)
    else:
        b = data.draw(hnp.arrays(np.float64, shape, elements=any_floats))
    rtol, atol = tol
    m = compute_metrics(a, b, rtol=rtol, atol=atol, block_bytes=block_bytes)
    assert_matches(m, oneshot(a, b, rtol, atol))
    if rtol is None and atol is None:
        assert m.allclose is None


def test_huge_and_tiny_magnitudes_do_not_overflow():
    rng = np.random.default_rng(0)
    base = rng.standard_normal(1000)
    for scale in (1e300, 1e-300):
        m = compute_metrics(base * scale, base * scale, block_bytes=800)
        assert m.cosine == pytest.approx(1.0, abs=1e-12)
        m = compute_metrics(base * scale, -base * scale, block_bytes=800)
        assert m.cosine == pytest.approx(-1.0, abs=1e-12)


def test_zero_norm_cosine_convention():
    zeros, ones = np.zeros(5), np.ones(5)
    assert compute_metrics(zeros, zeros).cosine == 1.0
    assert compute_metrics(zeros, ones).cosine == 0.0
    assert compute_metrics(ones, zeros).cosine == 0.0
    empty = compute_metrics(np.zeros((0, 3)), np.zeros((0, 3)))
    assert empty.elements == 0 and empty.cosine == 1.0 and verdict(empty)[0] == "pass"


def test_relative_error_uses_tiny_floor_for_zero_reference():
    m = compute_metrics(np.array([1e-30, 0.0]), np.array([0.0, 0.0]))
    assert m.max_rel == pytest.approx(1e-30 / REL_EPS)
    assert m.within_0_1pct == 0.5


def test_scalar_inputs():
    m = compute_metrics(np.float32(2.0), np.array(2.0))
    assert m.elements == 1 and m.max_abs == 0.0
    m = compute_metrics(torch.tensor(3.0), np.array(2.0))
    assert m.max_abs == 1.0


# ---------------------------------------------------------------------------------------------------- NaN / Inf
def test_nan_only_in_dump_side_fails_and_metrics_are_nan():
    b = np.arange(1.0, 9.0)
    a = b.copy()
    a[3] = np.nan
    a[5] += 0.5
    m = compute_metrics(a, b)
    assert (m.nan_a, m.inf_a, m.nan_b, m.inf_b) == (1, 0, 0, 0)
    assert m.finite_pairs == 7 and m.nonfinite_mismatch == 1
    assert m.worst_index == (5,) and (m.worst_a, m.worst_b) == (6.5, 6.0)  # still where the largest error is
    for key in (
        "cosine",
        "max_abs",
        "max_rel",
        "rmse",
        "within_0_1pct",
        "within_0_5pct",
        "euc_dist",
        "max_rel_eps",
        "one_thousandth_ratio",
        "five_thousandths_ratio",
    ):
        assert math.isnan(getattr(m, key)), key
    result, reasons = verdict(m)
    assert result == "fail" and any("NaN/Inf" in r for r in reasons)


def test_nan_only_in_reference_fails_too():
    a = np.ones(4)
    b = a.copy()
    b[0] = np.inf
    m = compute_metrics(a, b)
    assert m.inf_b == 1 and m.nonfinite_mismatch == 1 and verdict(m)[0] == "fail"


def test_same_nonfinite_pattern_passes():
    a = np.array([1.0, np.nan, -np.inf, np.inf, 2.0])
    m = compute_metrics(a, a.copy())
    assert (m.nan_a, m.inf_a, m.nan_b, m.inf_b) == (1, 2, 1, 2)
    assert m.nonfinite_mismatch == 0 and m.finite_pairs == 2
    assert verdict(m)[0] == "pass"


@pytest.mark.parametrize("x, y", [(np.inf, -np.inf), (np.nan, np.inf), (-np.inf, np.nan)])
def test_different_nonfinite_kinds_mismatch(x, y):
    m = compute_metrics(np.array([1.0, x]), np.array([1.0, y]))
    assert m.nonfinite_mismatch == 1 and verdict(m)[0] == "fail"


def test_all_nan_both_sides_has_no_finite_pairs():
    a = np.full((3, 2), np.nan)
    row = compare(a, a.copy()).iloc[0]
    assert row.verdict == "pass" and row.nan_a == 6 and "no finite element pairs" in row.note


# ---------------------------------------------------------------------------------------------------- low precision
def test_ml_dtypes_bfloat16_and_float8_upcast():
    rng = np.random.default_rng(1)
    ref = rng.standard_normal((33, 5)).astype(np.float32)
    bf = ref.astype(ml_dtypes.bfloat16)
    m = compute_metrics(bf, ref, block_bytes=64)
    expected = oneshot(bf.astype(np.float64), ref)
    assert_matches(m, expected, rel=NARROW_REL)
    assert m.max_abs > 0 and m.cosine > 0.999 and verdict(m)[0] == "pass"
    f8 = ref.astype(ml_dtypes.float8_e4m3fn)
    m8 = compute_metrics(f8, ref)
    assert_matches(m8, oneshot(f8.astype(np.float64), ref), rel=NARROW_REL)
    row = compare(bf, ref).iloc[0]
    assert row.dtype_a == "bfloat16" and row.dtype_b == "float32" and "dtype bfloat16 vs float32" in row.note


def test_torch_bfloat16_tensors_match_ml_dtypes():
    rng = np.random.default_rng(2)
    ref = rng.standard_normal((40, 3)).astype(np.float32)
    t = torch.from_numpy(ref).to(torch.bfloat16).requires_grad_()
    m_torch = compute_metrics(t, ref, block_bytes=40)
    m_np = compute_metrics(ref.astype(ml_dtypes.bfloat16), ref, block_bytes=40)
    assert m_torch == m_np
    row = compare(t, torch.from_numpy(ref)).iloc[0]
    assert row.dtype_a == "bfloat16" and row.verdict == "pass"


def test_torch_float64_and_int_keep_precision():
    x = torch.tensor([1.0 + 1e-12, 2.0], dtype=torch.float64)
    assert compute_metrics(x, np.array([1.0, 2.0])).max_abs == pytest.approx(1e-12, rel=1e-3)
    ints = torch.tensor([2**40 + 1, 5])
    assert compute_metrics(ints, np.array([2**40, 5])).max_abs == 1.0


def test_torch_bf16_via_read_block_is_float32_exact():
    t = torch.tensor([[1.0078125, -3.5]], dtype=torch.bfloat16)
    block = read_block(t, (slice(0, 1),))
    assert block.dtype == np.float64 and block.tolist() == [[1.0078125, -3.5]]


# ---------------------------------------------------------------------------------------------------- lazy inputs
def test_dask_xarray_and_zarr_inputs(tmp_path):
    rng = np.random.default_rng(3)
    ref = rng.standard_normal((50, 6))
    pert = ref.copy()
    pert[17, 2] += 0.25
    lazy = da.from_array(pert, chunks=(7, 6))
    arr = xr.DataArray(lazy, dims=("token", "hidden"))
    z = zarr.create_array(tmp_path / "a.zarr", shape=ref.shape, chunks=(11, 6), dtype="float64")
    z[...] = ref
    expected = oneshot(pert, ref)
    for a in (lazy, arr, xr.DataArray(pert)):
        for b in (z, ref, da.from_array(ref, chunks=5)):
            assert_matches(compute_metrics(a, b, block_bytes=96), expected)


def test_shape_mismatch_is_an_error_row_not_an_exception():
    row = compare(np.zeros((3, 4)), np.zeros((4, 3)), names="w").iloc[0]
    assert row.verdict == "shape_mismatch" and row.note == "shape 3×4 vs 4×3; not compared"
    assert row["name"] == "w" and row.shape_a == (3, 4) and row.shape_b == (4, 3)
    with pytest.raises(ValueError, match="shape mismatch"):
        compute_metrics(np.zeros(2), np.zeros(3))


def test_complex_input_is_an_error_row():
    row = compare(np.ones(3, dtype=complex), np.ones(3)).iloc[0]
    assert row.verdict == "dtype_mismatch" and "complex" in row.note
    row = compare(np.ones(3, dtype=complex), np.ones(3, dtype=complex)).iloc[0]
    assert row.verdict == "error" and "complex" in row.note


class SpyArray:
    """An array-like that records every slice read from it (to check the bounded-memory reading)."""

    def __init__(self, data: np.ndarray) -> None:
        self.data = data
        self.shape = data.shape
        self.dtype = data.dtype
        self.reads: list[int] = []

    def __getitem__(self, index):
        block = self.data[index]
        self.reads.append(np.asarray(block).size)
        return block


@pytest.mark.parametrize("shape", [(1000, 30), (3, 5000), (7, 3, 400)])
def test_reads_are_bounded_blocks(shape):
    rng = np.random.default_rng(4)
    data = rng.standard_normal(shape).astype(np.float32)
    a, b = SpyArray(data), SpyArray(data * 2)
    m = compute_metrics(a, b, block_bytes=8 * 1024)  # 1024 elements per block
    assert max(a.reads) <= 1024 and max(b.reads) <= 1024
    assert sum(a.reads) == data.size == sum(b.reads)
    assert_matches(m, oneshot(data, data * 2), rel=NARROW_REL)


def test_top_level_exports():
    import megadump_zarr
    from megadump_zarr import analyse

    assert megadump_zarr.compare is analyse.compare
    assert megadump_zarr.root_cause is analyse.root_cause and megadump_zarr.first_divergence is analyse.first_divergence
    assert set(analyse.__all__) == {
        "RESULT_COLUMNS",
        "compare",
        "error_map",
        "first_divergence",
        "first_nonfinite",
        "root_cause",
    }
