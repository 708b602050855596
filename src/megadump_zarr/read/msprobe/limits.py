"""Checks of what an imported document declares, before anything is loaded or written.

A converted dump must open in every reader, so a converter refuses up front (naming the file and field):
a dtype the store cannot hold (``complex64``), a shape whose byte size int64 cannot count, a tensor file
too small for the shape it declares (a 200-byte ``.npy`` whose header says ``(2**35,)`` would make
``np.load`` allocate 128 GiB before failing).
"""

from __future__ import annotations

import math
from pathlib import Path

from megadump_zarr.read.documents import INT64_MAX

__all__ = ["check_declared_bytes", "check_npy_header", "supported_itemsize"]


def supported_itemsize(dtype: str, what: str) -> int:
    """The bytes per element of ``dtype``, refusing one the store does not support.

    Args:
        dtype: torch-style dtype name (``float32``, ``bfloat16``).
        what: The file and field, for the message (``msprobe /x/dump.json at data.k.input_args[0].dtype``).
    """
    from megadump_zarr.layout.dtypes import NUMPY_DTYPES

    found = NUMPY_DTYPES.get(dtype)
    if found is None:
        raise ValueError(f"{what}: unsupported dtype {dtype!r}; megadump_zarr stores {sorted(NUMPY_DTYPES)}")
    return found.itemsize


def check_declared_bytes(shape: tuple[int, ...], itemsize: int, what: str, file: Path | None = None) -> int:
    """The byte size of ``shape``; refused when int64 cannot count it or when ``file`` is smaller.

    Args:
        shape: The declared shape.
        itemsize: Bytes per element.
        what: The file and field, for the message.
        file: The tensor file that must hold the bytes (``.pt`` archives and ``.npy`` files store them
            uncompressed), or None (statistics only).
    """
    elements = math.prod(shape)
    nbytes = elements * itemsize
    if nbytes > INT64_MAX:
        raise ValueError(
            f"{what}: shape {list(shape)} has {elements} elements ({nbytes} bytes), more than int64 can count"
        )
    if file is not None:
        size = file.stat().st_size
        if nbytes > size:
            raise ValueError(f"{what}: shape {list(shape)} needs {nbytes} bytes but {file} holds only {size} bytes")
    return nbytes


def check_npy_header(file: Path) -> None:
    """Refuse a ``.npy`` file whose header declares more data than the file holds (read before ``np.load``).

    Args:
        file: The ``.npy`` file.
    """
    import numpy as np

    try:
        with open(file, "rb") as handle:
            version = np.lib.format.read_magic(handle)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, _, dtype = read(handle)
            offset = handle.tell()
    except (ValueError, OSError, EOFError, SyntaxError, TypeError) as error:
        raise ValueError(f"refusing tensor file {file}: not a plain .npy array (its header: {error})") from None
    if dtype.hasobject:
        raise ValueError(f"refusing tensor file {file}: not a plain .npy array (its header declares object dtype)")
    available = file.stat().st_size - offset
    needed = math.prod(shape) * dtype.itemsize
    if needed > available:
        raise ValueError(
            f"refusing tensor file {file}: its .npy header declares shape {list(shape)} of {dtype} "
            f"({needed} bytes) but the file holds only {available} bytes of data"
        )
