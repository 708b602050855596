"""verify checks each pack row against the ids stored in the pack's task, owner_id and core_id arrays."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from megadump_zarr import open_dump
from megadump_zarr.layout.write_model import ArrayWrite, GroupWrite, InvocationWrite, WindowWrite
from megadump_zarr.store.writer import WindowWriter
from megadump_zarr.verify import verify_dump

from tests._packs import edit_rows
from tests._tasks import task_attrs

WINDOW = "rank_0/window_0000"
PACK = "invocation_000000_forward/stages/s/pack_0000"


def _task(task_id: int, owner: int, core: int) -> tuple[GroupWrite, ArrayWrite]:
    path = f"stages/s/task_{task_id:06d}"
    attrs = task_attrs(task_id, owner=owner, core=core, tensors=1)
    data = np.full((2, 3), float(task_id), dtype=np.float32)  # no row coordinate: a per-owner weight slice
    record = {"name": "w", "io": "input", "index": 0, "paramPosition": 0, "capturePhase": "before"}
    return GroupWrite(path, attrs, task=True), ArrayWrite(f"{path}/input_00_w", data, ("row", "col"), record)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    tasks = [_task(1, 0, 4), _task(2, 1, 5)]
    invocation = InvocationWrite(
        "invocation_000000_forward",
        {"invocationId": 0, "level": "L1"},
        [GroupWrite("stages/s", {"stage": "s"})] + [g for g, _ in tasks],
        [a for _, a in tasks],
    )
    with WindowWriter(tmp_path, pack=True) as writer:
        writer.write_window(WindowWrite(0, 0, {"schemaVersion": 7, "level": "L1"}, [invocation]))
    assert (tmp_path / WINDOW / PACK / "task_id" / "zarr.json").is_file()  # the two tasks share one pack
    return tmp_path


def _swap_rows_everywhere(root: Path) -> None:
    """Swap the two rows' task attributes in every copy (the pack's documents and its row_fields chunk):
    consistent documents, rows naming the wrong task."""

    def swap(tasks: list, records: dict) -> None:
        tasks[0], tasks[1] = tasks[1], tasks[0]

    edit_rows(root / WINDOW, PACK, swap)


def test_clean_pack_verifies(root: Path) -> None:
    check = verify_dump(open_dump(root))
    assert check.ok, check.problems


def test_swapped_rows_are_named_by_verify(root: Path) -> None:
    _swap_rows_everywhere(root)
    records = open_dump(root).records()  # the documents agree with themselves: the readers cannot tell
    assert sorted(records["task_id"]) == [1, 2]
    problems = verify_dump(open_dump(root)).problems
    keys = {p.key for p in problems}
    assert f"{WINDOW}/{PACK}/task_id" in keys, problems
    assert any("row 0 holds task_id 1 but attributes.tasks[0] names 2" in p.what for p in problems), problems
    assert f"{WINDOW}/{PACK}/owner_id" in keys and f"{WINDOW}/{PACK}/core_id" in keys, problems
