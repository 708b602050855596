"""``replay``: run one dumped task again on its own dumped inputs and judge its dumped outputs.

The task's parameters are rebuilt from its dumped input views (each view written back at its
``sourceOffsetBytes`` into a zero tensor of its parameter's declared shape and dtype: zeros
elsewhere). The reference's tile function then runs the task twice, once in the dump's dtype and
once in float64 (floating parameters widened exactly), and each dumped output is compared with the
same view of the replayed parameters, with :mod:`megadump_zarr.analyse` metrics and the dump dtype's
default tolerances (:func:`megadump_zarr.analyse.verdict.tolerance_for`).

An output passes when it matches either replay: the dtype replay (the kernel computes what the
reference computes) or the float64 one (it is as close to exact as its dtype allows). The task is
**wrong on its own inputs** when an output passes neither — the task is the culprit; else it is
**correct on its inputs** — a wrong output was already fed wrong inputs: look upstream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
import os
from typing import Any

import numpy as np
import pandas as pd
import torch

from megadump_zarr.analyse.metrics import TensorMetrics, compute_metrics
from megadump_zarr.analyse.verdict import dtype_kind, resolve_tolerance, verdict
from megadump_zarr.replay.references import Reference, resolve_reference
from megadump_zarr.replay.select import TaskSelection, select_task
from megadump_zarr.runtime import Tile
from megadump_zarr.runtime.compiler import CompiledTask
from megadump_zarr.layout.paths import window_path

__all__ = ["CORRECT", "WRONG", "ReplayResult", "replay"]

WRONG = "wrong on its own inputs"
CORRECT = "correct on its inputs"


@dataclass
class ReplayResult:
    """What a replay found.

    Attributes:
        verdict: :data:`WRONG` (the task is the culprit) or :data:`CORRECT` (look upstream).
        outputs: One row per dumped output: ``name``, ``io_index``, ``core_id``, ``verdict`` (pass/fail),
            ``max_abs``, ``max_rel``, ``cosine``, ``mismatches`` (against the dtype replay), the same
            against the float64 replay (``f64_verdict``, ``f64_max_abs``, ``f64_max_rel``, ``f64_cosine``),
            ``dtype``, ``rtol``, ``atol``, ``notes`` and ``path``.
        rank, window, invocation, stage, task_id, owner_id, kernel: The task replayed.
        reference: Where the reference came from.
        inputs: The dumped input records written back (paths).
    """

    verdict: str
    outputs: pd.DataFrame
    rank: int
    window: int
    invocation: int
    stage: str
    task_id: int
    owner_id: int | None
    kernel: str
    reference: str
    inputs: list[str] = field(default_factory=list)

    @property
    def culprit(self) -> bool:
        """Whether the task is wrong on its own inputs."""
        return self.verdict == WRONG

    def to_dict(self) -> dict[str, Any]:
        """The ``megadump replay --json`` document."""
        outputs = []
        for row in self.outputs.itertuples(index=False):
            outputs.append(
                {
                    "name": row.name,
                    "verdict": row.verdict,
                    "max_abs": row.max_abs,
                    "max_rel": row.max_rel,
                    "cosine": row.cosine,
                    "mismatches": row.mismatches,
                    "dtype": row.dtype,
                    "core_id": row.core_id,
                    "path": row.path,
                    "notes": list(row.notes),
                    "float64": {
                        "verdict": row.f64_verdict,
                        "max_abs": row.f64_max_abs,
                        "max_rel": row.f64_max_rel,
                        "cosine": row.f64_cosine,
                    },
                }
            )
        return {
            "verdict": self.verdict,
            "outputs": outputs,
            "rank": self.rank,
            "window": self.window,
            "invocation": self.invocation,
            "stage": self.stage,
            "task_id": self.task_id,
            "owner_id": self.owner_id,
            "kernel": self.kernel,
            "reference": self.reference,
            "inputs": self.inputs,
        }


@dataclass
class _Record:
    path: str
    io: str
    name: str
    core_id: int | None
    position: int
    dtype: torch.dtype
    dtype_name: str
    declared: tuple[int, ...]
    offset: int
    stored: tuple[int, ...]
    data: np.ndarray | None
    truncated_of: int | None = None  # the logical element count of a truncated record


def _torch_dtype(name: str, path: str) -> torch.dtype:
    dtype = getattr(torch, str(name), None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"record {path}: dtype {name!r} cannot be replayed")
    return dtype


def _records(dump: Any, selection: TaskSelection) -> list[_Record]:
    records = []
    for row in selection.records.itertuples(index=False):
        if not bool(getattr(row, "payload", True)):  # a statistics-first dump kept only this record's statistics
            raise ValueError(
                f"{row.io} {row.name!r} of task {selection.task_id} has statistics only, no values "
                f"({row.path}): replay needs the task's tensors (dump it with payloads)"
            )
        array = dump.record_array(row.path)
        attrs = array.attrs
        if row.truncated and row.io == "input":
            raise ValueError(
                f"input {row.name!r} of task {selection.task_id} is truncated ({row.path}, "
                "max_bytes_per_tensor): replay needs whole inputs"
            )
        if row.truncated:  # an output's stored prefix, flat
            values = np.asarray(array.values).reshape(-1)[: int(prod(row.stored_shape))]
            stored = (values.size,)
        else:
            values, stored = np.asarray(array.values), tuple(int(d) for d in row.stored_shape)
        offset, declared = attrs.get("sourceOffsetBytes"), attrs.get("declaredShape")
        if not isinstance(offset, int) or not isinstance(declared, list):
            raise ValueError(f"record {row.path} lacks sourceOffsetBytes/declaredShape: not an L1 task record")
        records.append(
            _Record(
                row.path,
                str(row.io),
                str(row.name),
                None if pd.isna(row.core_id) else int(row.core_id),
                int(row.param_position),
                _torch_dtype(row.dtype, row.path),
                str(row.dtype),
                tuple(int(d) for d in declared),
                offset,
                stored,
                values,
                int(prod(row.shape)) if row.truncated else None,
            )
        )
    return records


def _to_torch(values: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    raw = np.ascontiguousarray(values).view(np.uint8).reshape(-1)
    if not raw.size:  # an empty view (an expert with no tokens): numpy gives it stride 0, which torch cannot view
        return torch.empty(0, dtype=dtype)
    return torch.from_numpy(raw.copy()).view(dtype)


def _parameters(records: list[_Record], reference: Reference, selection: TaskSelection) -> list[torch.Tensor]:
    """Zero tensors of every known parameter, the dumped inputs written back at their offsets."""
    shapes: dict[int, tuple[tuple[int, ...], torch.dtype]] = {}
    for record in records:  # the dump's own parameter shapes and dtypes first (a golden built for another size or
        shapes.setdefault(record.position, (record.declared, record.dtype))  # dtype still replays this task)
    for spec in reference.specs:  # the reference's specs only for parameters the dump does not hold
        shapes.setdefault(spec.param_position, (tuple(spec.shape), spec.dtype))
    count = max(shapes) + 1 if shapes else 0
    params = [torch.zeros(*shapes[p][0], dtype=shapes[p][1]) if p in shapes else torch.empty(0) for p in range(count)]
    inputs = [r for r in records if r.io == "input"]
    if not inputs:
        raise ValueError(
            f"the dump holds no inputs of task {selection.task_id} of stage {selection.stage!r} "
            "(io or tensor_names filters?): replay needs the task's dumped inputs"
        )
    _check_every_input(inputs, reference, selection)
    for record in inputs:
        param = params[record.position]
        if param.dtype != record.dtype:
            raise ValueError(
                f"input {record.path} is {record.dtype_name} but parameter {record.position} is "
                f"{str(param.dtype).removeprefix('torch.')}"
            )
        flat = param.view(-1).view(torch.uint8)
        payload = _to_torch(record.data, record.dtype).view(torch.uint8)
        if record.offset + payload.numel() > flat.numel():
            raise ValueError(
                f"input {record.path} ({payload.numel()} bytes at offset {record.offset}) does not fit "
                f"parameter {record.position} of {flat.numel()} bytes"
            )
        flat[record.offset : record.offset + payload.numel()] = payload
    return params


def _check_every_input(inputs: list[_Record], reference: Reference, selection: TaskSelection) -> None:
    """Refuse a task whose dump lacks one of its inputs (a ``tensor_names`` filter): replayed as zeros, it
    would make a clean task look wrong on its own inputs. The operator's declared inputs say what the task
    reads; a bare tile function does not, so there the dumped input indices must have no gap."""
    dumped = {record.position for record in inputs}
    if reference.operator is not None:
        missing = [
            f"{spec.name!r} (input {i}, parameter {spec.param_position})"
            for i, spec in enumerate(reference.operator.inputs)
            if spec.param_position not in dumped
        ]
    else:
        table = selection.records
        indices = {int(i) for i in table.loc[table["io"] == "input", "index"]}
        missing = [f"input {i}" for i in range(max(indices) + 1) if i not in indices]
    if missing:
        operator = reference.operator
        reads = (
            f" that the reference operator {operator.name!r} reads"
            if operator is not None and operator.name != selection.stage
            else ""
        )
        raise ValueError(
            f"the dump lacks {', '.join(missing)} of task {selection.task_id} of stage "
            f"{selection.stage!r}{reads} (tensor_names or io filters?): replay needs every input of the "
            "task (a missing one would be replayed as zeros)"
        )


def _task(
    selection: TaskSelection, reference: Reference, tile_rows: Any, params: list[torch.Tensor], task_index: int
) -> CompiledTask:
    start = stop = None
    if isinstance(tile_rows, list) and len(tile_rows) == 2:
        start, stop = int(tile_rows[0]), int(tile_rows[1])
    elif reference.kernel is not None:  # a dump without tileRows: compile the reference kernel for the geometry
        try:
            compiled = reference.kernel.prepare(params)
            task = compiled.tasks[selection.task_id]
            if task.stage == selection.stage:
                start, stop = task.start, task.stop
        except (ValueError, TypeError, IndexError, RuntimeError):
            pass
    return CompiledTask(
        selection.task_id, selection.stage, reference.operator, task_index, start, stop, selection.owner_id
    )


def _run(reference: Reference, params: list[torch.Tensor], task: CompiledTask) -> None:
    try:
        with torch.no_grad():
            reference.tile_fn(Tile(params, task.start, task.stop, task.owner_id, task))
    except Exception as error:  # noqa: BLE001 - the user's reference failed: say so, with its message
        raise ValueError(
            f"the reference ({reference.origin}) failed on task {task.task_id} of stage "
            f"{task.stage!r}: {type(error).__name__}: {error}"
        ) from error


def _view(params: list[torch.Tensor], record: _Record) -> torch.Tensor:
    param = params[record.position]
    itemsize = torch.empty((), dtype=record.dtype).element_size()
    start = record.offset // itemsize
    count = int(prod(record.stored))
    return param.reshape(-1)[start : start + count].reshape(record.stored)


def _numeric(values: Any, kind: str) -> np.ndarray:
    if torch.is_tensor(values):
        values = values.detach().cpu()
        values = values.double().numpy() if kind in ("float", "other") else values.numpy()
    array = np.asarray(values)
    if kind == "float" and array.dtype != np.float64:
        array = array.astype(np.float64)
    return array


def _compare(
    dumped: np.ndarray, replayed: torch.Tensor, dtype_name: str, other: str, rtol: float | None, atol: float | None
) -> tuple[str, TensorMetrics, list[str]]:
    kind = dtype_kind(dtype_name)
    r, a, exact = resolve_tolerance(dtype_name, other if kind == "float" else dtype_name, rtol, atol)
    metrics = compute_metrics(_numeric(dumped, kind), _numeric(replayed, kind), rtol=r, atol=a, exact=exact)
    outcome, reasons = verdict(metrics)
    return outcome, metrics, reasons


def replay(
    dump: Any,
    stage: str,
    *,
    task_id: int | None = None,
    owner: int | None = None,
    invocation: int | None = None,
    reference: Any = None,
    rank: int | None = None,
    window: int | None = None,
    rtol: float | None = None,
    atol: float | None = None,
    storage_options: dict[str, Any] | None = None,
) -> ReplayResult:
    """Replay one dumped L1 task on its own dumped inputs and judge its dumped outputs.

    Dumps of the embedded demo model (``megadump demo``, or ``MoEBlock`` with any ``DemoConfig``)
    replay with no reference: the dump names its operator source and config. For your own kernels
    pass ``reference`` or call :func:`megadump_zarr.replay.register_reference` first.

    Args:
        dump: An open ``Dump`` or a dump root (path or URL).
        stage: The task's stage.
        task_id: The task's global id (or ``owner``).
        owner: The owner id (e.g. expert) of an owner-split task (or ``task_id``).
        invocation: Invocation id (default: the first holding the task).
        reference: A tile function ``fn(tile) -> None``, an ``OperatorNode``, a ``MegaKernel``/``Graph``
            holding the stage, or ``"module:attr"`` naming one; None: registered, else the dump's source.
        rank: Rank (default: the lowest holding the task).
        window: Window index (default: the first holding the task).
        rtol: Relative tolerance replacing the dtype's default.
        atol: Absolute tolerance replacing the dtype's default.
        storage_options: fsspec options when ``dump`` is a URL.

    Returns:
        A :class:`ReplayResult`: ``verdict`` is ``"wrong on its own inputs"`` (the task is the culprit)
        or ``"correct on its inputs"`` (look upstream); ``outputs`` has one row per dumped output.

    Raises:
        ValueError: Bad selectors (the message lists what exists), no reference, truncated or missing
            inputs, or a reference that fails.
    """
    from megadump_zarr.analyse.verdict import check_tolerance
    from megadump_zarr.read import open_dump
    from megadump_zarr.read.location import get_json

    rtol, atol = check_tolerance("rtol", rtol), check_tolerance("atol", atol)
    if not isinstance(stage, str) or not stage:
        raise ValueError(f"replay stage must be a non-empty string, got {stage!r}")
    if isinstance(dump, (str, os.PathLike)):
        dump = open_dump(dump, storage_options=storage_options)
    selection = select_task(
        dump.records(include_incomplete=True),
        stage=stage,
        task_id=task_id,
        owner=owner,
        invocation=invocation,
        rank=rank,
        window=window,
    )
    window_key = window_path(selection.rank, selection.window)
    invocation_attrs = (get_json(dump.store, f"{window_key}/{selection.invocation_name}/zarr.json") or {}).get(
        "attributes"
    ) or {}
    group = str(selection.records["group"].iloc[0])
    group_attrs = (get_json(dump.store, f"{group}/zarr.json") or {}).get("attributes") or {}
    records = _records(dump, selection)
    outputs = [r for r in records if r.io == "output"]
    if not outputs:
        if "partial" in selection.records and selection.records["partial"].astype(bool).any():
            raise ValueError(
                f"the launch of {selection.invocation_name} failed before task {selection.task_id} of "
                f"stage {stage!r} wrote its outputs (a salvaged partial launch: they are pending, never "
                "captured): nothing to judge"
            )
        raise ValueError(
            f"the dump holds no outputs of task {selection.task_id} of stage {stage!r} "
            "(io or tensor_names filters?): nothing to judge"
        )
    dtype = (
        outputs[0].dtype
        if outputs[0].dtype.is_floating_point
        else next((r.dtype for r in records if r.dtype.is_floating_point), torch.float32)
    )
    source = invocation_attrs.get("operatorSource")
    same = resolve_reference(reference, kernel=selection.kernel, stage=stage, source=source, dtype=dtype)
    wide = resolve_reference(reference, kernel=selection.kernel, stage=stage, source=source, dtype=torch.float64)
    task_index = group_attrs.get("stageTaskIndex") if isinstance(group_attrs.get("stageTaskIndex"), int) else 0
    params = _parameters(records, same, selection)
    task = _task(selection, same, group_attrs.get("tileRows"), params, task_index)
    wide_params = [p.double() if p.is_floating_point() else p.clone() for p in params]
    _run(same, params, task)
    _run(
        wide,
        wide_params,
        CompiledTask(task.task_id, task.stage, wide.operator, task.task_index, task.start, task.stop, task.owner_id),
    )
    rows = []
    for record in outputs:
        outcome, m, reasons = _compare(
            record.data, _view(params, record), record.dtype_name, record.dtype_name, rtol, atol
        )
        wide_view = _view(wide_params, record)
        f64_outcome, f64, f64_reasons = _compare(
            record.data,
            wide_view,
            record.dtype_name,
            "float64" if wide_view.is_floating_point() else record.dtype_name,
            rtol,
            atol,
        )
        combined = "pass" if "pass" in (outcome, f64_outcome) else "fail"
        notes = [f"vs {record.dtype_name} replay: {r}" for r in reasons] + [
            f"vs float64 replay: {r}" for r in f64_reasons
        ]
        if record.truncated_of is not None:  # max_bytes_per_tensor: only the stored prefix can be judged
            notes.append(
                f"truncated: judged on its first {int(prod(record.stored))} of {record.truncated_of} "
                "elements (max_bytes_per_tensor)"
            )
        rows.append(
            {
                "name": record.name,
                "core_id": record.core_id,
                "verdict": combined,
                "max_abs": m.max_abs,
                "max_rel": m.max_rel,
                "cosine": m.cosine,
                "mismatches": m.mismatches,
                "f64_verdict": f64_outcome,
                "f64_max_abs": f64.max_abs,
                "f64_max_rel": f64.max_rel,
                "f64_cosine": f64.cosine,
                "dtype": record.dtype_name,
                "rtol": m.rtol,
                "atol": m.atol,
                "notes": notes,
                "path": record.path,
            }
        )
    frame = pd.DataFrame(rows)
    overall = WRONG if (frame["verdict"] == "fail").any() else CORRECT
    return ReplayResult(
        overall,
        frame,
        selection.rank,
        selection.window,
        selection.invocation,
        stage,
        selection.task_id,
        selection.owner_id,
        selection.kernel,
        same.origin,
        [r.path for r in records if r.io == "input"],
    )
