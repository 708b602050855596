"""The seed's L1 task group attributes, as the tests that write task groups by hand spell them."""

from __future__ import annotations

from typing import Any


def task_attrs(
    task_id: int, stage: str = "s", *, owner: int | None = None, core: int | None = None, tensors: int = 2
) -> dict[str, Any]:
    """A task group's attributes (``taskId``, ``stageTaskIndex`` ... ``tileRows``) for ``task_id`` in ``stage``.

    Args:
        task_id: The task id (also its stage task index).
        stage: The stage name.
        owner: The owner id (default: the task id).
        core: The core id (default: the task id).
        tensors: ``tensorCount``.
    """
    return {
        "taskId": task_id,
        "stageTaskIndex": task_id,
        "stage": stage,
        "owner": {"label": "expert", "id": task_id if owner is None else owner},
        "coreType": "AIV",
        "coreId": task_id if core is None else core,
        "workerId": None,
        "tensorCount": tensors,
        "tileRows": None,
    }
