"""Issue 23.1: a record whose NaN/Inf pattern differs between the sides never reads as perfect.

An all-NaN record against finite values has no finite pair at all; its metrics over the finite pairs
alone would be cosine 1.0, max_abs 0, rmse 0 next to its ``fail``. They are NaN in the frame, ``n/a``
in the CLI table, null in the JSON, and so are msprobe's EucDist/MaxRelativeErr/ratios.
"""

from __future__ import annotations

import math
from pathlib import Path
import shutil

import numpy as np
import pytest

from megadump_zarr.analyse import compare
from megadump_zarr.read import open_dump
from tests._layout import stored_record

METRICS = ("cosine", "max_abs", "max_rel", "rmse", "within_0_1pct", "within_0_5pct")
MSPROBE = ("euc_dist", "max_rel_eps", "one_thousandth_ratio", "five_thousandths_ratio")


@pytest.fixture
def nan_pair(demo, tmp_path) -> tuple[Path, Path, str]:
    """The demo's L0 dump and a copy with one float record set to all-NaN; returns (a, b, record path)."""
    a = tmp_path / "a"
    shutil.copytree(demo.root / "l0", a)
    b = tmp_path / "b"
    shutil.copytree(demo.root / "l0", b)
    records = open_dump(a).records()
    floats = records[records["dtype"].astype(str).str.startswith("float")]
    path = floats["path"].iloc[0]
    array, index = stored_record(a, path)
    values = np.asarray(array[index])
    assert np.isfinite(values.astype(np.float64)).all() and values.size > 0
    array[index] = np.full(values.shape, np.nan, dtype=values.dtype)
    return a, b, path


def test_frame_metrics_are_nan_where_nan_patterns_differ(nan_pair):
    a, b, path = nan_pair
    result = compare(open_dump(a), open_dump(b))
    row = result[result["path"] == path].iloc[0]
    assert row["verdict"] == "fail" and row["nonfinite_mismatch"] == row["elements"] > 0
    for key in METRICS + MSPROBE:
        assert math.isnan(row[key]), key
    others = result[result["path"] != path]
    assert (others["verdict"] == "pass").all() and (others["cosine"] == 1.0).all()


def test_json_metrics_are_null(nan_pair, cli):
    a, b, path = nan_pair
    res = cli("--json", "compare", a, b)
    assert res.code == 1, res.err
    rows = {r["path"]: r for r in res.json()["results"]}
    row = rows[path]
    assert row["verdict"] == "fail"
    for key in METRICS + MSPROBE:
        assert row[key] is None, (key, row[key])
    assert any(r["cosine"] == 1.0 for p, r in rows.items() if p != path)


def test_table_shows_n_a(nan_pair, cli):
    a, b, path = nan_pair
    res = cli("compare", a, b, "--failures-only")
    assert res.code == 1, res.err
    name = path.rsplit("/", 1)[-1]
    lines = [line for line in res.out.splitlines() if line.lstrip().startswith("fail")]
    assert len(lines) == 1, res.out
    line = lines[0]
    assert line.count("n/a") >= 3, line  # 1-cos, max_abs, max_rel (rmse when it fits)
    assert " 0 " not in line.replace(name, ""), line  # no max_abs/1-cos of 0
