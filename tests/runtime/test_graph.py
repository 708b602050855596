"""runtime.graph: TensorSpec, OperatorNode, Graph dependencies, topological order and tensor roles."""

import pytest
import torch

import megadump_zarr.runtime as runtime_pkg
from megadump_zarr.runtime import (
    Graph,
    GraphTensor,
    OperatorNode,
    SplitSpec,
    TaskAiCoreType,
    TensorSpec,
    operator_diagnostic_name,
)


def _noop(tile):
    return None


def _spec(name, position, shape=(4, 2), dtype=torch.float32, **kw):
    return TensorSpec(name, shape, dtype, position, **kw)


# --- TensorSpec ------------------------------------------------------------------------------------------------


def test_tensor_spec_normalises_shape_and_dims():
    spec = TensorSpec("x", [3, 5], torch.float32, 0, dims=["token", "hidden"])
    assert spec.shape == (3, 5) and type(spec.shape) is tuple
    assert spec.dims == ("token", "hidden") and type(spec.dims) is tuple
    assert spec.dim_names == ("token", "hidden")
    assert spec.dynamic is False


def test_tensor_spec_generated_dim_names():
    assert TensorSpec("x", (2, 3, 4), torch.float32, 0).dim_names == ("dim_0", "dim_1", "dim_2")
    assert TensorSpec("s", (), torch.float32, 0).dim_names == ()


@pytest.mark.parametrize(
    "dtype, size",
    [
        (torch.float32, 4),
        (torch.bfloat16, 2),
        (torch.float16, 2),
        (torch.int64, 8),
        (torch.int32, 4),
        (torch.uint8, 1),
        (torch.bool, 1),
        (torch.float64, 8),
        (torch.float8_e4m3fn, 1),
    ],
)
def test_dtype_size(dtype, size):
    assert TensorSpec("x", (1,), dtype, 0).dtype_size == size


def test_row_elements():
    spec = TensorSpec("w", (4, 3, 5), torch.float32, 0)
    assert [spec.row_elements(axis) for axis in range(3)] == [15, 5, 1]


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(name=""), ValueError, "TensorSpec name must be a non-empty string, got ''"),
        (dict(name=3), ValueError, "TensorSpec name must be a non-empty string, got 3"),
        (dict(shape=(2, -1)), ValueError, "TensorSpec 'x' shape must be non-negative, got (2, -1)"),
        (dict(dtype="float32"), TypeError, "TensorSpec 'x' dtype must be a torch.dtype, got 'float32'"),
        (dict(param_position=-1), ValueError, "TensorSpec 'x' param_position must be a non-negative int, got -1"),
        (dict(param_position=True), ValueError, "TensorSpec 'x' param_position must be a non-negative int, got True"),
        (dict(param_position=1.0), ValueError, "TensorSpec 'x' param_position must be a non-negative int, got 1.0"),
        (dict(dims=("a",)), ValueError, "TensorSpec 'x' has 1 dims for shape (2, 3)"),
    ],
)
def test_tensor_spec_validation(kwargs, error, message):
    fields = dict(name="x", shape=(2, 3), dtype=torch.float32, param_position=0)
    fields.update(kwargs)
    with pytest.raises(error) as info:
        TensorSpec(**fields)
    assert str(info.value) == message


def test_tensor_spec_is_frozen():
    spec = _spec("x", 0)
    with pytest.raises(Exception):
        spec.name = "y"


# --- OperatorNode ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "core, expected",
    [
        ("cube", TaskAiCoreType.TASK_AICORE_CUBE),
        ("vector", TaskAiCoreType.TASK_AICORE_VECTOR),
        ("mix", TaskAiCoreType.TASK_AICORE_MIX),
        (TaskAiCoreType.TASK_AICORE_MIX, TaskAiCoreType.TASK_AICORE_MIX),
        (1, TaskAiCoreType.TASK_AICORE_VECTOR),
    ],
)
def test_operator_core_type(core, expected):
    op = OperatorNode("op", core, [_spec("x", 0)], [_spec("y", 1)], _noop)
    assert op.core_type is expected
    assert type(op.inputs) is tuple and type(op.outputs) is tuple


def test_core_type_int_values():
    assert [int(c) for c in TaskAiCoreType] == [0, 1, 2]


def test_operator_bad_core_type():
    with pytest.raises(ValueError) as info:
        OperatorNode("op", "aic", (), (), _noop)
    assert str(info.value) == "operator 'op' core_type must be one of ['cube', 'mix', 'vector'], got 'aic'"
    with pytest.raises(ValueError):
        OperatorNode("op", 7, (), (), _noop)


@pytest.mark.parametrize("rows", [0, -3, True])
def test_operator_bad_tile_rows(rows):
    with pytest.raises(ValueError) as info:
        OperatorNode("op", "vector", (), (), _noop, tile_rows=rows)
    assert str(info.value) == f"operator 'op' tile_rows must be positive, got {rows!r}"


def test_operator_owners_become_int_tuple():
    op = OperatorNode("op", "mix", (), (), _noop, owners=[0, 2, 5])
    assert op.owners == (0, 2, 5)


def test_split_axis():
    op = OperatorNode(
        "op",
        "vector",
        (_spec("a", 0), _spec("b", 1), _spec("c", 2)),
        (_spec("y", 3), _spec("z", 4)),
        _noop,
        SplitSpec(split_inputs=((0, 0), (2, -1)), split_output_dims=(1,)),
    )
    assert [op.split_axis("input", i) for i in range(3)] == [0, None, None]
    assert [op.split_axis("output", i) for i in range(2)] == [1, None]
    assert operator_diagnostic_name(op) == "op"


# --- Graph -----------------------------------------------------------------------------------------------------


def _hazard_graph():
    """a: x -> ws ; b: ws -> y (RAW) ; c: x -> ws (WAW on a, WAR on b) ; d: ws -> z (RAW on c) ;
    e: x -> w (independent) ; f: x -> alias, bound to ws's parameter 2 (WAR on d through the shared parameter)."""
    x, ws, y, z, w = _spec("x", 0), _spec("ws", 2), _spec("y", 3), _spec("z", 4), _spec("w", 5)
    alias = _spec("alias", 2, dims=("slot", "ffn"))
    ops = [
        OperatorNode("a", "cube", (x,), (ws,), _noop),
        OperatorNode("b", "vector", (ws,), (y,), _noop),
        OperatorNode("c", "mix", (x,), (ws,), _noop),
        OperatorNode("d", "vector", (ws,), (z,), _noop),
        OperatorNode("e", "vector", (x,), (w,), _noop),
        OperatorNode("f", "vector", (x,), (alias,), _noop),
    ]
    return Graph(ops), ops


def test_dependencies_raw_war_waw():
    graph, _ = _hazard_graph()
    assert graph.dependencies() == [set(), {0}, {0, 1}, {2}, set(), {2, 3}]


def test_in_place_operator_dependencies():
    x, y = _spec("x", 0), _spec("y", 1)
    graph = Graph(
        [
            OperatorNode("read", "vector", (x,), (y,), _noop),
            OperatorNode("inplace", "vector", (x,), (x,), _noop),  # reads and writes x: WAR on "read"
            OperatorNode("again", "vector", (x,), (x,), _noop),  # RAW/WAW on "inplace"
        ]
    )
    assert graph.dependencies() == [set(), {0}, {1}]


def test_topological_sort_program_order():
    graph, ops = _hazard_graph()
    assert graph.topological_sort() == ops


def test_tensors_roles_producers_consumers():
    graph, ops = _hazard_graph()
    tensors = graph.tensors()
    assert all(isinstance(t, GraphTensor) for t in tensors)
    table = {t.name: (t.param_position, t.role, t.producers, t.consumers) for t in tensors}
    assert [t.name for t in tensors] == ["x", "ws", "y", "z", "w", "alias"]
    assert table == {
        "x": (0, "external_input", (), ("a", "c", "e", "f")),
        "ws": (2, "stage_output", ("a", "c"), ("b", "d")),
        "y": (3, "final_output", ("b",), ()),
        "z": (4, "final_output", ("d",), ()),
        "w": (5, "final_output", ("e",), ()),
        "alias": (2, "final_output", ("f",), ()),
    }
    ws = tensors[1]
    assert ws.declared_shape == (4, 2) and ws.spec is ops[0].outputs[0]


def test_tensors_first_spec_wins():
    first = TensorSpec("ws", (4, 2), torch.float32, 1, dims=("slot", "ffn"))
    second = TensorSpec("ws", (4, 2), torch.float32, 1, dims=("token", "ffn"))
    x = _spec("x", 0)
    graph = Graph(
        [OperatorNode("up", "mix", (x,), (first,), _noop), OperatorNode("unperm", "vector", (first,), (second,), _noop)]
    )
    (tx, tws) = graph.tensors()
    assert tws.spec is first and tws.spec.dims == ("slot", "ffn")
    assert tws.role == "stage_output" and tws.producers == ("up", "unperm") and tws.consumers == ("unperm",)


def test_conflicting_param_position_raises():
    a = OperatorNode("a", "vector", (_spec("x", 0),), (_spec("y", 1),), _noop)
    b = OperatorNode("b", "vector", (_spec("y", 2),), (_spec("z", 3),), _noop)
    with pytest.raises(ValueError) as info:
        Graph([a, b])
    assert str(info.value) == (
        "tensor 'y' is bound to parameter 1 (torch.float32) and 2 (torch.float32) in operator 'b'"
    )


def test_conflicting_dtype_raises():
    a = OperatorNode("a", "vector", (_spec("x", 0),), (_spec("y", 1),), _noop)
    b = OperatorNode("b", "vector", (_spec("y", 1, dtype=torch.float16),), (_spec("z", 3),), _noop)
    with pytest.raises(
        ValueError, match=r"tensor 'y' is bound to parameter 1 \(torch.float32\) and 1 \(torch.float16\)"
    ):
        Graph([a, b])


def test_graph_rejects_non_operators():
    with pytest.raises(TypeError) as info:
        Graph(["op"])
    assert str(info.value) == "Graph operators must be OperatorNode, got str"


def test_runtime_all_exports_tensor_spec():
    namespace = {}
    exec("from megadump_zarr.runtime import *", namespace)
    assert "TensorSpec" in namespace
    assert "TensorSpec" in runtime_pkg.__all__
