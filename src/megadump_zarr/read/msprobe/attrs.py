"""The attributes :func:`~megadump_zarr.interop.msprobe.convert_msprobe` writes for an msprobe window, its
invocations (one per API call) and records (one per tensor leaf); in-place reading serves the same ones."""

from __future__ import annotations

import json
from typing import Any

from megadump_zarr.layout.write_model import SCHEMA_VERSION
from megadump_zarr.read.msprobe.dump_json import Call, Tensor, Window

__all__ = ["invocation_attrs", "invocation_name", "record_attrs", "window_attrs"]


def invocation_name(i: int, call: Call) -> str:
    """``invocation_{iiiiii}_{direction}``, the group of the window's ``i``-th call.

    Args:
        i: The call's position in the window.
        call: The call.
    """
    return f"invocation_{i:06d}_{call.direction}"


def invocation_attrs(window: Window, i: int, call: Call) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "invocationId": i,
        "step": window.step,
        "direction": call.direction,
        "kernelName": call.api,
        "device": "unknown",
        "level": "L0",
        "rank": window.rank,
        "launchFailed": False,
        "pendingRecords": [],
        "tensorCount": len(call.tensors),
        "msprobeCall": call.key,
        "api": call.api,
        "callIndex": call.call_index,
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


def record_attrs(window: Window, call: Call, position: int, item: Tensor) -> dict[str, Any]:
    return {
        "name": item.name,
        "paramPosition": position,
        "role": "external_input" if item.io == "input" else "final_output",
        "capturePhase": "before" if item.io == "input" else "after",
        "producers": [],
        "consumers": [],
        "ports": [],
        "declaredShape": list(item.shape),
        "actualShape": list(item.shape),
        "originalDtype": item.dtype,
        "storedDtype": item.dtype,
        "api": call.api,
        "callIndex": call.call_index,
        "direction": call.direction,
        "io": item.io,
        "argIndex": item.arg,
        "msprobeStats": _jsonable(item.stats),
        **({"msprobeFile": item.file.name} if item.file is not None else {}),
        **item.attrs,
    }


def window_attrs(window: Window) -> dict[str, Any]:
    from megadump_zarr._version import __version__

    names = [f"invocation_{i:06d}_{c.direction}" for i, c in enumerate(window.calls)]
    return {
        "schemaVersion": SCHEMA_VERSION,
        "producer": f"megadump_zarr {__version__}",
        "level": "L0",
        "tensorSerialization": "zarr-v3",
        "windowIndex": window.index,
        "capturePhaseSemantics": "api_boundary",
        "stageViewStorage": "array_per_tensor",
        "rank": window.rank,
        "step": window.step,
        "invocationCount": len(names),
        "invocations": names,
        "convertedFrom": {"format": "msprobe", "path": str(window.source.parent), **window.doc},
    }
