"""The native RuntimeConfig ABI (ctypes), packed into a uint8 tensor on the kernel's device."""

from __future__ import annotations

import ctypes
from enum import IntEnum

import torch

__all__ = [
    "MAX_PORTS",
    "MAX_TASKS",
    "RuntimeConfigC",
    "TaskAiCoreType",
    "TaskDescC",
    "TensorDescC",
    "pack_runtime_config",
    "unpack_runtime_config",
]

MAX_TASKS = 1024
MAX_PORTS = 8


class TaskAiCoreType(IntEnum):
    """Which accelerator worker runs a task."""

    TASK_AICORE_CUBE = 0
    TASK_AICORE_VECTOR = 1
    TASK_AICORE_MIX = 2


class TensorDescC(ctypes.Structure):
    """One task operand: ABI parameter, element bytes, element offset of the task's range."""

    _fields_ = [
        ("input_position", ctypes.c_uint32),
        ("data_type", ctypes.c_uint32),
        ("base_ptr_offset", ctypes.c_uint64),
        ("dynamic_shape", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]


class TaskDescC(ctypes.Structure):
    """One scheduled task."""

    _fields_ = [
        ("task_index", ctypes.c_uint32),
        ("core_type", ctypes.c_uint32),
        ("num_inputs", ctypes.c_uint32),
        ("num_outputs", ctypes.c_uint32),
        ("task_split_value", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
        ("inputs", TensorDescC * MAX_PORTS),
        ("outputs", TensorDescC * MAX_PORTS),
    ]


class RuntimeConfigC(ctypes.Structure):
    """The whole runtime configuration of one compiled kernel."""

    _fields_ = [
        ("num_workers", ctypes.c_uint32),
        ("num_tasks", ctypes.c_uint32),
        ("task_index_num", ctypes.c_uint32 * 3),
        ("diagnostic_mode", ctypes.c_uint32),
        ("cube_task_indices", ctypes.c_uint32 * MAX_TASKS),
        ("vector_task_indices", ctypes.c_uint32 * MAX_TASKS),
        ("mix_task_indices", ctypes.c_uint32 * MAX_TASKS),
        ("all_tasks", TaskDescC * MAX_TASKS),
    ]


def pack_runtime_config(config: RuntimeConfigC, device: torch.device | str = "cpu") -> torch.Tensor:
    """Pack a config into a uint8 tensor on ``device`` (the kernel's ``normal_tensor``).

    Args:
        config: The host config.
        device: Target device.
    """
    host = torch.frombuffer(bytearray(bytes(config)), dtype=torch.uint8)
    return host.to(device=device)


def unpack_runtime_config(tensor: torch.Tensor) -> RuntimeConfigC:
    """Read a config back from its packed tensor (any device).

    Args:
        tensor: A uint8 tensor of ``ctypes.sizeof(RuntimeConfigC)`` bytes.
    """
    expected = ctypes.sizeof(RuntimeConfigC)
    if tensor.dtype != torch.uint8 or tensor.numel() != expected:
        raise ValueError(f"runtime config must be {expected} uint8 bytes, got {tensor.numel()} {tensor.dtype}")
    return RuntimeConfigC.from_buffer_copy(tensor.detach().cpu().contiguous().numpy().tobytes())
