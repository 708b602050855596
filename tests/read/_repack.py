"""Turn a stored schema-6 L1 window into its schema-7 form by hand, with zarr-python (not the writer).

Each chosen task group's records become one row of a task-record pack (``store/packs.py``): tasks with
the same record signature share a pack, record arrays are sharded zarr-python arrays whose inner chunk
is the schema-6 record's chunk, and the window document lists the packs instead of the task groups.
The view over the result must give back the schema-6 window key for key.
"""

from __future__ import annotations

from collections.abc import Callable
import json
from pathlib import Path
import shutil
from typing import Any

import numpy as np
import zarr
from zarr.storage import LocalStore

from megadump_zarr.store.metadata import consolidated_sort_key, dumps
from megadump_zarr.store.packs import CORE_ARRAY, OWNER_ARRAY, PACK_ATTR, TASK_ARRAY_V1 as TASK_ARRAY, pack_name


def _signature(nodes: dict[str, Any], group: str) -> tuple[Any, ...] | None:
    """What tasks sharing a pack must agree on; ``None`` when a record spans several chunks."""
    parts = []
    for path in sorted(p for p in nodes if p.rpartition("/")[0] == group):
        doc = nodes[path]
        name = path.rpartition("/")[2]
        if doc["attributes"].get("name") is None:
            parts.append(("coord", name))
            continue
        if doc["chunk_grid"]["configuration"]["chunk_shape"] != doc["shape"]:
            return None
        parts.append(
            (
                name,
                doc["data_type"],
                tuple(doc["shape"]),
                tuple(doc.get("dimension_names") or ()),
                json.dumps(doc["codecs"]),
                json.dumps(doc["fill_value"]),
            )
        )
    return tuple(parts)


def repack(
    source: Path,
    target: Path,
    *,
    window: str = "rank_0/window_0000",
    shard_rows: int = 2,
    keep: Callable[[str], bool] = lambda group: False,
) -> list[str]:
    """Copy dump root ``source`` to ``target`` with the task groups of ``window`` packed.

    Args:
        source: A schema-6 dump root.
        target: Where the packed copy goes (must not exist).
        window: The window to pack.
        shard_rows: Tasks per shard.
        keep: Task groups (path relative to the window) to leave as schema-6 groups.

    Returns:
        The pack paths, relative to the window.
    """
    shutil.copytree(source, target)
    wdir = target / window
    doc = json.loads((wdir / "zarr.json").read_bytes())
    nodes: dict[str, Any] = doc["consolidated_metadata"]["metadata"]
    store = LocalStore(wdir)
    src = zarr.open_group(LocalStore(source / window, read_only=True), mode="r")
    by_stage: dict[tuple[str, tuple[Any, ...]], list[str]] = {}
    for path, node in nodes.items():
        parts = path.split("/")
        if len(parts) == 4 and parts[1] == "stages" and parts[3].startswith("task_") and not keep(path):
            signature = _signature(nodes, path)
            if signature is not None:
                by_stage.setdefault(("/".join(parts[:3]), signature), []).append(path)
    packs = []
    counters: dict[str, int] = {}
    for (stage, _), groups in sorted(by_stage.items(), key=lambda item: item[1][0]):
        index = counters[stage] = counters.get(stage, -1) + 1
        pack = f"{stage}/{pack_name(index)}"
        packs.append(pack)
        groups.sort()
        tasks = []
        members = [p for p in nodes if p.rpartition("/")[0] == groups[0]]
        for group in groups:
            coords = {}
            for path in sorted(p for p in nodes if p.rpartition("/")[0] == group):
                if nodes[path]["attributes"].get("name") is None:
                    values = np.asarray(src[path][...])
                    assert np.array_equal(values, np.arange(values[0], values[0] + len(values))), path
                    coords[path.rpartition("/")[2]] = [int(values[0]), int(values[0]) + len(values)]
            tasks.append({"group": group.rpartition("/")[2], "attrs": nodes[group]["attributes"], "coords": coords})
        ids = np.array([t["attrs"]["taskId"] for t in tasks], dtype=np.int64)
        owners = np.array([-1 if t["attrs"]["owner"]["id"] is None else t["attrs"]["owner"]["id"] for t in tasks])
        cores = np.array([t["attrs"]["coreId"] for t in tasks], dtype=np.int64)
        created: dict[str, Any] = {}
        for name, values, attrs in (
            (TASK_ARRAY, ids, {"tasks": tasks}),
            (OWNER_ARRAY, owners, {}),
            (CORE_ARRAY, cores, {}),
        ):
            array = zarr.create_array(
                store,
                name=f"{pack}/{name}",
                shape=values.shape,
                dtype="int64",
                chunks=values.shape,
                dimension_names=["task"],
                attributes=attrs,
                zarr_format=3,
                chunk_key_encoding={"name": "default", "separator": "."},
            )
            array[...] = values
            created[name] = array
        for member in members:
            component = member.rpartition("/")[2]
            first = nodes[member]
            if first["attributes"].get("name") is None:
                continue
            codecs = first["codecs"]
            shape = tuple(first["shape"])
            array = zarr.create_array(
                store,
                name=f"{pack}/{component}",
                shape=(len(groups), *shape),
                dtype=first["data_type"],
                chunks=(1, *shape),
                shards=(shard_rows, *shape),
                serializer=codecs[0],
                compressors=codecs[1:],
                filters=None,
                fill_value=first["fill_value"],
                dimension_names=["task", *first["dimension_names"]],
                attributes={"records": [nodes[f"{g}/{component}"]["attributes"] for g in groups]},
                zarr_format=3,
                chunk_key_encoding={"name": "default", "separator": "."},
                config={"write_empty_chunks": True},
            )
            array[...] = np.stack([np.asarray(src[f"{g}/{component}"][...]) for g in groups])
            created[component] = array
        for group in groups:
            shutil.rmtree(wdir / group)
            for path in [p for p in nodes if p == group or p.startswith(group + "/")]:
                del nodes[path]
        children = {name: json.loads((wdir / pack / name / "zarr.json").read_bytes()) for name in created}
        pack_attrs = {PACK_ATTR: 1, "stage": nodes[stage]["attributes"].get("stage"), "taskCount": len(groups)}
        pack_doc = {
            "attributes": pack_attrs,
            "zarr_format": 3,
            "consolidated_metadata": {
                "kind": "inline",
                "must_understand": False,
                "metadata": {k: children[k] for k in sorted(children, key=consolidated_sort_key)},
            },
            "node_type": "group",
        }
        (wdir / pack / "zarr.json").write_bytes(dumps(pack_doc))
        nodes[pack] = {
            "attributes": pack_attrs,
            "zarr_format": 3,
            "consolidated_metadata": {"kind": "inline", "must_understand": False, "metadata": {}},
            "node_type": "group",
        }
        for name, child in children.items():
            nodes[f"{pack}/{name}"] = child
    doc["consolidated_metadata"]["metadata"] = {k: nodes[k] for k in sorted(nodes, key=consolidated_sort_key)}
    (wdir / "zarr.json").write_bytes(dumps(doc))
    return packs


def tear(root: Path, window: str = "rank_0/window_0000") -> None:
    """Make a committed window look torn: status ``writing``, no consolidated metadata, no group documents
    (the writer writes those at commit)."""
    wdir = root / window
    doc = json.loads((wdir / "zarr.json").read_bytes())
    nodes = doc.pop("consolidated_metadata")["metadata"]
    doc["attributes"]["status"] = "writing"
    for key in ("committedAt",):
        doc["attributes"].pop(key, None)
    for path, node in nodes.items():
        if node["node_type"] == "group":
            (wdir / path / "zarr.json").unlink(missing_ok=True)
    (wdir / "zarr.json").write_bytes(dumps(doc))
