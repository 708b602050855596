"""Dump-level glue against a tiny in-memory FakeDump implementing records(), record_array(path), tensor(name)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
import xarray as xr

from megadump_zarr.analyse import RESULT_COLUMNS, compare, first_divergence, first_nonfinite
from megadump_zarr.analyse.compare import execution_order


class FakeDump:
    """A stand-in for ``megadump_zarr.read.Dump``: the three methods the analysis layer uses.

    Records are L1-style: (invocation, stage, task_id, io, index, name) → array. ``records()`` lists
    them deliberately in *path* order (stage names alphabetical), not execution order, to check that
    the analysis layer orders rows itself.
    """

    def __init__(self, arrays: dict[tuple, np.ndarray], *, stats: bool = True, rank: int = 0) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        rows = []
        for (invocation, stage, task_id, io, index, name), data in arrays.items():
            path = (
                f"rank_{rank}/window_0000/invocation_{invocation:06d}_forward/stages/{stage}/"
                f"task_{task_id:06d}/{io}_{index:02d}_{name}"
            )
            self.arrays[path] = np.asarray(data)
            rows.append(
                dict(
                    rank=rank,
                    window=0,
                    invocation=invocation,
                    step=0,
                    direction="forward",
                    kernel="k",
                    level="L1",
                    stage=stage,
                    task_id=task_id,
                    stage_task_index=0,
                    owner_label=None,
                    owner_id=None,
                    core_type="VECTOR",
                    core_id=0,
                    worker=None,
                    io=io,
                    index=index,
                    name=name,
                    dtype=str(np.asarray(data).dtype),
                    shape=tuple(np.shape(data)),
                    stored_shape=tuple(np.shape(data)),
                    truncated=False,
                    bytes=0,
                    stored_bytes=0,
                    min=np.nan,
                    max=np.nan,
                    mean=np.nan,
                    l2norm=np.nan,
                    nan_count=int(np.isnan(data).sum()) if stats else None,
                    inf_count=int(np.isinf(data).sum()) if stats else None,
                    path=path,
                    role=None,
                    capture_phase="before" if io == "input" else "after",
                    status="complete",
                )
            )
        self._records = pd.DataFrame(rows).sort_values("path", kind="stable").reset_index(drop=True)
        for col in ("task_id", "worker", "nan_count", "inf_count", "index"):
            self._records[col] = self._records[col].astype("Int64")
        self.tensor_calls: list[tuple[str, dict]] = []

    def records(self) -> pd.DataFrame:
        return self._records.copy()

    def record_array(self, path: str) -> xr.DataArray:
        if path not in self.arrays:
            raise KeyError(path)
        return xr.DataArray(self.arrays[path])

    def tensor(self, name: str, **select: Any) -> xr.DataArray:
        self.tensor_calls.append((name, select))
        recs = self._records[self._records["name"] == name]
        for key, value in select.items():
            recs = recs[recs[key] == value]
        if recs.empty:
            raise KeyError(name)
        if len(recs) > 1:
            raise ValueError(f"{name!r} is ambiguous: {len(recs)} records")
        return xr.DataArray(self.arrays[recs["path"].iloc[0]])


RNG = np.random.default_rng(0)
# stage "zeta" runs first (tasks 0-1), "alpha" second (task 2): path order differs from execution order
BASE = {
    (0, "zeta", 0, "input", 0, "x"): RNG.standard_normal((6, 4)),
    (0, "zeta", 0, "output", 0, "h"): RNG.standard_normal((6, 4)),
    (0, "zeta", 1, "output", 0, "h"): RNG.standard_normal((3, 4)),
    (0, "alpha", 2, "input", 0, "h"): RNG.standard_normal((9, 4)),
    (0, "alpha", 2, "output", 0, "y"): RNG.standard_normal((9, 2)),
    (1, "zeta", 0, "output", 0, "h"): RNG.standard_normal((6, 4)),
}
EXEC_ORDER = [(0, 0, "input"), (0, 0, "output"), (0, 1, "output"), (0, 2, "input"), (0, 2, "output"), (1, 0, "output")]


def perturbed(changes: dict[tuple, Any]) -> dict[tuple, np.ndarray]:
    out = {k: v.copy() for k, v in BASE.items()}
    for key, fn in changes.items():
        out[key] = fn(out[key])
    return out


def keys_of(df: pd.DataFrame) -> list[tuple]:
    return [(r.invocation, r.task_id, r.io) for r in df.itertuples()]


def test_records_are_reordered_into_execution_order():
    dump = FakeDump(BASE)
    assert keys_of(dump.records()) != EXEC_ORDER  # path order puts stage "alpha" first
    assert keys_of(execution_order(dump.records())) == EXEC_ORDER


def test_identical_dumps_pass_in_execution_order():
    result = compare(FakeDump(BASE), FakeDump(BASE))
    assert list(result.columns) == list(RESULT_COLUMNS)
    assert (result.verdict == "pass").all() and len(result) == len(BASE)
    assert keys_of(result) == EXEC_ORDER
    assert result.cosine.tolist() == pytest.approx([1.0] * len(BASE))
    assert first_divergence(result) is None
    assert result.path.str.startswith("rank_0/window_0000/").all()


def test_perturbed_record_fails_and_first_divergence_is_earliest():
    later = (0, "alpha", 2, "output", 0, "y")
    earlier = (0, "zeta", 1, "output", 0, "h")
    other = perturbed({later: lambda a: a * 1.5, earlier: lambda a: a + np.eye(3, 4) * 0.5})
    result = compare(FakeDump(BASE), FakeDump(other))
    failing = result[result.verdict == "fail"]
    assert keys_of(failing) == [(0, 1, "output"), (0, 2, "output")]
    assert (result.drop(failing.index).verdict == "pass").all()
    first = first_divergence(result)
    assert (first["name"], first.task_id, first.stage) == ("h", 1, "zeta")
    assert first.max_abs == pytest.approx(0.5)
    # re-sorting the frame does not change the answer: the index keeps execution order
    assert first_divergence(result.sort_values("name", ascending=False)).task_id == 1


def test_missing_records_and_shape_mismatch():
    only_a = (0, "alpha", 2, "input", 0, "h")
    a = dict(BASE)
    b = {k: v for k, v in BASE.items() if k != only_a}
    b[(0, "alpha", 2, "output", 1, "extra")] = np.zeros(3)
    b[(0, "zeta", 0, "input", 0, "x")] = np.zeros((4, 6))
    result = compare(FakeDump(a), FakeDump(b))
    by_name = {(r.name, r.io, r.task_id): r for r in result.itertuples()}
    missing_a = by_name[("h", "input", 2)]
    assert missing_a.verdict == "missing" and missing_a.note == "only in dump a" and missing_a.shape_a == (9, 4)
    missing_b = by_name[("extra", "output", 2)]
    assert missing_b.verdict == "missing" and missing_b.note == "only in dump b"
    err = by_name[("x", "input", 0)]
    assert err.verdict == "shape_mismatch" and err.note == "shape 6×4 vs 4×6; not compared"
    # b-only record sits in execution order (after task 2's output y)
    order = [(r.name, r.task_id) for r in result.itertuples()]
    assert order.index(("extra", 2)) == order.index(("y", 2)) + 1
    assert first_divergence(result).name == result.index[0]  # the shape error on the very first record
    assert first_divergence(result.drop(result.index[0])) is None
    assert first_divergence(result.drop(result.index[0]), include_missing=True)["name"] == "h"


def test_selection_and_names_filter_records():
    result = compare(FakeDump(BASE), FakeDump(BASE), invocation=0, io="output")
    assert keys_of(result) == [(0, 0, "output"), (0, 1, "output"), (0, 2, "output")]
    result = compare(FakeDump(BASE), FakeDump(BASE), names="h", task_id=[0, 2])
    assert keys_of(result) == [(0, 0, "output"), (0, 2, "input"), (1, 0, "output")]
    with pytest.raises(
        ValueError, match=r"unknown record filter 'colour'; filters: rank, .*, or a records\(\) column: rank, "
    ):
        compare(FakeDump(BASE), FakeDump(BASE), colour="red")


def test_unreadable_record_is_an_error_row():
    a, b = FakeDump(BASE), FakeDump(BASE)
    broken = b.records()["path"].iloc[0]
    del b.arrays[broken]
    result = compare(a, b)
    row = result[result.path == broken].iloc[0]
    assert row.verdict == "error" and "KeyError" in row.note


def test_float64_default_tolerance_and_user_tolerances():
    other = perturbed({(0, "zeta", 0, "input", 0, "x"): lambda a: a + 1e-4})
    default = compare(FakeDump(BASE), FakeDump(other))  # float64: rtol 1e-7, atol 1e-7
    assert default.allclose.tolist() == [False, True, True, True, True, True]
    assert default.verdict.tolist() == ["fail"] + ["pass"] * 5
    assert (default.rtol == 1e-7).all() and (default.atol == 1e-7).all()
    x = default.iloc[0]
    assert x.mismatches == 24 and x.first_mismatch == (0, 0) and x.worst_index is not None
    loose = compare(FakeDump(BASE), FakeDump(other), atol=1e-3)  # rtol keeps its default
    assert (loose.verdict == "pass").all() and (loose.atol == 1e-3).all() and (loose.rtol == 1e-7).all()
    assert first_divergence(default)["name"] == "x" and first_divergence(loose) is None


def test_progress_bar_runs(capsys):
    result = compare(FakeDump(BASE), FakeDump(BASE), progress=True)
    assert (result.verdict == "pass").all()


# ---------------------------------------------------------------------------------------------------- dump vs reference
def test_dump_against_reference_dict_and_dataset():
    dump = FakeDump(BASE)
    y = BASE[(0, "alpha", 2, "output", 0, "y")]
    x = BASE[(0, "zeta", 0, "input", 0, "x")]
    ref = {"y": torch.from_numpy(y).float(), "x": x, "nowhere": np.zeros(2)}
    result = compare(dump, ref, invocation=0)
    assert result["name"].tolist() == ["x", "y", "nowhere"]  # execution order, unknown names last
    assert result.verdict.tolist() == ["pass", "pass", "missing"]
    assert result.note.iloc[2] == "not in the dump"
    assert result.stage.tolist()[:2] == ["zeta", "alpha"] and result.task_id.tolist()[:2] == [0, 2]
    assert result.invocation.tolist() == [0, 0, 0]
    assert dump.tensor_calls == [("x", {"invocation": 0}), ("y", {"invocation": 0})]

    ds = xr.Dataset({"y": (("r", "c"), y * 1.5)})
    result = compare(dump, ds, invocation=0)
    assert result.verdict.tolist() == ["fail"] and first_divergence(result)["name"] == "y"


def test_reference_names_missing_and_errors():
    dump = FakeDump(BASE)
    result = compare(dump, {"x": BASE[(0, "zeta", 0, "input", 0, "x")]}, names=["x", "y", "h"], invocation=0)
    by_name = result.set_index("name")
    assert by_name.loc["x", "verdict"] == "pass"
    assert by_name.loc["y", "verdict"] == "missing" and by_name.loc["y", "note"] == "not in the reference"
    # "h" is in the dump but not in the reference
    assert by_name.loc["h", "verdict"] == "missing"
    # ambiguous tensor() → error row carrying the read layer's message
    result = compare(dump, {"h": np.zeros((6, 4))})
    assert result.verdict.tolist() == ["error"] and "ambiguous" in result.note.iloc[0]


def test_argument_errors():
    with pytest.raises(TypeError, match="dump under test first"):
        compare({"x": np.zeros(1)}, FakeDump(BASE))
    with pytest.raises(TypeError, match="a dump can be compared"):
        compare(FakeDump(BASE), np.zeros(3))
    with pytest.raises(TypeError, match="only applies to dumps"):
        compare(np.zeros(1), np.zeros(1), rank=0)


def test_mappings_compare_name_by_name():
    a = {"p": np.ones(3), "q": np.zeros(2)}
    b = xr.Dataset({"q": ("i", np.zeros(2)), "p": ("j", np.ones(3) * 3), "r": ("k", np.ones(1))})
    result = compare(a, b)
    assert result["name"].tolist() == ["p", "q", "r"]
    assert result.verdict.tolist() == ["fail", "pass", "missing"]


# ---------------------------------------------------------------------------------------------------- first_nonfinite
def test_first_nonfinite_uses_stats_in_execution_order():
    def plant(a):
        a = a.copy()
        a[0, 0] = np.nan
        return a

    def plant_inf(a):
        a = a.copy()
        a[1, 1] = -np.inf
        return a

    dump = FakeDump(perturbed({(0, "alpha", 2, "output", 0, "y"): plant, (0, "zeta", 1, "output", 0, "h"): plant_inf}))
    dump.arrays.clear()  # prove no data is read
    hit = first_nonfinite(dump)
    assert (hit["name"], hit.task_id, hit.inf_count) == ("h", 1, 1)
    hit = first_nonfinite(dump, stage="alpha")
    assert (hit["name"], hit.nan_count) == ("y", 1)
    assert first_nonfinite(dump, invocation=1) is None
    assert first_nonfinite(FakeDump(BASE)) is None


def test_first_nonfinite_without_stats_raises():
    with pytest.raises(ValueError, match="stats=False"):
        first_nonfinite(FakeDump(BASE, stats=False))
