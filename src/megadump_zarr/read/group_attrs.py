"""The checked attributes of a window's invocation, stage and task groups: the columns they give its records.

Each function reads a group's document from a window's nodes (flat relative path -> ``zarr.json`` document) and
names the document and field of a value that does not parse.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from megadump_zarr.layout.paths import INVOCATION_DIR, TASK_DIR
from megadump_zarr.read.documents import check_attributes, int_field, optional_str
from megadump_zarr.read.errors import DumpIntegrityError

__all__ = ["group_attrs", "invocation_info", "task_info"]


def group_attrs(nodes: Mapping[str, dict[str, Any]], path: str, window_key: str = "") -> dict[str, Any]:
    """A group's checked attributes (``{}`` when it has no document).

    Args:
        nodes: The window's nodes.
        path: The group's path relative to the window.
        window_key: The window's key (``rank_0/window_0000``), for messages.
    """
    where = f"{window_key}/{path}/zarr.json" if window_key else f"{path}/zarr.json"
    return check_attributes(nodes.get(path) or {}, where)


def invocation_info(name: str, nodes: Mapping[str, dict[str, Any]], window_key: str = "") -> dict[str, Any]:
    """The checked invocation columns of an invocation group (``invocation``, ``step``, ``direction``, ``kernel``,
    ``level``); its id and direction fall back to its name's.

    Args:
        name: The invocation group's name (``invocation_000000_forward``).
        nodes: The window's nodes.
        window_key: The window's key, for messages.
    """
    attrs = group_attrs(nodes, name, window_key)
    where = f"{window_key}/{name}/zarr.json" if window_key else f"{name}/zarr.json"
    match = INVOCATION_DIR.match(name)
    fallback = int(match.group(1)) if match else None
    invocation_id = int_field(attrs.get("invocationId", fallback), where, "attributes.invocationId")
    if invocation_id is None and fallback is not None:
        invocation_id = fallback
    direction = optional_str(attrs.get("direction", match.group(2) if match else None), where, "attributes.direction")
    return {
        "invocation": invocation_id,
        "step": int_field(attrs.get("step"), where, "attributes.step"),
        "direction": direction,
        "kernel": optional_str(attrs.get("kernelName"), where, "attributes.kernelName"),
        "level": optional_str(attrs.get("level"), where, "attributes.level"),
    }


def task_info(nodes: Mapping[str, dict[str, Any]], group: str, window_key: str) -> dict[str, Any]:
    """The checked task columns of an L1 task group ``invocation/stages/stage/task``.

    Args:
        nodes: The window's nodes.
        group: The task group's path relative to the window.
        window_key: The window's key, for messages.
    """
    parts = group.split("/")
    task_attrs = group_attrs(nodes, group, window_key)
    stage_attrs = group_attrs(nodes, "/".join(parts[:3]), window_key)
    where = f"{window_key}/{group}/zarr.json"
    match = TASK_DIR.match(parts[3])
    owner = task_attrs.get("owner")
    if owner is not None and not isinstance(owner, dict):
        raise ValueError(f"{where}: attributes.owner {str(owner)[:60]!r} is not a JSON object")
    owner = owner or {}
    stage = task_attrs.get("stage", stage_attrs.get("stage", parts[2]))
    stored_id = task_attrs.get("taskId")
    if match is not None and stored_id is not None and stored_id != int(match.group(1)):
        raise DumpIntegrityError(  # the name is the task's place; an id edited in every copy must not move it
            f"{where}: attributes.taskId {str(stored_id)[:40]} disagrees with its group's name {parts[3]!r}",
            key=where,
        )
    return {
        "stage": optional_str(stage, where, "attributes.stage"),
        "task_id": int_field(
            task_attrs.get("taskId", int(match.group(1)) if match else None), where, "attributes.taskId"
        ),
        "stage_task_index": int_field(task_attrs.get("stageTaskIndex"), where, "attributes.stageTaskIndex"),
        "owner_label": optional_str(owner.get("label"), where, "attributes.owner.label"),
        "owner_id": int_field(owner.get("id"), where, "attributes.owner.id"),
        "core_type": optional_str(task_attrs.get("coreType"), where, "attributes.coreType"),
        "core_id": int_field(task_attrs.get("coreId"), where, "attributes.coreId"),
        "worker": int_field(
            task_attrs.get("workerId", int(match.group(2)) if match and match.group(2) is not None else None),
            where,
            "attributes.workerId",
        ),
    }
