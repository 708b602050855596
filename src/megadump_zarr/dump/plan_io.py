"""L1 record plans as JSON sidecars, so a raw Device buffer saved from a hung launch can be decoded later.

Before each L1 launch the dumper writes ``{root}/.plans/rank_{r}/window_{wwww}/invocation_{id}_{direction}.json``
(a dot-directory that Zarr readers never list) and removes the window's plans once the window is
committed. ``salvage_window`` turns a saved buffer and its plan into a window marked ``aborted``.
"""

from __future__ import annotations

from collections.abc import Mapping
import json
from pathlib import Path
from typing import Any

import torch

from megadump_zarr.dump.arrays import dtype_name, torch_dtype_named
from megadump_zarr.dump.l1_plan import L1RecordPlan, PreparedL1Dump
from megadump_zarr.dump.snapshots import salvage_l1_dump
from megadump_zarr.dump.window import DumpInvocation, build_window
from megadump_zarr.dump.export import WindowWrite

__all__ = ["PLAN_SCHEMA", "load_plan", "plan_document", "plan_key", "records_from_plan", "salvage_window"]

PLAN_SCHEMA = "megadump_zarr.l1-plan/1"
_FIELDS = tuple(L1RecordPlan.__dataclass_fields__)


def plan_key(rank: int, window_index: int, invocation: str) -> str:
    """Relative key of one invocation's plan below the dump root.

    Args:
        rank: Rank.
        window_index: Window the invocation belongs to.
        invocation: The invocation group name.
    """
    return f".plans/rank_{rank}/window_{window_index:04d}/{invocation}.json"


def plan_document(prepared: PreparedL1Dump, invocation: DumpInvocation, window_index: int) -> dict[str, Any]:
    """The JSON document describing one launch's Device buffer.

    Args:
        prepared: The launch's plan and buffer.
        invocation: The invocation it belongs to.
        window_index: Its window.
    """
    records = []
    for record in prepared.records:
        entry = {name: getattr(record, name) for name in _FIELDS}
        entry["dtype"] = dtype_name(record.dtype)
        entry["actual_shape"] = list(record.actual_shape)
        entry["dims"] = list(record.dims)
        entry["declared_shape"] = list(record.declared_shape)
        records.append(entry)
    return {
        "schema": PLAN_SCHEMA, "rank": invocation.rank, "windowIndex": window_index,
        "invocationId": invocation.invocation_id, "step": invocation.step, "direction": invocation.direction,
        "kernelName": invocation.kernel_name, "device": invocation.device, "executionMode": invocation.execution_mode,
        "totalBytes": prepared.total_bytes, "records": records,
    }


def load_plan(source: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    """Read and check a plan document.

    Args:
        source: A path to the JSON file, or the parsed document.
    """
    if isinstance(source, Mapping):
        document = dict(source)
    else:
        try:
            document = json.loads(Path(source).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as error:
            raise ValueError(f"cannot read L1 plan {source}: {error}") from None
    if not isinstance(document, dict) or document.get("schema") != PLAN_SCHEMA:
        raise ValueError(f"not an L1 plan (schema {PLAN_SCHEMA!r} expected): {source if not isinstance(source, Mapping) else 'document'}")
    if not isinstance(document.get("records"), list) or not document["records"]:
        raise ValueError("L1 plan has no records")
    return document


def records_from_plan(document: Mapping[str, Any]) -> tuple[L1RecordPlan, ...]:
    """The record plans of a plan document.

    Args:
        document: A plan from ``load_plan``.
    """
    records = []
    for index, entry in enumerate(document["records"]):
        missing = [name for name in _FIELDS if name not in entry]
        if missing:
            raise ValueError(f"L1 plan record {index} lacks {missing}")
        values = {name: entry[name] for name in _FIELDS}
        try:
            values["dtype"] = torch_dtype_named(entry["dtype"])
        except ValueError:
            raise ValueError(f"L1 plan record {index} has unsupported dtype {entry['dtype']!r}") from None
        for name in ("actual_shape", "dims", "declared_shape"):
            values[name] = tuple(values[name])
        records.append(L1RecordPlan(**values))
    return tuple(records)


def salvage_window(buffer: Any, plan: str | Path | Mapping[str, Any], *, window_index: int | None = None) -> tuple[WindowWrite, list[dict[str, Any]]]:
    """Decode a raw Device buffer against its plan: CAPTURED records become a window to commit as
    ``aborted``; PENDING ones are listed (also in the invocation's ``pendingRecords`` attribute).

    Args:
        buffer: The raw buffer (bytes, numpy uint8, torch uint8 on any device, or a file path).
        plan: The plan file or document.
        window_index: Window index of the salvaged window (default: the plan's).
    """
    document = load_plan(plan)
    records = records_from_plan(document)
    if isinstance(buffer, (str, Path)):
        buffer = Path(buffer).read_bytes()
    if isinstance(buffer, (bytes, bytearray, memoryview)):
        buffer = torch.frombuffer(bytearray(buffer), dtype=torch.uint8)
    elif not torch.is_tensor(buffer):
        import numpy as np

        buffer = torch.from_numpy(np.ascontiguousarray(buffer, dtype=np.uint8))
    prepared = PreparedL1Dump(runtime_config=None, buffer=buffer, records=records, total_bytes=int(document["totalBytes"]))
    captured, pending = salvage_l1_dump(prepared)
    invocation = DumpInvocation(
        invocation_id=int(document["invocationId"]), step=int(document["step"]), kernel_name=str(document["kernelName"]),
        direction=str(document["direction"]), rank=int(document["rank"]), device=str(document["device"]), level="L1",
        l1_snapshots=list(captured), device_buffer_bytes=int(document["totalBytes"]),
        execution_mode=str(document.get("executionMode", "")), failed=True, pending_records=pending,
    )
    index = int(document["windowIndex"]) if window_index is None else window_index
    window = build_window("L1", invocation.rank, index, [invocation])
    window.attrs["salvaged"] = True
    return window, pending
