"""Bindings of stored values to their place that documents alone say, shared by the readers and ``verify``: a group's
``taskCount`` (a task-record pack) against the rows of every array along its ``task`` dimension."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["task_count_mismatches"]


def task_count_mismatches(nodes: Mapping[str, Any]) -> Iterator[tuple[str, Any, str, int]]:
    """``(group path, its taskCount, array name, rows along task)`` for each group whose ``taskCount`` disagrees with
    an array of its own along ``task`` (the first one found per group).

    Args:
        nodes: A window's stored nodes (path below the window -> document).
    """
    children: dict[str, list[tuple[str, Any]]] = {}
    counted = []
    for path, doc in nodes.items():
        if not isinstance(doc, dict):
            continue
        attrs = doc.get("attributes")
        if doc.get("node_type") == "group" and isinstance(attrs, dict) and "taskCount" in attrs:
            counted.append((path, attrs["taskCount"]))
        elif doc.get("node_type") == "array":
            children.setdefault(path.rpartition("/")[0], []).append((path.rpartition("/")[2], doc))
    for path, count in counted:
        for name, doc in children.get(path, []):
            dims, shape = doc.get("dimension_names"), doc.get("shape")
            if isinstance(dims, list) and dims and dims[0] == "task" and isinstance(shape, list) and shape:
                if count != shape[0] or isinstance(count, bool):
                    yield path, count, name, shape[0]
                    break
