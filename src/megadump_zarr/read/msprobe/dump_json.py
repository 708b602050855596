"""msprobe's ``dump.json`` parsed and validated into windows, calls and tensor leaves (nothing is loaded).

The plan behind both :func:`megadump_zarr.interop.msprobe.convert_msprobe` (which writes it) and
:class:`megadump_zarr.read.msprobe.store.MsprobeStore` (which serves it in place): the layout and its
rules are described in :mod:`megadump_zarr.interop.msprobe`. msprobe directories are untrusted input:
every ``data_name`` must be a plain file name resolving inside its ``dump_tensor_data`` directory, every
dtype one the store holds, every declared size countable (and a ``.npy`` file at least that large).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
import json
import os
from pathlib import Path
import re
from typing import Any

__all__ = ["Call", "Tensor", "Window", "is_msprobe_dump", "msprobe_windows"]

_STEP_DIR = re.compile(r"^step(\d+)$")
_RANK_DIR = re.compile(r"^(rank|proc)(\d*)$")
_DIRECTIONS = ("forward", "backward")
_IO_KEYS = {"input_args": "input", "input_kwargs": "input", "input": "input", "parameters": "input", "output": "output"}
_PARAM_GRAD = "parameters_grad"
_INPUT_FIRST = ("input_args", "input_kwargs", "input", "parameters")
_MAX_JSON_BYTES = 1 << 30


def _rank_dirs(step_dir: Path) -> list[Path]:
    return sorted(
        p for p in step_dir.iterdir() if p.is_dir() and _RANK_DIR.match(p.name) and (p / "dump.json").is_file()
    )


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
class Tensor:
    name: str
    io: str
    arg: str
    dtype: str
    shape: tuple[int, ...]
    stats: dict[str, Any]
    file: Path | None
    attrs: dict[str, Any]


@dataclass
class Call:
    key: str
    api: str
    call_index: int | None
    direction: str
    tensors: list[Tensor] = field(default_factory=list)
    other: dict[str, Any] = field(default_factory=dict)


@dataclass
class Window:
    source: Path
    rank: int
    step: int
    index: int
    task: str
    doc: dict[str, Any]
    calls: list[Call]

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
            after = tokens[k + 1 :]
            if after and after[0].isdigit():
                return ".".join(tokens[:k]), int(after[0]), direction
            if k >= 1 and tokens[k - 1].isdigit():
                return ".".join(tokens[: k - 1]), int(tokens[k - 1]), direction
            return ".".join(tokens[:k]), None, direction
    raise ValueError(
        f"API call name {key!r} names no direction (expected '.forward', '.backward' or '.parameters_grad')"
    )


def _is_tensor_leaf(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("type"), str)
        and value["type"] in ("torch.Tensor", "torch.nn.parameter.Parameter", "numpy.ndarray", "mindspore.Tensor")
    )


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
    if not isinstance(value, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 2**62 for d in value
    ):
        raise _fail(source, where, f"'shape' must be a list of non-negative integers, got {str(value)[:80]!r}")
    return tuple(value)


_HEX_DIGEST = re.compile(r"^[0-9A-Fa-f]{1,64}\Z")


def _check_sizes(source: Path, where: str, dtype: str, shape: tuple[int, ...], file: Path | None) -> None:
    """Refuse (before anything is loaded or written) a dtype the store cannot hold, a shape whose byte size
    int64 cannot count, and a tensor file smaller than the shape it (or its .npy header) declares."""
    from megadump_zarr.read.msprobe.limits import check_declared_bytes, check_npy_header, supported_itemsize

    itemsize = supported_itemsize(dtype, f"msprobe {source} at {where}.dtype")
    npy = file is not None and file.suffix == ".npy"
    # np.load would allocate what a .npy header declares; a .pt archive's view of its storage is checked
    # here too (zip directory and pickle only, no torch): an expanded tensor's 1-element storage may
    # declare 256 GiB
    check_declared_bytes(shape, itemsize, f"msprobe {source} at {where}.shape", file if npy else None)
    if npy:
        check_npy_header(file)
    elif file is not None and file.suffix == ".pt" and file.is_file():
        from megadump_zarr.read.msprobe.torchfile import check_pt

        check_pt(file)


def _confined_file(data_dir: Path, name: Any, source: Path, where: str) -> Path:
    """The tensor file ``name`` in ``data_dir``, refused unless it is a plain file name resolving inside it."""
    if not isinstance(name, str) or not name:
        raise _fail(source, where, f"'data_name' must be a non-empty file name, got {name!r}")
    if "\x00" in name or "/" in name or "\\" in name or name in (".", "..") or name.startswith("."):
        raise ValueError(
            f"refusing msprobe tensor file {name!r} ({source} at {where}): data_name must be a plain "
            f"file name inside {data_dir}"
        )
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
        raise ValueError(
            f"refusing msprobe tensor file {name!r} ({source} at {where}): it resolves to {resolved}, "
            f"outside {data_dir} (a symbolic link escapes it)"
        )
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
        raise _fail(
            path,
            "data",
            f"must be a JSON object mapping API calls to arguments, got {type(document.get('data')).__name__}",
        )
    return document


def _input_first(entry: dict[str, Any]) -> list[tuple[str, Any]]:
    """``entry``'s items, inputs (a module's parameters included) before outputs, msprobe's order otherwise."""
    items = list(entry.items())
    return [i for i in items if i[0] in _INPUT_FIRST] + [i for i in items if i[0] not in _INPUT_FIRST]


def _msprobe_call(key: str, entry: Any, source: Path, data_dir: Path | None, task: str) -> Call:
    try:
        api, call_index, direction = _parse_call(key)
    except ValueError as error:
        raise _fail(source, f"data.{key}", str(error)) from None
    if not isinstance(entry, dict):
        raise _fail(source, f"data.{key}", f"must be a JSON object, got {type(entry).__name__}")
    call = Call(key, api, call_index, direction)
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
                call.other[f"{io_key}.{arg}" if arg else io_key] = (
                    leaf.get("value", leaf) if isinstance(leaf, dict) else leaf
                )
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
            if leaf.get("md5") is not None:  # summary_mode "md5": the CRC32 of the bytes, 8 hex digits
                digest = leaf["md5"]
                if not isinstance(digest, str) or not _HEX_DIGEST.match(digest):
                    raise _fail(source, where, f"'md5' must be a hexadecimal digest, got {str(digest)[:80]!r}")
                stats["md5"] = digest.lower()
            attrs = {"requiresGrad": leaf.get("requires_grad")} if "requires_grad" in leaf else {}
            attrs["msprobeKey"] = _PARAM_GRAD if grads else io_key
            call.tensors.append(Tensor(name, io, arg, dtype.removeprefix("torch."), shape, stats, file, attrs))
    return call


def msprobe_windows(root: Path) -> list[Window]:
    legacy_root = root.resolve(strict=True)
    ranks_seen: dict[str, None] = {}
    found: list[tuple[int, Path, Path]] = []
    for step_dir, rank_dirs in _selected(root):
        for rank_dir in rank_dirs:
            resolved = rank_dir.resolve(strict=True)
            if not resolved.is_relative_to(legacy_root):
                raise ValueError(
                    f"refusing msprobe directory {rank_dir}: it resolves to {resolved}, outside {legacy_root}"
                )
            found.append((int(_STEP_DIR.match(step_dir.name).group(1)), rank_dir, resolved))
            ranks_seen.setdefault(rank_dir.name, None)
    if not found:
        raise ValueError(
            f"no msprobe dumps (step*/rank*|proc*/dump.json, or a step*/ or step*/rank*/ directory) found below {root}"
        )
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
            data_dir = resolved / "dump_tensor_data"
            if not data_dir.is_dir():
                raise _fail(source, "dump_data_dir", f"tensor task without a dump_tensor_data directory in {resolved}")
            data_dir = data_dir.resolve(strict=True)
            if not data_dir.is_relative_to(resolved):
                raise ValueError(f"refusing msprobe {data_dir}: dump_tensor_data is a link out of {resolved}")
        calls = [_msprobe_call(key, entry, source, data_dir, task) for key, entry in doc["data"].items()]
        key = (rank, step_index[step])
        if key in keys:
            raise ValueError(f"msprobe {keys[key]} and {source} both describe rank {rank} step {step}")
        keys[key] = source
        meta = {k: doc[k] for k in ("task", "level", "framework") if isinstance(doc.get(k), str)}
        windows.append(Window(source, rank, step, step_index[step], task, meta, calls))
    return sorted(windows, key=lambda w: (w.rank, w.index))


def _check_rank_step(rank_dir: Path, rank: int, step: int) -> None:
    """Refuse a rank or step directory number that readers cannot represent (before anything is written)."""
    from megadump_zarr.layout.limits import INT64_LIMIT, check_index

    check_index(rank, f"msprobe directory {rank_dir} 'rank' (its name)")
    check_index(step, f"msprobe directory {rank_dir.parent} 'step' (its name)", limit=INT64_LIMIT)
