"""runtime.kernel: the launch protocol with a diagnostic session, rank, and the prepare cache."""

import contextlib

import numpy as np
import pytest
import torch

from megadump_zarr.diagnostics import (
    DiagnosticCall,
    LaunchArguments,
    activate_session,
    active_session,
    deactivate_session,
)
from megadump_zarr.l1 import L1_ANY_WORKER, L1_DUMP_PHASE_AFTER, L1RecordEntry, pack_l1_buffer, read_l1_buffer
from megadump_zarr.runtime import Graph, MegaKernel, OperatorNode, SplitSpec, TensorSpec, megakernel_apply
from megadump_zarr.runtime.abi import RuntimeConfigC

SPLIT = SplitSpec(split_inputs=((0, 0),), split_output_dims=(0,))


class RecordingCall(DiagnosticCall):
    def __init__(self, arguments, log):
        super().__init__(arguments)
        self.log = log

    def complete(self):
        self.log.append("complete")

    def cancel(self):
        self.log.append("cancel")


class FakeSession:
    def __init__(self, make_arguments=None):
        self.contexts = []
        self.log = []
        self.make_arguments = make_arguments

    def prepare_call(self, context):
        self.contexts.append(context)
        self.log.append("prepare")
        arguments = context.ordinary_arguments() if self.make_arguments is None else self.make_arguments(context)
        return RecordingCall(arguments, self.log)


@contextlib.contextmanager
def _session(session):
    activate_session("fake", session)
    try:
        yield session
    finally:
        deactivate_session(session)


def _double(tile):
    tile.params[1][tile.rows] = tile.params[0][tile.rows] * 2


def _graph(fn=_double, rows=10):
    x = TensorSpec("x", (rows, 2), torch.float32, 0)
    y = TensorSpec("y", (rows, 2), torch.float32, 1)
    return Graph([OperatorNode("double", "vector", (x,), (y,), fn, SPLIT, 4)])


def _params(rows=10):
    return [torch.arange(rows * 2, dtype=torch.float32).reshape(rows, 2), torch.zeros(rows, 2)]


def test_launch_without_session():
    assert active_session() is None
    kernel = MegaKernel(_graph(), name="dbl")
    params = _params()
    runtime = kernel.launch(params)
    assert torch.equal(params[1], params[0] * 2)
    assert runtime.kernel_name == "dbl" and len(runtime.tasks) == 3


def test_launch_with_session_success():
    kernel = MegaKernel(_graph(), name="dbl", rank=3)
    params = _params()
    with _session(FakeSession()) as session:
        runtime = kernel.launch(params, direction="backward")
    assert session.log == ["prepare", "complete"]
    (context,) = session.contexts
    assert context.runtime is runtime and context.direction == "backward"
    assert context.runtime.kernel_name == "dbl" and context.runtime.rank == 3
    assert isinstance(context.parameters, tuple) and len(context.parameters) == 2
    assert all(a is b for a, b in zip(context.parameters, params))
    counters = context.fallback_event_counters
    assert counters.dtype == torch.int32 and counters.device == runtime.device
    assert counters.tolist() == [1, 1, 1]  # the ordinary arguments ran with them: one increment per task
    assert torch.equal(params[1], params[0] * 2)


def test_default_direction_is_forward():
    with _session(FakeSession()) as session:
        MegaKernel(_graph(), name="dbl").launch(_params())
    assert session.contexts[0].direction == "forward"


def test_tile_failure_cancels_and_reraises():
    boom = KeyError("tile 1 failed")

    def failing(tile):
        if tile.task.task_index == 1:
            raise boom
        _double(tile)

    kernel = MegaKernel(_graph(failing), name="bad")
    params = _params()
    with _session(FakeSession()) as session:
        with pytest.raises(KeyError) as info:
            kernel.launch(params)
    assert info.value is boom
    assert session.log == ["prepare", "cancel"]
    assert session.contexts[0].fallback_event_counters.tolist() == [1, 0, 0]
    assert torch.equal(params[1][:4], params[0][:4] * 2) and torch.equal(params[1][4:], torch.zeros(6, 2))
    assert active_session() is None


def test_session_arguments_drive_the_run():
    """The session's LaunchArguments are what runs: an L1 config and buffer make the device worker copy."""
    entry = L1RecordEntry(
        task_id=2,
        phase=L1_DUMP_PHASE_AFTER,
        parameter_position=1,
        source_offset_bytes=8 * 8,
        payload_offset=128,
        payload_bytes=16,
        status=0,
        task_index=2,
        worker_id=L1_ANY_WORKER,
    )
    buffer = torch.frombuffer(pack_l1_buffer([entry], payload_base=128), dtype=torch.uint8).clone()
    own_counters = torch.zeros(3, dtype=torch.int32)

    def l1_arguments(context):
        config = context.runtime.normal_tensor.clone()
        config[RuntimeConfigC.diagnostic_mode.offset] = 2
        return LaunchArguments(config, own_counters, buffer)

    params = _params()
    with _session(FakeSession(l1_arguments)) as session:
        MegaKernel(_graph(), name="dbl").launch(params)
    assert session.log == ["prepare", "complete"]
    (record,) = read_l1_buffer(buffer).records
    assert record.status == 1
    assert bytes(record.payload) == params[1][8:10].numpy().tobytes()
    assert own_counters.tolist() == [1, 1, 1]
    assert session.contexts[0].fallback_event_counters.tolist() == [0, 0, 0]  # replaced, so untouched


def test_rank_from_constructor_without_distributed():
    assert not (torch.distributed.is_available() and torch.distributed.is_initialized())
    assert MegaKernel(_graph(), name="k", rank=5).rank == 5
    assert MegaKernel(_graph(), name="k").rank == 0
    kernel = MegaKernel(_graph(), name="k", rank=2)
    assert kernel.prepare(_params()).rank == 2


@pytest.mark.parametrize(
    "rank, shown",
    [
        (1.5, "1.5 (float)"),
        (True, "True (bool)"),
        (np.bool_(False), "(bool"),
        (2.0, "2.0 (float)"),
        ("1", "'1' (str)"),
        (-1, "-1"),
    ],
)
def test_a_bool_float_or_negative_rank_is_refused_not_truncated(rank, shown):
    # int(1.5) used to write the window under rank_1/ silently (QA1 R1)
    with pytest.raises(ValueError, match=r"MegaKernel rank must be a non-negative integer or None, got ") as info:
        MegaKernel(_graph(), name="k", rank=rank)
    assert shown in str(info.value)


def test_a_numpy_integer_rank_is_accepted():
    kernel = MegaKernel(_graph(), name="k", rank=np.int64(3))
    assert kernel.rank == 3 and type(kernel.rank) is int
    assert kernel.prepare(_params()).rank == 3


def test_the_demo_block_refuses_a_float_rank_before_any_launch():
    from megadump_zarr.demo.model import DemoConfig, MoEBlock

    with pytest.raises(ValueError, match=r"rank must be a non-negative integer or None, got 1\.5 \(float\)"):
        MoEBlock(DemoConfig(tokens=8, d_model=8), rank=1.5)


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed unavailable")
def test_rank_from_torch_distributed_when_initialised(tmp_path):
    import torch.distributed as dist

    assert not dist.is_initialized()
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        kernel = MegaKernel(_graph(), name="k", rank=5)
        assert kernel.rank == 0  # the process group's rank wins over the constructor's
        assert kernel.prepare(_params()).rank == 0
    finally:
        dist.destroy_process_group()
    assert kernel.rank == 5


def test_prepare_caches_per_signature():
    kernel = MegaKernel(
        _graph(),
        name="k",
        num_workers=6,
        execution_mode="aiv_pipeline",
        vector_worker_stride=3,
        owner_label="expert",
        owner_context="ctx",
    )
    first = kernel.prepare(_params())
    assert kernel.prepare(_params()) is first  # same shapes/dtypes/device: cached
    other = [torch.zeros(12, 2), torch.zeros(12, 2)]
    second = kernel.prepare(other)  # a different signature compiles again
    assert second is not first
    assert kernel.prepare([torch.ones(12, 2), torch.ones(12, 2)]) is second
    assert first.spec.num_workers == 6 and first.spec.execution_mode == "aiv_pipeline"
    assert first.spec.vector_worker_stride == 3 and first.owner_label == "expert" and first.spec.owner_context == "ctx"
    assert kernel.launch(_params()) is first


def test_prepare_dtype_is_part_of_the_signature():
    kernel = MegaKernel(_graph(), name="k")
    kernel.prepare(_params())
    with pytest.raises(TypeError, match=r"parameter 0 \('x'\) must be torch.float32, got torch.float64"):
        kernel.prepare([p.double() for p in _params()])


def test_cache_hit_still_validates_contiguity():
    kernel = MegaKernel(_graph(), name="k")
    kernel.launch(_params())
    non_contiguous = [torch.zeros(2, 10).t(), torch.zeros(10, 2)]
    with pytest.raises(ValueError, match=r"parameter 0 \('x'\) must be contiguous"):
        kernel.launch(non_contiguous)


def test_non_contiguous_rejected_on_first_prepare():
    with pytest.raises(ValueError, match=r"parameter 0 \('x'\) must be contiguous"):
        MegaKernel(_graph(), name="k").launch([torch.zeros(2, 10).t(), torch.zeros(10, 2)])


def test_non_tensor_parameter_gets_the_compiler_error():
    with pytest.raises(TypeError, match=r"parameter 0 \('x'\) must be a torch.Tensor, got int"):
        MegaKernel(_graph(), name="k").launch([1, torch.zeros(10, 2)])


class _Square:
    """A block whose forward and backward each launch a kernel."""

    def __init__(self):
        x = TensorSpec("x", (6,), torch.float32, 0)
        y = TensorSpec("y", (6,), torch.float32, 1)
        g = TensorSpec("g", (6,), torch.float32, 2)
        split = SplitSpec(split_inputs=((0, 0),), split_output_dims=(0,))

        def square(t):
            t.params[1][t.rows] = t.params[0][t.rows] ** 2

        def square_bwd(t):
            t.params[2][t.rows] = 2 * t.params[0][t.rows] * t.params[1][t.rows]

        self.fwd = MegaKernel(Graph([OperatorNode("square", "vector", (x,), (y,), square, split, 4)]), name="sq")
        gy = TensorSpec("gy", (6,), torch.float32, 1)
        self.bwd = MegaKernel(
            Graph(
                [OperatorNode("square_bwd", "vector", (x, gy), (g,), square_bwd, SplitSpec(((0, 0), (1, 0)), (0,)), 4)]
            ),
            name="sq_bwd",
        )

    def run_forward(self, inputs):
        (x,) = inputs
        y = torch.zeros(6)
        self.fwd.launch([x.detach(), y])
        return y, (x.detach(),)

    def run_backward(self, saved, grads):
        (x,), (gy,) = saved, grads
        g = torch.zeros(6)
        self.bwd.launch([x, gy.contiguous(), g], direction="backward")
        return (g,)


def test_megakernel_apply_autograd_and_directions():
    block = _Square()
    x = torch.linspace(-1, 1, 6).requires_grad_()
    with _session(FakeSession()) as session:
        y = megakernel_apply(block, x)
        y.backward(torch.arange(6, dtype=torch.float32))
    assert torch.allclose(y.detach(), x.detach() ** 2)
    assert torch.allclose(x.grad, 2 * x.detach() * torch.arange(6, dtype=torch.float32))
    assert [(c.runtime.kernel_name, c.direction) for c in session.contexts] == [
        ("sq", "forward"),
        ("sq_bwd", "backward"),
    ]
    assert session.log == ["prepare", "complete", "prepare", "complete"]
