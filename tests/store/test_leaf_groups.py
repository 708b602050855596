"""Leaf data groups (L1 task groups of the tasks layout) are written whole by one pool task: their arrays, then
their consolidated ``zarr.json``; commit writes only the groups above them and the window document."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from megadump_zarr.layout.write_model import ArrayWrite, GroupWrite, InvocationWrite, WindowWrite
from megadump_zarr.store.backend import LocalBackend
from megadump_zarr.store.writer import WindowWriter


def _tasks(count: int, *, chunked: int | None = None) -> InvocationWrite:
    """An L1-like invocation: ``count`` task groups with two records and a row coordinate each."""
    groups = [GroupWrite("stages"), GroupWrite("stages/up", {"stage": "up"})]
    arrays = []
    for t in range(count):
        path = f"stages/up/task_{t:06d}"
        groups.append(GroupWrite(path, {"taskId": t, "owner": {"label": "expert", "id": t % 2}}, task=True))
        rows = np.arange(4 * t, 4 * t + 4, dtype=np.int64)
        shape = (4, 64 if chunked == t else 8)
        for io in ("input", "output"):
            data = np.full(shape, t + (0.5 if io == "output" else 0.0), dtype=np.float32)
            arrays.append(ArrayWrite(f"{path}/{io}_00_x", data, ("token", "hidden"), {"io": io}, {"token": rows}))
    return InvocationWrite("invocation_000000_forward", {"level": "L1"}, groups, arrays)


def _window(invocation: InvocationWrite) -> WindowWrite:
    return WindowWrite(0, 0, {"level": "L1"}, [invocation])


class _Recording(LocalBackend):
    """A local backend that records every key it stores, and can fail on one key."""

    def __init__(self, root: Path, fail: str | None = None) -> None:
        super().__init__(root)
        self.keys: list[str] = []
        self.fail = fail

    def put(self, key, data, *, atomic=False):  # noqa: ANN001 - the Backend signature
        if self.fail is not None and key.endswith(self.fail):
            raise OSError(28, "No space left on device (test)", key)
        self.keys.append(key)
        super().put(key, data, atomic=atomic)


def _writer(root: Path, fail: str | None = None, **options) -> tuple[WindowWriter, _Recording]:
    writer = WindowWriter(root, durable=False, **options)
    backend = _Recording(root, fail)
    writer.backend = backend
    return writer, backend


def _children(group: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_bytes()) for p in sorted(group.glob("*/zarr.json"))}


def test_task_group_document_follows_its_arrays_and_commit_skips_it(tmp_path):
    writer, backend = _writer(tmp_path / "d")
    with writer:
        session = writer.begin(0, 0, {"level": "L1"})
        session.write_invocation(_tasks(40))
        before_commit = list(backend.keys)
        session.commit()
    window = tmp_path / "d" / "rank_0" / "window_0000"
    base = "rank_0/window_0000/invocation_000000_forward/stages/up"
    for t in range(40):
        task = f"{base}/task_{t:06d}"
        own = [i for i, k in enumerate(before_commit) if k.startswith(task + "/")]
        assert before_commit[own[-1]] == f"{task}/zarr.json"  # written during write_invocation, after its arrays
        assert sorted(before_commit[i] for i in own[:-1]) == sorted(
            f"{task}/{a}/{f}"
            for a in ("input_00_x", "output_00_x", "token")
            for f in ("zarr.json", "c.0.0" if a != "token" else "c.0")
        )
    after = backend.keys[len(before_commit) :]
    assert sorted(after) == [  # the commit: group documents, the window inventory, the window document last
        "rank_0/window_0000/inventory.json",
        f"{base}/zarr.json",
        "rank_0/window_0000/invocation_000000_forward/stages/zarr.json",
        "rank_0/window_0000/invocation_000000_forward/zarr.json",
        "rank_0/window_0000/zarr.json",
    ]
    group = window / "invocation_000000_forward" / "stages" / "up" / "task_000007"
    doc = json.loads((group / "zarr.json").read_bytes())
    assert doc["attributes"] == {"taskId": 7, "owner": {"label": "expert", "id": 1}}
    assert doc["consolidated_metadata"]["metadata"] == _children(group)  # what commit wrote before
    window_doc = json.loads((window / "zarr.json").read_bytes())
    flat = window_doc["consolidated_metadata"]["metadata"]
    assert flat["invocation_000000_forward/stages/up/task_000007/token"] == _children(group)["token"]
    assert window_doc["attributes"]["status"] == "complete"


def test_chunked_record_keeps_its_group_for_the_commit(tmp_path):
    writer, backend = _writer(tmp_path / "d", chunk_bytes=512)  # task 3's records (4 x 64 fp32) take 2 chunks
    with writer:
        session = writer.begin(0, 0, {"level": "L1"})
        session.write_invocation(_tasks(5, chunked=3))
        before_commit = list(backend.keys)
        session.commit()
    base = "rank_0/window_0000/invocation_000000_forward/stages/up"
    assert f"{base}/task_000003/zarr.json" not in before_commit
    assert f"{base}/task_000002/zarr.json" in before_commit
    group = tmp_path / "d" / base / "task_000003"
    assert json.loads((group / "zarr.json").read_bytes())["consolidated_metadata"]["metadata"] == _children(group)
    assert (group / "input_00_x" / "c.1.0").is_file()


def test_failed_batch_leaves_consistent_groups_after_the_aborted_commit(tmp_path):
    target = "stages/up/task_000021/output_00_x/c.0.0"
    writer, _ = _writer(tmp_path / "d", fail=target)
    with writer, pytest.raises(OSError, match="No space left"):
        writer.write_window(_window(_tasks(40)))
    window = tmp_path / "d" / "rank_0" / "window_0000"
    window_doc = json.loads((window / "zarr.json").read_bytes())
    assert window_doc["attributes"]["status"] == "aborted"
    flat = window_doc["consolidated_metadata"]["metadata"]
    stage = window / "invocation_000000_forward" / "stages" / "up"
    assert not (stage / "task_000021" / "output_00_x" / "c.0.0").exists()
    assert "invocation_000000_forward/stages/up/task_000021/output_00_x" not in flat
    for t in range(40):
        group = stage / f"task_{t:06d}"
        listed = {
            k.rpartition("/")[2] for k in flat if k.startswith(f"invocation_000000_forward/stages/up/task_{t:06d}/")
        }
        if not (group / "zarr.json").is_file():
            assert listed == set(), t  # neither its arrays nor it were kept
            continue
        doc = json.loads((group / "zarr.json").read_bytes())
        if "consolidated_metadata" not in doc:  # a task of the failed batch: a plain group, none of its arrays kept
            assert listed == set() and doc["attributes"]["taskId"] == t, t
            continue
        metadata = doc["consolidated_metadata"]["metadata"]
        assert set(metadata) == listed, t  # the group's document lists exactly what the window kept
        children = _children(group)
        assert all(metadata[name] == children[name] for name in metadata), t
    kept = [
        t
        for t in range(40)
        if "consolidated_metadata" in json.loads((stage / f"task_{t:06d}" / "zarr.json").read_bytes())
    ]
    assert 21 not in kept and 0 in kept and 39 in kept  # the batches before and after the failing one were kept
