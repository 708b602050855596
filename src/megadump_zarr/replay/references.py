"""Where a replay finds the operator of a task: a reference the user passes, one registered per kernel
and stage, or the source the dump names (the embedded demo model).

No code named by a dump is imported: a dump's ``operatorSource`` is looked up in a fixed table of
known sources (:data:`TRUSTED_SOURCES`, today the demo model ``megadump_zarr.demo.MoEBlock``, which
registers itself through :func:`register_source`); anything else needs the user to pass or register a
reference (or register its source). A ``"module:attr"`` string is imported only when the user gives it
(``reference=`` or ``megadump replay --reference``).

A reference is a tile function ``fn(tile) -> None`` (what ``OperatorNode.tile_fn`` is: it computes one
task in place on ``tile.params``), an ``OperatorNode``, or a ``MegaKernel``/``Graph`` holding the
stage's operator.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import Any

import torch

from megadump_zarr.runtime import Graph, MegaKernel, OperatorNode, TensorSpec

__all__ = [
    "TRUSTED_SOURCES",
    "Reference",
    "clear_references",
    "register_reference",
    "register_source",
    "resolve_reference",
]

_REGISTRY: dict[tuple[str, str], Any] = {}
_SOURCES: dict[str, tuple[Callable[..., MegaKernel], Callable[[Any], str] | None]] = {}

TRUSTED_SOURCES: dict[str, str] = {"megadump_zarr.demo.MoEBlock": "megadump_zarr.demo.model:register_replay_source"}
"""The fixed table of sources a dump may name without the user registering them: source name ->
``"module:function"`` that registers it (:func:`register_source`). Only these are ever imported because of
a dump; the name is data here, so replay does not depend on the demo."""


@dataclass(frozen=True)
class Reference:
    """The resolved operator of one stage, for one dtype.

    Args:
        tile_fn: ``fn(tile) -> None``.
        specs: Every operand spec of the reference's graph (parameter shapes and dtypes), if known.
        operator: The ``OperatorNode``, if known.
        kernel: The ``MegaKernel``, if known (compiles the task's tile geometry for old dumps).
        origin: Where it came from, for messages and the report.
    """

    tile_fn: Callable[[Any], None]
    specs: tuple[TensorSpec, ...]
    operator: OperatorNode | None
    kernel: MegaKernel | None
    origin: str


def register_reference(kernel: str, stage: str, fn: Any) -> None:
    """Register the golden of one kernel's stage: ``replay`` uses it for that kernel and stage.

    Args:
        kernel: The kernel's diagnostic name (the dump's ``kernel`` column).
        stage: The stage (operator) name.
        fn: A tile function ``fn(tile) -> None``, an ``OperatorNode``, or a ``MegaKernel``/``Graph``
            holding an operator named ``stage``. ``None`` removes the registration.

    Raises:
        TypeError: ``fn`` is none of these; ``kernel`` or ``stage`` not a non-empty string.
    """
    for name, value in (("kernel", kernel), ("stage", stage)):
        if not isinstance(value, str) or not value:
            raise TypeError(f"register_reference: {name} must be a non-empty string, got {value!r}")
    if fn is None:
        _REGISTRY.pop((kernel, stage), None)
        return
    _reference_of(fn, stage, f"registered for kernel {kernel!r} stage {stage!r}")  # refuse a bad one now
    _REGISTRY[(kernel, stage)] = fn


def clear_references() -> None:
    """Forget every registered reference."""
    _REGISTRY.clear()


def _load(text: str) -> Any:
    module_name, _, attr = text.partition(":")
    if not module_name or not attr:
        raise ValueError(f"reference {text!r} must be 'module:attribute' (for example 'mypkg.golden:expert_up')")
    try:
        value: Any = import_module(module_name)
    except ImportError as error:
        raise ValueError(f"reference {text!r}: cannot import {module_name!r}: {error}") from None
    for part in attr.split("."):
        if not hasattr(value, part):
            raise ValueError(f"reference {text!r}: module {module_name!r} has no attribute {attr!r}")
        value = getattr(value, part)
    return value


def _operator_in(graph: Graph, stage: str, what: str) -> OperatorNode:
    for operator in graph.operators:
        if operator.name == stage:
            return operator
    raise ValueError(f"{what} has no stage {stage!r}; its stages: {', '.join(o.name for o in graph.operators)}")


def _specs(graph: Graph | None) -> tuple[TensorSpec, ...]:
    if graph is None:
        return ()
    return tuple(spec for operator in graph.operators for spec in (*operator.inputs, *operator.outputs))


def _reference_of(value: Any, stage: str, origin: str) -> Reference:
    if isinstance(value, str):
        value = _load(value)
    if isinstance(value, MegaKernel):
        operator = _operator_in(value.graph, stage, f"reference kernel {value.kernel_name!r}")
        return Reference(operator.tile_fn, _specs(value.graph), operator, value, origin)
    if isinstance(value, Graph):
        operator = _operator_in(value, stage, "reference graph")
        return Reference(operator.tile_fn, _specs(value), operator, None, origin)
    if isinstance(value, OperatorNode):
        return Reference(value.tile_fn, tuple((*value.inputs, *value.outputs)), value, None, origin)
    if callable(value):
        return Reference(value, (), None, None, origin)
    raise TypeError(
        f"a replay reference must be a tile function fn(tile), an OperatorNode, a MegaKernel or a Graph "
        f"({origin}), got {type(value).__name__}"
    )


def register_source(
    name: str, build: Callable[[Any, str, torch.dtype], MegaKernel] | None, describe: Callable[[Any], str] | None = None
) -> None:
    """Register a known operator source: a dump whose ``operatorSource`` names ``name`` replays against it.

    The embedded demo fills this for its model itself (``megadump_zarr.demo.model.register_replay_source``);
    replay knows no model of its own.

    Args:
        name: The source name a dump records (``operatorSource["name"]``).
        build: ``build(config, kernel, dtype) -> MegaKernel``: the named kernel rebuilt from the source's
            recorded ``config`` in ``dtype``; raises ``ValueError`` for an unknown kernel. ``None`` removes it.
        describe: ``describe(config) -> str``: the config in a few words for the reference's origin.

    Raises:
        TypeError: ``name`` is not a non-empty string, or ``build``/``describe`` not callable.
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"register_source: name must be a non-empty string, got {name!r}")
    if build is None:
        _SOURCES.pop(name, None)
        return
    for field_name, value in (("build", build), ("describe", describe)):
        if value is not None and not callable(value):
            raise TypeError(f"register_source: {field_name} must be callable, got {type(value).__name__}")
    _SOURCES[name] = (build, describe)


def _source(name: Any) -> tuple[Callable[..., MegaKernel], Callable[[Any], str] | None] | None:
    """The registered builder of a source name; a trusted source registers itself on first use."""
    if not isinstance(name, str):
        return None
    if name not in _SOURCES and name in TRUSTED_SOURCES:
        module_name, _, attr = TRUSTED_SOURCES[name].partition(":")
        getattr(import_module(module_name), attr)()  # the source's own module fills _SOURCES
    return _SOURCES.get(name)


def _known_source(source: Any, kernel: str, stage: str, dtype: torch.dtype) -> Reference | None:
    """The operator a dump's ``operatorSource`` names, rebuilt in ``dtype`` (None: unknown source)."""
    found = _source(source.get("name")) if isinstance(source, dict) else None
    if found is None:
        return None
    build, describe = found
    name = source["name"]
    megakernel = build(source.get("config"), kernel, dtype)
    operator = _operator_in(megakernel.graph, stage, f"{name} kernel {kernel!r}")
    described = describe(source.get("config") or {}) if describe is not None else ""
    return Reference(operator.tile_fn, _specs(megakernel.graph), operator, megakernel, f"{name}({described})")


def resolve_reference(reference: Any, *, kernel: str, stage: str, source: Any, dtype: torch.dtype) -> Reference:
    """The reference for one task: ``reference`` if given, else the registered one, else the dump's
    known ``operatorSource`` rebuilt in ``dtype``.

    Args:
        reference: The user's reference (see the module docstring) or None.
        kernel: The task's kernel name.
        stage: The task's stage.
        source: The invocation's ``operatorSource`` attribute (or None).
        dtype: The dtype the replay runs in (the demo model is rebuilt in it).

    Raises:
        ValueError: No reference can be found (the message says how to give one).
    """
    if reference is not None:
        return _reference_of(reference, stage, reference if isinstance(reference, str) else "reference=")
    if (kernel, stage) in _REGISTRY:
        return _reference_of(_REGISTRY[(kernel, stage)], stage, f"registered for kernel {kernel!r} stage {stage!r}")
    found = _known_source(source, kernel, stage, dtype)
    if found is not None:
        return found
    named = (
        f" (the dump names operator source {source.get('name')!r}, which is not a known one)"
        if isinstance(source, dict) and "name" in source
        else ""
    )
    raise ValueError(
        f"no reference for kernel {kernel!r} stage {stage!r}{named}: pass reference=fn (a tile "
        f"function, an OperatorNode or a MegaKernel; CLI --reference module:attr) or call "
        f"megadump_zarr.replay.register_reference({kernel!r}, {stage!r}, fn)"
    )
