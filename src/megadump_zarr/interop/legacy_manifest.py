"""Legacy (schema version 4) dump metadata: manifest and ``task.json`` validation and safe tensor-file paths.

:func:`read_legacy_window` reads one legacy window's ``manifest.json`` (and the ``task.json`` files it points to),
validates schema version, required keys and types, and resolves every ``file`` it names to a regular file
inside the window directory (relative, no ``..``, no symbolic link escaping it). The result, a
:class:`_Window`, says where each tensor goes and what it must look like; no tensor file is opened here
(loading and writing are :mod:`megadump_zarr.interop.legacy`'s business).
"""

from __future__ import annotations

from dataclasses import dataclass, field
import json
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from megadump_zarr.layout.write_model import GroupWrite
from megadump_zarr.layout.names import NameTable, safe_name
from megadump_zarr.layout.manifest import WindowManifest
from megadump_zarr.layout.paths import RANK_DIR, TASK_DIR, WINDOW_DIR, invocation_name, task_dir
from megadump_zarr.layout.schema import CAPTURE_PHASES, L0_STORAGE, LEVELS, TASK_STORAGE

__all__ = ["LEGACY_SCHEMA_VERSION", "LegacyTensor", "read_legacy_window", "window_dirs"]

LEGACY_SCHEMA_VERSION = 4

_DIRECTIONS = ("forward", "backward")
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


def _check_sizes(where: _Where, dtype: str, shape: tuple[int, ...], file: Path, field: str = "actualShape") -> None:
    """Refuse a storedDtype the store cannot hold and a shape int64 cannot count (the ``.pt`` file itself
    is checked against the shape once loaded)."""
    from megadump_zarr.read.msprobe.limits import check_declared_bytes, supported_itemsize

    try:
        itemsize = supported_itemsize(dtype, "storedDtype")
        check_declared_bytes(shape, itemsize, field)
    except ValueError as error:
        raise where.error(str(error)) from None


def _read_json(path: Path, what: str) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise ValueError(f"cannot read legacy {what} {path}: {error.strerror or error}") from None
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"legacy {what} {path} is not valid JSON: {error}") from None
    except RecursionError:
        raise ValueError(f"legacy {what} {path} is nested too deeply to be a manifest") from None
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
        raise ValueError(
            f"legacy tensor file {shown} ({where.source} at {where.path}) does not exist: {candidate}"
        ) from None
    except (OSError, RuntimeError) as error:  # symlink loops and the like
        raise ValueError(
            f"cannot resolve legacy tensor file {shown} ({where.source} at {where.path}): {error}"
        ) from None
    if not resolved.is_relative_to(window_dir):
        raise ValueError(
            f"refusing legacy tensor file {shown} ({where.source} at {where.path}): it resolves to {resolved}, "
            f"outside the window directory {window_dir} (a symbolic link escapes it)"
        )
    if not resolved.is_file():
        raise ValueError(
            f"legacy tensor file {shown} ({where.source} at {where.path}) is not a regular file: {resolved}"
        )
    return resolved


# --------------------------------------------------------------------------- the window (validated, nothing loaded)
@dataclass
class LegacyTensor:
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
    tensors: list[LegacyTensor] = field(default_factory=list)


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


def window_dirs(legacy_dir: Path) -> list[Path]:
    """The legacy window directories (``rank_{r}/window_{wwww}/`` holding a ``manifest.json``) below ``legacy_dir``.

    Args:
        legacy_dir: Directory holding the legacy ``rank_{r}/`` directories.
    """
    found = []
    for rank_dir in sorted(legacy_dir.iterdir()):
        if not RANK_DIR.match(rank_dir.name) or not rank_dir.is_dir():
            continue
        for window_dir in sorted(rank_dir.iterdir()):
            if WINDOW_DIR.match(window_dir.name) and (window_dir / "manifest.json").is_file():
                found.append(window_dir)
    return found


def read_legacy_window(window_dir: Path, legacy_root: Path) -> _Window:
    """Read and validate one legacy window's metadata and check every tensor file it names.

    Args:
        window_dir: The legacy window directory.
        legacy_root: The resolved legacy dump directory; the window must resolve inside it.

    Raises:
        ValueError: Invalid metadata (naming the file and key) or a file path escaping the window directory.
    """
    manifest_path = window_dir / "manifest.json"
    directory = window_dir.resolve(strict=True)
    if not directory.is_relative_to(legacy_root):
        raise ValueError(f"refusing legacy window {window_dir}: it resolves to {directory}, outside {legacy_root}")
    if manifest_path.resolve().parent != directory:
        raise ValueError(
            f"refusing legacy manifest {manifest_path}: it is a link to {manifest_path.resolve()}, "
            f"outside its window directory"
        )
    manifest = _read_json(manifest_path, "manifest")
    where = _Where(manifest_path)
    version = where.require(manifest, "schemaVersion")
    if version != LEGACY_SCHEMA_VERSION:
        raise where.at("schemaVersion").error(
            f"unsupported schemaVersion {version!r}; convert_legacy reads schemaVersion {LEGACY_SCHEMA_VERSION}"
        )
    serialization = manifest.get("tensorSerialization", "torch.save")
    if serialization != "torch.save":
        raise where.at("tensorSerialization").error(
            f"unsupported tensorSerialization {serialization!r}; expected 'torch.save'"
        )
    level = where.string(manifest, "level", LEVELS)
    rank = where.integer(manifest, "rank", minimum=0)
    window_index = where.integer(manifest, "windowIndex", minimum=0)
    expected = (int(RANK_DIR.match(window_dir.parent.name).group(1)), int(WINDOW_DIR.match(window_dir.name).group(1)))
    if (rank, window_index) != expected:
        raise where.error(
            f"manifest says rank {rank} window {window_index} but it lies in {window_dir.parent.name}/{window_dir.name}"
        )
    entries = where.array(manifest, "invocations")
    invocations = []
    names: set[str] = set()
    for i, entry in enumerate(entries):
        inv_where = where.at("invocations").at(i)
        invocation = (
            _legacy_l1_invocation(entry, inv_where, directory, rank)
            if level == "L1"
            else _legacy_l0_invocation(entry, inv_where, directory, rank)
        )
        if invocation.name in names:
            raise inv_where.error(f"invocation {invocation.name!r} appears twice")
        names.add(invocation.name)
        invocations.append(invocation)
    converted_from = {
        "schemaVersion": LEGACY_SCHEMA_VERSION,
        "path": str(directory),
        **{
            key: manifest[key]
            for key in ("tensorSerialization", "tensorFileLayout", "stageViewStorage")
            if key in manifest
        },
    }
    try:
        attrs = WindowManifest(
            level=level,
            rank=rank,
            window_index=window_index,
            capture_phase=manifest.get("capturePhaseSemantics", CAPTURE_PHASES[level]),
            storage=TASK_STORAGE if level == "L1" else L0_STORAGE,
            invocations=tuple(inv.name for inv in invocations),
            converted_from=converted_from,
        ).to_attrs()
    except ValueError as error:  # a manifest value the converted window could not carry (its field named)
        raise where.error(str(error)) from None
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
    return invocation_name(invocation_id, direction), attrs


def _legacy_l0_invocation(entry: Any, where: _Where, window_dir: Path, rank: int) -> _Invocation:
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
        _check_sizes(t_where, stored_dtype, actual, file)
        invocation.tensors.append(
            LegacyTensor(file, tensor["file"], component, tensor_attrs, None, component, actual, stored_dtype)
        )
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


def _legacy_l1_invocation(entry: Any, where: _Where, window_dir: Path, rank: int) -> _Invocation:
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
        task_component = task_dir(task_id, core_id if worker is not None else None)
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
            invocation.tensors.append(
                _legacy_l1_tensor(tensor, t_where.at("tensors").at(j), window_dir, path, components)
            )
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
            match = TASK_DIR.match(PurePosixPath(candidate).parent.name)
            if match:
                return core_id if match.group(2) is not None else None
    return None


def _legacy_l1_tensor(tensor: Any, where: _Where, window_dir: Path, group: str, components: set[str]) -> LegacyTensor:
    tensor_name = where.string(tensor, "name")
    where.integer(tensor, "paramPosition")
    io = where.string(tensor, "io", ("input", "output"))
    index = where.integer(tensor, "index", minimum=0)
    where.string(tensor, "capturePhase")
    stored_shape = where.shape(tensor, "storedShape")
    stored_dtype = where.string(tensor, "storedDtype")
    file = _confined(window_dir, where.require(tensor, "file"), where.at("file"))
    _check_sizes(where, stored_dtype, stored_shape, file, "storedShape")
    component = f"{io}_{index:02d}_{safe_name(tensor_name)}"
    if component in components:
        raise where.error(f"array {group}/{component} appears twice")
    components.add(component)
    truncated = bool(tensor.get("truncated", False))
    order = (
        "name",
        "paramPosition",
        "io",
        "index",
        "capturePhase",
        "sourceOffsetBytes",
        "declaredShape",
        "actualShape",
        "storedShape",
        "originalDtype",
        "storedDtype",
        "fullBytes",
        "storedBytes",
        "truncated",
        "note",
    )
    attrs = {key: tensor[key] for key in order if key in tensor}
    attrs.setdefault("originalDtype", stored_dtype)
    for key, value in tensor.items():
        if key not in attrs and key not in _DROPPED_TENSOR_KEYS:
            attrs[key] = value
    attrs["legacyFile"] = tensor["file"]
    dims = (f"{io}_{index:02d}_element",) if truncated and len(stored_shape) == 1 else None
    return LegacyTensor(
        file, tensor["file"], f"{group}/{component}", attrs, dims, component, stored_shape, stored_dtype
    )
