"""The attributes :func:`~megadump_zarr.interop.msprobe.convert_msprobe` writes for an msprobe window, its
invocations (one per API call) and records (one per tensor leaf); in-place reading serves the same ones."""

from __future__ import annotations

import json
from typing import Any

from megadump_zarr.layout.manifest import WindowManifest
from megadump_zarr.layout import paths
from megadump_zarr.layout.schema import MSPROBE_STORAGE
from megadump_zarr.read.msprobe.dump_json import Call, Tensor, Window

__all__ = ["invocation_attrs", "invocation_name", "record_attrs", "window_attrs"]


def invocation_name(i: int, call: Call) -> str:
    """``invocation_{iiiiii}_{direction}``, the group of the window's ``i``-th call.

    Args:
        i: The call's position in the window.
        call: The call.
    """
    return paths.invocation_name(i, call.direction)


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
    return WindowManifest(
        level="L0",
        rank=window.rank,
        window_index=window.index,
        capture_phase="api_boundary",
        storage=MSPROBE_STORAGE,
        invocations=tuple(invocation_name(i, call) for i, call in enumerate(window.calls)),
        step=window.step,
        converted_from={"format": "msprobe", "path": str(window.source.parent), **window.doc},
    ).to_attrs()
