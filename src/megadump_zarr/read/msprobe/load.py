"""Loading one msprobe tensor file safely: no code runs, sizes are checked before anything is read.

``.pt`` files load only through ``torch.load(weights_only=True)`` (convert), or, memory-mapped when
``mmap`` (in place: nothing is read until the bytes are used), through :mod:`.torchfile`'s allowlist
unpickler without importing torch; either way they must hold one dense tensor; ``.npy`` files load with
``allow_pickle=False`` after their header is checked against the file's size. Either must hold the dtype
and shape ``dump.json`` states.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from megadump_zarr.read.msprobe.dump_json import Tensor

__all__ = ["load_tensor"]


def _first_reason(error: BaseException) -> str:
    """The informative line of a (possibly very long) torch error message, without torch's boilerplate
    (which suggests retrying with ``weights_only=False``: exactly what must not be done here)."""
    boilerplate = ("Weights only load failed", "Check the documentation", "Please file an issue")
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    for line in lines:
        if not line.startswith(boilerplate):
            return line
    return lines[-1] if lines else type(error).__name__


def load_tensor(item: Tensor, *, mmap: bool = False) -> np.ndarray:
    """The tensor file of ``item`` as a numpy array of its exact dtype, checked against ``dump.json``.

    Args:
        item: A planned tensor leaf with a file.
        mmap: Map the file instead of reading it (``np.load(mmap_mode="r")``; a ``.pt`` file through
            :func:`.torchfile.read_pt`, the same allowlist as ``torch.load(weights_only=True)`` without
            importing torch): the bytes are read when used.

    Raises:
        ValueError: A file that is no plain tensor/array (never unpickled), or whose dtype or shape is not
            the one ``dump.json`` states (naming the file).
    """
    assert item.file is not None
    if item.file.suffix == ".npy":
        from megadump_zarr.read.msprobe.limits import check_npy_header

        check_npy_header(item.file)  # the header may have changed since the plan: never allocate what it says
        try:
            data = np.load(item.file, allow_pickle=False, mmap_mode="r" if mmap else None)
        except (ValueError, OSError, EOFError) as error:
            raise ValueError(
                f"refusing msprobe tensor file {item.file}: not a plain .npy array "
                f"(np.load(allow_pickle=False): {error})"
            ) from None
        if not isinstance(data, np.ndarray):
            raise ValueError(f"msprobe tensor file {item.file} holds a {type(data).__name__}, not one array")
        stored = data.dtype.name
    elif mmap:  # in place: no torch import, the storage memory-mapped (see .torchfile)
        from megadump_zarr.read.msprobe.torchfile import read_pt

        data, stored = read_pt(item.file)
    else:
        data, stored = _load_pt(item.file)
    if stored != item.dtype:
        raise ValueError(f"msprobe tensor file {item.file} holds dtype {stored}, dump.json says {item.dtype!r}")
    if tuple(data.shape) != item.shape:
        raise ValueError(
            f"msprobe tensor file {item.file} holds shape {list(data.shape)}, dump.json says {list(item.shape)}"
        )
    return data


def _load_pt(file: Path) -> tuple[np.ndarray, str]:
    import pickle
    import warnings

    import torch

    from megadump_zarr.tensor_arrays import dtype_name, tensor_to_numpy

    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            obj = torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise ValueError(
            f"refusing msprobe tensor file {file}: it is not a plain tensor file, "
            f"torch.load(weights_only=True) refused it ({_first_reason(error)}); it was not unpickled"
        ) from None
    except Exception as error:
        raise ValueError(
            f"cannot load msprobe tensor file {file}: {type(error).__name__}: {_first_reason(error)}"
        ) from None
    if not isinstance(obj, torch.Tensor):
        raise ValueError(f"msprobe tensor file {file} holds a {type(obj).__name__}, not a single torch.Tensor")
    if obj.layout != torch.strided or obj.is_quantized:
        raise ValueError(f"msprobe tensor file {file} holds a {obj.layout} tensor; only dense tensors are supported")
    try:
        return tensor_to_numpy(obj), dtype_name(obj.dtype)
    except TypeError as error:
        raise ValueError(f"msprobe tensor file {file}: {error}") from None
