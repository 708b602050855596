"""L0 (kernel boundary) dumps: roles, ports, attributes and values against the runtime's own tensors."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from megadump_zarr import TensorDumpConfig, tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from megadump_zarr.runtime import Graph, MegaKernel, SplitSpec
from tests.dump._dump_helpers import (
    assert_same,
    compile_graph,
    context_for,
    node_attrs,
    op,
    read_array,
    read_json,
    spec,
)


class LaunchSpy:
    """Record every launch's parameters before and after it ran (independent clones)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.launches: list[dict[str, Any]] = []
        real = MegaKernel.launch
        spy = self

        def launch(kernel: MegaKernel, parameters, *, direction: str = "forward"):
            before = [p.detach().clone() for p in parameters]
            runtime = real(kernel, parameters, direction=direction)
            after = [p.detach().clone() for p in parameters]
            spy.launches.append(
                dict(kernel=kernel.kernel_name, direction=direction, before=before, after=after, graph=kernel.graph)
            )
            return runtime

        monkeypatch.setattr(MegaKernel, "launch", launch)

    def one(self, kernel: str, direction: str = "forward") -> dict[str, Any]:
        (found,) = [
            launch for launch in self.launches if launch["kernel"] == kernel and launch["direction"] == direction
        ]
        return found


def run_l0(tmp_path: Path, monkeypatch, train: bool = False, dtype=torch.float32, **kw):
    spy = LaunchSpy(monkeypatch)
    block = MoEBlock(DemoConfig(dtype=dtype))
    x = block.make_input()
    with tensor_dump(TensorDumpConfig(tmp_path, **kw)):
        if train:
            x.requires_grad_()
            block(x).float().pow(2).mean().backward()
        else:
            block(x)
    return spy, tmp_path / "rank_0" / "window_0000"


def arrays_of(invocation: Path) -> list[str]:
    meta = read_json(invocation / "zarr.json")["consolidated_metadata"]["metadata"]
    return sorted(name for name, node in meta.items() if node["node_type"] == "array")


# --------------------------------------------------------------------------- roles, ports, attributes
EXPERT_TENSORS = ["expert_counts", "gate", "inverse_order", "out", "w_down", "w_up", "ws", "x", "xs", "ys"]


def test_roles_ports_and_attributes(tmp_path, monkeypatch):
    spy, window = run_l0(tmp_path, monkeypatch)
    router, experts = window / "invocation_000000_forward", window / "invocation_000002_forward"
    assert arrays_of(router) == ["h", "logits", "norm_weight", "w_router", "x"]
    assert arrays_of(window / "invocation_000001_forward") == ["h", "order", "xs"]
    assert arrays_of(experts) == EXPERT_TENSORS  # ws stored once despite two specs and two producers

    x = node_attrs(router / "x")
    assert {k: v for k, v in x.items() if k != "stats"} == {
        "name": "x",
        "paramPosition": 0,
        "role": "external_input",
        "capturePhase": "before",
        "producers": [],
        "consumers": ["norm"],
        "ports": [{"stage": "norm", "io": "input", "index": 0}],
        "declaredShape": [37, 16],
        "actualShape": [37, 16],
        "originalDtype": "float32",
        "storedDtype": "float32",
    }
    h = node_attrs(router / "h")
    assert (h["role"], h["capturePhase"], h["producers"], h["consumers"]) == (
        "stage_output",
        "after",
        ["norm"],
        ["router"],
    )
    assert h["ports"] == [{"stage": "norm", "io": "output", "index": 0}, {"stage": "router", "io": "input", "index": 0}]
    assert h["paramPosition"] == 2
    logits = node_attrs(router / "logits")
    assert (logits["role"], logits["capturePhase"], logits["producers"], logits["consumers"]) == (
        "final_output",
        "after",
        ["router"],
        [],
    )
    assert logits["declaredShape"] == [37, 4]
    assert node_attrs(router / "norm_weight")["role"] == "external_input"

    ws = node_attrs(experts / "ws")
    assert {k: v for k, v in ws.items() if k != "stats"} == {
        "name": "ws",
        "paramPosition": 4,
        "role": "stage_output",
        "capturePhase": "after",
        "producers": ["expert_up", "unpermute"],
        "consumers": ["expert_down", "combine"],
        "ports": [
            {"stage": "expert_up", "io": "output", "index": 0},
            {"stage": "expert_down", "io": "input", "index": 0},
            {"stage": "unpermute", "io": "output", "index": 0},
            {"stage": "combine", "io": "input", "index": 1},
        ],
        "declaredShape": [37, 16],
        "actualShape": [37, 16],
        "originalDtype": "float32",
        "storedDtype": "float32",
    }
    out = node_attrs(experts / "out")
    assert (out["role"], out["capturePhase"], out["producers"], out["consumers"], out["paramPosition"]) == (
        "final_output",
        "after",
        ["combine"],
        [],
        9,
    )
    counts = node_attrs(experts / "expert_counts")
    assert (counts["role"], counts["originalDtype"], counts["storedDtype"], counts["declaredShape"]) == (
        "external_input",
        "int64",
        "int64",
        [4],
    )
    assert counts["consumers"] == ["expert_up", "expert_down"]
    x_exp = node_attrs(experts / "x")
    assert (x_exp["paramPosition"], x_exp["role"], x_exp["capturePhase"]) == (7, "external_input", "before")
    assert x_exp["ports"] == [{"stage": "combine", "io": "input", "index": 0}]

    inv = node_attrs(experts)
    assert (
        inv["invocationId"],
        inv["step"],
        inv["direction"],
        inv["kernelName"],
        inv["device"],
        inv["tensorCount"],
    ) == (2, 0, "forward", "moe_experts", "cpu", 10)

    # every stored tensor: the role decides the phase, and the value is the runtime's tensor at that phase
    for index, kernel in enumerate(("moe_router", "moe_dispatch", "moe_experts")):
        launch = spy.one(kernel)
        invocation = window / f"invocation_{index:06d}_forward"
        for tensor in launch["graph"].tensors():
            attrs = node_attrs(invocation / tensor.name)
            phase = "before" if tensor.role == "external_input" else "after"
            assert attrs["capturePhase"] == phase
            assert attrs["role"] == tensor.role
            assert_same(read_array(invocation / tensor.name), launch[phase][tensor.param_position])


def test_ws_after_launch_is_unpermuted_ys(tmp_path, monkeypatch):
    spy, window = run_l0(tmp_path, monkeypatch)
    launch = spy.one("moe_experts")
    ys, inverse = launch["after"][5], launch["after"][6]
    ws = read_array(window / "invocation_000002_forward" / "ws")
    assert np.array_equal(ws, ys[inverse].numpy())


def test_bfloat16_values(tmp_path, monkeypatch):
    spy, window = run_l0(tmp_path, monkeypatch, dtype=torch.bfloat16, kernel_names="moe_experts")
    launch = spy.one("moe_experts")
    invocation = window / "invocation_000000_forward"
    for name, position, phase in (("x", 7, "before"), ("ws", 4, "after"), ("out", 9, "after"), ("gate", 8, "before")):
        stored = read_array(invocation / name)
        assert str(stored.dtype) == "bfloat16"
        assert_same(stored, launch[phase][position])
        attrs = node_attrs(invocation / name)
        assert (attrs["originalDtype"], attrs["storedDtype"]) == ("bfloat16", "bfloat16")


def test_backward_invocation(tmp_path, monkeypatch):
    spy, window = run_l0(tmp_path, monkeypatch, train=True, kernel_names="moe_experts_backward")
    launch = spy.one("moe_experts_backward", "backward")
    invocation = window / "invocation_000000_backward"
    bws = node_attrs(invocation / "bws")
    assert bws["producers"] == ["combine_bwd", "expert_down_bwd"]
    assert bws["consumers"] == ["permute_bwd", "expert_up_bwd"]
    assert bws["role"] == "stage_output"
    assert node_attrs(invocation / "grad_x")["role"] == "final_output"
    assert node_attrs(invocation / "grad_out")["role"] == "external_input"
    for tensor in launch["graph"].tensors():
        phase = "before" if tensor.role == "external_input" else "after"
        assert_same(read_array(invocation / tensor.name), launch[phase][tensor.param_position])


# --------------------------------------------------------------------------- filters
def test_tensor_names_filter(tmp_path, monkeypatch):
    _, window = run_l0(tmp_path, monkeypatch, tensor_names=("x", "ws"))
    assert arrays_of(window / "invocation_000000_forward") == ["x"]
    assert arrays_of(window / "invocation_000001_forward") == ["ws", "x"]
    # moe_dispatch has none of the names: the launch is not recorded at all
    assert read_json(window / "zarr.json")["attributes"]["invocations"] == [
        "invocation_000000_forward",
        "invocation_000001_forward",
    ]
    assert node_attrs(window / "invocation_000001_forward")["kernelName"] == "moe_experts"


def test_roles_filter(tmp_path, monkeypatch):
    _, window = run_l0(tmp_path, monkeypatch, roles="stage_output")
    names = read_json(window / "zarr.json")["attributes"]["invocations"]
    assert len(names) == 2  # router (h) and experts (ws, ys); dispatch has no stage output
    assert arrays_of(window / names[0]) == ["h"]
    assert arrays_of(window / names[1]) == ["ws", "ys"]
    _, window = run_l0(tmp_path / "b", monkeypatch, roles=("external_input", "final_output"), kernel_names="moe_router")
    assert arrays_of(window / "invocation_000000_forward") == ["logits", "norm_weight", "w_router", "x"]


# --------------------------------------------------------------------------- before-snapshots are independent
def test_external_input_is_snapshot_before_in_place_write(tmp_path):
    a = spec("a", (6, 3), 0, dims=("row", "col"))
    b = spec("b", (6, 3), 1, dims=("row", "col"))

    def scale_and_clobber(t: Any) -> None:
        t.params[1][t.rows] = t.params[0][t.rows] * 2
        t.params[0][t.rows] = -1.0  # the kernel writes its input in place

    graph = Graph([op("clobber", (a,), (b,), scale_and_clobber, split=SplitSpec(((0, 0),), (0,)), tile_rows=4)])
    kernel = MegaKernel(graph, name="inplace")
    pa = torch.arange(18, dtype=torch.float32).reshape(6, 3)
    original = pa.clone()
    pb = torch.zeros(6, 3)
    with tensor_dump(TensorDumpConfig(tmp_path)):
        kernel.launch([pa, pb])
    assert torch.equal(pa, torch.full((6, 3), -1.0))
    invocation = tmp_path / "rank_0" / "window_0000" / "invocation_000000_forward"
    assert_same(read_array(invocation / "a"), original)
    assert_same(read_array(invocation / "b"), original * 2)
    assert node_attrs(invocation / "a")["capturePhase"] == "before"
    assert node_attrs(invocation / "b")["capturePhase"] == "after"


def test_before_snapshot_independent_of_later_host_writes(tmp_path):
    """The before-snapshot is a copy: writing the parameter between launch and exit changes nothing."""
    a = spec("a", (4,), 0)
    b = spec("b", (4,), 1)
    graph = Graph([op("neg", (a,), (b,), lambda t: t.params[1].copy_(-t.params[0]))])
    kernel = MegaKernel(graph, name="neg")
    pa, pb = torch.ones(4), torch.zeros(4)
    with tensor_dump(TensorDumpConfig(tmp_path)):
        kernel.launch([pa, pb])
        pa.fill_(7.0)
        pb.fill_(7.0)
    invocation = tmp_path / "rank_0" / "window_0000" / "invocation_000000_forward"
    assert read_array(invocation / "a").tolist() == [1.0] * 4
    assert read_array(invocation / "b").tolist() == [-1.0] * 4


# --------------------------------------------------------------------------- parameter positions
def test_param_position_beyond_parameters(tmp_path):
    graph = Graph([op("neg", (spec("a", (4,), 0),), (spec("b", (4,), 3),), lambda t: None)])
    params = [torch.ones(4), torch.zeros(1), torch.zeros(1), torch.zeros(4)]
    runtime = compile_graph(graph, params)
    dumper = tensor_dump(TensorDumpConfig(tmp_path))
    with dumper:
        with pytest.raises(
            ValueError, match=re.escape("MegaKernel dump requires param_position 3, but only 2 parameters exist")
        ):
            dumper.prepare_call(context_for(runtime, params[:2]))
        # only the selected tensors count: with b filtered out, position 0 is enough
    filtered = tensor_dump(TensorDumpConfig(tmp_path / "f", tensor_names="a"))
    with filtered:
        call = filtered.prepare_call(context_for(runtime, params[:1]))
        call.complete()
    assert (tmp_path / "f" / "rank_0" / "window_0000" / "invocation_000000_forward" / "a").is_dir()


def test_unselected_launch_gets_ordinary_arguments(tmp_path):
    graph = Graph([op("neg", (spec("a", (4,), 0),), (spec("b", (4,), 1),), lambda t: None)])
    params = [torch.ones(4), torch.zeros(4)]
    runtime = compile_graph(graph, params)
    dumper = tensor_dump(TensorDumpConfig(tmp_path, directions="backward"))
    with dumper:
        call = dumper.prepare_call(context_for(runtime, params))
        assert call.arguments.runtime_config is runtime.normal_tensor
        call.complete()
    assert not (tmp_path / "rank_0").exists()


def test_failed_launch_discards_l0_snapshots(tmp_path):
    def explode(t: Any) -> None:
        raise ZeroDivisionError("kernel failed")

    graph = Graph([op("bad", (spec("a", (4,), 0),), (spec("b", (4,), 1),), explode)])
    kernel = MegaKernel(graph, name="bad")
    with tensor_dump(TensorDumpConfig(tmp_path)):
        with pytest.raises(ZeroDivisionError):
            kernel.launch([torch.ones(4), torch.zeros(4)])
    assert not (tmp_path / "rank_0").exists()
