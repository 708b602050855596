"""A committed packed window's records table comes from its packs' arrays along ``task`` (``read.pack_records``):
one block of rows per record array, the same table, value for value, as the task groups its rows stand for."""

from __future__ import annotations

import importlib.util
from pathlib import Path
import shutil
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
import numpy as np
import pandas as pd
import pytest

from megadump_zarr import open_dump
from megadump_zarr.read.catalog import WindowInfo
from megadump_zarr.read.records_table import records_frame
from megadump_zarr.read.errors import DumpIntegrityError
from tests._packs import stored_columns, write_column
from tests.store.test_packs_writer import _write, mixed_invocation

FIXTURE = Path(__file__).parent / "data" / "format10" / "packs"
WINDOW = "rank_0/window_0000"
PACK = "invocation_000000_forward/stages/combine/pack_0000"  # tasks 13-16, rows along token


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pack-records") / "packed"
    _write(root, True, mixed_invocation(seed=3))
    return root


def _expanded_records(root: Path) -> pd.DataFrame:
    """The records table read record by record from the task groups, records and row coordinates the packs stand
    for, each described from its pack's row (``task_nodes``)."""
    dump = open_dump(root)
    frames = []
    for info in dump._scan():  # noqa: SLF001 - the catalogue's windows, as records() reads them
        nodes = info.task_nodes() if hasattr(info, "task_nodes") else dump._nodes(info)  # noqa: SLF001
        plain = WindowInfo(info.rank, info.window, info.key, info.status, info.attrs, nodes, pack_rows=info.pack_rows)
        frames.append(records_frame([(plain, nodes)]))
    return pd.concat(frames, ignore_index=True)


def _no_per_task_tree() -> None:
    """Nothing can describe a packed window as task groups, records and row coordinates: the per-task tree
    (``read/pack_nodes.py``, ``pack_rows.expand_window``, ``store.packs.expand_pack``) is gone."""
    import megadump_zarr.read.pack_rows as pack_rows
    import megadump_zarr.store.packs as packs

    assert importlib.util.find_spec("megadump_zarr.read.pack_nodes") is None
    assert not [name for name in ("expand_window", "expand_torn", "replace_packs") if hasattr(pack_rows, name)]
    assert not [name for name in ("expand_pack", "RangeSource", "range_chunk") if hasattr(packs, name)]
    assert not [
        name for name in ("virtual", "sources", "array", "shard_chunks") if hasattr(pack_rows.PackedWindow, name)
    ]


def test_the_per_task_tree_of_a_packed_window_is_gone():
    _no_per_task_tree()


@pytest.mark.parametrize("which", ["written", "fixture"])
def test_records_from_the_packs_arrays_equal_the_task_groups_they_stand_for(packed, which):
    root = packed if which == "written" else FIXTURE
    records = open_dump(root).records()
    assert records["pack_array"].notna().sum() >= 8
    pd.testing.assert_frame_equal(records, _expanded_records(root))  # exact: one dump, two routes


def test_records_of_a_packed_window_build_no_task_group(packed):
    """``records()`` reads the packs' arrays, never a document per task group or record."""

    _no_per_task_tree()
    records = open_dump(packed).records()
    assert len(records) == 16 and records["pack_array"].notna().sum() == 15
    assert (records.loc[records["pack_array"].notna(), "pack_row"] >= 0).all()


_EDITED = ("task_id", "core_id", "worker_id", "token_start", "token_stop", "input_01_ws_offset", "stage_task_index")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(column=st.sampled_from(_EDITED), values=st.lists(st.integers(-3, 40), min_size=4, max_size=4))
def test_edited_pack_columns_are_refused_or_read_as_stored(tmp_path, column, values):
    """Any consistent edit of a pack's array along ``task`` (valid chunk and crc32c, its digests in the window inventory): the records
    table either refuses the pack, naming one of its arrays, or holds what the arrays hold, the same table as the
    task groups the rows stand for."""
    root = Path(tempfile.mkdtemp(dir=tmp_path))
    shutil.copytree(FIXTURE, root, dirs_exist_ok=True)
    if column == "token_start":  # both bounds moved together: only the rows' places change
        write_column(root / WINDOW, PACK, "token_stop", [v + 8 for v in values])
    write_column(root / WINDOW, PACK, column, values)
    try:
        records = open_dump(root).records()
    except DumpIntegrityError as error:
        if str(error).endswith("is both stored and in a task-record pack"):  # an id edited to a stored task's
            assert (error.key or "").startswith(f"{WINDOW}/{PACK.rpartition('/')[0]}/task_"), error
            return
        assert (error.key or "").startswith(f"{WINDOW}/{PACK}/"), error
        assert str(error).startswith("malformed task-record pack: "), error
        return
    rows = records[records["zarr_group"] == f"{WINDOW}/{PACK}"].sort_values(["pack_row", "name"])
    stored = stored_columns(root / WINDOW, PACK)
    assert rows.drop_duplicates("pack_row")["task_id"].tolist() == stored["task_id"].tolist()
    pd.testing.assert_frame_equal(records, _expanded_records(root))  # exact: one dump, two routes


def _same(got, want) -> None:
    """Two DataArrays alike: dims, attributes, coordinates and values, byte for byte (bfloat16 and NaN included)."""
    assert got.dims == want.dims and got.attrs == want.attrs and got.name == want.name
    assert sorted(got.coords) == sorted(want.coords)
    for name in want.coords:
        np.testing.assert_array_equal(got.coords[name].values, want.coords[name].values)  # exact: stored bytes
    assert got.dtype == want.dtype
    assert np.asarray(got.values).tobytes() == np.asarray(want.values).tobytes()  # exact: stored bytes


def test_a_packed_record_opens_from_its_row_without_the_window_described_as_task_groups(packed):
    """``record_array`` and ``tensor`` of packed records read ``(pack array, row)`` with what their pack's arrays
    along ``task`` give for that row: the same values, attributes, dimensions and row coordinates as the task
    groups the rows stand for, and no task group is described for it."""
    import zarr

    expected = open_dump(packed)
    paths = list(expected.records().query("pack_array.notna()", engine="python")["path"])
    want = {path: expected.record_array(path) for path in paths}
    want_x = expected.tensor("x", stage="up", io="input")

    _no_per_task_tree()
    dump = open_dump(packed)
    records = dump.records().set_index("path")
    for path in paths:
        got = dump.record_array(path)
        _same(got, want[path])
        row = records.loc[path]
        stored = zarr.open_array(str(packed / row["pack_array"]), mode="r")[int(row["pack_row"])]
        assert np.asarray(got.values).tobytes() == np.asarray(stored).tobytes()  # exact: stored bytes
    _same(dump.tensor("x", stage="up", io="input"), want_x)
