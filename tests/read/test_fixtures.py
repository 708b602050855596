"""The stored fixture of the current format, one dump per layout, read as zarr reads its stored bytes.

``tests/read/data/format10/`` holds one forward step of the default demo block in each layout: ``l0`` (the L0
layout), ``tasks`` (an L1 dump, a Zarr group per task) and ``packs`` (the same step in task-record packs), with
``SHA256SUMS``. It was written by ``tests/read/data/make_fixtures.py`` (its docstring says how to regenerate it:
only with a new format version). These tests hold the format still:

- every stored file hashes to its line of ``SHA256SUMS`` (none missing, none extra);
- each window says format 10 and its layout;
- every record reads exactly as zarr-python reads its stored bytes (its own array, or the row of the pack array
  the records table names), and the records table's integers and statistics are the stored ones, exactly;
- today's writer writes the same files for the same step, and the same records (floats within tolerance: they
  are recomputed now).
"""

from __future__ import annotations

import json
from pathlib import Path
import shutil

import numpy as np
import pandas as pd
import pytest
import zarr

from megadump_zarr import open_dump
from megadump_zarr.layout.schema import FORMAT_VERSION
from tests.read._fixture_checks import (
    assert_records_close,
    assert_records_read_as_stored,
    assert_stored_bytes_unchanged,
)

DATA = Path(__file__).parent / "data" / "format10"
LAYOUTS = ("l0", "tasks", "packs")
STORAGE = {"l0": "array_per_tensor_with_ports", "tasks": "array_per_task_record", "packs": "task_record_packs"}
WINDOW = "rank_0/window_0000"


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> Path:
    """A working copy of the fixture (reads never touch the stored files)."""
    return Path(shutil.copytree(DATA, tmp_path_factory.mktemp("format10") / "f"))


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> Path:
    """Today's writer, the same step, every layout."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_fixtures", DATA.parent / "make_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path_factory.mktemp("fresh") / "f"
    module.write(out)
    return out


def test_the_stored_bytes_match_their_checksums():
    assert assert_stored_bytes_unchanged(DATA, LAYOUTS) > 100


@pytest.mark.parametrize("layout", LAYOUTS)
def test_each_window_says_format_9_and_its_layout(stored, layout):
    attrs = json.loads((stored / layout / WINDOW / "zarr.json").read_text())["attributes"]
    assert (attrs["schemaVersion"], attrs["stageViewStorage"], attrs["status"]) == (
        FORMAT_VERSION,
        STORAGE[layout],
        "complete",
    )


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_record_reads_as_zarr_reads_its_stored_bytes(stored, layout):
    dump = assert_records_read_as_stored(stored / layout)
    records = dump.records()
    assert len(records) == {"l0": len(records), "tasks": 18, "packs": 18}[layout] > 0
    if layout == "packs":
        assert records["pack_array"].notna().sum() == 8  # combine's four uniform tiles, two records each
    else:
        assert records["pack_array"].isna().all()


def _same(value, stored) -> bool:
    """A records table value is the stored one: equal, or missing where nothing (``null``) is stored."""
    return bool(pd.isna(value)) if stored is None else value == stored


@pytest.mark.parametrize("layout", ("tasks", "packs"))
def test_the_records_table_holds_the_stored_ids_and_statistics_exactly(stored, layout):
    root = stored / layout
    records = open_dump(root).records()
    for row in records.itertuples():
        if pd.isna(row.pack_array):
            group = json.loads((root / row.group / "zarr.json").read_text())["attributes"]
            record = json.loads((root / row.path / "zarr.json").read_text())["attributes"]
            task_id, owner_id, core_id = group["taskId"], group["owner"]["id"], group["coreId"]
            stats = record["stats"]
            offset = record["sourceOffsetBytes"]
        else:  # the pack's arrays along task, as zarr reads them
            pack = zarr.open_group(str(root / row.pack_array.rpartition("/")[0]), mode="r")
            name = row.pack_array.rpartition("/")[2]
            task_id = int(pack["task_id"][row.pack_row])
            owner_id = int(pack["owner_id"][row.pack_row])
            core_id = int(pack["core_id"][row.pack_row])
            names = list(pack["statistic"][...])
            values = pack[f"{name}_stats"][row.pack_row]
            stats = {n: (None if np.isnan(v) else v) for n, v in zip(names, values.tolist())}
            offset = int(pack[f"{name}_offset"][row.pack_row])
        assert (row.task_id, row.core_id) == (task_id, core_id), row.path
        assert _same(row.owner_id, None if owner_id == -1 else owner_id), row.path
        assert (row.nan_count, row.inf_count) == (stats["nanCount"], stats["infCount"]), row.path
        for key in ("min", "max", "mean", "l2norm"):
            assert _same(getattr(row, key), stats[key]), (row.path, key)  # stored floats: exact
        assert offset >= 0, row.path


def test_the_tasks_and_packs_fixtures_hold_the_same_records(stored):
    tasks, packs = open_dump(stored / "tasks").records(), open_dump(stored / "packs").records()
    drop = ["path", "group"]
    assert_records_close(tasks.drop(columns=drop), packs.drop(columns=drop))
    for t, p in zip(tasks.itertuples(), packs.itertuples()):
        a = open_dump(stored / "tasks").record_array(t.path).values
        b = open_dump(stored / "packs").record_array(p.path).values
        np.testing.assert_array_equal(a, b, err_msg=t.path)  # exact: stored bytes


@pytest.mark.parametrize("layout", LAYOUTS)
def test_todays_writer_writes_the_same_files_and_records(stored, fresh, layout):
    listed = sorted(p.relative_to(stored / layout).as_posix() for p in (stored / layout).rglob("*") if p.is_file())
    written = sorted(p.relative_to(fresh / layout).as_posix() for p in (fresh / layout).rglob("*") if p.is_file())
    assert written == listed
    assert_records_close(open_dump(stored / layout).records(), open_dump(fresh / layout).records())
