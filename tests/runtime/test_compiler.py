"""runtime.compiler: tiling, owner tasks, schedules, placement (checked by hand) and parameter validation."""

import pytest
import torch

from megadump_zarr.runtime import (
    Graph,
    OperatorNode,
    SplitSpec,
    TaskAiCoreType,
    TensorSpec,
    compile_runtime,
    shard_view_resolver,
    worker_shard,
)
from megadump_zarr.runtime.abi import MAX_PORTS, RuntimeConfigC, unpack_runtime_config

ROWS_SPLIT = SplitSpec(split_inputs=((0, 0),), split_output_dims=(0,))


def _noop(tile):
    return None


def _tiled_graph(rows=37, cols=4, tile_rows=8, core="vector"):
    x = TensorSpec("x", (rows, cols), torch.float32, 0, ("token", "hidden"))
    w = TensorSpec("w", (cols, cols), torch.float32, 1)
    y = TensorSpec("y", (rows, cols), torch.float32, 2)
    return Graph([OperatorNode("scale", core, (x, w), (y,), _noop, ROWS_SPLIT, tile_rows)])


def _tiled_params(rows=37, cols=4):
    return [torch.zeros(rows, cols), torch.zeros(cols, cols), torch.zeros(rows, cols)]


# --- tiling ----------------------------------------------------------------------------------------------------


def test_tiling_37_rows_by_8():
    runtime = compile_runtime(_tiled_graph(), _tiled_params(), kernel_name="k")
    assert [(t.task_id, t.task_index, t.start, t.stop, t.owner_id) for t in runtime.tasks] == [
        (0, 0, 0, 8, None),
        (1, 1, 8, 16, None),
        (2, 2, 16, 24, None),
        (3, 3, 24, 32, None),
        (4, 4, 32, 37, None),
    ]
    assert runtime.tasks[-1].stop - runtime.tasks[-1].start == 5  # final partial tile
    config = runtime.host_config
    assert config.num_tasks == 5
    for task in runtime.tasks:
        desc = config.all_tasks[task.task_id]
        assert (desc.task_index, desc.core_type, desc.num_inputs, desc.num_outputs) == (task.task_index, 1, 2, 1)
        assert desc.task_split_value == 8  # the tile size, also for the partial tile
        x_desc, w_desc, y_desc = desc.inputs[0], desc.inputs[1], desc.outputs[0]
        assert (x_desc.input_position, x_desc.data_type, x_desc.base_ptr_offset) == (0, 4, task.start * 4)
        assert (w_desc.input_position, w_desc.data_type, w_desc.base_ptr_offset) == (1, 4, 0)  # not split
        assert (y_desc.input_position, y_desc.data_type, y_desc.base_ptr_offset) == (2, 4, task.start * 4)
        assert x_desc.dynamic_shape == w_desc.dynamic_shape == y_desc.dynamic_shape == 0
    assert [config.all_tasks[i].inputs[0].base_ptr_offset for i in range(5)] == [0, 32, 64, 96, 128]
    # unused port slots and task slots stay zero
    assert bytes(config.all_tasks[0].inputs[2]) == bytes(24)
    assert bytes(config.all_tasks[5]) == bytes(408)


def test_base_ptr_offset_uses_trailing_elements():
    x = TensorSpec("x", (10, 3, 5), torch.bfloat16, 0)
    y = TensorSpec("y", (10, 3, 5), torch.bfloat16, 1)
    graph = Graph([OperatorNode("op", "vector", (x,), (y,), _noop, ROWS_SPLIT, 4)])
    params = [torch.zeros(10, 3, 5, dtype=torch.bfloat16)] * 2
    runtime = compile_runtime(graph, params, kernel_name="k")
    descs = [runtime.host_config.all_tasks[i] for i in range(3)]
    assert [(d.inputs[0].base_ptr_offset, d.inputs[0].data_type, d.task_split_value) for d in descs] == [
        (0, 2, 4),
        (60, 2, 4),
        (120, 2, 4),
    ]
    assert [(t.start, t.stop) for t in runtime.tasks] == [(0, 4), (4, 8), (8, 10)]


def test_untiled_operator_is_one_task_over_all_rows():
    runtime = compile_runtime(_tiled_graph(tile_rows=None), _tiled_params(), kernel_name="k")
    assert [(t.start, t.stop) for t in runtime.tasks] == [(0, 37)]
    assert runtime.host_config.all_tasks[0].task_split_value == 37


def test_unsplit_operator_is_one_task():
    x = TensorSpec("x", (5,), torch.float32, 0)
    y = TensorSpec("y", (5,), torch.float32, 1)
    runtime = compile_runtime(
        Graph([OperatorNode("op", "cube", (x,), (y,), _noop)]), [torch.zeros(5)] * 2, kernel_name="k"
    )
    assert [(t.start, t.stop, t.owner_id) for t in runtime.tasks] == [(None, None, None)]
    desc = runtime.host_config.all_tasks[0]
    assert (desc.task_split_value, desc.inputs[0].base_ptr_offset, desc.outputs[0].base_ptr_offset) == (0, 0, 0)


def test_owner_tasks():
    xs = TensorSpec("xs", (6, 2), torch.float32, 0, dynamic=True)
    w = TensorSpec("w", (3, 2, 2), torch.float32, 1)
    ys = TensorSpec("ys", (6, 2), torch.float32, 2, dynamic=True)
    graph = Graph([OperatorNode("expert", "mix", (xs, w), (ys,), _noop, owners=(2, 0, 1))])
    runtime = compile_runtime(
        graph,
        [torch.zeros(6, 2), torch.zeros(3, 2, 2), torch.zeros(6, 2)],
        kernel_name="k",
        owner_label="expert",
        owner_context="ctx",
    )
    assert [(t.task_id, t.task_index, t.owner_id, t.start, t.stop) for t in runtime.tasks] == [
        (0, 0, 2, None, None),
        (1, 1, 0, None, None),
        (2, 2, 1, None, None),
    ]
    assert runtime.metadata.task_owner_ids == {0: 2, 1: 0, 2: 1}
    assert runtime.owner_label == "expert" and runtime.spec.owner_context == "ctx"
    for i in range(3):
        desc = runtime.host_config.all_tasks[i]
        assert desc.task_split_value == 0 and desc.core_type == 2
        assert (
            desc.inputs[0].dynamic_shape == 1
            and desc.inputs[1].dynamic_shape == 0
            and desc.outputs[0].dynamic_shape == 1
        )
        assert desc.inputs[0].base_ptr_offset == 0


# --- a mixed graph: stages, schedules, placement ------------------------------------------------------------


def _mixed_graph():
    T, D, E = 37, 4, 3
    xs = TensorSpec("xs", (T, D), torch.float32, 0, dynamic=True)
    w = TensorSpec("w", (E, D, D), torch.float32, 1)
    ws = TensorSpec("ws", (T, D), torch.float32, 2, dynamic=True)
    ys = TensorSpec("ys", (T, D), torch.float32, 3, dynamic=True)
    out = TensorSpec("out", (T, D), torch.float32, 4)
    fin = TensorSpec("fin", (T, D), torch.float32, 5)
    experts = (0, 1, 2)
    return Graph(
        [
            OperatorNode("up", "mix", (xs, w), (ws,), _noop, owners=experts),
            OperatorNode("down", "cube", (ws, w), (ys,), _noop, owners=experts),
            OperatorNode("scale", "vector", (ys,), (out,), _noop, ROWS_SPLIT, 8),
            OperatorNode("proj", "cube", (out,), (fin,), _noop, ROWS_SPLIT, 16),
        ]
    )


def _mixed_params():
    return [
        torch.zeros(37, 4),
        torch.zeros(3, 4, 4),
        torch.zeros(37, 4),
        torch.zeros(37, 4),
        torch.zeros(37, 4),
        torch.zeros(37, 4),
    ]


def _compile_mixed(**kw):
    return compile_runtime(_mixed_graph(), _mixed_params(), kernel_name="mixed", **kw)


def test_stage_names_and_schedules():
    runtime = _compile_mixed()
    assert runtime.task_stage_names == {
        0: "up",
        1: "up",
        2: "up",
        3: "down",
        4: "down",
        5: "down",
        6: "scale",
        7: "scale",
        8: "scale",
        9: "scale",
        10: "scale",
        11: "proj",
        12: "proj",
        13: "proj",
    }
    assert [t.stage for t in runtime.tasks] == [runtime.task_stage_names[i] for i in range(14)]
    assert [t.task_index for t in runtime.tasks] == [0, 1, 2, 0, 1, 2, 0, 1, 2, 3, 4, 0, 1, 2]
    config = runtime.host_config
    assert config.num_tasks == 14 and config.num_workers == 8
    assert list(config.task_index_num) == [6, 5, 3]  # cube, vector, mix
    assert list(config.cube_task_indices[:7]) == [3, 4, 5, 11, 12, 13, 0]
    assert list(config.vector_task_indices[:6]) == [6, 7, 8, 9, 10, 0]
    assert list(config.mix_task_indices[:4]) == [0, 1, 2, 0]
    assert [config.all_tasks[i].core_type for i in range(14)] == [2, 2, 2, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0]
    assert runtime.metadata.task_owner_ids == {0: 0, 1: 1, 2: 2, 3: 0, 4: 1, 5: 2}
    assert [(t.start, t.stop) for t in runtime.tasks[11:]] == [(0, 16), (16, 32), (32, 37)]
    assert [config.all_tasks[i].task_split_value for i in (11, 12, 13)] == [16, 16, 16]
    # the packed tensor is the host config
    assert bytes(unpack_runtime_config(runtime.normal_tensor)) == bytes(config)
    assert runtime.kernel_name == "mixed" and runtime.rank == 0 and runtime.device == torch.device("cpu")
    assert runtime.spec.execution_mode == "event_driven" and runtime.spec.vector_worker_stride == 2
    assert runtime.spec.num_workers == 8


_CORE_NAMES = {
    TaskAiCoreType.TASK_AICORE_CUBE: "AIC",
    TaskAiCoreType.TASK_AICORE_VECTOR: "AIV",
    TaskAiCoreType.TASK_AICORE_MIX: "MIX",
}


def _event_driven_locations(config: RuntimeConfigC, stride: int) -> dict[int, tuple[str, int]]:
    """The dumper's placement rule, written out: the i-th task of a schedule runs on worker
    i % (num_workers // 2) for cube and mix, i % (num_workers // stride) for vector."""
    workers = int(config.num_workers)
    schedules = (
        (TaskAiCoreType.TASK_AICORE_CUBE, config.cube_task_indices, config.task_index_num[0]),
        (TaskAiCoreType.TASK_AICORE_VECTOR, config.vector_task_indices, config.task_index_num[1]),
        (TaskAiCoreType.TASK_AICORE_MIX, config.mix_task_indices, config.task_index_num[2]),
    )
    locations = {}
    for core, indices, count in schedules:
        group = workers // stride if core == TaskAiCoreType.TASK_AICORE_VECTOR else workers // 2
        for i in range(count):
            assert indices[i] not in locations
            locations[int(indices[i])] = (_CORE_NAMES[core], i % group)
    return locations


def test_event_driven_placement_8_workers_stride_4():
    runtime = _compile_mixed(num_workers=8, vector_worker_stride=4)
    assert runtime.spec.vector_worker_stride == 4
    # cube/mix: 8 // 2 = 4 groups; vector: 8 // 4 = 2 groups.
    assert _event_driven_locations(runtime.host_config, 4) == {
        0: ("MIX", 0),
        1: ("MIX", 1),
        2: ("MIX", 2),
        3: ("AIC", 0),
        4: ("AIC", 1),
        5: ("AIC", 2),
        11: ("AIC", 3),
        12: ("AIC", 0),
        13: ("AIC", 1),
        6: ("AIV", 0),
        7: ("AIV", 1),
        8: ("AIV", 0),
        9: ("AIV", 1),
        10: ("AIV", 0),
    }


def test_event_driven_placement_6_workers_stride_2():
    runtime = _compile_mixed(num_workers=6)
    # cube/mix: 6 // 2 = 3; vector: 6 // 2 = 3.
    assert _event_driven_locations(runtime.host_config, 2) == {
        0: ("MIX", 0),
        1: ("MIX", 1),
        2: ("MIX", 2),
        3: ("AIC", 0),
        4: ("AIC", 1),
        5: ("AIC", 2),
        11: ("AIC", 0),
        12: ("AIC", 1),
        13: ("AIC", 2),
        6: ("AIV", 0),
        7: ("AIV", 1),
        8: ("AIV", 2),
        9: ("AIV", 0),
        10: ("AIV", 1),
    }


# --- aiv_pipeline: worker shards -------------------------------------------------------------------------


def _shards(start, stop, workers=8):
    return [worker_shard(start, stop, w, workers) for w in range(workers)]


def test_worker_shard_8_rows_8_workers():
    assert _shards(0, 8) == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7), (7, 8)]
    assert _shards(8, 16) == [(8, 9), (9, 10), (10, 11), (11, 12), (12, 13), (13, 14), (14, 15), (15, 16)]


def test_worker_shard_5_rows_8_workers_empty_tail():
    assert _shards(0, 5) == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 5), (5, 5), (5, 5)]
    assert _shards(32, 37) == [(32, 33), (33, 34), (34, 35), (35, 36), (36, 37), (37, 37), (37, 37), (37, 37)]


def test_worker_shard_37_rows_8_workers():
    # ceil(37 / 8) = 5 rows per worker; the last worker gets the remaining 2.
    assert _shards(0, 37) == [(0, 5), (5, 10), (10, 15), (15, 20), (20, 25), (25, 30), (30, 35), (35, 37)]


def test_worker_shard_9_rows_and_empty_tile():
    assert _shards(0, 9) == [(0, 2), (2, 4), (4, 6), (6, 8), (8, 9), (9, 9), (9, 9), (9, 9)]
    assert _shards(4, 4, 3) == [(4, 4), (4, 4), (4, 4)]


def test_aiv_pipeline_runtime_keeps_tiles_and_schedules():
    runtime = compile_runtime(_tiled_graph(), _tiled_params(), kernel_name="k", execution_mode="aiv_pipeline")
    assert runtime.spec.execution_mode == "aiv_pipeline"
    assert [(t.start, t.stop) for t in runtime.tasks] == [(0, 8), (8, 16), (16, 24), (24, 32), (32, 37)]
    assert list(runtime.host_config.task_index_num) == [0, 5, 0]
    # every (task, worker) pair is a location; the shard of each is worker_shard of the task's tile
    table = {(t.task_id, w): worker_shard(t.start, t.stop, w, 8) for t in runtime.tasks for w in range(8)}
    assert [table[(4, w)] for w in range(8)] == [
        (32, 33),
        (33, 34),
        (34, 35),
        (35, 36),
        (36, 37),
        (37, 37),
        (37, 37),
        (37, 37),
    ]
    assert [table[(0, w)] for w in range(8)] == [(w, w + 1) for w in range(8)]


class _View:
    def __init__(self, source_offset_bytes, shape):
        self.source_offset_bytes = source_offset_bytes
        self.shape = tuple(shape)


class _Context:
    def __init__(self, operator, io, index, spec, default, core_id, num_workers):
        self.operator, self.io, self.index, self.tensor_spec = operator, io, index, spec
        self.default_view, self.core_id = default, core_id
        self.runtime_config = type("Cfg", (), {"num_workers": num_workers})()

    def make_view(self, shape, *, source_offset_bytes=None):
        return _View(source_offset_bytes, shape)


def test_shard_view_resolver_final_partial_tile():
    graph = _tiled_graph()
    op = graph.operators[0]
    x = op.inputs[0]  # (37, 4) float32: 16 bytes per row
    default = _View(32 * 16, (5, 4))  # the clipped final tile, rows [32, 37)
    views = [shard_view_resolver(_Context(op, "input", 0, x, default, w, 8)) for w in range(8)]
    assert [(v.source_offset_bytes, v.shape) for v in views] == [
        (512, (1, 4)),
        (528, (1, 4)),
        (544, (1, 4)),
        (560, (1, 4)),
        (576, (1, 4)),
        (592, (0, 4)),
        (592, (0, 4)),
        (592, (0, 4)),
    ]
    # an unsplit port keeps its default view
    w_default = _View(0, (4, 4))
    assert shard_view_resolver(_Context(op, "input", 1, op.inputs[1], w_default, 3, 8)) is w_default


# --- validation ---------------------------------------------------------------------------------------------


def test_wrong_dtype():
    params = _tiled_params()
    params[1] = params[1].double()
    with pytest.raises(TypeError) as info:
        compile_runtime(_tiled_graph(), params, kernel_name="k")
    assert str(info.value) == "parameter 1 ('w') must be torch.float32, got torch.float64"


def test_too_few_parameters():
    with pytest.raises(ValueError) as info:
        compile_runtime(_tiled_graph(), _tiled_params()[:2], kernel_name="k")
    assert str(info.value) == "operator 'scale' tensor 'y' needs parameter 2, got 2 parameters"


def test_too_few_elements():
    params = _tiled_params()
    params[2] = torch.zeros(36, 4)
    with pytest.raises(ValueError) as info:
        compile_runtime(_tiled_graph(), params, kernel_name="k")
    assert str(info.value) == "parameter 2 ('y') holds 144 elements, fewer than its declared shape (37, 4)"


def test_non_contiguous():
    params = _tiled_params()
    params[0] = torch.zeros(4, 37).t()
    assert params[0].shape == (37, 4)
    with pytest.raises(ValueError) as info:
        compile_runtime(_tiled_graph(), params, kernel_name="k")
    assert str(info.value) == "parameter 0 ('x') must be contiguous"


def test_non_tensor_parameter():
    params = _tiled_params()
    params[1] = [[0.0] * 4] * 4
    with pytest.raises(TypeError) as info:
        compile_runtime(_tiled_graph(), params, kernel_name="k")
    assert str(info.value) == "parameter 1 ('w') must be a torch.Tensor, got list"


def test_mixed_devices():
    params = _tiled_params()
    params[2] = torch.empty(37, 4, device="meta")
    with pytest.raises(ValueError) as info:
        compile_runtime(_tiled_graph(), params, kernel_name="k")
    assert str(info.value) == "parameter 2 ('y') is on meta, others on cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_mixed_devices_cuda():
    params = _tiled_params()
    params[0] = params[0].cuda()
    with pytest.raises(ValueError, match=r"parameter 1 \('w'\) is on cpu, others on cuda:0"):
        compile_runtime(_tiled_graph(), params, kernel_name="k")


@pytest.mark.parametrize("mode", ["broadcast", "", None])
def test_bad_execution_mode(mode):
    with pytest.raises(ValueError) as info:
        compile_runtime(_tiled_graph(), _tiled_params(), kernel_name="k", execution_mode=mode)
    assert str(info.value) == f"execution_mode must be one of ['event_driven', 'aiv_pipeline'], got {mode!r}"


@pytest.mark.parametrize("workers", [1, 0, True, 8.0])
def test_bad_num_workers(workers):
    with pytest.raises(ValueError) as info:
        compile_runtime(_tiled_graph(), _tiled_params(), kernel_name="k", num_workers=workers)
    assert str(info.value) == f"num_workers must be an int >= 2, got {workers!r}"


def test_too_many_ports():
    specs = tuple(TensorSpec(f"i{n}", (2,), torch.float32, n) for n in range(MAX_PORTS + 1))
    out = TensorSpec("o", (2,), torch.float32, MAX_PORTS + 1)
    graph = Graph([OperatorNode("wide", "vector", specs, (out,), _noop)])
    with pytest.raises(ValueError) as info:
        compile_runtime(graph, [torch.zeros(2)] * (MAX_PORTS + 2), kernel_name="k")
    assert str(info.value) == f"operator 'wide' has more than {MAX_PORTS} inputs or outputs"


def test_too_many_tasks():
    graph = _tiled_graph(rows=1025, cols=1, tile_rows=1)
    with pytest.raises(ValueError) as info:
        compile_runtime(graph, _tiled_params(1025, 1), kernel_name="big")
    assert str(info.value) == "kernel 'big' needs more than 1024 tasks; raise tile_rows"
    # 1024 tasks fit
    assert (
        len(
            compile_runtime(
                _tiled_graph(rows=1024, cols=1, tile_rows=1), _tiled_params(1024, 1), kernel_name="ok"
            ).tasks
        )
        == 1024
    )


def test_larger_parameter_is_accepted():
    params = _tiled_params()
    params[0] = torch.zeros(40, 4)
    runtime = compile_runtime(_tiled_graph(), params, kernel_name="k")
    assert len(runtime.tasks) == 5
