"""A ``torch.save`` file (one dense tensor) read without torch and without running its pickle's code.

``torch.save`` writes a zip archive: ``{name}/data.pkl`` (a small pickle that rebuilds the tensor),
``{name}/data/{key}`` (each storage's raw bytes, stored uncompressed) and ``{name}/byteorder``. Reading
one in place (:mod:`.store`) needs only where the tensor's bytes lie, so this module unpickles
``data.pkl`` with an allowlist as strict as ``torch.load(weights_only=True)``'s for a plain tensor --
``torch._utils._rebuild_tensor_v2``, ``torch._utils._rebuild_parameter``, ``collections.OrderedDict``
and the ``torch.*Storage`` types, each resolved to an inert local stand-in (torch is never imported, no
other global can be named) -- then maps the storage's bytes with numpy (``mmap``: nothing is read until
used). Importing torch costs a command-line compare more than a second; this costs a zip directory and a
~150-byte pickle per file.

Refused (``ValueError`` naming the file): anything that is not such an archive, a pickle naming any
other global (a pickle that would run code), a compressed or missing storage, a storage that does not
hold the tensor densely (stride 0 as ``expand`` writes, overlapping strides, a storage smaller than the
view, an offset past its end: the declared shape could otherwise stand for far more bytes than the file
holds), a big-endian archive, more than one tensor or anything but a tensor.
"""

from __future__ import annotations

from collections import OrderedDict
import io
import os
import pickle
from pathlib import Path
import struct
import threading
import zipfile
from typing import Any

import numpy as np

__all__ = ["check_pt", "read_pt"]

_PICKLE_LIMIT = 1 << 20  # one tensor's data.pkl is ~150 bytes
_STORAGES = {
    "FloatStorage": "float32",
    "DoubleStorage": "float64",
    "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
    "Float8_e4m3fnStorage": "float8_e4m3fn",
    "Float8_e5m2Storage": "float8_e5m2",
}


class _Inert:
    """A stand-in object: a pickle's BUILD opcode cannot set its state."""

    def __setstate__(self, state: Any) -> None:
        raise pickle.UnpicklingError("the pickle sets the state of a tensor part")


class _StorageType(_Inert):
    def __init__(self, dtype: str) -> None:
        self.dtype = dtype


class _Storage(_Inert):
    def __init__(self, dtype: str, key: str, numel: int) -> None:
        self.dtype, self.key, self.numel = dtype, key, numel


class _TensorView(_Inert):
    def __init__(self, storage: _Storage, offset: int, size: tuple[int, ...], stride: tuple[int, ...]) -> None:
        self.storage, self.offset, self.size, self.stride = storage, offset, size, stride


def _ints(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, tuple) or not all(type(v) is int and v >= 0 for v in value):
        raise pickle.UnpicklingError(f"{what} is not a tuple of non-negative integers")
    return value


def _rebuild_tensor_v2(storage: Any, offset: Any, size: Any, stride: Any, *_rest: Any) -> _TensorView:
    if not isinstance(storage, _Storage) or type(offset) is not int or offset < 0:
        raise pickle.UnpicklingError("_rebuild_tensor_v2 is not given a storage and an offset")
    size, stride = _ints(size, "the tensor's size"), _ints(stride, "the tensor's stride")
    if len(size) != len(stride):
        raise pickle.UnpicklingError(f"size {list(size)} and stride {list(stride)} differ in length")
    return _TensorView(storage, offset, size, stride)


def _rebuild_parameter(data: Any, *_rest: Any) -> Any:
    if not isinstance(data, _TensorView):
        raise pickle.UnpicklingError("_rebuild_parameter is not given a tensor")
    return data


def _ordered_dict(*args: Any) -> OrderedDict[Any, Any]:
    if args:
        raise pickle.UnpicklingError("OrderedDict with arguments")
    return OrderedDict()


class _Unpickler(pickle.Unpickler):
    """Only the globals a plain tensor's pickle names, each an inert stand-in; no torch import."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _rebuild_tensor_v2
        if module == "torch._utils" and name == "_rebuild_parameter":
            return _rebuild_parameter
        if module == "collections" and name == "OrderedDict":
            return _ordered_dict
        if module == "torch" and name in _STORAGES:
            return _StorageType(_STORAGES[name])
        raise pickle.UnpicklingError(f"it names the global {module}.{name}, which a plain tensor file does not")

    def persistent_load(self, pid: Any) -> _Storage:
        if not (
            isinstance(pid, tuple)
            and len(pid) == 5
            and pid[0] == "storage"
            and isinstance(pid[1], _StorageType)
            and isinstance(pid[2], str)
            and isinstance(pid[3], str)
            and type(pid[4]) is int
            and pid[4] >= 0
        ):
            raise pickle.UnpicklingError(f"unexpected persistent id {str(pid)[:80]}")
        return _Storage(pid[1].dtype, pid[2], pid[4])


def _member(archive: zipfile.ZipFile, suffix: str) -> zipfile.ZipInfo | None:
    found = [info for info in archive.infolist() if info.filename.split("/", 1)[-1] == suffix]
    return found[0] if len(found) == 1 else None


def _data_offset(handle: Any, info: zipfile.ZipInfo) -> int:
    """Where a stored member's bytes begin in the archive (after its local header)."""
    handle.seek(info.header_offset)
    header = handle.read(30)
    if len(header) != 30 or header[:4] != b"PK\x03\x04":
        raise ValueError("a storage's local zip header is damaged")
    name_length, extra_length = struct.unpack("<HH", header[26:30])
    return info.header_offset + 30 + name_length + extra_length


def _view(file: Path, archive: zipfile.ZipFile, handle: Any) -> tuple[_TensorView, int]:
    pkl = _member(archive, "data.pkl")
    if pkl is None or pkl.file_size > _PICKLE_LIMIT:
        raise ValueError("it is not a torch.save archive holding one data.pkl")
    order = _member(archive, "byteorder")
    if order is not None and archive.read(order).strip() != b"little":
        raise ValueError("it is a big-endian archive")
    try:
        obj = _Unpickler(io.BytesIO(archive.read(pkl))).load()
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        AttributeError,
        IndexError,
        KeyError,
        struct.error,
        RecursionError,
        MemoryError,
    ) as error:
        raise ValueError(f"its pickle was refused ({type(error).__name__}: {error}); it was not run") from None
    if not isinstance(obj, _TensorView):
        raise ValueError(f"it holds a {type(obj).__name__.lstrip('_')}, not a single tensor")
    data = _member(archive, f"data/{obj.storage.key}")
    if data is None or data.compress_type != zipfile.ZIP_STORED:
        raise ValueError(f"its storage {obj.storage.key!r} is missing or compressed")
    return obj, _data_offset(handle, data) if data.file_size else 0


_PARSED: OrderedDict[tuple[str, int, int, int, int], tuple[_TensorView, int, int]] = OrderedDict()
_PARSED_LIMIT = 4096
_PARSED_LOCK = threading.Lock()


def _parsed(file: Path) -> tuple[_TensorView, int, int]:
    """``(view, data offset, storage bytes)`` of ``file``, parsed once per version of the file.

    In-place reads load a tensor file once per chunk (the file may have changed since the dump was
    opened); parsing its zip directory and pickle costs ~1 ms, a ``stat`` a few µs. So the parse is kept,
    keyed by the file's device, inode, size and modification time: a file replaced or rewritten is
    parsed again, and one that changed without a new size or time is still bounded by the read, which
    refuses a file ending before the tensor (:func:`.store._pread_into`).
    """
    st = os.stat(file)
    key = (str(file), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    with _PARSED_LOCK:
        found = _PARSED.get(key)
        if found is not None:
            _PARSED.move_to_end(key)
            return found
    with open(file, "rb") as handle, zipfile.ZipFile(handle) as archive:
        view, start = _view(file, archive, handle)
        info = _member(archive, f"data/{view.storage.key}")
        size = info.file_size if info is not None else 0
    with _PARSED_LOCK:
        _PARSED[key] = (view, start, size)
        while len(_PARSED) > _PARSED_LIMIT:
            _PARSED.popitem(last=False)
    return view, start, size


def _dense_problem(view: _TensorView) -> str | None:
    """Why the storage does not hold the view's elements densely, or ``None`` when it does.

    Densely: every element of the declared shape has bytes of its own in the storage -- no stride 0 (an
    expanded or broadcast tensor), no two elements on the same bytes (overlapping strides), nothing past
    the storage's end. Then the shape's element count is at most the storage's, which the file holds, so
    whatever reads the tensor is bounded by the file's size. A non-contiguous view that does not overlap
    (``tensor[:, 2:5]``, what msprobe writes for a sliced dump) is dense in this sense and accepted.
    """
    numel = view.storage.numel
    if view.offset > numel:
        return f"its storage offset {view.offset} lies past the end of its storage of {numel} elements"
    if 0 in view.size:
        return None
    dims = sorted((s, n) for n, s in zip(view.size, view.stride) if n != 1)
    reach = 0  # the furthest element, relative to the offset, of the dimensions seen so far
    for stride, size in dims:
        if stride == 0:
            return f"a dimension of size {size} has stride 0 (an expanded tensor: one element stands for {size})"
        if stride <= reach:
            return f"its strides overlap (stride {stride} within the {reach + 1} elements an inner dimension spans)"
        reach += (size - 1) * stride
    if view.offset + reach >= numel:
        return f"it reaches element {view.offset + reach}, past the end of its storage of {numel} elements"
    return None


def _checked(file: Path) -> tuple[_TensorView, int, int, np.dtype]:
    """Parse ``file`` and refuse it unless its storage holds its tensor densely; ``(view, start, size, dtype)``."""
    from megadump_zarr.layout.dtypes import NUMPY_DTYPES

    try:
        view, start, size = _parsed(file)
        dtype = np.dtype(NUMPY_DTYPES[view.storage.dtype])
    except (zipfile.BadZipFile, OSError, ValueError, KeyError, struct.error) as error:
        raise ValueError(f"refusing msprobe tensor file {file}: it is not a plain tensor file ({error})") from None
    if size != view.storage.numel * dtype.itemsize:
        raise ValueError(
            f"refusing msprobe tensor file {file}: its storage holds {size} bytes, its pickle says "
            f"{view.storage.numel} {dtype.name} elements"
        )
    problem = _dense_problem(view)
    if problem is not None:
        raise ValueError(
            f"refusing msprobe tensor file {file}: its stored bytes cannot hold its tensor (size {list(view.size)}, "
            f"stride {list(view.stride)}, offset {view.offset}) densely: {problem}"
        )
    return view, start, size, dtype


def check_pt(file: str | os.PathLike[str]) -> tuple[tuple[int, ...], str]:
    """Refuse a ``torch.save`` file that is not a plain tensor its stored bytes hold densely (see
    :func:`read_pt`); reads its zip directory and ~150-byte pickle only (kept for the later read).

    Args:
        file: The ``.pt`` file.

    Returns:
        The tensor's shape and dtype name.

    Raises:
        ValueError: The file is refused, naming it and why.
    """
    view, _, _, _ = _checked(Path(file))
    return tuple(view.size), view.storage.dtype


def read_pt(file: str | os.PathLike[str]) -> tuple[np.ndarray, str]:
    """The tensor of a ``torch.save`` file as a memory-mapped numpy array of its exact dtype, and the dtype.

    Args:
        file: The ``.pt`` file.

    Raises:
        ValueError: The file is refused (see the module docstring), naming it: also when its storage does not
            hold the tensor densely (stride 0, overlapping strides, an offset or extent past the storage).
    """
    file = Path(file)
    view, start, size, dtype = _checked(file)
    count = int(np.prod(view.size, dtype=np.int64)) if view.size else 1
    if not count or not size:
        return np.zeros(view.size, dtype=dtype), view.storage.dtype
    mapped = np.memmap(file, dtype=np.uint8, mode="r", offset=start, shape=(size,)).view(dtype)
    strides = tuple(s * dtype.itemsize for s in view.stride)
    array = np.lib.stride_tricks.as_strided(mapped[view.offset :], shape=view.size, strides=strides, writeable=False)
    return array, view.storage.dtype
