"""``TensorDumpConfig``: what to capture, and where and how to store it."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
import re
from typing import Any

from megadump_zarr.codecs import parse_compressor

__all__ = ["TensorDumpConfig"]

_VALID_DIRECTIONS = frozenset(("forward", "backward"))
_VALID_ROLES = frozenset(("external_input", "stage_output", "final_output"))
_VALID_IO = frozenset(("input", "output"))
_VALID_CORE_TYPES = frozenset(("AIC", "AIV"))
_VALID_ON_ERROR = ("discard", "keep")
_VALID_MODES = ("tensor", "statistics", "nonfinite", "diff")
_VALID_ON_BUDGET = ("error", "statistics")
_VALID_LAYOUTS = ("tasks", "packs")
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def _string_filter(value: Any, *, name: str, allowed: frozenset[str] | None = None) -> tuple[str, ...] | None:
    """A scalar or collection of names → tuple, or None.

    Args:
        value: The user's value.
        name: Field name for messages.
        allowed: Permitted values, when the vocabulary is closed.
    """
    if value is None:
        return None
    values = (value,) if isinstance(value, str) else tuple(value)
    if not values:
        raise ValueError(f"{name} must not be empty")
    for item in values:
        if not isinstance(item, str) or not item:
            raise TypeError(f"{name} entries must be non-empty strings, got {item!r}")
        if allowed is not None and item not in allowed:
            raise ValueError(f"unsupported {name} entry {item!r}; expected one of {sorted(allowed)}")
    return values


def _id_filter(value: Any, *, name: str) -> tuple[int, ...] | None:
    """A non-negative int or collection of them → tuple, or None; booleans are refused.

    Args:
        value: The user's value.
        name: Field name for messages.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"{name} entries must be non-negative integers, got {value!r}")
    values = (value,) if isinstance(value, int) else tuple(value)
    if not values:
        raise ValueError(f"{name} must not be empty")
    for item in values:
        if not isinstance(item, int) or isinstance(item, bool) or item < 0:
            raise ValueError(f"{name} entries must be non-negative integers, got {item!r}")
    return values


def _positive_int(value: Any, *, name: str, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        suffix = " or None" if optional else ""
        raise TypeError(f"{name} must be a positive integer{suffix}")
    if value <= 0:
        raise ValueError(f"{name} must be positive")


def _output_location(value: Any) -> str | Path:
    if not isinstance(value, (str, Path)):
        raise TypeError(f"output_dir must be str or Path, got {type(value).__name__}")
    if isinstance(value, str) and _URL.match(value):
        if value.startswith("file://"):
            return Path(value[len("file://") :]).expanduser()
        return value.rstrip("/")
    return Path(value).expanduser()


@dataclass(frozen=True)
class TensorDumpConfig:
    """Configuration for MegaKernel Tensor value collection.

    Args:
        output_dir: Root of the dump: a local directory, or a URL such as ``s3://bucket/prefix``.
        level: ``"L0"`` (kernel boundary) or ``"L1"`` (task boundary).
        tensor_names: Exact logical Tensor names to keep.
        roles: L0 roles to keep: ``external_input``, ``stage_output``, ``final_output``.
        directions: ``forward`` and/or ``backward`` invocations to keep.
        ranks: Non-negative distributed ranks to keep.
        kernel_names: Exact MegaKernel names to keep.
        stages: Exact L1 stage names.
        task_ids: Stable global RuntimeConfig task IDs.
        stage_task_indices: Task indices local to a stage.
        owner_ids: Business owner IDs (for example experts).
        core_types: L1 worker types, ``AIC`` and/or ``AIV``.
        core_ids: Core-local worker IDs.
        io: L1 ports to capture: ``input``, ``output`` or both.
        device_memory_budget_mb: Most Device memory one L1 launch may use for its buffer.
        max_bytes_per_tensor: Per-record byte cap; a capped Tensor is stored as a flattened prefix of
            whole elements and marked truncated.
        storage_options: Options for the object store (fsspec/obstore), never written to the dump.
        compressor: Codec name (see ``megadump_zarr.codecs``): ``"default"``, ``"none"``,
            ``"zstd-3"``, ``"blosc-lz4"``, ...
        chunk_bytes: Target bytes per chunk (chunks hold whole rows).
        on_error: ``"discard"`` drops an unfinished window on an exception (the seed's behaviour);
            ``"keep"`` commits what was captured with status ``"aborted"``.
        stats: Store min, max, mean, L2 norm, NaN and Inf counts per tensor.
        async_export: Export windows on a background thread (the step only waits when the queue is
            full); False exports on the step thread.
        host_memory_budget_mb: Most host memory held by windows waiting for the background exporter.
        save_plans: Before each L1 launch, save its record plan below ``{output_dir}/.plans_{run}/``
            (a Zarr group per run, keyed by the dumper's ``run_id``; each launch's plan is removed once
            its window is committed, and never another run's), so a Device buffer saved from a hung
            launch can still be decoded with ``megadump decode-buffer``.
        mode: What each selected record stores. ``"tensor"`` (default, the seed's): the payload.
            ``"statistics"``: min, max, mean, L2 norm, NaN/Inf/element counts and a content checksum,
            computed on the device (no payload crosses to the host), in the invocation's
            ``statistics`` table. ``"nonfinite"``: statistics for every record, payloads only for
            records holding NaN or Inf. ``"diff"``: statistics for every record, payloads only where
            the record differs from the same record of ``baseline``.
        baseline: The dump (path or URL) ``mode="diff"`` compares against; required for it, refused
            for the other modes. Opened when the dumper is entered, before any launch.
        baseline_storage_options: Object-store options for ``baseline`` (never written to the dump).
        durable: Before a local window's status is written, make everything written for it durable
            (one ``syncfs`` of the file system), then sync the status document and its directory:
            a window that reads as complete after a crash has all its bytes. ``False`` skips the
            syncs (scratch runs). Object stores are durable per write; nothing extra is done there.
        on_budget: What an L1 launch does when its Device buffer would exceed
            ``device_memory_budget_mb``: ``"error"`` raises the seed's ``MemoryError``;
            ``"statistics"`` stores statistics instead of the payload for the records that do not fit.
            In ``nonfinite``/``diff`` the device copies the tensors it keeps into a pool bounded by the
            budget (a tensor that does not fit keeps its statistics only, counted in the statistics
            group's ``poolFull`` attribute), so these modes never raise for the budget.
        layout: How L1 task groups are stored. ``"tasks"`` (default): a Zarr group per task
            (``stages/{stage}/task_{tttttt}``) holding its record arrays and row coordinates, which plain
            ``xr.open_zarr`` opens. ``"packs"``: the small records of a stage's tasks share task-record
            packs (``stages/{stage}/pack_{pppp}``, fewer files; read through ``open_dump``).
    """

    output_dir: str | Path
    level: str = "L0"
    tensor_names: str | Collection[str] | None = None
    roles: str | Collection[str] | None = None
    directions: str | Collection[str] | None = None
    ranks: int | Collection[int] | None = None
    kernel_names: str | Collection[str] | None = None
    stages: str | Collection[str] | None = None
    task_ids: int | Collection[int] | None = None
    stage_task_indices: int | Collection[int] | None = None
    owner_ids: int | Collection[int] | None = None
    core_types: str | Collection[str] | None = None
    core_ids: int | Collection[int] | None = None
    io: str | Collection[str] | None = None
    device_memory_budget_mb: int = 512
    max_bytes_per_tensor: int | None = None
    storage_options: Mapping[str, Any] | None = field(default=None, repr=False)  # may hold credentials
    compressor: str | None = "default"
    chunk_bytes: int = 4 << 20
    on_error: str = "discard"
    stats: bool = True
    async_export: bool = False
    host_memory_budget_mb: int = 2048
    save_plans: bool = True
    durable: bool = True
    mode: str = "tensor"
    baseline: str | Path | None = None
    baseline_storage_options: Mapping[str, Any] | None = field(default=None, repr=False)  # may hold credentials
    on_budget: str = "error"
    layout: str = "tasks"

    def __post_init__(self) -> None:
        """Validate every field and normalise the collection filters."""
        output_dir = _output_location(self.output_dir)
        level = self.level.upper() if isinstance(self.level, str) else self.level
        if level not in ("L0", "L1"):
            raise ValueError(f"unsupported Tensor dump level {self.level!r}; expected 'L0' or 'L1'")
        kernel_names = _string_filter(self.kernel_names, name="kernel_names")
        tensor_names = _string_filter(self.tensor_names, name="tensor_names")
        roles = _string_filter(self.roles, name="roles", allowed=_VALID_ROLES)
        directions = _string_filter(self.directions, name="directions", allowed=_VALID_DIRECTIONS)
        stages = _string_filter(self.stages, name="stages")
        task_ids = _id_filter(self.task_ids, name="task_ids")
        stage_task_indices = _id_filter(self.stage_task_indices, name="stage_task_indices")
        owner_ids = _id_filter(self.owner_ids, name="owner_ids")
        core_types = _string_filter(self.core_types, name="core_types", allowed=_VALID_CORE_TYPES)
        core_ids = _id_filter(self.core_ids, name="core_ids")
        io = _string_filter(self.io, name="io", allowed=_VALID_IO)
        _positive_int(self.device_memory_budget_mb, name="device_memory_budget_mb")
        _positive_int(self.max_bytes_per_tensor, name="max_bytes_per_tensor", optional=True)
        if level == "L1" and all(
            value is None for value in (stages, task_ids, stage_task_indices, owner_ids, tensor_names)
        ):
            raise ValueError("L1 Tensor dump requires at least one stage, task, owner, or Tensor filter")
        self._check_storage_fields()
        for name, value in (
            ("output_dir", output_dir),
            ("level", level),
            ("kernel_names", kernel_names),
            ("tensor_names", tensor_names),
            ("roles", roles or tuple(sorted(_VALID_ROLES))),
            ("directions", directions or tuple(sorted(_VALID_DIRECTIONS))),
            ("ranks", _id_filter(self.ranks, name="ranks")),
            ("stages", stages),
            ("task_ids", task_ids),
            ("stage_task_indices", stage_task_indices),
            ("owner_ids", owner_ids),
            ("core_types", core_types),
            ("core_ids", core_ids),
            ("io", io or tuple(sorted(_VALID_IO))),
            ("storage_options", dict(self.storage_options) if self.storage_options is not None else None),
        ):
            object.__setattr__(self, name, value)

    def _check_storage_fields(self) -> None:
        if self.storage_options is not None and not isinstance(self.storage_options, Mapping):
            raise TypeError(f"storage_options must be a mapping or None, got {type(self.storage_options).__name__}")
        parse_compressor(self.compressor)
        _positive_int(self.chunk_bytes, name="chunk_bytes")
        if self.on_error not in _VALID_ON_ERROR:
            raise ValueError(f"unsupported on_error {self.on_error!r}; expected one of {list(_VALID_ON_ERROR)}")
        if self.layout not in _VALID_LAYOUTS:
            raise ValueError(f"unsupported layout {self.layout!r}; expected one of {list(_VALID_LAYOUTS)}")
        for name in ("stats", "async_export", "save_plans", "durable"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {type(getattr(self, name)).__name__}")
        _positive_int(self.host_memory_budget_mb, name="host_memory_budget_mb")
        self._check_mode_fields()

    def _check_mode_fields(self) -> None:
        """Validate ``mode``, ``baseline``, ``baseline_storage_options`` and ``on_budget``."""
        if self.mode not in _VALID_MODES:
            raise ValueError(f"unsupported mode {self.mode!r}; expected one of {list(_VALID_MODES)}")
        if self.on_budget not in _VALID_ON_BUDGET:
            raise ValueError(f"unsupported on_budget {self.on_budget!r}; expected one of {list(_VALID_ON_BUDGET)}")
        if self.mode == "diff":
            if self.baseline is None:
                raise ValueError("mode='diff' requires baseline=URL of the dump to compare against")
            if not isinstance(self.baseline, (str, Path)) or not str(self.baseline):
                raise TypeError(f"baseline must be a non-empty str or Path, got {self.baseline!r}")
        elif self.baseline is not None:
            raise ValueError(
                f"baseline is only used with mode='diff', got mode={self.mode!r} and baseline={self.baseline!r}"
            )
        options = self.baseline_storage_options
        if options is not None and not isinstance(options, Mapping):
            raise TypeError(f"baseline_storage_options must be a mapping or None, got {type(options).__name__}")
        if options is not None and self.mode != "diff":  # silently unused otherwise; values not shown (credentials)
            raise ValueError(f"baseline_storage_options is only used with mode='diff', got mode={self.mode!r}")
        if options is not None:
            object.__setattr__(self, "baseline_storage_options", dict(options))

    @property
    def is_remote(self) -> bool:
        """Whether ``output_dir`` is an object-store URL rather than a local directory."""
        return isinstance(self.output_dir, str)

    def selects_invocation(self, direction: str, rank: int, kernel_name: str | None = None) -> bool:
        """Whether one invocation passes the kernel, direction and rank filters.

        Args:
            direction: ``forward`` or ``backward``.
            rank: Job-global rank.
            kernel_name: Stable diagnostic name of the kernel.
        """
        if self.kernel_names is not None and kernel_name not in self.kernel_names:
            return False
        if direction not in self.directions:
            return False
        return self.ranks is None or rank in self.ranks

    def selects_tensor(self, tensor_name: str, role: str) -> bool:
        """Whether one logical Tensor passes the L0 name and role filters.

        Args:
            tensor_name: Logical tensor name.
            role: Graph-derived role.
        """
        if role not in self.roles:
            return False
        return self.tensor_names is None or tensor_name in self.tensor_names
