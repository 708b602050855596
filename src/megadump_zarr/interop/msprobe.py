"""Import Ascend msprobe (PyPI ``mindstudio-probe``) PyTorch dumps into this project's Zarr layout.

msprobe's ``PrecisionDebugger`` writes, per step and rank (or process)::

    {dump_path}/step{N}/rank{R}|proc{PID}/dump.json          task, level, framework, dump_data_dir, data
                                        /dump_tensor_data/{data_name}   tensor task: one .pt (or .npy) per tensor
                                        /stack.json, construct.json     (not imported)

``data`` maps each API call (``Functional.linear.0.forward``, ``Module.fc1.Linear.forward.0``,
``Module.fc1.Linear.parameters_grad.0``) to its arguments: ``input_args`` (list), ``input_kwargs``
(mapping), ``output`` (forward) or ``input``/``output`` (backward), nested lists/mappings of leaves; a
module's forward at msprobe level L0 or mix also has ``parameters`` (its weights and buffers by name), and
its ``parameters_grad`` entry maps each parameter to its gradient. A tensor leaf has ``type``
``torch.Tensor``, ``dtype``, ``shape``, msprobe's ``Max``/``Min``/``Mean``/``Norm`` and, in the tensor
task, ``data_name``. Every level (L0 modules, L1 APIs, mix both) converts the same way.

:func:`convert_msprobe` writes one window per (rank, step), ``rank_{r}/window_{wwww}`` with windows
numbered in step order, level ``L0``: each API call in ``data`` order (msprobe's execution order) is
one invocation ``invocation_{iiiiii}_{forward|backward}`` (``kernelName`` the API, e.g.
``Functional.linear``), each tensor leaf one record whose ``name`` is msprobe's full data name without
extension (``Functional.linear.0.forward.input.0``), with ``api``, ``callIndex``, ``direction``, ``io``,
``argIndex`` (``"0"``, ``"0.1"`` for nested, the keyword for kwargs, the parameter's name) and
``msprobeKey`` (``input_args``, ``parameters``, ``parameters_grad``, ...) as attributes and msprobe's
own statistics as ``msprobeStats``. Non-tensor arguments are kept in the invocation's ``nonTensorArgs``.
A module's parameters are *inputs* of its forward, recorded after its arguments and before its outputs
(so a perturbed weight, not the output it feeds, is the root cause); ``parameters_grad`` is a backward
invocation whose records (``Module.fc1.Linear.parameters_grad.0.weight``) are *outputs*.

Statistics task (no tensor files): every invocation gets a ``statistics`` table
(:mod:`.msprobe_stats`: one row per tensor leaf, ``payload`` false, so ``records()`` lists them as
statistics-only records) holding msprobe's Max/Min/Mean/Norm as min/max/mean/l2norm, and no payload
arrays. The invocation's ``records`` attribute keeps every record's attributes, msprobe's statistics
included.

msprobe directories are untrusted input, handled like the legacy importer's (:mod:`.legacy`): every
``data_name`` must be a plain file name that resolves (links included) to a regular file inside its
``dump_tensor_data`` directory; ``.pt`` files load only through ``torch.load(weights_only=True)`` and must
hold one dense tensor of the dtype and shape ``dump.json`` states; ``.npy`` files load with
``allow_pickle=False``; every ``dump.json`` is validated and every file checked before anything is
written, and every destination window must be free.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
import json
import os
from pathlib import Path
import re
from typing import Any

import numpy as np

from megadump_zarr.dump.export import SCHEMA_VERSION
from megadump_zarr.interop.msprobe_stats import statistics_table

__all__ = ["convert_msprobe", "is_msprobe_dump"]

_STEP_DIR = re.compile(r"^step(\d+)$")
_RANK_DIR = re.compile(r"^(rank|proc)(\d*)$")
_DIRECTIONS = ("forward", "backward")
_IO_KEYS = {"input_args": "input", "input_kwargs": "input", "input": "input", "parameters": "input", "output": "output"}
_PARAM_GRAD = "parameters_grad"
_INPUT_FIRST = ("input_args", "input_kwargs", "input", "parameters")
_MAX_JSON_BYTES = 1 << 30


def _rank_dirs(step_dir: Path) -> list[Path]:
    return sorted(p for p in step_dir.iterdir() if p.is_dir() and _RANK_DIR.match(p.name) and (p / "dump.json").is_file())


def _step_dirs(root: Path) -> list[Path]:
    found = [p for p in root.iterdir() if p.is_dir() and _STEP_DIR.match(p.name)]
    return sorted(found, key=lambda p: int(_STEP_DIR.match(p.name).group(1)))


def _selected(root: Path) -> list[tuple[Path, list[Path]]]:
    """``(step dir, its rank dirs)`` to convert: below msprobe's dump_path, or one ``step{N}`` directory, or
    one ``step{N}/rank{R}|proc{PID}`` directory (what ``msprobe compare -tp/-gp`` is given)."""
    if (root / "dump.json").is_file() and _RANK_DIR.match(root.name) and _STEP_DIR.match(root.parent.name):
        return [(root.parent, [root])]
    if _STEP_DIR.match(root.name) and not _step_dirs(root) and _rank_dirs(root):
        return [(root, _rank_dirs(root))]
    return [(step, _rank_dirs(step)) for step in _step_dirs(root)]


def is_msprobe_dump(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds msprobe dumps: ``step{N}/rank{R}|proc{PID}/dump.json`` below it.

    Args:
        path: A local directory.
    """
    root = Path(path)
    try:
        return root.is_dir() and any(ranks for _, ranks in _selected(root))
    except OSError:
        return False


# --------------------------------------------------------------------------- the plan (validated, nothing loaded)
@dataclass
class _Tensor:
    name: str
    io: str
    arg: str
    dtype: str
    shape: tuple[int, ...]
    stats: dict[str, Any]
    file: Path | None
    attrs: dict[str, Any]


@dataclass
class _Call:
    key: str
    api: str
    call_index: int | None
    direction: str
    tensors: list[_Tensor] = field(default_factory=list)
    other: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Window:
    source: Path
    rank: int
    step: int
    index: int
    task: str
    doc: dict[str, Any]
    calls: list[_Call]

    @property
    def tensor_count(self) -> int:
        return sum(len(c.tensors) for c in self.calls)


def _fail(source: Path, where: str, message: str) -> ValueError:
    return ValueError(f"msprobe {source} at {where}: {message}")


def _parse_call(key: str) -> tuple[str, int | None, str]:
    """``Functional.linear.0.forward`` -> (``Functional.linear``, 0, ``forward``); ``Module.fc.Linear.forward.0`` too."""
    tokens = key.split(".")
    for k in range(len(tokens) - 1, -1, -1):
        if tokens[k] in (*_DIRECTIONS, _PARAM_GRAD):
            # a module's parameter gradients (``Module.fc.Linear.parameters_grad.0``) come out of its backward
            direction = "backward" if tokens[k] == _PARAM_GRAD else tokens[k]
            after = tokens[k + 1:]
            if after and after[0].isdigit():
                return ".".join(tokens[:k]), int(after[0]), direction
            if k >= 1 and tokens[k - 1].isdigit():
                return ".".join(tokens[:k - 1]), int(tokens[k - 1]), direction
            return ".".join(tokens[:k]), None, direction
    raise ValueError(f"API call name {key!r} names no direction (expected '.forward', '.backward' or "
                     f"'.parameters_grad')")


def _is_tensor_leaf(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("type"), str) and value["type"] in (
        "torch.Tensor", "torch.nn.parameter.Parameter", "numpy.ndarray", "mindspore.Tensor")


def _leaves(value: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    if _is_tensor_leaf(value) or (isinstance(value, dict) and "type" in value):
        yield path, value
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _leaves(item, (*path, str(i)))
    elif isinstance(value, dict):
        for k, item in value.items():
            yield from _leaves(item, (*path, str(k)))
    elif value is not None:
        yield path, value


def _shape(source: Path, where: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**62
                                              for d in value):
        raise _fail(source, where, f"'shape' must be a list of non-negative integers, got {str(value)[:80]!r}")
    return tuple(value)


def _check_sizes(source: Path, where: str, dtype: str, shape: tuple[int, ...], file: Path | None) -> None:
    """Refuse (before anything is loaded or written) a dtype the store cannot hold, a shape whose byte size
    int64 cannot count, and a tensor file smaller than the shape it (or its .npy header) declares."""
    from megadump_zarr.interop._limits import check_declared_bytes, check_npy_header, supported_itemsize

    itemsize = supported_itemsize(dtype, f"msprobe {source} at {where}.dtype")
    npy = file is not None and file.suffix == ".npy"
    # a .pt archive is checked when loaded (torch reads its storages by their stored size, and a payload
    # that is no tensor is better named as such); np.load would allocate what a .npy header declares
    check_declared_bytes(shape, itemsize, f"msprobe {source} at {where}.shape", file if npy else None)
    if npy:
        check_npy_header(file)


def _confined_file(data_dir: Path, name: Any, source: Path, where: str) -> Path:
    """The tensor file ``name`` in ``data_dir``, refused unless it is a plain file name resolving inside it."""
    if not isinstance(name, str) or not name:
        raise _fail(source, where, f"'data_name' must be a non-empty file name, got {name!r}")
    if "\x00" in name or "/" in name or "\\" in name or name in (".", "..") or name.startswith("."):
        raise ValueError(f"refusing msprobe tensor file {name!r} ({source} at {where}): data_name must be a plain "
                         f"file name inside {data_dir}")
    if not name.endswith((".pt", ".npy")):
        raise _fail(source, where, f"data_name {name!r} is neither a .pt nor a .npy file")
    candidate = data_dir / name
    try:
        resolved = candidate.resolve(strict=True)
    except FileNotFoundError:
        raise ValueError(f"msprobe tensor file {name!r} ({source} at {where}) does not exist: {candidate}") from None
    except (OSError, RuntimeError) as error:
        raise ValueError(f"cannot resolve msprobe tensor file {name!r} ({source} at {where}): {error}") from None
    if not resolved.is_relative_to(data_dir):
        raise ValueError(f"refusing msprobe tensor file {name!r} ({source} at {where}): it resolves to {resolved}, "
                         f"outside {data_dir} (a symbolic link escapes it)")
    if not resolved.is_file():
        raise ValueError(f"msprobe tensor file {name!r} ({source} at {where}) is not a regular file: {resolved}")
    return resolved


def _read_dump_json(path: Path) -> dict[str, Any]:
    try:
        if path.stat().st_size > _MAX_JSON_BYTES:
            raise ValueError(f"msprobe {path} is larger than {_MAX_JSON_BYTES} bytes")
        document = json.loads(path.read_bytes())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise ValueError(f"cannot read msprobe {path}: {type(error).__name__}: {error}") from None
    if not isinstance(document, dict):
        raise ValueError(f"msprobe {path} must hold a JSON object, got {type(document).__name__}")
    if not isinstance(document.get("data"), dict):
        raise _fail(path, "data", f"must be a JSON object mapping API calls to arguments, got "
                                  f"{type(document.get('data')).__name__}")
    return document


def _input_first(entry: dict[str, Any]) -> list[tuple[str, Any]]:
    """``entry``'s items, inputs (a module's parameters included) before outputs, msprobe's order otherwise."""
    items = list(entry.items())
    return [i for i in items if i[0] in _INPUT_FIRST] + [i for i in items if i[0] not in _INPUT_FIRST]


def _plan_call(key: str, entry: Any, source: Path, data_dir: Path | None, task: str) -> _Call:
    try:
        api, call_index, direction = _parse_call(key)
    except ValueError as error:
        raise _fail(source, f"data.{key}", str(error)) from None
    if not isinstance(entry, dict):
        raise _fail(source, f"data.{key}", f"must be a JSON object, got {type(entry).__name__}")
    call = _Call(key, api, call_index, direction)
    seen: set[str] = set()
    grads = _PARAM_GRAD in key.split(".")
    for io_key, value in _input_first(entry):
        # a module's parameters are inputs of its forward (listed before its outputs: a perturbed weight is
        # the root cause, not the output it feeds); their gradients (parameters_grad) outputs of its backward
        io = "output" if grads else _IO_KEYS.get(io_key, io_key)
        for path, leaf in _leaves(value, ()):
            where = f"data.{key}.{io_key}" + "".join(f"[{p}]" for p in path)
            arg = ".".join(path)
            if grads:  # {"weight": [leaf]}: msprobe names it Module.fc.Linear.parameters_grad.0.weight
                path = (io_key, *path) if len(value if isinstance(value, list) else [value]) != 1 else (io_key,)
                arg = ".".join(path)
            if not _is_tensor_leaf(leaf):
                call.other[f"{io_key}.{arg}" if arg else io_key] = leaf.get("value", leaf) if isinstance(leaf, dict) \
                    else leaf
                continue
            data_name = leaf.get("data_name")
            if task == "tensor" and data_name is None:
                raise _fail(source, where, "a tensor-task record has no 'data_name'")
            if data_name is not None and data_dir is not None:
                file = _confined_file(data_dir, data_name, source, f"{where}.data_name")
                name = data_name.rsplit(".", 1)[0]
            else:
                file = None
                part = "" if grads else ("parameters" if io_key == "parameters" else io)
                name = ".".join(p for p in (key, part, arg) if p)
            if name in seen:
                raise _fail(source, where, f"record name {name!r} appears twice in {key}")
            seen.add(name)
            dtype = leaf.get("dtype")
            if not isinstance(dtype, str):
                raise _fail(source, where, f"'dtype' must be a string, got {dtype!r}")
            shape = _shape(source, where, leaf.get("shape"))
            _check_sizes(source, where, dtype.removeprefix("torch."), shape, file)
            stats = {k: leaf.get(k) for k in ("Max", "Min", "Mean", "Norm") if k in leaf}
            attrs = {"requiresGrad": leaf.get("requires_grad")} if "requires_grad" in leaf else {}
            attrs["msprobeKey"] = _PARAM_GRAD if grads else io_key
            call.tensors.append(_Tensor(name, io, arg, dtype.removeprefix("torch."), shape, stats, file, attrs))
    return call


def _plan_windows(root: Path) -> list[_Window]:
    legacy_root = root.resolve(strict=True)
    ranks_seen: dict[str, None] = {}
    found: list[tuple[int, Path, Path]] = []
    for step_dir, rank_dirs in _selected(root):
        for rank_dir in rank_dirs:
            resolved = rank_dir.resolve(strict=True)
            if not resolved.is_relative_to(legacy_root):
                raise ValueError(f"refusing msprobe directory {rank_dir}: it resolves to {resolved}, outside {legacy_root}")
            found.append((int(_STEP_DIR.match(step_dir.name).group(1)), rank_dir, resolved))
            ranks_seen.setdefault(rank_dir.name, None)
    if not found:
        raise ValueError(f"no msprobe dumps (step*/rank*|proc*/dump.json, or a step*/ or step*/rank*/ directory) found below {root}")
    # rank{R} keeps R; proc{PID} directories (msprobe's name when there is no rank) become ranks in PID order.
    procs = sorted((n for n in ranks_seen if not n.startswith("rank")), key=lambda n: int(n[4:] or 0))
    proc_rank = {n: i for i, n in enumerate(procs)}
    step_index = {s: i for i, s in enumerate(sorted({s for s, _, _ in found}))}
    windows = []
    keys: dict[tuple[int, int], Path] = {}
    for step, rank_dir, resolved in found:
        match = _RANK_DIR.match(rank_dir.name)
        rank = int(match.group(2) or 0) if match.group(1) == "rank" else proc_rank[rank_dir.name]
        _check_rank_step(rank_dir, rank, step)
        source = resolved / "dump.json"
        if source.resolve().parent != resolved:
            raise ValueError(f"refusing msprobe {rank_dir / 'dump.json'}: it is a link out of its directory")
        doc = _read_dump_json(source)
        task = doc.get("task")
        if task not in ("tensor", "statistics"):
            raise _fail(source, "task", f"unsupported msprobe task {task!r}; expected 'tensor' or 'statistics'")
        data_dir = None
        if task == "tensor":
            data_dir = (resolved / "dump_tensor_data")
            if not data_dir.is_dir():
                raise _fail(source, "dump_data_dir", f"tensor task without a dump_tensor_data directory in {resolved}")
            data_dir = data_dir.resolve(strict=True)
            if not data_dir.is_relative_to(resolved):
                raise ValueError(f"refusing msprobe {data_dir}: dump_tensor_data is a link out of {resolved}")
        calls = [_plan_call(key, entry, source, data_dir, task) for key, entry in doc["data"].items()]
        key = (rank, step_index[step])
        if key in keys:
            raise ValueError(f"msprobe {keys[key]} and {source} both describe rank {rank} step {step}")
        keys[key] = source
        meta = {k: doc[k] for k in ("task", "level", "framework") if isinstance(doc.get(k), str)}
        windows.append(_Window(source, rank, step, step_index[step], task, meta, calls))
    return sorted(windows, key=lambda w: (w.rank, w.index))


def _check_rank_step(rank_dir: Path, rank: int, step: int) -> None:
    """Refuse a rank or step directory number that readers cannot represent (before anything is written)."""
    from megadump_zarr.dump.limits import INT64_LIMIT, check_index

    check_index(rank, f"msprobe directory {rank_dir} 'rank' (its name)")
    check_index(step, f"msprobe directory {rank_dir.parent} 'step' (its name)", limit=INT64_LIMIT)


# --------------------------------------------------------------------------- loading (untrusted files)
def _load(item: _Tensor) -> np.ndarray:
    assert item.file is not None
    if item.file.suffix == ".npy":
        from megadump_zarr.interop._limits import check_npy_header

        check_npy_header(item.file)  # the header may have changed since the plan: never allocate what it says
        try:
            data = np.load(item.file, allow_pickle=False)
        except (ValueError, OSError, EOFError) as error:
            raise ValueError(f"refusing msprobe tensor file {item.file}: not a plain .npy array "
                             f"(np.load(allow_pickle=False): {error})") from None
        if not isinstance(data, np.ndarray):
            raise ValueError(f"msprobe tensor file {item.file} holds a {type(data).__name__}, not one array")
        stored = data.dtype.name
    else:
        data, stored = _load_pt(item.file)
    if stored != item.dtype:
        raise ValueError(f"msprobe tensor file {item.file} holds dtype {stored}, dump.json says {item.dtype!r}")
    if tuple(data.shape) != item.shape:
        raise ValueError(f"msprobe tensor file {item.file} holds shape {list(data.shape)}, dump.json says {list(item.shape)}")
    return data


def _load_pt(file: Path) -> tuple[np.ndarray, str]:
    import pickle
    import warnings

    import torch

    from megadump_zarr.dump.arrays import dtype_name, tensor_to_numpy
    from megadump_zarr.interop.legacy import _first_reason

    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            obj = torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise ValueError(f"refusing msprobe tensor file {file}: it is not a plain tensor file, "
                         f"torch.load(weights_only=True) refused it ({_first_reason(error)}); it was not unpickled") from None
    except Exception as error:
        raise ValueError(f"cannot load msprobe tensor file {file}: {type(error).__name__}: {_first_reason(error)}") from None
    if not isinstance(obj, torch.Tensor):
        raise ValueError(f"msprobe tensor file {file} holds a {type(obj).__name__}, not a single torch.Tensor")
    if obj.layout != torch.strided or obj.is_quantized:
        raise ValueError(f"msprobe tensor file {file} holds a {obj.layout} tensor; only dense tensors are supported")
    try:
        return tensor_to_numpy(obj), dtype_name(obj.dtype)
    except TypeError as error:
        raise ValueError(f"msprobe tensor file {file}: {error}") from None


# --------------------------------------------------------------------------- writing
def _invocation_attrs(window: _Window, i: int, call: _Call) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "invocationId": i, "step": window.step, "direction": call.direction, "kernelName": call.api,
        "device": "unknown", "level": "L0", "rank": window.rank, "launchFailed": False, "pendingRecords": [],
        "tensorCount": len(call.tensors), "msprobeCall": call.key, "api": call.api, "callIndex": call.call_index,
    }
    if call.other:
        attrs["nonTensorArgs"] = _jsonable(call.other)
    return attrs


def _jsonable(value: Any) -> Any:
    try:
        json.dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError):
        return json.loads(json.dumps(value, default=str).replace("NaN", "null"))


def _record_attrs(window: _Window, call: _Call, position: int, item: _Tensor) -> dict[str, Any]:
    return {
        "name": item.name, "paramPosition": position, "role": "external_input" if item.io == "input" else "final_output",
        "capturePhase": "before" if item.io == "input" else "after", "producers": [], "consumers": [], "ports": [],
        "declaredShape": list(item.shape), "actualShape": list(item.shape), "originalDtype": item.dtype,
        "storedDtype": item.dtype, "api": call.api, "callIndex": call.call_index, "direction": call.direction,
        "io": item.io, "argIndex": item.arg, "msprobeStats": _jsonable(item.stats),
        **({"msprobeFile": item.file.name} if item.file is not None else {}), **item.attrs,
    }


def _window_attrs(window: _Window) -> dict[str, Any]:
    from megadump_zarr._version import __version__

    names = [f"invocation_{i:06d}_{c.direction}" for i, c in enumerate(window.calls)]
    return {
        "schemaVersion": SCHEMA_VERSION, "producer": f"megadump_zarr {__version__}", "level": "L0",
        "tensorSerialization": "zarr-v3", "windowIndex": window.index, "capturePhaseSemantics": "api_boundary",
        "stageViewStorage": "array_per_tensor", "rank": window.rank, "step": window.step,
        "invocationCount": len(names), "invocations": names,
        "convertedFrom": {"format": "msprobe", "path": str(window.source.parent), **window.doc},
    }


def _invocations(window: _Window, tick: Any) -> Iterator[Any]:
    """The window's invocations, one API call at a time (tensor files are loaded here, one call in memory)."""
    from megadump_zarr.dump.export import ArrayWrite, InvocationWrite
    from megadump_zarr.dump.names import NameTable

    for i, call in enumerate(window.calls):
        name = f"invocation_{i:06d}_{call.direction}"
        table = NameTable(f"{name} of {window.source}")
        components = [table.add(item.name) for item in call.tensors]
        arrays = []
        statistics = None
        if window.task == "tensor":
            for position, (item, component) in enumerate(zip(call.tensors, components)):
                data = _load(item)
                dims = tuple(f"{component}_dim_{d}" for d in range(data.ndim))
                arrays.append(ArrayWrite(component, data, dims, _record_attrs(window, call, position, item)))
                tick(f"rank {window.rank} step {window.step} {call.key}")
        elif call.tensors:
            statistics = statistics_table(call.key, call.tensors, components)
            for _ in call.tensors:
                tick(f"rank {window.rank} step {window.step} {call.key}")
        attrs = _invocation_attrs(window, i, call)
        if window.task != "tensor":
            attrs["records"] = [_record_attrs(window, call, p, t) for p, t in enumerate(call.tensors)]
        yield InvocationWrite(name, attrs, [], arrays, statistics)


def convert_msprobe(
    dump_dir: str | os.PathLike[str],
    url: str | os.PathLike[str],
    *,
    storage_options: Mapping[str, Any] | None = None,
    compressor: str | None = "default",
    progress: bool = False,
) -> list[str]:
    """Import every msprobe PyTorch dump (``step*/rank*|proc*/dump.json``) below ``dump_dir``.

    Every ``dump.json`` is read and validated and every tensor file checked before anything is written;
    each destination window must not exist yet. Windows are then written call by call and committed
    ``"complete"``; a tensor file refused while the windows are written removes every window this call
    wrote (a refused input leaves no output).

    Args:
        dump_dir: msprobe's ``dump_path`` (holding ``step{N}/`` directories), or one ``step{N}`` directory,
            or one ``step{N}/rank{R}|proc{PID}`` directory (the step number is kept either way).
        url: Destination dump root: a local directory or an fsspec URL.
        storage_options: fsspec options for a URL destination.
        compressor: Compressor of the destination arrays (see :mod:`megadump_zarr.codecs`).
        progress: Show a rich progress bar (one tick per tensor).

    Returns:
        The converted windows' paths (local) or URLs, in (rank, window) order.

    Raises:
        ValueError: An invalid ``dump.json`` (naming the file and key), a ``data_name`` escaping its
            directory, or a tensor file that is not a plain tensor/array (naming the file).
        FileExistsError: A destination window already exists (nothing written).
        FileNotFoundError: ``dump_dir`` is not a directory.
    """
    from megadump_zarr.interop._undo import UndoableWrites
    from megadump_zarr.interop.legacy import _progress
    from megadump_zarr.store.writer import WindowWriter, window_status

    root = Path(dump_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"msprobe dump directory not found: {root}")
    windows = _plan_windows(root)
    options = dict(storage_options) if storage_options is not None else None
    for window in windows:
        if window_status(url, window.rank, window.index, storage_options=options) is not None:
            raise FileExistsError(f"Tensor dump window already exists: rank {window.rank} window {window.index} below "
                                  f"{url} (converting {window.source})")
    urls: list[str] = []
    total = sum(w.tensor_count for w in windows)
    with WindowWriter(url, storage_options=options, compressor=compressor, pack=False) as writer, _progress(progress, total, "converting msprobe tensors") as tick:
        undo = UndoableWrites(writer)
        try:
            for window in windows:
                session = undo.begin(window.rank, window.index, _window_attrs(window))
                urls.append(session.write_all(_invocations(window, tick)))
        except BaseException as error:  # a refused file: every window this call wrote is removed again
            try:
                undo.undo()
            except Exception as undo_error:
                error.add_note(f"removing the windows this conversion wrote below {url} also failed: {undo_error!r}")
            raise
        writer.index_root()
    return urls
