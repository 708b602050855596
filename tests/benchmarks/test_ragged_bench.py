"""``python -m benchmarks.ragged --quick``: every workload reports the five layouts with positive figures, and
the prototype concatenated layout stores fewer files than the tasks layout (issue 21)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr

from benchmarks import ragged
from benchmarks._ragged_concat import ConcatWriter, concat_records, read_concat_task


def test_quick_run_reports_every_layout_with_positive_figures(tmp_path, capsys):
    out = tmp_path / "ragged.json"
    assert ragged.main(["--quick", "--json", str(out), "--dir", str(tmp_path)]) == 0
    doc = json.loads(out.read_text())
    assert len(doc["run"]["load_average_before"]) == 3
    workloads = {e["workload"] for e in doc["entries"]}
    assert len(workloads) == 2 and any(w.startswith("demo") for w in workloads)
    for workload in workloads:
        rows = {e["layout"]: e for e in doc["entries"] if e["workload"] == workload}
        assert set(rows) == set(ragged.LAYOUTS)
        for row in rows.values():
            for key in ("files", "dirs", "bytes", "puts", "write_s", "write_cpu_s", "floor_s", "read_one_s"):
                assert row[key] > 0, (workload, row["layout"], key)
            assert row["records_s"] > 0 and row["records"] > 0 and row["bytes_per_payload"] > 0
            assert row["puts"] >= row["files"]  # every stored file was written at least once
        for concat in ("concat256", "concat4m", "concat_lean"):
            assert rows[concat]["files"] < rows["tasks"]["files"], workload
            assert rows[concat]["files_vs_tasks"] == rows[concat]["files"] / rows["tasks"]["files"]
    assert list(tmp_path.glob("megadump-bench-*")) == []  # the scratch dumps are removed
    assert "files/tasks" in capsys.readouterr().out


@pytest.mark.parametrize("lean", [False, True])
def test_concat_layout_reads_each_task_back(tmp_path, lean):
    rows = [3, 5, 1, 5]
    window = ragged.synthetic_window(rows, 8)
    ConcatWriter(str(tmp_path), row_chunk=4, lean=lean).write([window])
    stage = "rank_0/window_0000/invocation_000000_forward/stages/expert_up"
    data = {a.path: a.data for a in window.invocations[0].arrays}
    for task in range(len(rows)):
        got = read_concat_task(str(tmp_path), stage, "output_00_y", task)
        assert got.shape == (rows[task], 8)
        assert got.tobytes() == data[f"stages/expert_up/task_{task:06d}/output_00_y"].tobytes()
    table = concat_records(str(tmp_path))
    assert len(table) == 2 * len(rows)
    shapes = table[table["name"] == "input_00_x"].sort_values("task_id")["shape"].tolist()
    assert shapes == [(r, 8) for r in rows]
    assert np.isfinite(table["l2norm"]).all()
    ds = xr.open_zarr(tmp_path / stage)  # plain xarray: one task's rows through the row -> task coordinate
    one = ds.set_xindex("token_task_id").sel(token_task_id=3)["output_00_y"].values
    assert one.tobytes() == data["stages/expert_up/task_000003/output_00_y"].tobytes()
    assert ("task_id" in ds.coords) is not lean and ("token" in ds.coords) is not lean
