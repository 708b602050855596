"""Integer differences are computed in integer arithmetic: ``max_abs`` of ``2**53 + 1`` against ``2**53`` is 1,
not float64's 0 (its rounding of both values to ``2**53``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from megadump_zarr import TensorDumpConfig, compare, open_dump, tensor_dump
from megadump_zarr.analyse.metrics import compute_metrics
from tests.dump._dump_helpers import MegaKernel, copy_rows_graph

BIG = 2**53


def test_compare_of_int64_beyond_float64_reports_the_exact_difference():
    a = np.array([1, BIG + 1, 3], dtype=np.int64)
    b = np.array([1, BIG, 3], dtype=np.int64)
    row = compare(a, b).iloc[0]
    assert row["verdict"] == "fail" and int(row["mismatches"]) == 1
    assert row["max_abs"] == 1.0
    assert tuple(row["worst_index"]) == (1,)


@pytest.mark.parametrize(
    "a, b, gap",
    [
        (np.array([np.iinfo(np.int64).max]), np.array([np.iinfo(np.int64).min]), 2**64 - 1),
        (np.array([2**64 - 1], dtype=np.uint64), np.array([2**64 - 2], dtype=np.uint64), 1),
        (np.array([-(2**62) - 1, 5]), np.array([-(2**62), 5]), 1),
        (np.array([True, False]), np.array([False, False]), 1),
        (np.array([7], dtype=np.uint8), np.array([250], dtype=np.uint8), 243),
    ],
)
def test_integer_max_abs_is_exact(a, b, gap):
    metrics = compute_metrics(a, b, exact=True)
    assert metrics.max_abs == float(gap) and metrics.mismatches == 1


def test_bitwise_int64_difference_beyond_float64(tmp_path):
    def dump(out, value):
        a = torch.ones(8, 4, dtype=torch.int64)
        a[5, 2] = value
        kernel = MegaKernel(copy_rows_graph(8, 4, 4, dtype=torch.int64), name="copy")
        with tensor_dump(TensorDumpConfig(out, level="L0")) as dumper:
            kernel.launch([a, torch.zeros_like(a)])
            dumper.step()

    dump(tmp_path / "a", BIG + 1)
    dump(tmp_path / "b", BIG)
    result = compare(open_dump(tmp_path / "a"), open_dump(tmp_path / "b"), bitwise=True)
    inputs = result[result["name"] == "a"].iloc[0]
    assert inputs["verdict"] == "fail" and inputs["max_abs"] == 1.0
    assert inputs["note"] == "bitwise: bytes differ in 1 of 32 elements, first at (5, 2)"
    plain = compare(open_dump(tmp_path / "a"), open_dump(tmp_path / "b"))
    row = plain[plain["name"] == "a"].iloc[0]
    assert row["verdict"] == "fail" and row["max_abs"] == 1.0
