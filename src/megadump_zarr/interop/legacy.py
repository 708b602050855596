"""Import legacy (schema version 4, ``torch.save`` per tensor) dumps into this project's Zarr layout.

The predecessor wrote one directory per rank window::

    rank_{r}/window_{wwww}/manifest.json                 schemaVersion 4, level, windowIndex, rank, invocations
      invocation_{iiiiii}_{direction}/
        L1: stages/{stage}/task_{tttttt}[_worker_{ccc}]/{io}_{index:02d}_{name}.pt + task.json
        L0: one primary ``.pt`` per logical tensor, hard links for its other stage ports

:func:`convert_legacy` writes each window into the Zarr layout of ``DESIGN.md`` ("Store layout") with the
same group paths, array names and attribute names the dumper itself writes (see
``megadump_zarr.dump.window``), window ``schemaVersion`` 5 and ``convertedFrom`` naming the source.

Legacy directories are untrusted input:

* tensors are read only with ``torch.load(path, map_location="cpu", weights_only=True)``; a file that is not
  a plain tensor (the restricted unpickler refuses it, or it holds anything but one tensor) is a
  ``ValueError`` naming the file; nothing in it is executed;
* every ``file`` in a manifest or ``task.json`` must be a relative path without ``..`` that resolves
  (symbolic links included) to a regular file inside its window directory;
* manifests are validated (schema version, required keys, types) before a single window is written,
  and every window's destination is checked to be free first.

Limits (the legacy format does not carry them): L1 arrays get dimension names
``{array}_dim_{i}`` (or ``{io}_{index:02d}_element`` for truncated records) and no row coordinates,
L0 arrays ``{array}_dim_{i}``; ``declaredShape`` (L1) and ``executionMode`` appear only if the legacy
metadata has them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
import json
import os
from pathlib import Path, PurePosixPath, PureWindowsPath
import pickle
import re
from typing import Any
import warnings

import megadump_zarr
from megadump_zarr.dump.export import ArrayWrite, GroupWrite, InvocationWrite
from megadump_zarr.dump.names import NameTable, safe_name

__all__ = ["LEGACY_SCHEMA_VERSION", "convert_legacy"]

LEGACY_SCHEMA_VERSION = 4
SCHEMA_VERSION = 5  # megadump_zarr.dump.window.SCHEMA_VERSION (not imported: that module pulls in the runtime)

_LEVELS = ("L0", "L1")
_DIRECTIONS = ("forward", "backward")
_TASK_DIR = re.compile(r"^task_(\d+)(?:_worker_(\d+))?$")
_RANK_DIR = re.compile(r"^rank_(\d+)$")
_WINDOW_DIR = re.compile(r"^window_(\d+)$")
_DROPPED_TENSOR_KEYS = ("file", "stats")  # "stats" is the store's own attribute


# --------------------------------------------------------------------------- validation helpers
class _Where:
    """A location inside one metadata file, for error messages."""

    def __init__(self, source: Path, path: str = "") -> None:
        self.source = source
        self.path = path

    def at(self, part: str | int) -> _Where:
        if isinstance(part, int):
            return _Where(self.source, f"{self.path}[{part}]")
        return _Where(self.source, f"{self.path}.{part}" if self.path else part)

    def error(self, message: str) -> ValueError:
        location = f" at {self.path}" if self.path else ""
        return ValueError(f"invalid legacy metadata {self.source}{location}: {message}")

    def require(self, mapping: Any, key: str) -> Any:
        if not isinstance(mapping, dict):
            raise self.error(f"expected a JSON object, got {type(mapping).__name__}")
        if key not in mapping:
            raise self.error(f"missing required key {key!r}")
        return mapping[key]

    def integer(self, mapping: Any, key: str, *, minimum: int | None = None, required: bool = True) -> int | None:
        if not required and (not isinstance(mapping, dict) or key not in mapping):
            return None
        value = self.require(mapping, key)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.at(key).error(f"{key!r} must be an integer, got {value!r}")
        if minimum is not None and value < minimum:
            raise self.at(key).error(f"{key!r} must be >= {minimum}, got {value}")
        return value

    def string(self, mapping: Any, key: str, choices: tuple[str, ...] | None = None) -> str:
        value = self.require(mapping, key)
        if not isinstance(value, str):
            raise self.at(key).error(f"{key!r} must be a string, got {value!r}")
        if choices is not None and value not in choices:
            raise self.at(key).error(f"{key!r} must be one of {list(choices)}, got {value!r}")
        return value

    def array(self, mapping: Any, key: str) -> list[Any]:
        value = self.require(mapping, key)
        if not isinstance(value, list):
            raise self.at(key).error(f"{key!r} must be a list, got {type(value).__name__}")
        return value

    def shape(self, mapping: Any, key: str) -> tuple[int, ...]:
        value = self.array(mapping, key)
        if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in value):
            raise self.at(key).error(f"{key!r} must be a list of non-negative integers, got {value!r}")
        return tuple(value)


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ValueError(f"cannot read legacy {what} {path}: {error.strerror or error}") from None
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"legacy {what} {path} is not valid JSON: {error}") from None
    if not isinstance(document, dict):
        raise ValueError(f"legacy {what} {path} must hold a JSON object, got {type(document).__name__}")
    return document


def _confined(window_dir: Path, relative: Any, where: _Where) -> Path:
    """The file a manifest entry names, refused unless it stays inside the (resolved) window directory."""
    if not isinstance(relative, str) or not relative:
        raise where.error(f"'file' must be a non-empty relative path, got {relative!r}")
    shown = repr(relative)
    if "\x00" in relative:
        raise where.error(f"file {shown} contains a NUL character")
    posix, windows = PurePosixPath(relative), PureWindowsPath(relative)
    if posix.is_absolute() or windows.is_absolute() or windows.drive or relative.startswith(("/", "\\")):
        raise ValueError(
            f"refusing legacy tensor file {shown} ({where.source} at {where.path}): absolute paths are not "
            f"allowed; files must lie inside the window directory {window_dir}"
        )
    if ".." in posix.parts or ".." in windows.parts:
        raise ValueError(
            f"refusing legacy tensor file {shown} ({where.source} at {where.path}): '..' components are not "
            f"allowed; files must lie inside the window directory {window_dir}"
        )
    candidate = window_dir / posix
    try:
        resolved = candidate.resolve(strict=True)
    except FileNotFoundError:
        raise ValueError(f"legacy tensor file {shown} ({where.source} at {where.path}) does not exist: {candidate}") from None
    except (OSError, RuntimeError) as error:  # symlink loops and the like
        raise ValueError(f"cannot resolve legacy tensor file {shown} ({where.source} at {where.path}): {error}") from None
    if not resolved.is_relative_to(window_dir):
        raise ValueError(
            f"refusing legacy tensor file {shown} ({where.source} at {where.path}): it resolves to {resolved}, "
            f"outside the window directory {window_dir} (a symbolic link escapes it)"
        )
    if not resolved.is_file():
        raise ValueError(f"legacy tensor file {shown} ({where.source} at {where.path}) is not a regular file: {resolved}")
    return resolved


# --------------------------------------------------------------------------- the plan (validated, nothing loaded)
@dataclass
class _Tensor:
    """One tensor file to load, where it goes and what it must look like."""

    file: Path
    label: str  # the file as the manifest names it, for messages
    path: str  # array path relative to the invocation group
    attrs: dict[str, Any]
    dims: tuple[str, ...] | None  # None: ``{component}_dim_{i}`` from the loaded rank
    component: str
    shape: tuple[int, ...] | None
    dtype: str | None


@dataclass
class _Invocation:
    name: str
    attrs: dict[str, Any]
    groups: list[GroupWrite] = field(default_factory=list)
    tensors: list[_Tensor] = field(default_factory=list)


@dataclass
class _Window:
    manifest: Path
    directory: Path
    rank: int
    window_index: int
    attrs: dict[str, Any]
    invocations: list[_Invocation]

    @property
    def tensor_count(self) -> int:
        return sum(len(inv.tensors) for inv in self.invocations)


def _window_dirs(legacy_dir: Path) -> list[Path]:
    found = []
    for rank_dir in sorted(legacy_dir.iterdir()):
        if not _RANK_DIR.match(rank_dir.name) or not rank_dir.is_dir():
            continue
        for window_dir in sorted(rank_dir.iterdir()):
            if _WINDOW_DIR.match(window_dir.name) and (window_dir / "manifest.json").is_file():
                found.append(window_dir)
    return found


def _plan_window(window_dir: Path, legacy_root: Path) -> _Window:
    manifest_path = window_dir / "manifest.json"
    directory = window_dir.resolve(strict=True)
    if not directory.is_relative_to(legacy_root):
        raise ValueError(f"refusing legacy window {window_dir}: it resolves to {directory}, outside {legacy_root}")
    if manifest_path.resolve().parent != directory:
        raise ValueError(f"refusing legacy manifest {manifest_path}: it is a link to {manifest_path.resolve()}, "
                         f"outside its window directory")
    manifest = _read_json(manifest_path, "manifest")
    where = _Where(manifest_path)
    version = where.require(manifest, "schemaVersion")
    if version != LEGACY_SCHEMA_VERSION:
        raise where.at("schemaVersion").error(
            f"unsupported schemaVersion {version!r}; convert_legacy reads schemaVersion {LEGACY_SCHEMA_VERSION}"
        )
    serialization = manifest.get("tensorSerialization", "torch.save")
    if serialization != "torch.save":
        raise where.at("tensorSerialization").error(f"unsupported tensorSerialization {serialization!r}; expected 'torch.save'")
    level = where.string(manifest, "level", _LEVELS)
    rank = where.integer(manifest, "rank", minimum=0)
    window_index = where.integer(manifest, "windowIndex", minimum=0)
    expected = (int(_RANK_DIR.match(window_dir.parent.name).group(1)), int(_WINDOW_DIR.match(window_dir.name).group(1)))
    if (rank, window_index) != expected:
        raise where.error(
            f"manifest says rank {rank} window {window_index} but it lies in {window_dir.parent.name}/{window_dir.name}"
        )
    entries = where.array(manifest, "invocations")
    invocations = []
    names: set[str] = set()
    for i, entry in enumerate(entries):
        inv_where = where.at("invocations").at(i)
        invocation = _plan_l1_invocation(entry, inv_where, directory, rank) if level == "L1" else \
            _plan_l0_invocation(entry, inv_where, directory, rank)
        if invocation.name in names:
            raise inv_where.error(f"invocation {invocation.name!r} appears twice")
        names.add(invocation.name)
        invocations.append(invocation)
    is_l1 = level == "L1"
    attrs = {
        "schemaVersion": SCHEMA_VERSION,
        "producer": f"megadump_zarr {megadump_zarr.__version__}",
        "level": level,
        "tensorSerialization": "zarr-v3",
        "windowIndex": window_index,
        "capturePhaseSemantics": manifest.get("capturePhaseSemantics",
                                              "task_boundary" if is_l1 else "mega_kernel_boundary"),
        "stageViewStorage": "array_per_task_record" if is_l1 else "array_per_tensor_with_ports",
        "rank": rank,
        "invocationCount": len(invocations),
        "invocations": [inv.name for inv in invocations],
        "convertedFrom": {
            "schemaVersion": LEGACY_SCHEMA_VERSION,
            "path": str(directory),
            **{key: manifest[key] for key in ("tensorSerialization", "tensorFileLayout", "stageViewStorage")
               if key in manifest},
        },
    }
    return _Window(manifest_path, directory, rank, window_index, attrs, invocations)


def _invocation_base(entry: Any, where: _Where, rank: int, level: str, payload_key: str) -> tuple[str, dict[str, Any]]:
    invocation_id = where.integer(entry, "invocationId", minimum=0)
    direction = where.string(entry, "direction", _DIRECTIONS)
    where.integer(entry, "step")
    where.string(entry, "kernelName")
    where.string(entry, "device")
    where.array(entry, payload_key)
    attrs = {key: value for key, value in entry.items() if key not in ("tasks", "tensors")}
    attrs.update(level=level, rank=rank, launchFailed=False, pendingRecords=[])
    return f"invocation_{invocation_id:06d}_{direction}", attrs


def _plan_l0_invocation(entry: Any, where: _Where, window_dir: Path, rank: int) -> _Invocation:
    name, attrs = _invocation_base(entry, where, rank, "L0", "tensors")
    names = NameTable(f"invocation {name} of {where.source}")
    invocation = _Invocation(name, attrs)
    for i, tensor in enumerate(entry["tensors"]):
        t_where = where.at("tensors").at(i)
        tensor_name = t_where.string(tensor, "name")
        t_where.integer(tensor, "paramPosition")
        t_where.string(tensor, "role")
        t_where.string(tensor, "capturePhase")
        actual = t_where.shape(tensor, "actualShape")
        stored_dtype = t_where.string(tensor, "storedDtype")
        file = _confined(window_dir, t_where.require(tensor, "file"), t_where.at("file"))
        try:
            component = names.add(tensor_name)
        except ValueError as error:
            raise t_where.error(str(error)) from None
        tensor_attrs = {
            "name": tensor_name,
            "paramPosition": tensor["paramPosition"],
            "role": tensor["role"],
            "capturePhase": tensor["capturePhase"],
            "producers": tensor.get("producers", []),
            "consumers": tensor.get("consumers", []),
            "ports": _ports(tensor.get("ports", [])),
            "declaredShape": tensor.get("declaredShape", list(actual)),
            "actualShape": list(actual),
            "originalDtype": tensor.get("originalDtype", stored_dtype),
            "storedDtype": stored_dtype,
        }
        for key, value in tensor.items():  # anything else the legacy writer recorded
            if key not in tensor_attrs and key not in _DROPPED_TENSOR_KEYS:
                tensor_attrs[key] = value
        tensor_attrs["legacyFile"] = tensor["file"]
        invocation.tensors.append(_Tensor(file, tensor["file"], component, tensor_attrs, None, component,
                                          actual, stored_dtype))
    attrs["tensorCount"] = len(invocation.tensors)
    return invocation


def _ports(ports: Any) -> Any:
    """Port metadata as recorded, each port's legacy ``file`` kept as ``legacyFile`` (never loaded)."""
    if not isinstance(ports, list):
        return ports
    out = []
    for port in ports:
        if isinstance(port, dict) and "file" in port:
            port = {("legacyFile" if key == "file" else key): value for key, value in port.items()}
        out.append(port)
    return out


def _task_entry(task: Any, where: _Where, window_dir: Path) -> tuple[dict[str, Any], _Where, str | None]:
    """The task's metadata (the manifest's copy, or its ``task.json`` when the manifest lists no tensors)."""
    metadata_file = task.get("metadataFile") if isinstance(task, dict) else None
    if isinstance(task, dict) and "tensors" not in task and metadata_file is not None:
        path = _confined(window_dir, metadata_file, where.at("metadataFile"))
        return _read_json(path, "task metadata"), _Where(path), metadata_file
    return task, where, metadata_file if isinstance(metadata_file, str) else None


def _plan_l1_invocation(entry: Any, where: _Where, window_dir: Path, rank: int) -> _Invocation:
    name, attrs = _invocation_base(entry, where, rank, "L1", "tasks")
    stages = NameTable(f"invocation {name} stages of {where.source}")
    invocation = _Invocation(name, attrs)
    seen_stages: set[str] = set()
    task_paths: set[str] = set()
    records = 0
    for i, raw_task in enumerate(entry["tasks"]):
        task, t_where, metadata_file = _task_entry(raw_task, where.at("tasks").at(i), window_dir)
        task_id = t_where.integer(task, "taskId", minimum=0)
        t_where.integer(task, "stageTaskIndex")
        stage = t_where.string(task, "stage")
        t_where.require(task, "owner")
        t_where.string(task, "coreType")
        core_id = t_where.integer(task, "coreId", minimum=0)
        tensors = t_where.array(task, "tensors")
        try:
            stage_component = stages.add(stage)
        except ValueError as error:
            raise t_where.error(str(error)) from None
        if stage_component not in seen_stages:
            seen_stages.add(stage_component)
            invocation.groups.append(GroupWrite(f"stages/{stage_component}", {"stage": stage}))
        worker = _worker_of(task, metadata_file, tensors, core_id)
        task_component = f"task_{task_id:06d}" + (f"_worker_{core_id:03d}" if worker is not None else "")
        path = f"stages/{stage_component}/{task_component}"
        if path in task_paths:
            raise t_where.error(f"task group {path!r} appears twice in invocation {name}")
        task_paths.add(path)
        task_attrs = {key: value for key, value in task.items() if key not in ("tensors", "metadataFile")}
        task_attrs["workerId"] = worker
        task_attrs["tensorCount"] = len(tensors)
        invocation.groups.append(GroupWrite(path, task_attrs))
        components: set[str] = set()
        for j, tensor in enumerate(tensors):
            invocation.tensors.append(_plan_l1_tensor(tensor, t_where.at("tensors").at(j), window_dir, path, components))
        records += len(tensors)
    attrs.update(taskCount=len(task_paths), recordCount=records)
    return invocation


def _worker_of(task: dict[str, Any], metadata_file: str | None, tensors: list[Any], core_id: int) -> int | None:
    """The worker id of a per-worker task (its legacy directory is ``task_{t}_worker_{core}``), else None."""
    if "workerId" in task:
        value = task["workerId"]
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    candidates = [metadata_file] + [t.get("file") for t in tensors if isinstance(t, dict)]
    for candidate in candidates:
        if isinstance(candidate, str) and "/" in candidate:
            match = _TASK_DIR.match(PurePosixPath(candidate).parent.name)
            if match:
                return core_id if match.group(2) is not None else None
    return None


def _plan_l1_tensor(tensor: Any, where: _Where, window_dir: Path, group: str, components: set[str]) -> _Tensor:
    tensor_name = where.string(tensor, "name")
    where.integer(tensor, "paramPosition")
    io = where.string(tensor, "io", ("input", "output"))
    index = where.integer(tensor, "index", minimum=0)
    where.string(tensor, "capturePhase")
    stored_shape = where.shape(tensor, "storedShape")
    stored_dtype = where.string(tensor, "storedDtype")
    file = _confined(window_dir, where.require(tensor, "file"), where.at("file"))
    component = f"{io}_{index:02d}_{safe_name(tensor_name)}"
    if component in components:
        raise where.error(f"array {group}/{component} appears twice")
    components.add(component)
    truncated = bool(tensor.get("truncated", False))
    order = ("name", "paramPosition", "io", "index", "capturePhase", "sourceOffsetBytes", "declaredShape",
             "actualShape", "storedShape", "originalDtype", "storedDtype", "fullBytes", "storedBytes", "truncated", "note")
    attrs = {key: tensor[key] for key in order if key in tensor}
    attrs.setdefault("originalDtype", stored_dtype)
    for key, value in tensor.items():
        if key not in attrs and key not in _DROPPED_TENSOR_KEYS:
            attrs[key] = value
    attrs["legacyFile"] = tensor["file"]
    dims = (f"{io}_{index:02d}_element",) if truncated and len(stored_shape) == 1 else None
    return _Tensor(file, tensor["file"], f"{group}/{component}", attrs, dims, component, stored_shape, stored_dtype)


# --------------------------------------------------------------------------- loading (untrusted files)
def _load_tensor(item: _Tensor) -> Any:
    """Load one legacy tensor with torch's restricted unpickler and check it against its metadata."""
    import torch

    from megadump_zarr.dump.arrays import dtype_name, tensor_to_numpy

    try:
        with warnings.catch_warnings():  # torch warns about pickle protocols it may not support; we report errors
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            obj = torch.load(item.file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise ValueError(
            f"refusing legacy tensor file {item.file}: it is not a plain tensor file, torch.load(weights_only=True) "
            f"refused it ({_first_reason(error)}); it was not unpickled"
        ) from None
    except Exception as error:  # corrupt or truncated archives, unsupported storage types, ...
        raise ValueError(
            f"cannot load legacy tensor file {item.file}: {type(error).__name__}: {_first_reason(error)}"
        ) from None
    if not isinstance(obj, torch.Tensor):
        raise ValueError(f"legacy tensor file {item.file} holds a {type(obj).__name__}, not a single torch.Tensor")
    if obj.layout != torch.strided or obj.is_quantized:
        raise ValueError(f"legacy tensor file {item.file} holds a {obj.layout} tensor; only dense tensors are supported")
    stored = dtype_name(obj.dtype)
    if item.dtype is not None and stored != item.dtype:
        raise ValueError(f"legacy tensor file {item.file} holds dtype {stored}, its metadata says storedDtype {item.dtype!r}")
    shape = tuple(obj.shape)
    if item.shape is not None and shape != item.shape:
        raise ValueError(f"legacy tensor file {item.file} holds shape {list(shape)}, its metadata says {list(item.shape)}")
    try:
        return tensor_to_numpy(obj)
    except TypeError as error:
        raise ValueError(f"legacy tensor file {item.file}: {error}") from None


def _first_reason(error: BaseException) -> str:
    """The informative line of a (possibly very long) torch error message, without torch's boilerplate
    (which suggests retrying with ``weights_only=False``: exactly what must not be done here)."""
    boilerplate = ("Weights only load failed", "Check the documentation", "Please file an issue")
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    for line in lines:
        if not line.startswith(boilerplate):
            return line
    return lines[-1] if lines else type(error).__name__


def _array(item: _Tensor, data: Any) -> ArrayWrite:
    dims = item.dims if item.dims is not None else tuple(f"{item.component}_dim_{i}" for i in range(data.ndim))
    return ArrayWrite(item.path, data, dims, item.attrs)


# --------------------------------------------------------------------------- progress
@contextmanager
def _progress(enabled: bool, total: int) -> Iterator[Any]:
    if not enabled:
        yield lambda description=None: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()) as bar:
        task = bar.add_task("converting legacy tensors", total=total)

        def tick(description: str | None = None) -> None:
            bar.update(task, advance=1, description=description or "converting legacy tensors")

        yield tick


# --------------------------------------------------------------------------- public API
def convert_legacy(
    legacy_dir: str | os.PathLike[str],
    url: str | os.PathLike[str],
    *,
    storage_options: Mapping[str, Any] | None = None,
    compressor: str | None = "default",
    progress: bool = False,
) -> list[str]:
    """Import every legacy window (``rank_*/window_*/manifest.json``, schema version 4) below ``legacy_dir``.

    Every manifest is read and validated, and every tensor file path checked, before anything is
    written; each destination window must not exist yet. Then each window is written invocation by
    invocation (one invocation's tensors in memory at a time) and committed ``"complete"``. If a
    tensor file is refused while its window is being written, that window is committed ``"aborted"``
    (keeping what was written) and the error is raised; windows converted before it stay complete.

    Args:
        legacy_dir: Directory holding the legacy ``rank_{r}/`` directories.
        url: Destination dump root: a local directory or an fsspec URL.
        storage_options: fsspec options for a URL destination.
        compressor: Compressor of the destination arrays (see :mod:`megadump_zarr.codecs`).
        progress: Show a rich progress bar (one tick per tensor).

    Returns:
        The converted windows' paths (local) or URLs, in (rank, window) order.

    Raises:
        ValueError: A manifest or ``task.json`` that is invalid (naming the file and key), a file path that
            escapes its window directory, or a tensor file that is not a plain tensor (naming the file).
        FileExistsError: A destination window already exists (nothing written).
        FileNotFoundError: ``legacy_dir`` is not a directory.
    """
    from megadump_zarr.store.writer import WindowWriter, window_status

    root = Path(legacy_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"legacy dump directory not found: {root}")
    legacy_root = root.resolve(strict=True)
    windows = [_plan_window(directory, legacy_root) for directory in _window_dirs(root)]
    if not windows:
        raise ValueError(f"no legacy windows (rank_*/window_*/manifest.json) found below {root}")
    options = dict(storage_options) if storage_options is not None else None
    seen: dict[tuple[int, int], Path] = {}
    for window in windows:
        key = (window.rank, window.window_index)
        if key in seen:
            raise ValueError(f"legacy manifests {seen[key]} and {window.manifest} both describe rank {key[0]} window {key[1]}")
        seen[key] = window.manifest
        if window_status(url, window.rank, window.window_index, storage_options=options) is not None:
            raise FileExistsError(
                f"Tensor dump window already exists: rank {window.rank} window {window.window_index} below {url} "
                f"(converting {window.manifest})"
            )

    urls: list[str] = []
    total = sum(window.tensor_count for window in windows)
    with WindowWriter(url, storage_options=options, compressor=compressor) as writer, _progress(progress, total) as tick:
        for window in windows:
            session = writer.begin(window.rank, window.window_index, window.attrs)
            try:
                for invocation in window.invocations:
                    arrays = []
                    for item in invocation.tensors:
                        arrays.append(_array(item, _load_tensor(item)))
                        tick(f"rank {window.rank} window {window.window_index} {invocation.name}")
                    session.write_invocation(InvocationWrite(invocation.name, dict(invocation.attrs),
                                                             list(invocation.groups), arrays))
                    del arrays
            except BaseException as error:
                try:
                    session.commit("aborted")
                except Exception as commit_error:
                    error.add_note(f"committing {session.url} as aborted also failed: {commit_error!r}")
                raise
            urls.append(session.commit("complete"))
    return urls
