"""The statistics table on disk (plain xarray, no import of ours) and in records()."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from megadump_zarr import TensorDumpConfig, open_dump, tensor_dump
from megadump_zarr.demo.model import MoEBlock


def run(out: Path, mode: str, *, poison=None, **fields):
    block = MoEBlock()
    if poison is not None:
        poison(block)
    cfg = TensorDumpConfig(
        out, level="L1", kernel_names="moe_experts", stages=["expert_up", "combine"], mode=mode, **fields
    )
    with tensor_dump(cfg) as dumper:
        for _ in range(2):
            block(block.make_input())
            dumper.step()
    return open_dump(out)


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    root = tmp_path_factory.mktemp("statistics_read")

    def nan(block):
        block.w_up[2, 0, 0] = float("nan")

    return {
        "root": root,
        "tensor": run(root / "tensor", "tensor"),
        "statistics": run(root / "statistics", "statistics"),
        "nonfinite": run(root / "nonfinite", "nonfinite", poison=nan),
    }


SCRIPT = """
import json, sys, xarray as xr
ds = xr.open_zarr(sys.argv[1])
print(json.dumps({"dims": dict(ds.sizes), "coords": sorted(ds.coords), "vars": sorted(ds.data_vars),
                  "stage": [str(s) for s in ds["stage"].values], "task_id": ds["task_id"].values.tolist(),
                  "name": [str(s) for s in ds["name"].values], "max": ds["max"].values.tolist(),
                  "digest": [int(c) for c in ds["digest"].values], "payload": ds["payload"].values.tolist(),
                  }))
"""


def test_plain_xarray_opens_the_statistics_group(dumps):
    group = dumps["root"] / "statistics" / "rank_0" / "window_0000" / "invocation_000000_forward" / "statistics"
    result = subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-c", SCRIPT, str(group)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "consolidated" not in result.stderr
    found = json.loads(result.stdout)
    assert found["coords"] == sorted(
        [
            "stage",
            "task_id",
            "owner_id",
            "core_type",
            "core_id",
            "worker",
            "io",
            "index",
            "name",
            "param_position",
            "shape",
            "dtype",
            "path",
            "payload",
        ]
    )
    assert found["vars"] == sorted(
        ["element_count", "nan_count", "inf_count", "min", "max", "mean", "l2norm", "digest"]
    )
    records = dumps["statistics"].records()
    mine = records[records["invocation"] == 0]
    assert found["dims"] == {"record": len(mine)}
    assert found["stage"] == list(mine["stage"]) and found["task_id"] == list(mine["task_id"])
    assert found["name"] == list(mine["name"]) and found["max"] == list(mine["max"])
    assert found["digest"] == [int(c) for c in mine["digest"]] and not any(found["payload"])


def test_records_columns_for_every_mode(dumps):
    tensor, stats, nonfinite = (dumps[k].records() for k in ("tensor", "statistics", "nonfinite"))
    assert list(stats.columns) == list(tensor.columns)
    assert list(stats.columns[-4:]) == ["payload", "digest", "element_count", "md5"]
    assert stats["md5"].isna().all()  # msprobe's digest: its statistics dumps only
    assert stats["payload"].dtype == bool and str(stats["digest"].dtype) == "UInt64"
    assert tensor["payload"].all() and tensor["digest"].isna().all()
    assert (tensor["element_count"] == [int(np.prod(s)) for s in tensor["shape"]]).all()
    assert (stats["stored_bytes"] == 0).all() and (stats["stored_shape"] == ()).all()
    assert list(stats["bytes"]) == list(tensor["bytes"]) and list(stats["capture_phase"]) == list(
        tensor["capture_phase"]
    )
    assert list(
        stats[["stage", "task_id", "owner_id", "core_type", "core_id", "io", "index", "name"]].itertuples(index=False)
    ) == list(
        tensor[["stage", "task_id", "owner_id", "core_type", "core_id", "io", "index", "name"]].itertuples(index=False)
    )
    kept = nonfinite[nonfinite["payload"]]
    assert len(kept) > 0 and kept["digest"].notna().all()  # a kept payload gets the device digest too
    assert set(kept["owner_id"].dropna()) == {2}


def test_stored_payload_of_a_kept_record_reads_as_usual(dumps):
    dump = dumps["nonfinite"]
    kept = dump.records()
    kept = kept[kept["payload"]]
    values = dump.record_array(kept["path"].iloc[0]).values
    assert int(np.isnan(values).sum()) == kept["nan_count"].iloc[0]


def test_reading_a_statistics_only_payload_says_so(dumps):
    dump = dumps["statistics"]
    path = dump.records()["path"].iloc[0]
    with pytest.raises(ValueError, match="holds statistics only .* its statistics are in records\\(\\)"):
        dump.record_array(path)
