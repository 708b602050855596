"""A plain interpreter (no megadump_zarr import) reads bfloat16 dumps with xr.open_zarr; every data group opens
without any warning."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import xarray as xr

from megadump_zarr import TensorDumpConfig, tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from megadump_zarr.runtime import MegaKernel
from tests.dump._dump_helpers import open_task, read_json
from tests._packs import stored_rows

BF16 = DemoConfig(dtype=torch.bfloat16)


def l1_bf16_dump(root: Path, monkeypatch) -> tuple[Path, dict]:
    seen: dict = {}
    real = MegaKernel.launch

    def spy(kernel, parameters, *, direction="forward"):
        if kernel.kernel_name == "moe_experts":
            seen["before"] = [p.clone() for p in parameters]
        return real(kernel, parameters, direction=direction)

    monkeypatch.setattr(MegaKernel, "launch", spy)
    block = MoEBlock(BF16)
    with tensor_dump(
        TensorDumpConfig(root, level="L1", kernel_names="moe_experts", stages=("expert_up", "combine"), layout="packs")
    ):
        block(block.make_input())
    return root / "rank_0" / "window_0000" / "invocation_000000_forward", seen


READER = textwrap.dedent("""
    import json, sys
    import xarray as xr
    assert "megadump_zarr" not in sys.modules, "the reader must not import megadump_zarr"
    out = {}
    for path in sys.argv[1:]:
        ds = xr.open_zarr(path)
        out[path] = {name: {"dtype": str(var.dtype), "dims": list(var.dims),
                            "values": var.values.astype("float32").tolist()}
                     for name, var in ds.data_vars.items()}
        out[path]["coords"] = {name: c.values.tolist() for name, c in ds.coords.items()}
    print(json.dumps(out))
""")


def test_plain_interpreter_reads_bfloat16_task_record_packs(tmp_path, monkeypatch):
    """``layout="packs"``: the expert_up tiles are ragged (each expert its own row count), so each stays a task
    group; the combine stage's four same-shape tasks share a pack, which a plain interpreter opens with
    ``task_id``, ``owner_id`` and ``core_id`` as coordinates along ``task``."""
    inv, seen = l1_bf16_dump(tmp_path, monkeypatch)
    xs, counts, w_up = seen["before"][0], seen["before"][1], seen["before"][2]
    up = inv / "stages" / "expert_up"
    assert sorted(p.name for p in up.iterdir() if p.is_dir()) == [f"task_{e:06d}" for e in range(4)]
    (pack,) = sorted((inv / "stages" / "combine").glob("pack_*"))
    groups = [up / f"task_{e:06d}" for e in range(4)]
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", READER, *map(str, groups), str(pack)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    data = json.loads(result.stdout)
    start = 0
    for e, group in enumerate(groups):
        rows = slice(start, start + int(counts[e]))
        start = rows.stop
        got = data[str(group)]
        assert set(got) == {"input_00_xs", "input_01_expert_counts", "input_02_w_up", "output_00_ws", "coords"}
        assert got["input_00_xs"]["dtype"] == "bfloat16"
        assert got["input_00_xs"]["dims"] == ["slot", "hidden"]
        assert got["input_00_xs"]["values"] == xs[rows].float().tolist()
        assert got["input_02_w_up"]["values"] == w_up[e].float().tolist()
        hidden = F.silu(xs[rows] @ w_up[e])  # the task's output, recomputed in bfloat16
        assert got["output_00_ws"]["dtype"] == "bfloat16"
        assert got["output_00_ws"]["values"] == hidden.float().tolist()
        assert got["input_01_expert_counts"]["dtype"] == "int64"
        assert got["coords"]["slot"] == list(range(rows.start, rows.stop))
    got = data[str(pack)]
    window = next(a for a in pack.parents if a.name.startswith("window_"))
    tasks = stored_rows(window, pack.relative_to(window).as_posix())[0]
    assert len(tasks) == 4
    assert got["coords"]["task_id"] == [t["attrs"]["taskId"] for t in tasks]
    assert got["coords"]["owner_id"] == [
        -1 if t["attrs"]["owner"]["id"] is None else t["attrs"]["owner"]["id"] for t in tasks
    ]
    assert got["coords"]["core_id"] == [t["attrs"]["coreId"] for t in tasks]
    assert {"task_id", "owner_id", "core_id", "task_id_stats"}.isdisjoint(name for name in got if name != "coords")
    assert all(var["dims"][0] == "task" for name, var in got.items() if name != "coords")


def test_plain_interpreter_reads_bfloat16_l0(tmp_path):
    block = MoEBlock(BF16)
    x = block.make_input()
    with tensor_dump(TensorDumpConfig(tmp_path, kernel_names="moe_router")):
        block.route(x)
    inv = tmp_path / "rank_0" / "window_0000" / "invocation_000000_forward"
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", READER, str(inv)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout)[str(inv)]
    assert got["x"]["dtype"] == "bfloat16"
    assert got["x"]["values"] == x.float().tolist()
    assert got["norm_weight"]["values"] == block.g.float().tolist()


def data_groups(window: Path) -> list[Path]:
    """Every data group of a window, from its consolidated metadata: each group holding arrays (an L0
    invocation group, an L1 task group); groups between them and the window are plain groups."""
    meta = read_json(window / "zarr.json")["consolidated_metadata"]["metadata"]
    parents = {key.rpartition("/")[0] for key, node in meta.items() if node["node_type"] == "array"}
    groups = []
    for key, node in meta.items():
        parts = key.split("/")
        if node["node_type"] != "group" or key not in parents:
            continue
        if len(parts) == 1 or (len(parts) == 4 and parts[1] == "stages"):
            groups.append(window / key)
    return groups


def open_all_silently(paths: list[Path]) -> list[xr.Dataset]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        datasets = [xr.open_zarr(str(p)) for p in paths]
        for ds in datasets:
            ds.load()
    assert [str(w.message) for w in caught] == []
    return datasets


def test_every_group_opens_without_warning(tmp_path):
    block = MoEBlock(BF16)
    x = block.make_input().requires_grad_()
    with tensor_dump(TensorDumpConfig(tmp_path / "l0")):
        block(x).float().pow(2).mean().backward()
    l0 = data_groups(tmp_path / "l0" / "rank_0" / "window_0000")
    assert len(l0) == 4
    datasets = open_all_silently(l0)
    assert sum(len(ds.data_vars) for ds in datasets) == 5 + 3 + 10 + 15

    block = MoEBlock(BF16)
    x = block.make_input()
    with tensor_dump(
        TensorDumpConfig(
            tmp_path / "l1",
            level="L1",
            kernel_names="moe_experts",
            stages=("expert_up", "expert_down", "combine"),
            layout="packs",
        )
    ):
        block(x)
    with tensor_dump(
        TensorDumpConfig(tmp_path / "g", level="L1", kernel_names="moe_dispatch", stages="gather", layout="packs")
    ):
        block.route(block.make_input())
    l1 = data_groups(tmp_path / "l1" / "rank_0" / "window_0000") + data_groups(
        tmp_path / "g" / "rank_0" / "window_0000"
    )
    packs = [p for p in l1 if p.name.startswith("pack_")]
    # the expert tiles are ragged (a shape unique in its stage stays a task group), as is combine's last tile;
    # combine's 4 full tiles and gather's tasks share a shape each
    assert sorted(p.parent.name for p in l1 if p.name.startswith("task_")) == (
        ["combine"] + ["expert_down"] * 4 + ["expert_up"] * 4
    )
    tasks = sum(read_json(p / "zarr.json")["attributes"]["taskCount"] for p in packs)
    assert tasks == 4 + (4 * 8 + 5)  # gather: 8 one-row shards per full tile, 5 for the last
    datasets = open_all_silently(l1)
    bf16 = 0
    for ds in datasets:
        for var in ds.data_vars.values():
            records = var.attrs.get("records", [var.attrs])
            if records[0].get("originalDtype") == "bfloat16":
                assert var.dtype.name == "bfloat16"
                bf16 += 1
    assert bf16 > 0
    # a task's record values equal the window's own view of them
    ds = open_task(
        tmp_path / "l1" / "rank_0" / "window_0000" / "invocation_000000_forward" / "stages" / "combine" / "task_000017"
    )
    assert ds["output_00_out"].shape == (5, 16)
    last = (
        tmp_path / "l1" / "rank_0" / "window_0000" / "invocation_000000_forward" / "stages" / "combine" / "task_000017"
    )
    assert (last / "zarr.json").is_file()  # the ragged last tile is a task group of its own
    assert ds["token"].values.tolist() == list(range(32, 37))
    assert np.array_equal(ds["input_00_x"].values.astype(np.float32), x[32:].float().numpy())
