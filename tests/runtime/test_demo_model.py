"""demo.model: the MoE block's kernels against the eager reference, forward and backward."""

import contextlib

import pytest
import torch
import torch.nn.functional as F

from megadump_zarr.demo.model import DemoConfig, ExpertLayout, MoEBlock, _ExpertCall
from megadump_zarr.diagnostics import DiagnosticCall, activate_session, deactivate_session
from megadump_zarr.runtime import megakernel_apply


class RecordingSession:
    def __init__(self):
        self.contexts = []

    def prepare_call(self, context):
        self.contexts.append(context)
        return DiagnosticCall(context.ordinary_arguments())


@contextlib.contextmanager
def _session():
    session = RecordingSession()
    activate_session("fake", session)
    try:
        yield session
    finally:
        deactivate_session(session)


def _tolerance(dtype):
    return dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)


def _block(tokens, dtype, seed, device="cpu"):
    return MoEBlock(DemoConfig(tokens=tokens, tile_rows=8, dtype=dtype, seed=seed, device=device))


CASES = [(tokens, dtype, seed) for tokens in (37, 64) for dtype in (torch.float32, torch.bfloat16) for seed in (0, 3)]


@pytest.mark.parametrize("tokens, dtype, seed", CASES)
def test_forward_matches_reference(tokens, dtype, seed):
    block = _block(tokens, dtype, seed)
    x = block.make_input()
    out = block(x)
    ref = block.reference(x)
    assert out.shape == (tokens, 16) and out.dtype == dtype
    torch.testing.assert_close(out, ref, **_tolerance(dtype))
    assert not torch.allclose(out.float(), x.float(), atol=1e-3)  # the experts contribute


def _leaves(*tensors):
    return [t.detach().clone().requires_grad_() for t in tensors]


@pytest.mark.parametrize("tokens, dtype, seed", CASES)
def test_backward_matches_eager_autograd(tokens, dtype, seed):
    block = _block(tokens, dtype, seed)
    x = block.make_input()
    routing = block.route(x)
    originals = (x, routing["xs"], routing["gate"], block.w_up, block.w_down)
    kernel_leaves = _leaves(*originals)
    with _session() as session:
        out = megakernel_apply(_ExpertCall(block, routing), *kernel_leaves)
        grad_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed + 11)).to(dtype)
        out.backward(grad_out)
    ref_leaves = _leaves(*originals)
    ref = block.reference(ref_leaves[0], xs=ref_leaves[1], gate=ref_leaves[2], w_up=ref_leaves[3], w_down=ref_leaves[4])
    torch.testing.assert_close(out.detach(), ref.detach(), **_tolerance(dtype))
    ref.backward(grad_out)
    for name, mine, theirs in zip(("x", "xs", "gate", "w_up", "w_down"), kernel_leaves, ref_leaves):
        assert mine.grad is not None and mine.grad.dtype == dtype, name
        assert theirs.grad.abs().max() > 0, name
        torch.testing.assert_close(mine.grad, theirs.grad, **_tolerance(dtype), msg=lambda m, n=name: f"grad {n}: {m}")
    assert [(c.runtime.kernel_name, c.direction) for c in session.contexts] == [
        ("moe_experts", "forward"),
        ("moe_experts_backward", "backward"),
    ]


def test_launch_sequence_and_directions():
    block = _block(37, torch.float32, 0)
    x = block.make_input().requires_grad_()
    with _session() as session:
        block(x).sum().backward()
    assert [(c.runtime.kernel_name, c.direction) for c in session.contexts] == [
        ("moe_router", "forward"),
        ("moe_dispatch", "forward"),
        ("moe_experts", "forward"),
        ("moe_experts_backward", "backward"),
    ]
    backward = session.contexts[-1]
    assert backward.runtime.owner_label == "expert"
    assert backward.runtime.spec.owner_context == ExpertLayout(counts_position=3)
    assert len(backward.parameters) == 15
    assert torch.equal(x.grad, torch.ones_like(x))  # d(sum(x + ...))/dx through the residual only


def _expert_outputs(block, routing):
    """Eager per-expert outputs in slot order, and the hidden activations."""
    xs, counts = routing["xs"], routing["expert_counts"]
    hidden, ys, start = [], [], 0
    for e in range(block.config.n_experts):
        rows = slice(start, start + int(counts[e]))
        h = F.silu(xs[rows] @ block.w_up[e])
        hidden.append(h)
        ys.append(h @ block.w_down[e])
        start = rows.stop
    return torch.cat(hidden), torch.cat(ys)


def test_expert_workspace_holds_unpermuted_outputs():
    block = _block(37, torch.float32, 1)
    x = block.make_input()
    with _session() as session:
        out = block(x)
    experts = session.contexts[2]
    assert experts.runtime.kernel_name == "moe_experts"
    xs, counts, w_up, w_down, ws, ys, inverse, x_p, gate, out_p = experts.parameters
    assert out_p.data_ptr() == out.data_ptr()
    routing = block.route(x)
    hidden, ys_ref = _expert_outputs(block, routing)
    torch.testing.assert_close(ys, ys_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ws, ys_ref[routing["inverse_order"]], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(ws, hidden, atol=1e-3)  # the hidden activations were overwritten by unpermute
    assert not torch.allclose(ws, ys_ref, atol=1e-3)  # token order, not slot order
    torch.testing.assert_close(out_p, x + gate[:, None] * ws, rtol=1e-6, atol=1e-6)
    stages = [op.name for op in experts.runtime.graph.topological_sort()]
    assert stages == ["expert_up", "expert_down", "unpermute", "combine"]
    # ws is one parameter bound to two stages' outputs
    tensors = {t.name: t for t in experts.runtime.graph.tensors()}
    assert tensors["ws"].producers == ("expert_up", "unpermute") and tensors["ws"].consumers == (
        "expert_down",
        "combine",
    )
    assert tensors["ws"].role == "stage_output" and tensors["out"].role == "final_output"
    assert tensors["xs"].role == "external_input"


def test_router_kernel_final_partial_tile():
    block = _block(37, torch.float32, 0)
    x = block.make_input()
    with _session() as session:
        block.route(x)
    router = session.contexts[0].runtime
    assert router.kernel_name == "moe_router" and router.spec.execution_mode == "event_driven"
    assert [(t.stage, t.start, t.stop) for t in router.tasks] == [
        ("norm", 0, 8),
        ("norm", 8, 16),
        ("norm", 16, 24),
        ("norm", 24, 32),
        ("norm", 32, 37),
        ("router", 0, 8),
        ("router", 8, 16),
        ("router", 16, 24),
        ("router", 24, 32),
        ("router", 32, 37),
    ]
    last = router.host_config.all_tasks[4]
    assert last.task_split_value == 8 and last.inputs[0].base_ptr_offset == 32 * 16
    assert list(router.host_config.task_index_num) == [5, 5, 0]


def test_router_kernel_64_tokens_has_full_tiles():
    block = _block(64, torch.float32, 0)
    runtime = block.router_kernel.prepare(
        [block.make_input(), block.g, torch.zeros(64, 16), block.w_router, torch.zeros(64, 4)]
    )
    assert {t.stop - t.start for t in runtime.tasks} == {8}
    assert len(runtime.tasks) == 16


def test_dispatch_kernel_runs_in_aiv_pipeline_mode():
    block = _block(37, torch.float32, 0)
    x = block.make_input()
    with _session() as session:
        routing = block.route(x)
    dispatch = session.contexts[1].runtime
    assert dispatch.kernel_name == "moe_dispatch"
    assert dispatch.spec.execution_mode == "aiv_pipeline" and dispatch.host_config.num_workers == 8
    assert [(t.start, t.stop) for t in dispatch.tasks] == [(0, 8), (8, 16), (16, 24), (24, 32), (32, 37)]
    h, order, xs = session.contexts[1].parameters
    assert torch.equal(xs, h[order])
    assert torch.equal(routing["xs"], routing["h"][routing["order"]])
    assert torch.equal(routing["order"][routing["inverse_order"]], torch.arange(37))
    assert int(routing["expert_counts"].sum()) == 37


def test_rank_passed_to_kernels():
    block = MoEBlock(DemoConfig(), rank=4)
    for kernel in (block.router_kernel, block.dispatch_kernel, block.expert_kernel, block.expert_backward_kernel):
        assert kernel.rank == 4


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_forward_matches_reference_cuda(dtype):
    block = _block(37, dtype, 0, device="cuda")
    x = block.make_input()
    assert x.device.type == "cuda"
    out = block(x)
    assert out.device.type == "cuda"
    # TF32 or reduced-precision reductions on the GPU: allow bf16-level tolerance for float32 too
    torch.testing.assert_close(out, block.reference(x), rtol=2e-2, atol=2e-2)
