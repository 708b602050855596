"""runtime.abi: ctypes layouts checked by hand, pack/unpack round trips, the diagnostic_mode byte."""

import ctypes
import struct

import pytest
import torch

from megadump_zarr.runtime import Graph, OperatorNode, SplitSpec, TensorSpec, compile_runtime
from megadump_zarr.runtime.abi import (
    MAX_PORTS,
    MAX_TASKS,
    RuntimeConfigC,
    TaskDescC,
    TensorDescC,
    pack_runtime_config,
    unpack_runtime_config,
)


def _offsets(struct_type):
    return {
        name: (getattr(struct_type, name).offset, getattr(struct_type, name).size) for name, _ in struct_type._fields_
    }


def test_constants():
    assert (MAX_TASKS, MAX_PORTS) == (1024, 8)


def test_tensor_desc_layout():
    assert ctypes.sizeof(TensorDescC) == 24
    assert ctypes.alignment(TensorDescC) == 8
    assert _offsets(TensorDescC) == {
        "input_position": (0, 4),
        "data_type": (4, 4),
        "base_ptr_offset": (8, 8),
        "dynamic_shape": (16, 4),
        "reserved": (20, 4),
    }


def test_tensor_desc_bytes_little_endian():
    desc = TensorDescC(input_position=7, data_type=2, base_ptr_offset=0x0102030405060708, dynamic_shape=1)
    assert bytes(desc) == struct.pack("<IIQII", 7, 2, 0x0102030405060708, 1, 0)


def test_task_desc_layout():
    # 6 u32 (24 bytes), then 8 inputs and 8 outputs of 24 bytes each.
    assert ctypes.sizeof(TaskDescC) == 24 + 2 * 8 * 24 == 408
    assert _offsets(TaskDescC) == {
        "task_index": (0, 4),
        "core_type": (4, 4),
        "num_inputs": (8, 4),
        "num_outputs": (12, 4),
        "task_split_value": (16, 4),
        "reserved": (20, 4),
        "inputs": (24, 192),
        "outputs": (216, 192),
    }


def test_runtime_config_layout():
    assert _offsets(RuntimeConfigC) == {
        "num_workers": (0, 4),
        "num_tasks": (4, 4),
        "task_index_num": (8, 12),
        "diagnostic_mode": (20, 4),
        "cube_task_indices": (24, 4096),
        "vector_task_indices": (4120, 4096),
        "mix_task_indices": (8216, 4096),
        "all_tasks": (12312, 1024 * 408),
    }
    assert ctypes.sizeof(RuntimeConfigC) == 12312 + 1024 * 408 == 430104


def _runtime():
    x = TensorSpec("x", (37, 4), torch.float32, 0)
    w = TensorSpec("w", (4, 4), torch.bfloat16, 1)
    y = TensorSpec("y", (37, 4), torch.float32, 2, dynamic=True)

    def fn(tile):
        return None

    graph = Graph(
        [
            OperatorNode("a", "vector", (x, w), (y,), fn, SplitSpec(((0, 0),), (0,)), 8),
            OperatorNode("b", "cube", (y,), (x,), fn, SplitSpec(((0, 0),), (0,)), 16),
            OperatorNode("c", "mix", (w,), (y,), fn, owners=(3, 1)),
        ]
    )
    params = [torch.zeros(37, 4), torch.zeros(4, 4, dtype=torch.bfloat16), torch.zeros(37, 4)]
    return compile_runtime(graph, params, kernel_name="abi", num_workers=6)


def _fields(config):
    tasks = []
    for i in range(int(config.num_tasks)):
        t = config.all_tasks[i]
        ports = [
            (p.input_position, p.data_type, p.base_ptr_offset, p.dynamic_shape)
            for p in (*t.inputs[: t.num_inputs], *t.outputs[: t.num_outputs])
        ]
        tasks.append((t.task_index, t.core_type, t.num_inputs, t.num_outputs, t.task_split_value, ports))
    return (
        config.num_workers,
        config.num_tasks,
        list(config.task_index_num),
        config.diagnostic_mode,
        list(config.cube_task_indices[:8]),
        list(config.vector_task_indices[:8]),
        list(config.mix_task_indices[:8]),
        tasks,
    )


def test_pack_unpack_round_trip():
    runtime = _runtime()
    packed = runtime.normal_tensor
    assert packed.dtype == torch.uint8 and packed.device.type == "cpu" and packed.dim() == 1
    assert packed.numel() == ctypes.sizeof(RuntimeConfigC)
    assert bytes(packed.numpy().tobytes()) == bytes(runtime.host_config)
    back = unpack_runtime_config(packed)
    assert bytes(back) == bytes(runtime.host_config)
    assert _fields(back) == _fields(runtime.host_config)
    # hand-checked values survive the trip
    assert (back.num_workers, back.num_tasks, list(back.task_index_num)) == (6, 10, [3, 5, 2])
    assert back.all_tasks[4].task_split_value == 8 and back.all_tasks[4].inputs[0].base_ptr_offset == 32 * 4
    assert back.all_tasks[4].inputs[1].data_type == 2 and back.all_tasks[4].outputs[0].dynamic_shape == 1
    # and the unpacked config is a copy, not a view of the tensor
    packed_again = pack_runtime_config(back)
    assert torch.equal(packed_again, packed)
    back.num_workers = 99
    assert unpack_runtime_config(packed).num_workers == 6


def test_pack_is_independent_of_later_config_changes():
    config = RuntimeConfigC()
    config.num_workers = 4
    packed = pack_runtime_config(config, "cpu")
    config.num_workers = 5
    assert unpack_runtime_config(packed).num_workers == 4


def test_diagnostic_mode_offset_is_the_byte_that_sets_mode_two():
    runtime = _runtime()
    offset = RuntimeConfigC.diagnostic_mode.offset
    assert offset == 20
    patched = runtime.normal_tensor.clone()
    patched[offset] = 2
    config = unpack_runtime_config(patched)
    assert config.diagnostic_mode == 2
    # nothing else changed
    original = bytearray(bytes(runtime.host_config))
    original[offset] = 2
    assert bytes(config) == bytes(original)
    assert unpack_runtime_config(runtime.normal_tensor).diagnostic_mode == 0
    # the neighbouring bytes are not the mode's low byte
    for wrong in (offset - 1, offset + 1):
        other = runtime.normal_tensor.clone()
        other[wrong] = 2
        assert unpack_runtime_config(other).diagnostic_mode != 2


@pytest.mark.parametrize(
    "tensor",
    [
        torch.zeros(ctypes.sizeof(RuntimeConfigC) - 1, dtype=torch.uint8),
        torch.zeros(ctypes.sizeof(RuntimeConfigC) // 4, dtype=torch.int32),
    ],
)
def test_unpack_rejects_wrong_size_or_dtype(tensor):
    with pytest.raises(ValueError) as info:
        unpack_runtime_config(tensor)
    assert str(info.value) == (
        f"runtime config must be {ctypes.sizeof(RuntimeConfigC)} uint8 bytes, got {tensor.numel()} {tensor.dtype}"
    )
