"""Zero-copy views of host tensors and byte payloads as numpy arrays of the exact dtype."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import torch

__all__ = ["dtype_name", "numpy_dtype_of", "tensor_to_numpy", "torch_dtype_named"]

_NUMPY = {
    torch.bool: np.dtype(np.bool_),
    torch.uint8: np.dtype(np.uint8),
    torch.int8: np.dtype(np.int8),
    torch.int16: np.dtype(np.int16),
    torch.int32: np.dtype(np.int32),
    torch.int64: np.dtype(np.int64),
    torch.float16: np.dtype(np.float16),
    torch.float32: np.dtype(np.float32),
    torch.float64: np.dtype(np.float64),
    torch.bfloat16: np.dtype(ml_dtypes.bfloat16),
    torch.float8_e4m3fn: np.dtype(ml_dtypes.float8_e4m3fn),
    torch.float8_e5m2: np.dtype(ml_dtypes.float8_e5m2),
}


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.bfloat16`` → ``"bfloat16"``.

    Args:
        dtype: A torch dtype.
    """
    return str(dtype).removeprefix("torch.")


def numpy_dtype_of(dtype: torch.dtype) -> np.dtype:
    """The numpy (ml_dtypes) dtype storing ``dtype`` exactly.

    Args:
        dtype: A torch dtype.
    """
    try:
        return _NUMPY[dtype]
    except KeyError:
        raise TypeError(
            f"Tensor dtype {dtype} cannot be stored; supported: {sorted(dtype_name(d) for d in _NUMPY)}"
        ) from None


def tensor_to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A numpy view of a contiguous CPU tensor with the same bytes and exact dtype (no conversion).

    Args:
        tensor: A CPU tensor.
    """
    target = numpy_dtype_of(tensor.dtype)
    flat = tensor.detach().contiguous().reshape(-1)
    raw = flat.view(torch.uint8).numpy() if flat.numel() else np.empty(0, dtype=np.uint8)
    return raw.view(target).reshape(tuple(tensor.shape))


def torch_dtype_named(name: str) -> torch.dtype:
    """``"bfloat16"`` → ``torch.bfloat16``, for every dtype the dump stores.

    Args:
        name: A name as written by ``dtype_name``.
    """
    for dtype in _NUMPY:
        if dtype_name(dtype) == name:
            return dtype
    raise ValueError(f"unsupported dtype {name!r}; expected one of {sorted(dtype_name(d) for d in _NUMPY)}")
