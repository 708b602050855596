"""The window manifest: the attributes of a window group, built once as a typed, validated object.

Every writer of a window (the dumper's ``build_window``, the legacy and msprobe importers, the msprobe
in-place store) builds a :class:`WindowManifest` and writes :meth:`WindowManifest.to_attrs`; a reader can
turn a window's attributes back with :meth:`WindowManifest.from_attrs`. The key order of ``to_attrs`` is
the order the writers have always written (``zarr.json`` bytes are unchanged).
"""

from __future__ import annotations

from collections.abc import Mapping
import numbers
from dataclasses import dataclass, field
from typing import Any

from megadump_zarr.layout.paths import INVOCATION_DIR
from megadump_zarr.layout.schema import LEVELS, PRODUCER, FORMAT_VERSION, STORAGE_KINDS, TENSOR_SERIALIZATION

__all__ = ["WindowManifest"]

_KEYS = (
    "schemaVersion",
    "producer",
    "level",
    "tensorSerialization",
    "windowIndex",
    "capturePhaseSemantics",
    "stageViewStorage",
    "rank",
    "step",
    "invocationCount",
    "invocations",
    "partialLaunches",
    "convertedFrom",
)


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check_text(name: str, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"WindowManifest.{name} must be non-empty text, got {value!r}")


def _check_names(name: str, value: Any) -> None:
    if not isinstance(value, tuple) or not all(isinstance(n, str) and INVOCATION_DIR.match(n) for n in value):
        raise ValueError(f"WindowManifest.{name} must be a tuple of invocation group names, got {value!r}")


@dataclass(frozen=True)
class WindowManifest:
    """A window group's attributes (before the store adds ``status`` and its timestamps).

    Args:
        level: ``L0`` or ``L1``.
        rank: The job-global rank (an integer >= 0).
        window_index: The window's index (an integer >= 0).
        capture_phase: ``capturePhaseSemantics`` (``task_boundary``, ``mega_kernel_boundary``,
            ``api_boundary``, or what a converted manifest said).
        storage: ``stageViewStorage``, one of :data:`~megadump_zarr.layout.schema.STORAGE_KINDS`.
        invocations: The window's invocation group names, in order.
        step: The training step of the whole window (msprobe windows), or ``None``.
        partial_launches: Launches that failed and whose captured records were kept (the dumper's windows),
            or ``None`` (the key is left out).
        converted_from: What a converted window came from (``convertedFrom``), or ``None``.
        schema_version: ``schemaVersion`` (defaults to this package's).
        producer: ``producer`` (defaults to this package and its version).
        tensor_serialization: ``tensorSerialization``.
        extra: Other attributes, kept after the known ones (a reader's :meth:`from_attrs` keeps what a
            store added: ``status``, ``createdAt``, ...).
    """

    level: str
    rank: int
    window_index: int
    capture_phase: str
    storage: str
    invocations: tuple[str, ...] = ()
    step: int | None = None
    partial_launches: tuple[str, ...] | None = None
    converted_from: Mapping[str, Any] | None = None
    schema_version: int = FORMAT_VERSION
    producer: str = PRODUCER
    tensor_serialization: str = TENSOR_SERIALIZATION
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"WindowManifest.level must be one of {LEVELS}, got {self.level!r}")
        for name in ("rank", "window_index"):
            value = getattr(self, name)
            if not _is_int(value) or value < 0:
                raise ValueError(f"WindowManifest.{name} must be an integer >= 0, got {value!r}")
            object.__setattr__(self, name, int(value))  # a numpy integer is written as a JSON number
        if self.step is not None:
            if not _is_int(self.step):
                raise ValueError(f"WindowManifest.step must be an integer or None, got {self.step!r}")
            object.__setattr__(self, "step", int(self.step))
        if not _is_int(self.schema_version) or self.schema_version < 1:
            raise ValueError(f"WindowManifest.schema_version must be an integer >= 1, got {self.schema_version!r}")
        for name in ("capture_phase", "producer", "tensor_serialization"):
            _check_text(name, getattr(self, name))
        if self.storage not in STORAGE_KINDS:
            raise ValueError(f"WindowManifest.storage must be one of {sorted(STORAGE_KINDS)}, got {self.storage!r}")
        _check_names("invocations", self.invocations)
        if self.partial_launches is not None:
            _check_names("partial_launches", self.partial_launches)
        if self.converted_from is not None and not isinstance(self.converted_from, Mapping):
            raise ValueError(f"WindowManifest.converted_from must be a mapping or None, got {self.converted_from!r}")
        if not isinstance(self.extra, Mapping) or set(self.extra) & set(_KEYS):
            raise ValueError(f"WindowManifest.extra must be a mapping of other attributes, got {self.extra!r}")

    def to_attrs(self) -> dict[str, Any]:
        """The window group's attributes, in the order the writers write them."""
        attrs: dict[str, Any] = {
            "schemaVersion": self.schema_version,
            "producer": self.producer,
            "level": self.level,
            "tensorSerialization": self.tensor_serialization,
            "windowIndex": self.window_index,
            "capturePhaseSemantics": self.capture_phase,
            "stageViewStorage": self.storage,
            "rank": self.rank,
        }
        if self.step is not None:
            attrs["step"] = self.step
        attrs["invocationCount"] = len(self.invocations)
        attrs["invocations"] = list(self.invocations)
        if self.partial_launches is not None:
            attrs["partialLaunches"] = list(self.partial_launches)
        if self.converted_from is not None:
            attrs["convertedFrom"] = dict(self.converted_from)
        attrs.update(self.extra)
        return attrs

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any], where: str = "window") -> WindowManifest:
        """A window's attributes read back, validated (``invocationCount`` must match ``invocations``).

        Args:
            attrs: The window group's attributes (``zarr.json``'s ``attributes``).
            where: What the attributes are, for messages (``rank_0/window_0000/zarr.json``).

        Raises:
            ValueError: Naming ``where``, the attribute and its value.
        """
        if not isinstance(attrs, Mapping):
            raise ValueError(f"{where}: window attributes must be a JSON object, got {type(attrs).__name__}")
        required = ("level", "rank", "windowIndex", "capturePhaseSemantics", "stageViewStorage", "invocations")
        missing = [key for key in ("schemaVersion", *required) if key not in attrs]
        if missing:
            raise ValueError(f"{where}: window attributes lack {missing}")
        invocations, partial = attrs["invocations"], attrs.get("partialLaunches")
        if not isinstance(invocations, list) or partial is not None and not isinstance(partial, list):
            raise ValueError(f"{where}: invocations/partialLaunches must be lists, got {invocations!r}, {partial!r}")
        if attrs.get("invocationCount", len(invocations)) != len(invocations):
            raise ValueError(
                f"{where}: invocationCount {attrs['invocationCount']!r} but {len(invocations)} invocations listed"
            )
        try:
            return cls(
                level=attrs["level"],
                rank=attrs["rank"],
                window_index=attrs["windowIndex"],
                capture_phase=attrs["capturePhaseSemantics"],
                storage=attrs["stageViewStorage"],
                invocations=tuple(invocations),
                step=attrs.get("step"),
                partial_launches=None if partial is None else tuple(partial),
                converted_from=attrs.get("convertedFrom"),
                schema_version=attrs["schemaVersion"],
                producer=attrs.get("producer", "unknown"),
                tensor_serialization=attrs.get("tensorSerialization", TENSOR_SERIALIZATION),
                extra={key: value for key, value in attrs.items() if key not in _KEYS},
            )
        except ValueError as error:
            raise ValueError(f"{where}: {error}") from None
