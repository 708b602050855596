"""L1 (task boundary) dumps: demo values against independently computed task-boundary tensors, broadcast shards,
placement, selection, every seed planning rule with its exact error, limits and truncation."""

from __future__ import annotations

import re
from math import ceil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from megadump_zarr import TensorDumpConfig, tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from megadump_zarr.dump.l1_plan import build_record_plans, prepare_l1_dump, task_locations
from megadump_zarr.dump.l1_views import L1TensorView, L1TensorViewContext, default_tensor_view
from megadump_zarr.l1 import L1_ANY_WORKER, L1_DUMP_PAYLOAD_BASE, read_l1_buffer
from megadump_zarr.runtime import Graph, MegaKernel, SplitSpec, execute
from tests.dump._dump_helpers import (
    assert_same,
    compile_graph,
    copy_rows_graph,
    node_attrs,
    op,
    read_array,
    read_json,
    spec,
    view_children,
)

EXPERT_STAGES = ("expert_up", "expert_down", "unpermute", "combine")


def l1_config(root: Path, **kw: Any) -> TensorDumpConfig:
    return TensorDumpConfig(root, level="L1", **kw)


def task_dir(invocation: Path, stage: str, task_id: int, worker: int | None = None) -> Path:
    name = f"task_{task_id:06d}" + ("" if worker is None else f"_worker_{worker:03d}")
    return invocation / "stages" / stage / name


def group_children(group: Path) -> tuple[list[str], list[str]]:
    """(groups, arrays) directly below ``group`` in the schema-6 view, from their own documents (groups
    between the window and the data groups carry no consolidated metadata; packs expand to task groups)."""
    return view_children(group)


def record_arrays(task: Path) -> list[str]:
    return [name for name in group_children(task)[1] if name.startswith(("input_", "output_"))]


# --------------------------------------------------------------------------- independent expected values
class Expected:
    """The expert kernel's tensors at every task boundary, recomputed from a second identical block."""

    def __init__(self, dtype: torch.dtype) -> None:
        block = MoEBlock(DemoConfig(dtype=dtype))
        c = block.config
        self.x = block.make_input()
        routing = block.route(self.x)  # runs the router/dispatch kernels with no session active
        self.xs, self.counts = routing["xs"], routing["expert_counts"]
        self.inv, self.gate = routing["inverse_order"], routing["gate"]
        self.w_up, self.w_down = block.w_up, block.w_down
        self.rows = []
        start = 0
        for e in range(c.n_experts):
            self.rows.append(slice(start, start + int(self.counts[e])))
            start += int(self.counts[e])
        self.hidden = torch.zeros(c.tokens, c.d_model, dtype=dtype)
        self.ys = torch.zeros(c.tokens, c.d_model, dtype=dtype)
        for e, r in enumerate(self.rows):
            self.hidden[r] = F.silu(self.xs[r] @ self.w_up[e])
            self.ys[r] = self.hidden[r] @ self.w_down[e]
        self.ws_tokens = self.ys[self.inv]
        self.out = self.x + self.gate[:, None] * self.ws_tokens
        self.tiles = [
            slice(i * c.tile_rows, min((i + 1) * c.tile_rows, c.tokens)) for i in range(ceil(c.tokens / c.tile_rows))
        ]
        self.config = c
        self.element = torch.empty((), dtype=dtype).element_size()


def run_expert_dump(root: Path, dtype: torch.dtype, **kw: Any) -> tuple[Path, torch.Tensor, Any]:
    block = MoEBlock(DemoConfig(dtype=dtype))
    x = block.make_input()
    with tensor_dump(l1_config(root, kernel_names="moe_experts", **kw)) as dumper:
        out = block(x)
    return root / "rank_0" / "window_0000" / "invocation_000000_forward", out, dumper


DTYPES = [pytest.param(torch.float32, id="float32"), pytest.param(torch.bfloat16, id="bfloat16")]


@pytest.mark.parametrize("dtype", DTYPES)
def test_expert_stages_equal_task_boundary_values(tmp_path, dtype):
    exp = Expected(dtype)
    D, E, size = exp.config.d_model, exp.config.n_experts, exp.element
    name = str(dtype).removeprefix("torch.")
    inv, out, _ = run_expert_dump(tmp_path, dtype, stages=("expert_up", "expert_down", "combine"))
    assert torch.equal(out, exp.out)  # the recomputation is the runtime's own arithmetic
    assert group_children(inv / "stages")[0] == ["combine", "expert_down", "expert_up"]

    for e, r in enumerate(exp.rows):
        note_rows = f"expert {e} rows [{r.start}, {r.stop})"
        up = task_dir(inv, "expert_up", e)
        assert record_arrays(up) == ["input_00_xs", "input_01_expert_counts", "input_02_w_up", "output_00_ws"]
        assert_same(read_array(up / "input_00_xs"), exp.xs[r])
        assert_same(read_array(up / "input_01_expert_counts"), exp.counts)
        assert_same(read_array(up / "input_02_w_up"), exp.w_up[e])
        assert_same(read_array(up / "output_00_ws"), exp.hidden[r])
        attrs = node_attrs(up / "output_00_ws")
        assert {k: v for k, v in attrs.items() if k != "stats"} == {
            "name": "ws",
            "paramPosition": 4,
            "io": "output",
            "index": 0,
            "capturePhase": "after",
            "sourceOffsetBytes": r.start * D * size,
            "declaredShape": [exp.config.tokens, D],
            "actualShape": [r.stop - r.start, D],
            "storedShape": [r.stop - r.start, D],
            "originalDtype": name,
            "storedDtype": name,
            "fullBytes": (r.stop - r.start) * D * size,
            "storedBytes": (r.stop - r.start) * D * size,
            "truncated": False,
            "note": note_rows,
        }
        w_attrs = node_attrs(up / "input_02_w_up")
        assert (w_attrs["capturePhase"], w_attrs["sourceOffsetBytes"], w_attrs["actualShape"], w_attrs["note"]) == (
            "before",
            e * D * D * size,
            [D, D],
            f"expert {e} weights",
        )
        c_attrs = node_attrs(up / "input_01_expert_counts")
        assert (c_attrs["originalDtype"], c_attrs["note"], c_attrs["sourceOffsetBytes"], c_attrs["fullBytes"]) == (
            "int64",
            "",
            0,
            E * 8,
        )
        assert node_attrs(up / "input_00_xs")["note"] == note_rows
        assert node_attrs(up)["taskId"] == e

        down = task_dir(inv, "expert_down", E + e)
        assert record_arrays(down) == ["input_00_ws", "input_01_expert_counts", "input_02_w_down", "output_00_ys"]
        assert_same(read_array(down / "input_00_ws"), exp.hidden[r])
        assert_same(read_array(down / "input_02_w_down"), exp.w_down[e])
        assert_same(read_array(down / "output_00_ys"), exp.ys[r])
        assert node_attrs(down / "input_00_ws")["capturePhase"] == "before"
        assert node_attrs(down / "output_00_ys")["capturePhase"] == "after"

    first_combine = 2 * E + len(exp.tiles)  # expert_up, expert_down, then unpermute's tiles
    for i, rows in enumerate(exp.tiles):
        comb = task_dir(inv, "combine", first_combine + i)
        assert record_arrays(comb) == ["input_00_x", "input_01_ws", "input_02_gate", "output_00_out"]
        assert_same(read_array(comb / "input_00_x"), exp.x[rows])
        assert_same(read_array(comb / "input_01_ws"), exp.ws_tokens[rows])
        assert_same(read_array(comb / "input_02_gate"), exp.gate[rows])
        assert_same(read_array(comb / "output_00_out"), exp.out[rows])
        attrs = node_attrs(comb / "output_00_out")
        n = rows.stop - rows.start
        assert (attrs["sourceOffsetBytes"], attrs["actualShape"], attrs["fullBytes"], attrs["note"]) == (
            rows.start * D * size,
            [n, D],
            n * D * size,
            "",
        )
        g = node_attrs(comb / "input_02_gate")
        assert (g["sourceOffsetBytes"], g["actualShape"]) == (rows.start * size, [n])
    # the last tile is clipped: 37 tokens in tiles of 8
    assert node_attrs(task_dir(inv, "combine", first_combine + 4) / "input_00_x")["actualShape"] == [5, D]


@pytest.mark.parametrize("dtype", DTYPES)
def test_workspace_hidden_activations_only_visible_at_l1(tmp_path, dtype):
    exp = Expected(dtype)
    l1_inv, _, _ = run_expert_dump(tmp_path / "l1", dtype, stages="expert_up", io="output")
    block = MoEBlock(DemoConfig(dtype=dtype))
    with tensor_dump(TensorDumpConfig(tmp_path / "l0", kernel_names="moe_experts", tensor_names="ws")):
        block(block.make_input())
    l0_ws = read_array(tmp_path / "l0" / "rank_0" / "window_0000" / "invocation_000000_forward" / "ws")
    assert_same(l0_ws, exp.ws_tokens)  # after the launch the workspace holds the unpermuted ys
    for e, r in enumerate(exp.rows):
        stored = read_array(task_dir(l1_inv, "expert_up", e) / "output_00_ws")
        assert_same(stored, exp.hidden[r])
        assert not np.array_equal(stored.astype(np.float32), l0_ws[r].astype(np.float32))


@pytest.mark.parametrize("dtype", DTYPES)
def test_unpermute_outputs(tmp_path, dtype):
    exp = Expected(dtype)
    inv, _, _ = run_expert_dump(tmp_path, dtype, stages="unpermute", io="output")
    E = exp.config.n_experts
    for i, rows in enumerate(exp.tiles):
        task = task_dir(inv, "unpermute", 2 * E + i)
        assert record_arrays(task) == ["output_00_ws"]
        assert_same(read_array(task / "output_00_ws"), exp.ws_tokens[rows])
        assert node_attrs(task / "output_00_ws")["capturePhase"] == "after"


def test_all_four_expert_stages_with_inputs(tmp_path):
    exp = Expected(torch.float32)
    inv, _, _ = run_expert_dump(tmp_path, torch.float32, stages=EXPERT_STAGES)
    task = task_dir(inv, "unpermute", 2 * exp.config.n_experts)
    assert "input_00_ys" in record_arrays(task)


def test_permute_bwd_stage_dump(tmp_path):
    block = MoEBlock()
    x = block.make_input().requires_grad_()
    with tensor_dump(l1_config(tmp_path, kernel_names="moe_experts_backward", stages="permute_bwd")):
        block(x).float().pow(2).mean().backward()
    assert (tmp_path / "rank_0" / "window_0000" / "invocation_000000_backward" / "stages" / "permute_bwd").is_dir()


def test_backward_expert_stage_values(tmp_path, monkeypatch):
    block = MoEBlock()
    x = block.make_input().requires_grad_()
    captured = {}
    real = MegaKernel.launch

    def spy(kernel, parameters, *, direction="forward"):
        runtime = real(kernel, parameters, direction=direction)
        if direction == "backward":
            captured["after"] = [p.clone() for p in parameters]
        return runtime

    monkeypatch.setattr(MegaKernel, "launch", spy)
    with tensor_dump(l1_config(tmp_path, kernel_names="moe_experts_backward", stages="expert_up_bwd", io="output")):
        block(x).float().pow(2).mean().backward()
    inv = tmp_path / "rank_0" / "window_0000" / "invocation_000000_backward"
    counts = captured["after"][3]
    start = 0
    tasks = view_children(inv / "stages" / "expert_up_bwd")[0]
    assert len(tasks) == 4
    for e, name in enumerate(tasks):
        rows = slice(start, start + int(counts[e]))
        start = rows.stop
        assert_same(
            read_array(inv / "stages" / "expert_up_bwd" / name / "output_00_grad_xs"), captured["after"][13][rows]
        )
        assert_same(
            read_array(inv / "stages" / "expert_up_bwd" / name / "output_01_grad_w_up"), captured["after"][14][e]
        )
        assert node_attrs(inv / "stages" / "expert_up_bwd" / name)["owner"] == {"label": "expert", "id": e}


# --------------------------------------------------------------------------- task attributes and placement
def seed_placement(runtime: Any) -> dict[int, tuple[str, int]]:
    """The seed's rule, computed here from the RuntimeConfig: cube/mix on schedule index % (workers // 2),
    vector on schedule index % (workers // vector_worker_stride)."""
    cfg, stride = runtime.host_config, runtime.spec.vector_worker_stride
    workers = int(cfg.num_workers)
    out = {}
    for slot, (name, indices) in enumerate(
        (("AIC", cfg.cube_task_indices), ("AIV", cfg.vector_task_indices), ("MIX", cfg.mix_task_indices))
    ):
        group = workers // stride if name == "AIV" else workers // 2
        for position in range(int(cfg.task_index_num[slot])):
            out[int(indices[position])] = (name, position % group)
    return out


def test_task_group_attrs_and_placement(tmp_path, monkeypatch):
    block = MoEBlock()
    x = block.make_input()
    runtimes = {}
    real = MegaKernel.launch

    def spy(kernel, parameters, *, direction="forward"):
        runtimes[kernel.kernel_name] = real(kernel, parameters, direction=direction)
        return runtimes[kernel.kernel_name]

    monkeypatch.setattr(MegaKernel, "launch", spy)
    with tensor_dump(
        l1_config(tmp_path, kernel_names="moe_experts", stages=("expert_up", "expert_down", "combine"), io="output")
    ):
        block(x)
    runtime = runtimes["moe_experts"]
    placement = seed_placement(runtime)
    # the demo's numbers, spelled out: 4 mix, 4 cube, 5 + 5 vector tasks on 8 workers
    assert [placement[t] for t in range(18)] == (
        [("MIX", i) for i in range(4)]
        + [("AIC", i) for i in range(4)]
        + [("AIV", p % 4) for p in range(5)]
        + [("AIV", p % 4) for p in range(5, 10)]
    )
    inv = tmp_path / "rank_0" / "window_0000" / "invocation_000000_forward"
    seen = 0
    for stage in ("expert_up", "expert_down", "combine"):
        for task in [inv / "stages" / stage / name for name in view_children(inv / "stages" / stage)[0]]:
            attrs = node_attrs(task)
            tid = attrs["taskId"]
            assert task.name == f"task_{tid:06d}"
            assert runtime.task_stage_names[tid] == stage == attrs["stage"]
            assert (attrs["coreType"], attrs["coreId"]) == placement[tid]
            assert attrs["stageTaskIndex"] == int(runtime.host_config.all_tasks[tid].task_index)
            owner = runtime.metadata.task_owner_ids.get(tid)
            assert attrs["owner"] == {"label": "expert", "id": owner}
            assert attrs["workerId"] is None
            assert attrs["tensorCount"] == 1
            seen += 1
    assert seen == 4 + 4 + 5
    assert node_attrs(task_dir(inv, "expert_up", 2))["owner"] == {"label": "expert", "id": 2}
    assert node_attrs(task_dir(inv, "combine", 15))["stageTaskIndex"] == 2
    assert node_attrs(task_dir(inv, "combine", 15))["owner"] == {"label": "expert", "id": None}
    inv_attrs = node_attrs(inv)
    assert (inv_attrs["taskCount"], inv_attrs["recordCount"], inv_attrs["executionMode"]) == (13, 13, "event_driven")
    assert inv_attrs["deviceBufferBytes"] > L1_DUMP_PAYLOAD_BASE
    manifest = node_attrs(tmp_path / "rank_0" / "window_0000")
    assert (manifest["level"], manifest["capturePhaseSemantics"]) == ("L1", "task_boundary")


def test_device_buffer_bytes_attr_matches_plan(tmp_path, monkeypatch):
    import megadump_zarr.dump.dumper as dumper_module

    totals = []
    real = dumper_module.prepare_l1_dump

    def spy(*a, **k):
        prepared = real(*a, **k)
        totals.append(prepared.total_bytes)
        return prepared

    monkeypatch.setattr(dumper_module, "prepare_l1_dump", spy)
    inv, _, _ = run_expert_dump(tmp_path, torch.float32, stages="expert_up")
    assert node_attrs(inv)["deviceBufferBytes"] == totals[0]
    assert totals[0] % 64 == 0


# --------------------------------------------------------------------------- broadcast (aiv_pipeline)
def broadcast_dump(root: Path, **kw: Any):
    block = MoEBlock()
    x = block.make_input()
    with tensor_dump(l1_config(root, kernel_names="moe_dispatch", stages="gather", **kw)):
        routing = block.route(x)
    return root / "rank_0" / "window_0000" / "invocation_000000_forward", block, routing


def shard(start: int, stop: int, worker: int, workers: int = 8) -> tuple[int, int]:
    per = ceil((stop - start) / workers)
    begin = min(start + worker * per, stop)
    return begin, min(begin + per, stop)


def test_broadcast_shards(tmp_path):
    inv, block, routing = broadcast_dump(tmp_path, tensor_names=("order", "xs"))
    order, xs = routing["order"], routing["xs"]
    groups = group_children(inv / "stages" / "gather")[0]
    expected_groups = []
    for tile in range(5):
        start, stop = tile * 8, min(tile * 8 + 8, 37)
        for worker in range(8):
            begin, end = shard(start, stop, worker)
            if end == begin:
                continue  # empty shard: no worker runs, no record
            expected_groups.append(f"task_{tile:06d}_worker_{worker:03d}")
            task = task_dir(inv, "gather", tile, worker)
            assert record_arrays(task) == ["input_01_order", "output_00_xs"]
            assert_same(read_array(task / "input_01_order"), order[begin:end])
            assert_same(read_array(task / "output_00_xs"), xs[begin:end])
            attrs = node_attrs(task)
            assert (
                attrs["taskId"],
                attrs["stageTaskIndex"],
                attrs["coreType"],
                attrs["coreId"],
                attrs["workerId"],
            ) == (tile, tile, "AIV", worker, worker)
            assert attrs["owner"] == {"label": "", "id": None}
            rec = node_attrs(task / "output_00_xs")
            assert (rec["sourceOffsetBytes"], rec["actualShape"], rec["capturePhase"]) == (
                begin * 16 * 4,
                [end - begin, 16],
                "after",
            )
    assert groups == sorted(expected_groups)
    assert len(groups) == 4 * 8 + 5
    for worker in (5, 6, 7):
        assert not task_dir(inv, "gather", 4, worker).exists()
    assert node_attrs(inv)["executionMode"] == "aiv_pipeline"


def test_broadcast_unsplit_input_per_worker(tmp_path):
    inv, block, routing = broadcast_dump(tmp_path, io="input", tensor_names="h")
    h = routing["h"]
    for tile, worker in ((0, 0), (0, 3), (3, 7), (4, 4)):
        task = task_dir(inv, "gather", tile, worker)
        assert record_arrays(task) == ["input_00_h"]
        assert_same(read_array(task / "input_00_h"), h)  # h is not split: every worker reads all of it
        assert node_attrs(task / "input_00_h")["capturePhase"] == "before"


def test_broadcast_one_task_group_per_non_empty_shard(tmp_path):
    """Seed: 'No Device worker is launched for this empty row shard' -- so such a worker has no records at all
    (on a device its unsplit-input records would never be CAPTURED and decoding would fail)."""
    inv, _, _ = broadcast_dump(tmp_path)
    groups = group_children(inv / "stages" / "gather")[0]
    assert len(groups) == 4 * 8 + 5
    for worker in (5, 6, 7):
        assert not task_dir(inv, "gather", 4, worker).exists()


# --------------------------------------------------------------------------- a tiny three-stage graph
def three_stage_graph() -> tuple[Graph, list[torch.Tensor]]:
    a = spec("a", (16, 4), 0, dims=("row", "col"))
    b = spec("b", (16, 4), 1, dims=("row", "col"))
    c = spec("c", (16, 4), 2, dims=("row", "col"))
    d = spec("d", (16, 4), 3, dims=("row", "col"))
    split = SplitSpec(((0, 0),), (0,))

    def up(t):
        t.params[1][t.rows] = t.params[0][t.rows] + 1

    def act(t):
        t.params[2][t.rows] = t.params[1][t.rows] * 3

    def own(t):
        t.params[3].add_(t.params[2] * t.owner_id)

    graph = Graph(
        [
            op("up", (a,), (b,), up, core="cube", split=split, tile_rows=4),
            op("act", (b,), (c,), act, core="vector", split=split, tile_rows=4),
            op("own", (c,), (d,), own, core="mix", owners=(5, 6, 7)),
        ]
    )
    params = [
        torch.arange(64, dtype=torch.float32).reshape(16, 4),
        torch.zeros(16, 4),
        torch.zeros(16, 4),
        torch.zeros(16, 4),
    ]
    return graph, params


def plan(config_kw: dict[str, Any], stride: int = 4) -> list[tuple[int, str, int]]:
    graph, params = three_stage_graph()
    runtime = compile_graph(graph, params, vector_worker_stride=stride, owner_label="team")
    records = build_record_plans(runtime, graph, params, TensorDumpConfig("/unused", level="L1", **config_kw), 0)
    return [(r.task_id, r.io, r.index) for r in records]


def both(tasks) -> list[tuple[int, str, int]]:
    return [(t, io, 0) for t in tasks for io in ("input", "output")]


ALL = ("up", "act", "own")


@pytest.mark.parametrize(
    "kw, expected",
    [
        ({"stages": "act"}, both(range(4, 8))),
        ({"stages": ("own", "up")}, both([0, 1, 2, 3, 8, 9, 10])),
        ({"task_ids": (1, 5, 10)}, both([1, 5, 10])),
        ({"stage_task_indices": 0}, both([0, 4, 8])),
        ({"stage_task_indices": (2, 3)}, both([2, 3, 6, 7, 10])),
        ({"owner_ids": 6}, both([9])),
        ({"owner_ids": (5, 7)}, both([8, 10])),
        ({"stages": ALL, "core_types": "AIV"}, both(range(4, 8))),
        ({"stages": ALL, "core_types": "AIC"}, both(range(0, 4))),
        ({"stages": ALL, "core_types": ("AIC", "AIV")}, both(range(0, 8))),  # MIX is never selected by core_types
        # core 1: cube schedule position 1 (% 4); vector positions 1, 3 (% (8 // 4)); mix position 1 (% 4)
        ({"stages": ALL, "core_ids": 1}, both([1, 5, 7, 9])),
        ({"stages": ALL, "core_ids": 0, "core_types": "AIV"}, both([4, 6])),
        ({"stages": ALL, "io": "input"}, [(t, "input", 0) for t in range(11)]),
        ({"stages": ALL, "io": "output"}, [(t, "output", 0) for t in range(11)]),
        ({"tensor_names": "b"}, [(t, "output", 0) for t in range(4)] + [(t, "input", 0) for t in range(4, 8)]),
        (
            {"tensor_names": ("a", "d"), "stages": ALL},
            [(t, "input", 0) for t in range(4)] + [(t, "output", 0) for t in (8, 9, 10)],
        ),
        ({"stages": "act", "stage_task_indices": 1, "io": "output"}, [(5, "output", 0)]),
        ({"task_ids": (0, 4), "tensor_names": "b", "io": "input"}, [(4, "input", 0)]),
    ],
)
def test_selection_filters(kw, expected):
    assert plan(kw) == expected


def test_placement_rule_with_vector_stride():
    graph, params = three_stage_graph()
    for stride in (1, 2, 4, 8):
        runtime = compile_graph(graph, params, vector_worker_stride=stride)
        locations = task_locations(runtime.host_config, vector_worker_stride=stride)
        assert {tid: (loc.core_type, loc.core_id) for tid, loc in locations.items()} == seed_placement(runtime)
        assert [locations[t].core_id for t in range(4, 8)] == [p % (8 // stride) for p in range(4)]
    broadcast = task_locations(runtime.host_config, broadcast_tasks=True)
    assert len(broadcast) == 11 * 8
    assert broadcast[(4, 7)].core_type == "AIV" and broadcast[(4, 7)].core_id == 7


@pytest.mark.parametrize(
    "kw",
    [
        {"stages": "nope"},
        {"task_ids": 99},
        {"owner_ids": 1},
        {"stages": "own", "core_types": "AIC"},
        {"stages": "up", "core_ids": 7},
        {"tensor_names": "zzz"},
        {"stages": "up", "tensor_names": "c"},
    ],
)
def test_selection_matches_nothing(kw):
    with pytest.raises(ValueError, match=re.escape("L1 dump filters selected no task Tensor records")):
        plan(kw)


def test_plan_record_layout():
    graph, params = three_stage_graph()
    runtime = compile_graph(graph, params, owner_label="team")
    records = build_record_plans(runtime, graph, params, TensorDumpConfig("/u", level="L1", stages=ALL), 0)
    offset = L1_DUMP_PAYLOAD_BASE
    for i, r in enumerate(records):
        assert r.record_offset == 64 + 64 * i
        assert r.payload_offset == offset and offset % 64 == 0
        offset = -(-(offset + r.payload_bytes) // 64) * 64
        assert r.phase == ("before" if r.io == "input" else "after")
        assert r.worker_id == L1_ANY_WORKER
        assert r.owner_label == "team"
    by_task = {(r.task_id, r.io): r for r in records}
    assert by_task[(2, "input")].source_offset_bytes == 2 * 4 * 4 * 4
    assert by_task[(2, "input")].actual_shape == (4, 4)
    assert by_task[(9, "output")].owner_id == 6
    assert by_task[(9, "output")].actual_shape == (16, 4)
    assert by_task[(9, "output")].source_offset_bytes == 0


def test_tiny_graph_end_to_end_values(tmp_path):
    graph, params = three_stage_graph()
    kernel = MegaKernel(graph, name="tiny", vector_worker_stride=4, owner_label="team")
    a0 = params[0].clone()
    with tensor_dump(l1_config(tmp_path, stages=ALL)):
        kernel.launch(params)
    inv = tmp_path / "rank_0" / "window_0000" / "invocation_000000_forward"
    b, c = a0 + 1, (a0 + 1) * 3
    for t in range(4):
        rows = slice(4 * t, 4 * t + 4)
        assert_same(read_array(task_dir(inv, "up", t) / "input_00_a"), a0[rows])
        assert_same(read_array(task_dir(inv, "up", t) / "output_00_b"), b[rows])
        assert_same(read_array(task_dir(inv, "act", 4 + t) / "output_00_c"), c[rows])
    d = torch.zeros(16, 4)
    for k, owner in enumerate((5, 6, 7)):
        task = task_dir(inv, "own", 8 + k)
        assert_same(read_array(task / "input_00_c"), c)
        assert_same(read_array(task / "output_00_d"), d + c * owner)  # after this task only
        d = d + c * owner
        assert node_attrs(task)["owner"] == {"label": "team", "id": owner}
        assert (node_attrs(task)["coreType"], node_attrs(task)["coreId"]) == ("MIX", k)
    assert [node_attrs(task_dir(inv, "act", 4 + p))["coreId"] for p in range(4)] == [0, 1, 0, 1]


# --------------------------------------------------------------------------- default view refusals
def prepare(graph: Graph, params: list[torch.Tensor], runtime: Any = None, **kw: Any):
    runtime = runtime or compile_graph(graph, params)
    kw.setdefault("stages", [o.name for o in graph.operators][0])
    return prepare_l1_dump(runtime, graph, params, TensorDumpConfig("/unused", level="L1", **kw), rank=0, device="cpu")


def test_non_contiguous_split_refused():
    a = spec("a", (4, 8), 0)
    b = spec("b", (4, 8), 1)
    graph = Graph([op("cols", (a,), (b,), lambda t: None, split=SplitSpec(((0, 1),), (1,)), tile_rows=2)])
    params = [torch.zeros(4, 8), torch.zeros(4, 8)]
    with pytest.raises(
        ValueError,
        match=re.escape("L1 default view cannot copy a non-contiguous split; configure diagnostic_view_resolver"),
    ):
        prepare(graph, params)


def test_split_on_dim1_of_single_row_is_contiguous():
    a = spec("a", (1, 8), 0)
    b = spec("b", (1, 8), 1)
    graph = Graph([op("cols", (a,), (b,), lambda t: None, split=SplitSpec(((0, 1),), (1,)), tile_rows=3)])
    params = [torch.arange(8.0).reshape(1, 8), torch.zeros(1, 8)]
    prepared = prepare(graph, params, io="input")
    assert [(r.source_offset_bytes, r.actual_shape) for r in prepared.records] == [
        (0, (1, 3)),
        (12, (1, 3)),
        (24, (1, 2)),
    ]


def test_row_unaligned_split_offset_refused():
    graph = copy_rows_graph()
    params = [torch.zeros(8, 4), torch.zeros(8, 4)]
    runtime = compile_graph(graph, params)
    runtime.host_config.all_tasks[1].inputs[0].base_ptr_offset = 5  # rows hold 4 elements
    with pytest.raises(
        ValueError, match=re.escape("L1 default split offset is not row-aligned; configure diagnostic_view_resolver")
    ):
        prepare(graph, params, runtime)
    # a resolver takes responsibility: the default view is then strided/unaligned without refusal
    graph.operators[0].diagnostic_view_resolver = lambda ctx: ctx.default_view
    prepared = prepare(graph, params, runtime, io="input")
    assert prepared.records[1].source_offset_bytes == 20


def test_dynamic_shape_needs_resolver():
    a = spec("a", (8, 4), 0, dynamic=True)
    b = spec("b", (8, 4), 1)
    graph = Graph([op("dyn", (a,), (b,), lambda t: None)])
    params = [torch.zeros(8, 4), torch.zeros(8, 4)]
    with pytest.raises(ValueError, match=re.escape("L1 dump stage 'dyn' Tensor 'a' needs a diagnostic_view_resolver")):
        prepare(graph, params)
    # outputs only: the static port plans fine
    assert [r.tensor_name for r in prepare(graph, params, io="output").records] == ["b"]
    runtime = compile_graph(graph, params)
    task = runtime.host_config.all_tasks[0]
    with pytest.raises(
        ValueError,
        match=re.escape(
            "L1 dump stage 'dyn' Tensor 'a' has dynamic shape; configure OperatorNode.diagnostic_view_resolver"
        ),
    ):
        default_tensor_view(graph.operators[0], task, task.inputs[0], a, "input", 0)


def test_host_ports_are_dynamic_and_need_resolver():
    graph = copy_rows_graph(diagnostic_host_ports=True)
    params = [torch.zeros(8, 4), torch.zeros(8, 4)]
    with pytest.raises(ValueError, match=re.escape("L1 dump stage 'copy' Tensor 'a' needs a diagnostic_view_resolver")):
        prepare(graph, params)
    seen = []

    def resolver(ctx):
        seen.append((ctx.tensor_desc.dynamic_shape, ctx.tensor_desc.input_position, ctx.default_view))
        return ctx.make_view((2, 4), source_offset_bytes=16 * ctx.task_desc.task_index)

    graph.operators[0].diagnostic_view_resolver = resolver
    prepared = prepare(graph, params)
    assert [(r.io, r.source_offset_bytes, r.actual_shape) for r in prepared.records] == [
        ("input", 0, (2, 4)),
        ("output", 0, (2, 4)),
        ("input", 16, (2, 4)),
        ("output", 16, (2, 4)),
    ]
    assert seen[0] == (1, 0, L1TensorView(0, (8, 4)))


def test_invalid_split_dimension():
    graph = copy_rows_graph()
    params = [torch.zeros(8, 4), torch.zeros(8, 4)]
    runtime = compile_graph(graph, params)
    graph.operators[0].split_spec = SplitSpec(((0, 2),), (0,))
    with pytest.raises(ValueError, match=re.escape("L1 dump split dimension 2 is invalid for Tensor 'a' shape [8, 4]")):
        prepare(graph, params, runtime)


# --------------------------------------------------------------------------- resolvers
def resolver_graph(resolver: Any, rows: int = 8) -> tuple[Graph, list[torch.Tensor]]:
    graph = copy_rows_graph(rows=rows, diagnostic_view_resolver=resolver)
    return graph, [torch.arange(rows * 4, dtype=torch.float32).reshape(rows, 4), torch.zeros(rows, 4)]


@pytest.mark.parametrize("value, tname", [({"shape": (1,)}, "dict"), (None, "NoneType"), ((0, (1,)), "tuple")])
def test_resolver_must_return_view(value, tname):
    graph, params = resolver_graph(lambda ctx: value)
    with pytest.raises(
        TypeError, match=re.escape(f"L1 dump resolver for stage 'copy' must return L1TensorView, got {tname}")
    ):
        prepare(graph, params)


def test_resolver_must_be_callable():
    graph, params = resolver_graph(42)
    with pytest.raises(
        TypeError, match=re.escape("L1 dump diagnostic_view_resolver for stage 'copy' must be callable")
    ):
        prepare(graph, params)


def test_resolver_view_exceeding_parameter():
    graph, params = resolver_graph(lambda ctx: ctx.make_view((9, 4), source_offset_bytes=0))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "L1 dump view for Tensor 'a' exceeds its ABI parameter: offset=0, bytes=144, parameter_bytes=128"
        ),
    ):
        prepare(graph, params)
    graph, params = resolver_graph(lambda ctx: ctx.make_view((1, 4), source_offset_bytes=120))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "L1 dump view for Tensor 'a' exceeds its ABI parameter: offset=120, bytes=16, parameter_bytes=128"
        ),
    ):
        prepare(graph, params)
    graph, params = resolver_graph(lambda ctx: ctx.make_view((2, 4), source_offset_bytes=96))  # ends exactly at the end
    assert prepare(graph, params, io="input").records[0].source_offset_bytes == 96


@pytest.mark.parametrize("offset", [2, 1, 6, 130])
def test_resolver_unaligned_offset(offset):
    graph, params = resolver_graph(lambda ctx: L1TensorView(offset, (1,)))
    with pytest.raises(
        ValueError, match=re.escape("L1 dump Tensor 'a' source offset must align to its element byte size")
    ):
        prepare(graph, params)


@pytest.mark.parametrize("offset", [-4, True, 4.0, 1 << 64, None])
def test_resolver_bad_offset_type(offset):
    graph, params = resolver_graph(lambda ctx: L1TensorView(offset, (1,)))
    with pytest.raises(ValueError, match=re.escape("L1 dump Tensor 'a' source offset must be a non-negative uint64")):
        prepare(graph, params)


@pytest.mark.parametrize("shape", [(-1,), (1.0,), (True,), ("2",)])
def test_resolver_bad_shape(shape):
    graph, params = resolver_graph(lambda ctx: L1TensorView(0, shape))
    with pytest.raises(ValueError, match=re.escape("L1 dump Tensor 'a' view shape must contain non-negative integers")):
        prepare(graph, params)


def test_resolver_context_contents():
    contexts = []

    def resolver(ctx):
        contexts.append(ctx)
        return ctx.default_view

    graph, params = resolver_graph(resolver)
    layout = object()
    runtime = compile_graph(graph, params, rank=3, owner_context=layout)
    prepare(graph, params, runtime, task_ids=1)
    assert [(c.io, c.index, c.task_id, c.stage, c.rank, c.owner_id, c.core_id) for c in contexts] == [
        ("input", 0, 1, "copy", 0, None, 1),
        ("output", 0, 1, "copy", 0, None, 1),
    ]
    ctx = contexts[0]
    assert ctx.owner_context is layout
    assert ctx.operator is graph.operators[0]
    assert ctx.tensor_spec.name == "a"
    assert ctx.default_view == L1TensorView(64, (4, 4))
    assert ctx.runtime_config is runtime.host_config
    assert ctx.parameters[0] is params[0]
    assert ctx.parameter_cache is contexts[1].parameter_cache  # one cache per launch


def test_resolver_gets_dumper_rank(tmp_path):
    ranks = []
    graph, params = resolver_graph(lambda ctx: ranks.append(ctx.rank) or ctx.default_view)
    kernel = MegaKernel(graph, name="k", rank=2)
    with tensor_dump(l1_config(tmp_path, stages="copy")):
        kernel.launch(params)
    assert set(ranks) == {2}
    assert (tmp_path / "rank_2" / "window_0000").is_dir()


# --------------------------------------------------------------------------- other plan rules
def test_duplicate_stage_names():
    a, b, c = spec("a", (4,), 0), spec("b", (4,), 1), spec("c", (4,), 2)
    graph = Graph([op("same", (a,), (b,), lambda t: None), op("same", (b,), (c,), lambda t: None)])
    params = [torch.zeros(4)] * 3
    with pytest.raises(ValueError, match=re.escape("duplicate L1 diagnostic stage name 'same'")):
        prepare(graph, params)


def test_runtime_required():
    with pytest.raises(ValueError, match=re.escape("L1 Tensor dump requires the prepared MegaKernel runtime")):
        prepare_l1_dump(None, None, [], TensorDumpConfig("/u", level="L1", stages="s"), rank=0, device="cpu")


def test_parameter_position_disagrees():
    graph = copy_rows_graph()
    params = [torch.zeros(8, 4), torch.zeros(8, 4)]
    runtime = compile_graph(graph, params)
    runtime.host_config.all_tasks[0].inputs[0].input_position = 1
    with pytest.raises(ValueError, match=re.escape("L1 task 0 input0 parameter position disagrees with graph Tensor")):
        prepare(graph, params, runtime)


def test_parameter_missing():
    graph = copy_rows_graph()
    params = [torch.zeros(8, 4), torch.zeros(8, 4)]
    runtime = compile_graph(graph, params)
    with pytest.raises(ValueError, match=re.escape("L1 task 0 requires parameter 1, got 1 parameters")):
        prepare(graph, params[:1], runtime)


def test_element_size_mismatch():
    graph = copy_rows_graph()
    params = [torch.zeros(8, 4), torch.zeros(8, 4)]
    runtime = compile_graph(graph, params)
    with pytest.raises(ValueError, match=re.escape("L1 task 0 Tensor 'a' ABI element byte size mismatch")):
        prepare(graph, [torch.zeros(8, 4, dtype=torch.float64), params[1]], runtime)


def test_parameter_not_tensor_or_not_contiguous():
    graph = copy_rows_graph()
    params = [torch.zeros(8, 4), torch.zeros(8, 4)]
    runtime = compile_graph(graph, params)
    with pytest.raises(TypeError, match=re.escape("L1 dump Tensor 'a' must map to torch.Tensor, got list")):
        prepare(graph, [[0.0] * 32, params[1]], runtime)
    with pytest.raises(ValueError, match=re.escape("L1 dump Tensor 'a' ABI parameter must be contiguous")):
        prepare(graph, [torch.zeros(4, 8).t(), params[1]], runtime)


def test_too_many_ports():
    graph = copy_rows_graph()
    params = [torch.zeros(8, 4), torch.zeros(8, 4)]
    runtime = compile_graph(graph, params)
    runtime.host_config.all_tasks[0].num_inputs = 2
    with pytest.raises(ValueError, match=re.escape("L1 task 0 declares too many input ports for its graph stage")):
        prepare(graph, params, runtime)


def test_schedule_capacity_and_duplicates():
    graph = copy_rows_graph()
    params = [torch.zeros(8, 4), torch.zeros(8, 4)]
    runtime = compile_graph(graph, params)
    runtime.host_config.task_index_num[1] = 5000
    with pytest.raises(
        ValueError, match=re.escape("L1 dump task schedule count is outside RuntimeConfig capacity: 5000")
    ):
        prepare(graph, params, runtime)
    runtime = compile_graph(graph, params)
    runtime.host_config.cube_task_indices[0] = 1
    runtime.host_config.task_index_num[0] = 1
    with pytest.raises(ValueError, match=re.escape("L1 dump task 1 appears in multiple Device schedules")):
        prepare(graph, params, runtime)


@pytest.mark.parametrize("workers, mode", [(1, "event_driven"), (0, "event_driven"), (0, "aiv_pipeline")])
def test_num_workers_required(workers, mode):
    graph = copy_rows_graph()
    params = [torch.zeros(8, 4), torch.zeros(8, 4)]
    runtime = compile_graph(graph, params, execution_mode=mode)
    runtime.host_config.num_workers = workers
    with pytest.raises(
        ValueError, match=re.escape("L1 dump requires RuntimeConfig.num_workers to identify active AIC/AIV workers")
    ):
        prepare(graph, params, runtime)


def test_runtime_config_override():
    graph = copy_rows_graph()
    params = [torch.zeros(8, 4), torch.zeros(8, 4)]
    runtime = compile_graph(graph, params)
    before = runtime.normal_tensor.clone()
    prepared = prepare(graph, params, runtime)
    from megadump_zarr.runtime import RuntimeConfigC

    offset = RuntimeConfigC.diagnostic_mode.offset
    assert int(prepared.runtime_config[offset]) == 2
    assert torch.equal(runtime.normal_tensor, before)  # the runtime's own config is untouched
    diff = (prepared.runtime_config != before).nonzero().flatten().tolist()
    assert diff == [offset]
    header = read_l1_buffer(prepared.buffer).header
    assert (header.enabled, header.record_count, header.payload_offset, header.total_bytes) == (
        1,
        4,
        L1_DUMP_PAYLOAD_BASE,
        prepared.total_bytes,
    )
    assert prepared.buffer.numel() == prepared.total_bytes


# --------------------------------------------------------------------------- limits
def many_ports_graph(ports_in: int = 4) -> tuple[Graph, list[torch.Tensor]]:
    n = 1024  # MAX_TASKS: one row per task
    inputs = [spec(f"i{k}", (n,), k) for k in range(ports_in)]
    out = spec("o", (n,), ports_in)
    graph = Graph(
        [
            op(
                "wide",
                inputs,
                (out,),
                lambda t: None,
                split=SplitSpec(tuple((k, 0) for k in range(ports_in)), (0,)),
                tile_rows=1,
            )
        ]
    )
    return graph, [torch.zeros(n) for _ in range(ports_in + 1)]


def test_record_count_limit():
    graph, params = many_ports_graph(4)
    runtime = compile_graph(graph, params)
    assert len(runtime.tasks) == 1024
    prepared = prepare(graph, params, runtime, io="input")  # 1024 × 4 = 4096 records: the most allowed
    assert len(prepared.records) == 4096
    assert prepared.records[-1].record_offset == 64 + 4095 * 64
    with pytest.raises(ValueError, match=re.escape("L1 dump record count exceeds 4096")):
        prepare(graph, params, runtime)  # 1024 × 5 ports


def test_record_count_limit_full_launch_decodes():
    graph, params = many_ports_graph(4)
    for k, p in enumerate(params):
        p.copy_(torch.arange(1024.0) + 1000 * k)
    runtime = compile_graph(graph, params)
    prepared = prepare(graph, params, runtime, io="input")
    from megadump_zarr.diagnostics import LaunchArguments
    from megadump_zarr.dump.snapshots import decode_l1_dump

    execute(runtime, params, LaunchArguments(prepared.runtime_config, None, prepared.buffer))
    snapshots = decode_l1_dump(prepared)
    assert len(snapshots) == 4096
    for s in snapshots[::97]:
        r = s.record
        assert s.data.tolist() == [float(r.task_id + 1000 * r.index)]


def test_budget_error_names_the_ways_out():
    a = spec("a", (262144,), 0)
    graph = Graph([op("big", (a,), (spec("b", (1,), 1),), lambda t: None)])
    with pytest.raises(MemoryError) as raised:
        prepare(graph, [torch.zeros(262144), torch.zeros(1)], device_memory_budget_mb=1, io="input")
    message = str(raised.value)
    budget = (1 << 20) - L1_DUMP_PAYLOAD_BASE  # what is left for payloads under a 1 MiB budget, one record
    assert (
        f"store a prefix of each of the 1 records with max_bytes_per_tensor= (about {budget // 64 * 64} bytes"
        in message
    )
    assert 'keep statistics instead of the payloads that do not fit with on_budget="statistics"' in message


def test_device_memory_budget():
    a = spec("a", (262144,), 0)  # exactly 1 MiB of float32
    graph = Graph([op("big", (a,), (spec("b", (1,), 1),), lambda t: None)])
    params = [torch.zeros(262144), torch.zeros(1)]
    total = -(-(L1_DUMP_PAYLOAD_BASE + (1 << 20)) // 64) * 64
    with pytest.raises(
        MemoryError,
        match=re.escape(f"L1 dump requires {total} Device bytes, exceeding device_memory_budget_mb=1 (1048576 bytes)"),
    ):
        prepare(graph, params, device_memory_budget_mb=1, io="input")
    assert prepare(graph, params, device_memory_budget_mb=2, io="input").total_bytes == total
    # the cap shrinks the slot below the budget
    assert prepare(graph, params, device_memory_budget_mb=1, io="input", max_bytes_per_tensor=4096).total_bytes == (
        L1_DUMP_PAYLOAD_BASE + 4096
    )


def test_32_bit_buffer_limit():
    """A 4 GiB view over meta-device parameters: refused before any allocation."""
    n = 1 << 30
    a = spec("a", (n,), 0)
    graph = Graph([op("huge", (a,), (spec("b", (1,), 1),), lambda t: None)])
    params = [torch.empty(n, device="meta"), torch.empty(1, device="meta")]
    runtime = compile_graph(graph, params)
    with pytest.raises(ValueError, match=re.escape("L1 dump buffer exceeds the 32-bit payload-offset ABI")):
        prepare(graph, params, runtime, io="input", device_memory_budget_mb=1 << 20)
    # checked before the budget: a small budget does not hide the ABI limit
    with pytest.raises(ValueError, match=re.escape("L1 dump buffer exceeds the 32-bit payload-offset ABI")):
        prepare(graph, params, runtime, io="input", device_memory_budget_mb=1)


# --------------------------------------------------------------------------- truncation
def test_max_bytes_truncation_plan():
    graph = copy_rows_graph()
    params = [torch.zeros(8, 4), torch.zeros(8, 4)]
    prepared = prepare(graph, params, max_bytes_per_tensor=22)
    r = prepared.records[0]
    assert (r.payload_bytes, r.full_bytes, r.truncated, r.actual_shape) == (20, 64, True, (4, 4))
    prepared = prepare(graph, params, max_bytes_per_tensor=64)
    assert (prepared.records[0].payload_bytes, prepared.records[0].truncated) == (64, False)
    prepared = prepare(graph, params, max_bytes_per_tensor=4)
    assert prepared.records[0].payload_bytes == 4


@pytest.mark.parametrize(
    "cap, dtype", [(1, torch.float32), (3, torch.float32), (1, torch.bfloat16), (7, torch.float64)]
)
def test_max_bytes_below_one_element(cap, dtype):
    graph = copy_rows_graph(dtype=dtype)
    params = [torch.zeros(8, 4, dtype=dtype), torch.zeros(8, 4, dtype=dtype)]
    with pytest.raises(ValueError, match=re.escape(f"max_bytes_per_tensor={cap} cannot store one element")):
        prepare(graph, params, max_bytes_per_tensor=cap)


@pytest.mark.parametrize("dtype", DTYPES)
def test_truncated_records_stored_as_flat_prefix(tmp_path, dtype):
    graph = copy_rows_graph(rows=8, cols=4, tile_rows=4, dtype=dtype)
    kernel = MegaKernel(graph, name="trunc")
    a = (torch.arange(32, dtype=torch.float32).reshape(8, 4) / 3).to(dtype)
    params = [a.clone(), torch.zeros(8, 4, dtype=dtype)]
    size = a.element_size()
    cap = 5 * size + 1
    with tensor_dump(l1_config(tmp_path, stages="copy", max_bytes_per_tensor=cap)):
        kernel.launch(params)
    inv = tmp_path / "rank_0" / "window_0000" / "invocation_000000_forward"
    name = str(dtype).removeprefix("torch.")
    for t in range(2):
        task = task_dir(inv, "copy", t)
        rows = slice(4 * t, 4 * t + 4)
        for array, source in (("input_00_a", a[rows]), ("output_00_b", a[rows] * 2)):
            stored = read_array(task / array)
            assert_same(stored, source.reshape(-1)[:5])
            attrs = node_attrs(task / array)
            assert {
                k: attrs[k]
                for k in (
                    "actualShape",
                    "storedShape",
                    "truncated",
                    "fullBytes",
                    "storedBytes",
                    "originalDtype",
                    "storedDtype",
                    "sourceOffsetBytes",
                )
            } == {
                "actualShape": [4, 4],
                "storedShape": [5],
                "truncated": True,
                "fullBytes": 16 * size,
                "storedBytes": 5 * size,
                "originalDtype": name,
                "storedDtype": name,
                "sourceOffsetBytes": 16 * size * t,
            }
            dims = read_json(task / array / "zarr.json")["dimension_names"]
            assert len(dims) == 1


# --------------------------------------------------------------------------- resolver context helpers
def make_context(parameters, default=L1TensorView(8, (2,))) -> L1TensorViewContext:
    return L1TensorViewContext(
        operator=None,
        task_id=0,
        owner_id=None,
        task_desc=None,
        tensor_desc=None,
        tensor_spec=None,
        io="input",
        index=0,
        parameters=parameters,
        runtime_config=None,
        rank=0,
        stage="s",
        default_view=default,
        parameter_cache={},
    )


def test_parameter_cpu_caches_and_rejects_non_tensors():
    p = torch.arange(6.0).reshape(2, 3).t()  # non-contiguous: the cached copy is contiguous
    ctx = make_context([p, [1, 2]])
    first = ctx.parameter_cpu(0)
    assert ctx.parameter_cpu(0) is first
    assert first.is_contiguous() and torch.equal(first, p)
    assert ctx.parameter_cache == {0: first}
    with pytest.raises(TypeError, match=re.escape("L1 dump parameter 1 must be torch.Tensor, got list")):
        ctx.parameter_cpu(1)
    assert 1 not in ctx.parameter_cache


def test_make_view():
    ctx = make_context([])
    assert ctx.make_view((3, 2)) == L1TensorView(8, (3, 2), "")
    assert ctx.make_view([np.int64(2)], source_offset_bytes=0, note="n") == L1TensorView(0, (2,), "n")
    assert ctx.make_view((0,), source_offset_bytes=16) == L1TensorView(16, (0,))
    assert ctx.make_view(torch.Size([4])) == L1TensorView(8, (4,))
    with pytest.raises(ValueError, match=re.escape("L1 dump view shape must be non-negative, got (-1, 2)")):
        ctx.make_view((-1, 2))
    for bad in (-1, True, 2.0, "8"):
        with pytest.raises(
            ValueError, match=re.escape(f"L1 dump source offset must be a non-negative integer, got {bad!r}")
        ):
            ctx.make_view((1,), source_offset_bytes=bad)
    with pytest.raises(ValueError, match=re.escape("L1 dump source offset must be a non-negative integer, got -8")):
        make_context([], L1TensorView(-8, (1,))).make_view((1,))


# --------------------------------------------------------------------------- edges through the dumper
def test_zero_row_record(tmp_path):
    """An owner with no rows (an expert that got no tokens) stores an empty (0, cols) array."""
    a = spec("a", (8, 4), 0, dims=("row", "col"))
    b = spec("b", (8, 4), 1, dims=("row", "col"))

    def resolver(ctx):
        return ctx.make_view((0, 4), source_offset_bytes=32, note="empty") if ctx.owner_id == 0 else ctx.default_view

    graph = Graph(
        [
            op(
                "s",
                (a,),
                (b,),
                lambda t: t.params[1].copy_(t.params[0] + t.owner_id),
                owners=(0, 1),
                diagnostic_view_resolver=resolver,
            )
        ]
    )
    kernel = MegaKernel(graph, name="k", owner_label="expert")
    with tensor_dump(l1_config(tmp_path, stages="s")):
        kernel.launch([torch.ones(8, 4), torch.zeros(8, 4)])
    inv = tmp_path / "rank_0" / "window_0000" / "invocation_000000_forward"
    empty = task_dir(inv, "s", 0)
    assert read_array(empty / "input_00_a").shape == (0, 4)
    attrs = node_attrs(empty / "input_00_a")
    assert (
        attrs["actualShape"],
        attrs["storedShape"],
        attrs["fullBytes"],
        attrs["storedBytes"],
        attrs["note"],
        attrs["sourceOffsetBytes"],
    ) == ([0, 4], [0, 4], 0, 0, "empty", 32)
    assert_same(read_array(task_dir(inv, "s", 1) / "output_00_b"), torch.full((8, 4), 2.0))


def test_budget_refusal_stops_the_launch(tmp_path):
    a = spec("a", (262144,), 0)
    b = spec("b", (262144,), 1)
    kernel = MegaKernel(Graph([op("big", (a,), (b,), lambda t: t.params[1].copy_(t.params[0]))]), name="big")
    params = [torch.ones(262144), torch.zeros(262144)]
    with tensor_dump(l1_config(tmp_path, stages="big", device_memory_budget_mb=1)):
        with pytest.raises(MemoryError, match=re.escape("exceeding device_memory_budget_mb=1 (1048576 bytes)")):
            kernel.launch(params)
    assert torch.count_nonzero(params[1]) == 0  # refused while planning: the kernel never ran
    assert not (tmp_path / "rank_0").exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_expert_stages_on_cuda(tmp_path):
    block = MoEBlock(DemoConfig(device="cuda"))
    x = block.make_input()
    with tensor_dump(l1_config(tmp_path, kernel_names="moe_experts", stages="expert_up", io="output")):
        block(x)
    cpu = Expected(torch.float32)
    inv = tmp_path / "rank_0" / "window_0000" / "invocation_000000_forward"
    assert node_attrs(inv)["device"].startswith("cuda")
    for e, r in enumerate(cpu.rows):
        stored = read_array(task_dir(inv, "expert_up", e) / "output_00_ws")
        assert np.allclose(stored, cpu.hidden[r].numpy(), atol=1e-5)
