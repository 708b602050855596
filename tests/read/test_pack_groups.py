"""A packed window's task groups as the views that list groups show them (``Dump.tree``, ``Dump.dataset``, the
xarray engine's group attributes, ``export_hdf5``), committed or torn: described from its packs' checked arrays
along ``task`` (``read.pack_record``), never from the window described as per-task nodes, and the same groups,
variables and values as the tasks layout of the same step (``tests/read/data/format10/{tasks,packs}``)."""

from __future__ import annotations

from pathlib import Path
import shutil
import sys
from typing import Any

import pandas as pd
import pytest
import xarray as xr

from megadump_zarr import open_dump
from tests._layout import tear

DATA = Path(__file__).parent / "data" / "format10"
WINDOW = "rank_0/window_0000"
STAGE = "invocation_000000_forward/stages/combine"
PACKED = (13, 14, 15, 16)  # combine's tasks in pack_0000; task 17 keeps its task group
_PER_TASK = ("expand_pack", "expand_packs", "replace_packs", "expand_window", "expand_torn")


@pytest.fixture
def no_per_task_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every function that describes a packed window as per-task nodes, wherever it is still defined, raises."""
    import megadump_zarr.interop.hdf5  # noqa: F401 - every reader loaded before the patch
    import megadump_zarr.read.dump  # noqa: F401

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a packed window was described as per-task nodes")

    for name, module in list(sys.modules.items()):
        if name.startswith("megadump_zarr.") and module is not None:
            for attr in _PER_TASK:
                if callable(getattr(module, attr, None)):
                    monkeypatch.setattr(module, attr, refuse)


@pytest.fixture
def layouts(tmp_path: Path) -> tuple[Path, Path]:
    """(tasks layout root, packs layout root): copies of the fixture of one step."""
    return (
        Path(shutil.copytree(DATA / "tasks", tmp_path / "plain")),
        Path(shutil.copytree(DATA / "packs", tmp_path / "packed")),
    )


def _unbound(dataset: xr.Dataset) -> xr.Dataset:
    """``dataset`` loaded (its values read, so both layouts compare by value)."""
    return dataset.load()


def test_a_committed_packed_windows_groups_come_from_its_packs(layouts, no_per_task_nodes):
    plain, packed = layouts
    a, b = open_dump(plain), open_dump(packed)
    tree_a, tree_b = a.tree(), b.tree()
    assert set(tree_b[f"{WINDOW}/{STAGE}"].children) == {f"task_{t:06d}" for t in (*PACKED, 17)}
    assert sorted(node.path for node in tree_b.subtree) == sorted(node.path for node in tree_a.subtree)
    for node in tree_a.subtree:
        want = _unbound(node.to_dataset(inherit=False))
        got = _unbound(tree_b[node.path].to_dataset(inherit=False))
        if node.path.startswith(f"/{WINDOW}/"):  # the window's own attributes name its layout
            xr.testing.assert_identical(got, want)  # exact: stored bytes
        else:
            xr.testing.assert_equal(got, want)  # exact: stored bytes
    info = next(w for w in b.catalogue() if w.key == WINDOW)
    plain_info = next(w for w in a.catalogue() if w.key == WINDOW)
    for task in PACKED:
        group = f"{STAGE}/task_{task:06d}"
        xr.testing.assert_identical(
            _unbound(b.dataset(stage="combine", task=task)), _unbound(a.dataset(stage="combine", task=task))
        )  # exact: stored bytes
        assert b.group_attributes(info, group) == a.group_attributes(plain_info, group)
    assert b.group_attributes(info, STAGE) == a.group_attributes(plain_info, STAGE)


def test_a_torn_packed_window_lists_and_opens_its_packed_task_groups(layouts, no_per_task_nodes):
    """Torn (no consolidated metadata): its packs are read from their listed documents; the same records, task
    groups and values as the torn tasks layout, the pack keeping the task attributes that layout has no document
    for."""
    plain, packed = layouts
    tear(plain)
    tear(packed)
    a, b = open_dump(plain), open_dump(packed)
    ra, rb = a.records(include_incomplete=True), b.records(include_incomplete=True)
    columns = ["path", "name", "stage", "task_id", "shape", "dtype", "io", "index", "min", "max", "status", "group"]
    pd.testing.assert_frame_equal(ra[columns], rb[columns])  # exact: stored bytes
    packed_rows = rb[rb["pack_array"].notna()]
    assert sorted(set(packed_rows["task_id"])) == list(PACKED)
    assert (packed_rows["pack_array"].str.contains("/pack_0000/") & (packed_rows["pack_row"] >= 0)).all()
    tree_a, tree_b = a.tree(include_incomplete=True), b.tree(include_incomplete=True)
    assert sorted(node.path for node in tree_b.subtree) == sorted(node.path for node in tree_a.subtree)
    for node in tree_a.subtree:
        got = tree_b[node.path].to_dataset(inherit=False)
        xr.testing.assert_equal(_unbound(got), _unbound(node.to_dataset(inherit=False)))  # exact: stored bytes
    for task in PACKED:
        ds = b.dataset(window=0, stage="combine", task=task)
        assert ds.attrs["taskId"] == task and ds.attrs["owner"]["label"] == "expert"
        xr.testing.assert_equal(
            _unbound(ds), _unbound(a.dataset(window=0, stage="combine", task=task))
        )  # exact: stored bytes


def test_a_torn_windows_pack_cut_short_is_left_out(layouts, no_per_task_nodes):
    """A pack whose task id array the kill left unwritten holds no task group yet: its rows are not listed, the
    rest of the window reads."""
    _, packed = layouts
    tear(packed)
    shutil.rmtree(packed / WINDOW / STAGE / "pack_0000" / "task_id")
    dump = open_dump(packed)
    records = dump.records(include_incomplete=True)
    assert records["pack_array"].isna().all() and len(records) > 0
    assert not set(records["task_id"].dropna()) & set(PACKED)
    tree = dump.tree(include_incomplete=True)
    assert set(tree[f"{WINDOW}/{STAGE}"].children) == {"task_000017"}


def _h5_contents(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    import h5py

    from megadump_zarr.interop.hdf5 import decode_hdf5_attrs

    groups: dict[str, Any] = {}
    arrays: dict[str, Any] = {}
    with h5py.File(path, "r") as f:

        def visit(name: str, obj: Any) -> None:
            attrs = decode_hdf5_attrs(obj.attrs)
            if isinstance(obj, h5py.Group):
                groups[name] = attrs
            else:
                arrays[name] = (obj.dtype, obj.shape, obj[...].tobytes(), attrs)

        f.visititems(visit)
    return groups, arrays


@pytest.mark.parametrize("torn", [False, True], ids=["committed", "torn"])
def test_a_packed_window_exports_its_task_groups_from_its_packs(layouts, tmp_path, no_per_task_nodes, torn):
    pytest.importorskip("h5py")
    from megadump_zarr.interop.hdf5 import export_hdf5

    plain, packed = layouts
    if torn:
        tear(plain)
        tear(packed)
    files = [
        export_hdf5(root / WINDOW, tmp_path / f"{root.name}.h5", allow_incomplete=torn) for root in (plain, packed)
    ]
    (plain_groups, plain_arrays), (packed_groups, packed_arrays) = map(_h5_contents, files)
    assert not any("pack_" in name for name in packed_groups)
    assert {f"{STAGE}/task_{t:06d}" for t in PACKED} <= set(packed_groups)
    assert packed_groups.keys() == plain_groups.keys()
    if not torn:  # a torn tasks-layout window has no group documents; the pack keeps its tasks' attributes
        assert packed_groups == plain_groups
    else:
        assert packed_groups[f"{STAGE}/task_000013"]["taskId"] == 13
    assert packed_arrays.keys() == plain_arrays.keys()
    for name, (dtype, shape, data, attrs) in plain_arrays.items():
        assert packed_arrays[name][:2] == (dtype, shape), name
        assert packed_arrays[name][2] == data, name  # exact: stored bytes
        assert packed_arrays[name][3] == attrs, name
    assert len(plain_arrays) >= 4 * len(PACKED)
