"""L1 record plans saved beside the dump, so a raw Device buffer saved from a hung launch can be decoded later.

Before each L1 launch the dumper saves the launch's plan as the attributes of a small Zarr group
``{root}/.plans_{run}/rank_{r}_window_{wwww}_{invocation}/zarr.json``, below a per-run group
``.plans_{run}/zarr.json``. ``run`` is the dumper's run id (UTC time, pid and a random part), so a
later run into the same root never overwrites or removes an earlier run's plans; each committed
window removes only its own launches' plans, and the run group goes once the run holds none. Both
levels are plain Zarr groups: zarr and xarray list the root without a ``ZarrUserWarning``, and no
empty directory is left behind. ``salvage_window`` turns a saved buffer and its plan into a window
marked ``aborted``; ``find_plans`` lists the saved plans of a root (also the older
``.plans/rank_R/window_WWWW/*.json`` files).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
import json
import os
from pathlib import Path
import re
from typing import Any
import uuid

import torch

from megadump_zarr.tensor_arrays import dtype_name, torch_dtype_named
from megadump_zarr.layout.limits import INT64_LIMIT, check_index
from megadump_zarr.l1 import L1_DUMP_MAX_RECORDS
from megadump_zarr.dump.statistics_mode import salvage_l1_statistics
from megadump_zarr.dump.statistics_slots import has_statistics
from megadump_zarr.dump.l1_plan import L1RecordPlan, PreparedL1Dump
from megadump_zarr.dump.snapshots import salvage_l1_dump
from megadump_zarr.dump.window import DumpInvocation, build_window
from megadump_zarr.layout.write_model import WindowWrite
from megadump_zarr.layout.paths import RANK_DIR, WINDOW_DIR

__all__ = [
    "PLAN_SCHEMA",
    "SavedPlan",
    "find_plans",
    "load_plan",
    "new_run_id",
    "plan_document",
    "plan_group_bytes",
    "plan_key",
    "plan_prefix",
    "records_from_plan",
    "run_prefix",
    "salvage_window",
]

PLAN_SCHEMA = "megadump_zarr.l1-plan/1"
_FIELDS = tuple(L1RecordPlan.__dataclass_fields__)
_RUN_DIR = re.compile(r"^\.plans_([0-9]{8}T[0-9]{6}Z_[0-9]+_[0-9a-f]{8})$")
_MAX_PLAN_BYTES = 64 << 20  # a 4096-record plan is ~2 MB


def new_run_id() -> str:
    """A run id no other run shares: UTC start time, process id and 32 random bits
    (``20261201T081500Z_4242_1a2b3c4d``)."""
    return f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}_{os.getpid()}_{uuid.uuid4().hex[:8]}"


def run_prefix(run_id: str) -> str:
    """Key of one run's plan group below the dump root (``.plans_{run}``).

    Args:
        run_id: From ``new_run_id``.
    """
    return f".plans_{run_id}"


def plan_prefix(rank: int, window_index: int, invocation: str, run_id: str) -> str:
    """Key of one launch's plan group below the dump root.

    Args:
        rank: Rank.
        window_index: Window the invocation belongs to.
        invocation: The invocation group name.
        run_id: The dumper's run id.
    """
    return f"{run_prefix(run_id)}/rank_{rank}_window_{window_index:04d}_{invocation}"


def plan_key(rank: int, window_index: int, invocation: str, run_id: str) -> str:
    """Key of the document holding one launch's plan: ``{plan_prefix(...)}/zarr.json`` (same arguments)."""
    return f"{plan_prefix(rank, window_index, invocation, run_id)}/zarr.json"


def plan_group_bytes(attributes: Mapping[str, Any]) -> bytes:
    """A Zarr v3 group document holding ``attributes`` (the plan, or the run group's description).

    Args:
        attributes: JSON-serialisable attributes.
    """
    return json.dumps({"zarr_format": 3, "node_type": "group", "attributes": dict(attributes)}).encode()


def plan_document(
    prepared: PreparedL1Dump, invocation: DumpInvocation, window_index: int, run_id: str | None = None
) -> dict[str, Any]:
    """The JSON document describing one launch's Device buffer.

    Args:
        prepared: The launch's plan and buffer.
        invocation: The invocation it belongs to.
        window_index: Its window.
        run_id: The dumper's run id (kept in the document).
    """
    records = []
    for record in prepared.records:
        entry = {name: getattr(record, name) for name in _FIELDS}
        entry["dtype"] = dtype_name(record.dtype)
        entry["actual_shape"] = list(record.actual_shape)
        entry["dims"] = list(record.dims)
        entry["declared_shape"] = list(record.declared_shape)
        records.append(entry)
    document = {
        "schema": PLAN_SCHEMA,
        "rank": invocation.rank,
        "windowIndex": window_index,
        "invocationId": invocation.invocation_id,
        "step": invocation.step,
        "direction": invocation.direction,
        "kernelName": invocation.kernel_name,
        "device": invocation.device,
        "executionMode": invocation.execution_mode,
        "totalBytes": prepared.total_bytes,
        "runId": run_id,
        "records": records,
    }
    # what a replay of a salvaged window needs (as in a committed one): the operators' source, the tiles' rows
    if invocation.operator_source is not None:
        document["operatorSource"] = invocation.operator_source
    rows = {
        str(task): [int(start), int(stop)]
        for task, (start, stop) in invocation.task_rows.items()
        if start is not None and stop is not None
    }
    if rows:
        document["taskRows"] = rows
    return document


def _replay_fields(document: Mapping[str, Any]) -> tuple[dict[str, Any] | None, dict[int, tuple[int, int]]]:
    """The plan's optional ``operatorSource`` (a mapping) and ``taskRows`` (task id -> ``[start, stop]``)."""
    source = document.get("operatorSource")
    if source is not None and not isinstance(source, dict):
        raise ValueError(f"L1 plan field 'operatorSource' must be a mapping, got {type(source).__name__}")
    table = document.get("taskRows", {})
    if not isinstance(table, dict):
        raise ValueError(f"L1 plan field 'taskRows' must be a mapping, got {type(table).__name__}")
    rows: dict[int, tuple[int, int]] = {}
    for task, value in table.items():
        if not (isinstance(task, str) and task.isdigit()) or not isinstance(value, list) or len(value) != 2:
            raise ValueError(f"L1 plan field 'taskRows' entry {task!r}: {value!r} is not a task id -> [start, stop]")
        start, stop = (check_index(v, f"L1 plan field 'taskRows' entry {task!r}", limit=INT64_LIMIT) for v in value)
        rows[check_index(int(task), "L1 plan field 'taskRows' task id", limit=INT64_LIMIT)] = (start, stop)
    return source, rows


def load_plan(source: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    """Read and check a plan document.

    Args:
        source: A path to the JSON file, or the parsed document.
    """
    if isinstance(source, Mapping):
        document = dict(source)
    else:
        path = Path(source)
        if path.is_dir():  # a saved plan group
            path = path / "zarr.json"
        try:
            if path.stat().st_size > _MAX_PLAN_BYTES:
                raise ValueError(f"cannot read L1 plan {source}: larger than {_MAX_PLAN_BYTES} bytes")
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
            raise ValueError(f"cannot read L1 plan {source}: {error}") from None
        if isinstance(document, dict) and document.get("node_type") == "group" and "attributes" in document:
            document = document["attributes"]  # a saved plan group's zarr.json
    if not isinstance(document, dict) or document.get("schema") != PLAN_SCHEMA:
        raise ValueError(
            f"not an L1 plan (schema {PLAN_SCHEMA!r} expected): {source if not isinstance(source, Mapping) else 'document'}"
        )
    if not isinstance(document.get("records"), list) or not document["records"]:
        raise ValueError("L1 plan has no records")
    if len(document["records"]) > L1_DUMP_MAX_RECORDS:
        raise ValueError(
            f"L1 plan has {len(document['records'])} records, more than a buffer holds ({L1_DUMP_MAX_RECORDS})"
        )
    return document


def records_from_plan(document: Mapping[str, Any]) -> tuple[L1RecordPlan, ...]:
    """The record plans of a plan document.

    Args:
        document: A plan from ``load_plan``.
    """
    records = []
    for index, entry in enumerate(document["records"]):
        if not isinstance(entry, dict):
            raise ValueError(f"L1 plan record {index} must be an object, got {type(entry).__name__}")
        missing = [name for name in _FIELDS if name not in entry]
        if missing:
            raise ValueError(f"L1 plan record {index} lacks {missing}")
        values = {name: entry[name] for name in _FIELDS}
        for name, value in values.items():
            _check_record_field(index, name, value)
        try:
            values["dtype"] = torch_dtype_named(entry["dtype"])
        except (ValueError, TypeError):
            raise ValueError(f"L1 plan record {index} has unsupported dtype {entry['dtype']!r}") from None
        for name in ("actual_shape", "dims", "declared_shape"):
            values[name] = tuple(values[name])
        records.append(L1RecordPlan(**values))
    return tuple(records)


_STRING_FIELDS = frozenset(("stage", "owner_label", "core_type", "io", "phase", "tensor_name", "note", "dtype"))
_SHAPE_FIELDS = frozenset(("actual_shape", "declared_shape"))


def _check_record_field(index: int, name: str, value: Any) -> None:
    """One record field has the type the plan format gives it (else a ValueError naming it)."""
    what = f"L1 plan record {index} field {name!r}"
    if name in _STRING_FIELDS:
        if not isinstance(value, str):
            raise ValueError(f"{what} must be a string, got {value!r}")
    elif name == "truncated":
        if not isinstance(value, bool):
            raise ValueError(f"{what} must be true or false, got {value!r}")
    elif name == "owner_id":
        if value is not None:
            check_index(value, what, limit=INT64_LIMIT)
    elif name in _SHAPE_FIELDS:
        if not isinstance(value, list):
            raise ValueError(f"{what} must be a list of integers, got {value!r}")
        for dim in value:
            check_index(dim, what, limit=INT64_LIMIT)
    elif name == "dims":
        if not isinstance(value, list) or not all(isinstance(dim, str) for dim in value):
            raise ValueError(f"{what} must be a list of strings, got {value!r}")
    else:
        check_index(value, what, limit=INT64_LIMIT)


def salvage_window(
    buffer: Any, plan: str | Path | Mapping[str, Any], *, window_index: int | None = None
) -> tuple[WindowWrite, list[dict[str, Any]]]:
    """Decode a raw Device buffer against its plan: CAPTURED records become a window to commit as
    ``aborted``; PENDING ones are listed (also in the invocation's ``pendingRecords`` attribute).

    Args:
        buffer: The raw buffer (bytes, numpy uint8, torch uint8 on any device, or a file path).
        plan: The plan file or document.
        window_index: Window index of the salvaged window (default: the plan's).
    """
    document = load_plan(plan)
    records = records_from_plan(document)
    rank = check_index(document.get("rank"), "L1 plan field 'rank'")
    planned_window = check_index(document.get("windowIndex"), "L1 plan field 'windowIndex'")
    index = planned_window if window_index is None else check_index(window_index, "window index")
    invocation_id = check_index(document.get("invocationId"), "L1 plan field 'invocationId'", limit=INT64_LIMIT)
    step = check_index(document.get("step"), "L1 plan field 'step'", limit=INT64_LIMIT)
    total_bytes = check_index(document.get("totalBytes"), "L1 plan field 'totalBytes'", limit=INT64_LIMIT)
    operator_source, task_rows = _replay_fields(document)
    for name in ("kernelName", "direction", "device"):
        if not isinstance(document.get(name), str):
            raise ValueError(f"L1 plan field {name!r} must be a string, got {document.get(name)!r}")
    if document["direction"] not in ("forward", "backward"):
        raise ValueError(f"L1 plan field 'direction' must be 'forward' or 'backward', got {document['direction']!r}")
    if isinstance(buffer, (str, Path)):
        buffer = Path(buffer).read_bytes()
    if isinstance(buffer, (bytes, bytearray, memoryview)):
        buffer = torch.frombuffer(bytearray(buffer), dtype=torch.uint8)
    elif not torch.is_tensor(buffer):
        import numpy as np

        buffer = torch.from_numpy(np.ascontiguousarray(buffer, dtype=np.uint8))
    prepared = PreparedL1Dump(runtime_config=None, buffer=buffer, records=records, total_bytes=total_bytes)
    statistics = has_statistics(records)  # a statistics-first launch: its slots are statistics, not payloads
    captured, pending = ((), []) if statistics else salvage_l1_dump(prepared)
    invocation = DumpInvocation(
        invocation_id=invocation_id,
        step=step,
        kernel_name=document["kernelName"],
        direction=document["direction"],
        rank=rank,
        device=document["device"],
        level="L1",
        l1_snapshots=list(captured),
        device_buffer_bytes=total_bytes,
        execution_mode=str(document.get("executionMode", "")),
        failed=True,
        pending_records=pending,
        task_rows=task_rows,
        operator_source=operator_source,
    )
    if statistics:
        invocation.pending_records = pending = salvage_l1_statistics(invocation, prepared)
    window = build_window("L1", invocation.rank, index, [invocation])
    window.attrs["salvaged"] = True
    return window, pending


@dataclass(frozen=True)
class SavedPlan:
    """One plan saved below a dump root.

    Args:
        path: The plan group's directory (or an older ``.json`` plan file).
        run_id: The run that saved it (``""`` for the older layout).
        rank: Its rank.
        window_index: Its window.
        invocation: Its invocation group name.
    """

    path: Path
    run_id: str
    rank: int
    window_index: int
    invocation: str

    def describe(self) -> str:
        """One line for messages: run, rank, window, invocation, path."""
        return (
            f"run {self.run_id or '(old layout)'} rank {self.rank} window {self.window_index} "
            f"{self.invocation}: {self.path}"
        )


# A saved plan's directory name is its own flat grammar (rank, window and invocation in one component), not
# a path of the dump's layout/paths.py grammar, so its patterns stay here.
_PLAN_DIR = re.compile(r"^rank_(\d+)_window_(\d+)_(invocation_\d+_[A-Za-z]+)$")
_OLD_RANK, _OLD_WINDOW = RANK_DIR, WINDOW_DIR  # the old layout's plan directories are the dump's own
_OLD_FILE = re.compile(r"^(invocation_\d+_[A-Za-z]+)\.json$")


def find_plans(
    root: str | Path,
    *,
    run_id: str | None = None,
    rank: int | None = None,
    window_index: int | None = None,
    invocation: str | int | None = None,
) -> list[SavedPlan]:
    """The plans saved below a local dump root, filtered, sorted by run, rank, window and invocation.

    Args:
        root: The dump root.
        run_id: Keep this run's plans only (a unique prefix of the id is enough).
        rank: Keep this rank's.
        window_index: Keep this window's.
        invocation: Keep this invocation's: its group name or its id.
    """
    base = Path(root)
    found: list[SavedPlan] = []
    try:
        entries = sorted(os.listdir(base))
    except OSError as error:
        raise ValueError(f"cannot list plans below {root}: {error}") from None
    for entry in entries:
        match = _RUN_DIR.match(entry)
        if match and (base / entry).is_dir() and not (base / entry).is_symlink():
            for name in sorted(os.listdir(base / entry)):
                plan = _PLAN_DIR.match(name)
                if plan and (base / entry / name / "zarr.json").is_file():
                    found.append(
                        SavedPlan(
                            base / entry / name, match.group(1), int(plan.group(1)), int(plan.group(2)), plan.group(3)
                        )
                    )
    old = base / ".plans"
    if old.is_dir() and not old.is_symlink():  # the layout before run ids
        for rank_dir in sorted(old.iterdir()):
            rank_match = _OLD_RANK.match(rank_dir.name)
            if not rank_match or not rank_dir.is_dir():
                continue
            for window_dir in sorted(rank_dir.iterdir()):
                window_match = _OLD_WINDOW.match(window_dir.name)
                if not window_match or not window_dir.is_dir():
                    continue
                for file in sorted(window_dir.iterdir()):
                    file_match = _OLD_FILE.match(file.name)
                    if file_match and file.is_file():
                        found.append(
                            SavedPlan(
                                file, "", int(rank_match.group(1)), int(window_match.group(1)), file_match.group(1)
                            )
                        )

    def keep(plan: SavedPlan) -> bool:
        if run_id is not None and not plan.run_id.startswith(run_id):
            return False
        if rank is not None and plan.rank != rank:
            return False
        if window_index is not None and plan.window_index != window_index:
            return False
        if isinstance(invocation, int) and not isinstance(invocation, bool):
            return int(plan.invocation.split("_")[1]) == invocation
        return invocation is None or plan.invocation == invocation

    return [plan for plan in found if keep(plan)]
