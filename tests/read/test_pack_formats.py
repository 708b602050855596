"""The reader keeps reading pack formats 2, 3 and 4 (``layout="packs"`` dumps of window schemaVersion 8,
``megadumpPack: 2``, ``3`` and ``4``), each on a dump stored by its writer.

``tests/read/data/packs2`` (commit 9d7f66c), ``tests/read/data/packs3`` (commit 21ee36a) and
``tests/read/data/packs4`` (commit bc9d41c) each hold an L1 dump of one demo step in the packs layout (see their
READMEs): two four-row packs whose rows carry row coordinates (formats 3 and 4 also store them as ``global_{dim}``
arrays, format 2 does not; format 4 keeps each row's attributes in ``row_fields``, not JSON lists), and ragged
tasks kept as task groups.
Their files hash to the lists stored with them (``SHA256SUMS``); each fixture read through the public API
(records and the pack rows they name, record arrays, stitched tensors, compare with itself, verify, the CLI)
agrees with itself and with zarr-python and xarray reading the same stored bytes, exactly. The same step
dumped by today's writer, in either layout, gives the same records, tensors and a passing compare: integers
and metadata exactly, floats within float32 tolerance (the fixtures' were computed elsewhere).
"""

from __future__ import annotations

import json
from pathlib import Path
import runpy
import warnings

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

from megadump_zarr import compare, open_dump
from megadump_zarr.verify import verify_dump
from tests._packs import stored_rows
from tests.cli._helpers import cli_runner
from tests.read._fixture_checks import (
    copy_stored,
    assert_dataarray_close,
    assert_records_close,
    assert_records_read_as_stored,
    assert_stored_bytes_unchanged,
)

DATA = {f: Path(__file__).parent / "data" / f"packs{f}" for f in (2, 3, 4)}
FILES = {2: 78, 3: 84, 4: 88}  # stored files (format 3 adds a global_{dim} array per row coordinate, 4 row_fields)
LEVELS = ("l1",)
LAYOUTS = ("packs", "tasks")
WINDOW = Path("rank_0") / "window_0000"
STAGES = WINDOW / "invocation_000000_forward" / "stages"
RECORDS = 33
# The fixture's packs (one per stage, ``pack_0000``): the task id of each row, and the row coordinates of its rows.
PACK_TASKS = {"unpermute": [8, 9, 10, 11], "combine": [13, 14, 15, 16]}
PACK_COORDS = {"unpermute": {"slot", "token"}, "combine": {"token"}}
# Today's writer gives no row coordinate to an operand every task reads whole (unpermute's ys, by slot).
TODAY_PACK_COORDS = {"unpermute": {"token"}, "combine": {"token"}}
# The task groups left unpacked: ragged expert tiles, and each packed stage's clipped last tile.
TASK_GROUPS = {"expert_up": [0, 1, 2, 3], "unpermute": [12], "combine": [17]}


@pytest.fixture(scope="module", params=sorted(DATA), ids=[f"format{f}" for f in sorted(DATA)])
def pack_format(request) -> int:
    """The pack format of the stored fixture under test."""
    return request.param


@pytest.fixture(scope="module")
def stored(pack_format, tmp_path_factory) -> Path:
    """A copy of the stored dump of ``pack_format`` (the reader never writes, but the fixture stays pristine)."""
    return copy_stored(DATA[pack_format], tmp_path_factory.mktemp(f"packs{pack_format}"))


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> dict[str, Path]:
    """The same demo step dumped by today's writer in each layout (the fixtures' own generator, today's code)."""
    write = runpy.run_path(str(DATA[3] / "generate.py"))["write"]
    bases = {}
    for layout in LAYOUTS:
        bases[layout] = tmp_path_factory.mktemp(f"today-{layout}")
        write(bases[layout], layout)
    return bases


def _doc(path: Path) -> dict:
    return json.loads((path / "zarr.json").read_bytes())


@pytest.mark.parametrize("pack_format", sorted(DATA))
def test_the_stored_bytes_match_the_checksums_stored_with_the_fixture(pack_format):
    assert assert_stored_bytes_unchanged(DATA[pack_format], LEVELS) == FILES[pack_format]


def test_the_fixture_is_schema_8_with_its_format_of_packs(stored, pack_format):
    window = _doc(stored / "l1" / WINDOW)["attributes"]
    assert window["schemaVersion"] == 8 and window["status"] == "complete"
    assert window["stageViewStorage"] == "task_record_packs"
    stages = stored / "l1" / STAGES
    assert sorted(p.name for p in stages.iterdir() if p.is_dir()) == ["combine", "expert_up", "unpermute"]
    for stage in TASK_GROUPS:
        children = sorted(p.name for p in (stages / stage).iterdir() if p.is_dir())
        groups = [f"task_{t:06d}" for t in TASK_GROUPS[stage]]
        assert children == (["pack_0000"] if stage in PACK_TASKS else []) + groups
    for stage, tasks in PACK_TASKS.items():
        pack = stages / stage / "pack_0000"
        assert _doc(pack)["attributes"] == {"megadumpPack": pack_format, "stage": stage, "taskCount": len(tasks)}
        arrays = sorted(p.name for p in pack.iterdir() if p.is_dir())
        assert {"task_id", "owner_id", "core_id"} <= set(arrays) and "task" not in arrays
        globals_ = sorted(a for a in arrays if a.startswith("global_"))  # format 3's row-coordinate arrays
        assert globals_ == ([] if pack_format == 2 else sorted(f"global_{dim}" for dim in PACK_COORDS[stage]))
        ids = zarr.open_array(str(pack / "task_id"), mode="r")
        assert ids[...].tolist() == tasks  # exact: integers
        assert ("row_fields" in arrays) == (pack_format >= 4) and ("tasks" in ids.attrs) == (pack_format < 4)
        rows = stored_rows(stored / "l1" / WINDOW, pack.relative_to(stored / "l1" / WINDOW).as_posix())[0]
        assert [row["group"] for row in rows] == [f"task_{t:06d}" for t in tasks]
        assert all(set(row["coords"]) == PACK_COORDS[stage] for row in rows)  # rows with row coordinates
        assert [row["coords"]["token"] for row in rows] == [[0, 8], [8, 16], [16, 24], [24, 32]]
        fields = ["row_fields"] if pack_format >= 4 else []
        for name in set(arrays) - {"task_id", "owner_id", "core_id", *fields} - set(globals_):
            assert _doc(pack / name)["attributes"]["coordinates"] == " ".join(
                ["task_id", "owner_id", "core_id", *globals_, *fields]
            ), name
        for name in globals_:  # each row's global indices: arange(start, stop) of its coords entry
            dim = name.removeprefix("global_")
            values = zarr.open_array(str(pack / name), mode="r")[...]
            assert values.tolist() == [list(range(*row["coords"][dim])) for row in rows]  # exact: integers


def test_records_read_with_their_pack_arrays_and_rows(stored):
    records = open_dump(stored / "l1").records()
    assert len(records) == RECORDS and set(records["status"]) == {"complete"}
    assert sorted(set(records["task_id"])) == [0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]
    assert all(g.rpartition("/")[2] == f"task_{t:06d}" for g, t in zip(records["group"], records["task_id"]))
    assert set(records["name"]) == {"xs", "ws", "ys", "inverse_order", "out"}
    assert records["pack_row"].dtype == np.int64
    packed = records["pack_array"].notna()
    assert int(packed.sum()) == 20
    for row in records.itertuples():
        tasks = PACK_TASKS.get(row.stage, [])
        if row.task_id in tasks:  # exact: names and integers
            array = f"{(STAGES / row.stage / 'pack_0000').as_posix()}/{row.path.rpartition('/')[2]}"
            assert (row.pack_array, row.pack_row) == (array, tasks.index(row.task_id)), row.path
        else:
            assert pd.isna(row.pack_array) and row.pack_row == -1, row.path


def test_record_arrays_equal_zarr_reading_the_stored_pack_rows_and_carry_their_stored_stats(stored):
    assert_records_read_as_stored(stored / "l1")


def test_plain_xarray_opens_a_pack_with_its_ids_as_coordinates(stored, pack_format):
    root = stored / "l1"
    dump = open_dump(root)
    records = dump.records()
    for stage, tasks in PACK_TASKS.items():
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ds = xr.open_zarr(root / STAGES / stage / "pack_0000", consolidated=True, chunks=None)
        row_coordinates = set() if pack_format == 2 else {f"global_{dim}" for dim in PACK_COORDS[stage]}
        fields = {"row_fields"} if pack_format >= 4 else set()  # format 4: each row's attributes, (task, field)
        assert set(ds.coords) == {"task_id", "owner_id", "core_id"} | row_coordinates | fields
        assert all(ds[c].dims[0] == "task" for c in ds.coords)
        assert ds.attrs["megadumpPack"] == pack_format and ds.sizes["task"] == len(tasks)
        assert ds["task_id"].values.tolist() == tasks  # exact: integers
        rows = records[records["pack_array"].str.startswith(f"{(STAGES / stage).as_posix()}/pack_0000/", na=False)]
        assert len(rows) == len(tasks) * len(ds.data_vars)
        for name in row_coordinates:  # the rows' place in the stitched tensor: the task's own coordinate
            dim = name.removeprefix("global_")
            for row in rows.drop_duplicates("task_id").itertuples():
                own = dump.dataset(stage=stage, task=int(row.task_id))
                np.testing.assert_array_equal(
                    ds[name].isel(task=row.pack_row).values, own[dim].values
                )  # exact: integers
        for row in rows.itertuples():
            var = row.pack_array.rpartition("/")[2]
            assert int(ds["task_id"][row.pack_row]) == row.task_id
            assert int(ds["core_id"][row.pack_row]) == row.core_id
            np.testing.assert_array_equal(
                ds[var].isel(task=row.pack_row).values, dump.record_array(row.path).values
            )  # exact: stored bytes


@pytest.mark.parametrize("layout", LAYOUTS)
def test_stitched_tensors_equal_their_records_and_todays(stored, fresh, layout):
    old, new = open_dump(stored / "l1"), open_dump(fresh[layout] / "l1")
    records = old.records()
    keys = ["stage", "io", "name"]
    selections = records[keys].drop_duplicates().to_dict("records")
    assert len(selections) == 7
    for select in selections:
        name = select.pop("name")
        tensor = old.tensor(name, **select).load()
        rows = records[
            (records["name"] == name) & (records["stage"] == select["stage"]) & (records["io"] == select["io"])
        ]
        for path in rows["path"]:  # each record is its rows of the tensor
            record = old.record_array(path).load()
            dim = record.dims[0]
            np.testing.assert_array_equal(
                tensor.sel({dim: record[dim].values}).values, record.values, err_msg=path
            )  # exact: stored bytes
        assert_dataarray_close(tensor, new.tensor(name, **select).load(), f"{name} {select}")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_records_and_values_equal_todays_dump_of_the_same_step(stored, fresh, layout, pack_format):
    from megadump_zarr.layout.write_model import SCHEMA_VERSION
    from megadump_zarr.store.packs import PACK_VERSION

    today = fresh[layout] / "l1"
    window = _doc(today / WINDOW)["attributes"]
    assert window["schemaVersion"] == SCHEMA_VERSION >= 8
    if layout == "packs":  # today's packs are the fixture's format or newer, with its row-coordinate arrays
        assert PACK_VERSION >= max(pack_format, 3)
        for stage in PACK_TASKS:
            pack = today / STAGES / stage / "pack_0000"
            assert _doc(pack)["attributes"]["megadumpPack"] == PACK_VERSION
            names = {p.name for p in pack.iterdir()}
            assert {f"global_{dim}" for dim in TODAY_PACK_COORDS[stage]} <= names
            assert not {f"global_{dim}" for dim in PACK_COORDS[stage] - TODAY_PACK_COORDS[stage]} & names
    old, new = open_dump(stored / "l1"), open_dump(today)
    a, b = old.records(), new.records()
    assert len(a) == len(b) == RECORDS
    assert_records_close(a, b)
    if layout == "packs":  # the same tasks packed in the same rows
        pd.testing.assert_frame_equal(a[["pack_array", "pack_row"]], b[["pack_array", "pack_row"]])  # exact: integers
    else:
        assert b["pack_array"].isna().all() and (b["pack_row"] == -1).all()
    for path in a["path"]:
        stored_array, fresh_array = old.record_array(path).load(), new.record_array(path).load()
        assert_dataarray_close(_without_whole_rows(stored_array, fresh_array), fresh_array, path)


def _without_whole_rows(stored: xr.DataArray, fresh: xr.DataArray) -> xr.DataArray:
    """``stored`` without the row coordinate the fixture's writer gave a record holding every row of its
    tensor (an operand every task reads whole); today's writer gives such a record none."""
    extra = [name for name in set(stored.coords) - set(fresh.coords) if name in stored.dims]
    for name in extra:
        np.testing.assert_array_equal(stored[name].values, np.arange(stored.sizes[name]))  # exact: indices
    return stored.drop_vars(extra)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_compare_of_the_fixture_with_itself_and_with_todays_dump(stored, fresh, layout):
    itself = compare(stored / "l1", stored / "l1")
    assert len(itself) == RECORDS and set(itself["verdict"]) == {"pass"}
    assert (itself["max_abs"] == 0).all() and (itself["cosine"] == 1).all()  # exact: stored bytes
    today = compare(stored / "l1", fresh[layout] / "l1")
    assert len(today) == RECORDS and set(today["verdict"]) == {"pass"}
    assert (today["dtype_a"] == today["dtype_b"]).all() and set(today["dtype_a"]) == {"float32", "int64"}
    floats = today["dtype_a"] == "float32"
    assert (today.loc[floats, "max_abs"] <= 1e-5).all(), today.loc[today["max_abs"] > 1e-5, ["path", "max_abs"]]
    assert (today.loc[~floats, "max_abs"] == 0).all() and (today["mismatches"] == 0).all()  # exact: integers


def test_verify_and_the_cli_pass_on_the_fixture(stored, fresh, capsys, monkeypatch):
    dump = open_dump(stored / "l1")
    assert verify_dump(dump).ok and verify_dump(dump, deep=True).ok
    run = cli_runner(capsys, monkeypatch)
    verified = run("verify", "--deep", stored / "l1")
    assert verified.code == 0, verified.out + verified.err
    assert verified.out.splitlines()[-1].startswith("ok: 1 window(s) checked, 0 not committed")
    listed = run("ls", stored / "l1")
    assert listed.code == 0, listed.out + listed.err
    assert listed.err.startswith(f"{RECORDS} records"), listed.err
    assert all(path in listed.out for path in dump.records()["path"]), listed.out  # packed records by their paths
    for layout in LAYOUTS:
        compared = run("compare", stored / "l1", fresh[layout] / "l1")
        assert compared.code == 0, compared.out + compared.err
        assert f"PASS: all {RECORDS} records pass" in compared.out
