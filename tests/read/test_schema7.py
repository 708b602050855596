"""The reader keeps reading schema-7 dumps (L1 task records stored in ``pack_NNNN`` groups).

``tests/read/data/schema7`` holds an L0 and an L1 dump of one demo step stored by the schema-7 writer
(commit 4722b6d, see its README). Its files hash to the list stored with it (``SHA256SUMS``); the
fixture read through the public API (records, record arrays, stitched tensors, compare with itself,
verify) agrees with itself and with zarr-python reading the same stored bytes, exactly. The same step
dumped by today's writer, whatever its layout, gives the same records, tensors and a passing compare:
integers and metadata exactly, floats within float32 tolerance (the fixture's were computed elsewhere).
"""

from __future__ import annotations

import json
from pathlib import Path
import runpy
import warnings

import numpy as np
import pytest
import zarr

from megadump_zarr import compare, open_dump
from megadump_zarr.verify import verify_dump
from tests.cli._helpers import cli_runner
from tests.read._fixture_checks import (
    copy_stored,
    assert_dataarray_close,
    assert_records_close,
    assert_records_read_as_stored,
    assert_stored_bytes_unchanged,
)

DATA = Path(__file__).parent / "data" / "schema7"
LEVELS = ("l0", "l1")
WINDOW = Path("rank_0") / "window_0000"
STAGES = WINDOW / "invocation_000000_forward" / "stages"
RECORDS = {"l0": 18, "l1": 18}
# The L1 fixture's packs: the task ids each pack's rows hold (expert_up tasks 0-3, combine 13-17).
PACK_TASKS = {"combine": [[13, 14, 15, 16], [17]], "expert_up": [[0], [1], [2], [3]]}


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> Path:
    """A copy of the stored schema-7 dumps (the reader never writes, but the fixture stays pristine)."""
    return copy_stored(DATA, tmp_path_factory.mktemp("schema7"))


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> Path:
    """The same demo step dumped by today's writer (the fixture's own generator, run with today's code)."""
    base = tmp_path_factory.mktemp("today")
    runpy.run_path(str(DATA / "generate.py"))["write"](base)
    return base


def _doc(path: Path) -> dict:
    return json.loads((path / "zarr.json").read_bytes())


def test_the_stored_bytes_match_the_checksums_stored_with_the_fixture():
    assert assert_stored_bytes_unchanged(DATA, LEVELS) == 115


@pytest.mark.parametrize("level", LEVELS)
def test_the_fixture_is_schema_7_with_task_record_packs(stored, level):
    window = _doc(stored / level / WINDOW)["attributes"]
    assert window["schemaVersion"] == 7 and window["status"] == "complete"
    assert window["stageViewStorage"] == {"l0": "array_per_tensor_with_ports", "l1": "task_record_packs"}[level]
    if level == "l1":
        for stage, tasks in PACK_TASKS.items():
            packs = sorted(p.name for p in (stored / level / STAGES / stage).iterdir() if p.name.startswith("pack_"))
            assert packs == [f"pack_{i:04d}" for i in range(len(tasks))]
            for pack, want in zip(packs, tasks):
                assert _doc(stored / level / STAGES / stage / pack)["attributes"]["megadumpPack"] == 1
                ids = zarr.open_array(str(stored / level / STAGES / stage / pack / "task"), mode="r")[...]
                assert sorted(set(ids.tolist())) == want  # exact: integers


@pytest.mark.parametrize("level", LEVELS)
def test_records_read_with_the_old_layouts_groups(stored, level):
    records = open_dump(stored / level).records()
    assert len(records) == RECORDS[level] and set(records["status"]) == {"complete"}
    if level == "l1":
        assert sorted(set(records["task_id"])) == [0, 1, 2, 3, 13, 14, 15, 16, 17]
        assert all(g.rpartition("/")[2] == f"task_{t:06d}" for g, t in zip(records["group"], records["task_id"]))
        assert set(records["name"]) == {"xs", "ws", "out"}
    else:
        assert sorted(set(records["invocation"])) == [0, 1, 2]


@pytest.mark.parametrize("level", LEVELS)
def test_record_arrays_equal_zarr_reading_the_stored_bytes_and_carry_their_stored_stats(stored, level):
    dump = assert_records_read_as_stored(stored / level)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        if level == "l1":
            group = str(STAGES / "combine" / "task_000015")
            ds = dump.dataset(stage="combine", task=15)
            # a packed task group's dataset: its records, attributes and row coordinate
            assert set(ds.data_vars) == {"input_01_ws", "output_00_out"} and ds.attrs["taskId"] == 15
            assert ds["token"].values.tolist() == list(range(16, 24))
            for var in ds.data_vars:
                np.testing.assert_array_equal(
                    ds[var].values, dump.record_array(f"{group}/{var}").values
                )  # exact: stored bytes


@pytest.mark.parametrize("level", LEVELS)
def test_stitched_tensors_equal_their_records_and_todays(stored, fresh, level):
    old, new = open_dump(stored / level), open_dump(fresh / level)
    records = old.records()
    keys = ["invocation", "name"] if level == "l0" else ["stage", "io", "name"]
    selections = records[keys].drop_duplicates().to_dict("records")
    assert len(selections) == {"l0": 18, "l1": 4}[level]
    for select in selections:
        name = select.pop("name")
        tensor = old.tensor(name, **select).load()
        rows = records[(records["name"] == name) & np.logical_and.reduce([records[k] == v for k, v in select.items()])]
        assert tensor.size == int(rows["element_count"].sum())  # exact: integers
        assert_dataarray_close(tensor, new.tensor(name, **select).load(), f"{name} {select}")


@pytest.mark.parametrize("level", LEVELS)
def test_records_and_values_equal_todays_dump_of_the_same_step(stored, fresh, level):
    from megadump_zarr.layout.write_model import SCHEMA_VERSION

    assert _doc(fresh / level / WINDOW)["attributes"]["schemaVersion"] == SCHEMA_VERSION >= 7
    old, new = open_dump(stored / level), open_dump(fresh / level)
    a, b = old.records(), new.records()
    assert len(a) == len(b) == RECORDS[level]
    assert_records_close(a, b)
    for path in a["path"]:
        assert_dataarray_close(old.record_array(path).load(), new.record_array(path).load(), path)


@pytest.mark.parametrize("level", LEVELS)
def test_compare_of_the_fixture_with_itself_and_with_todays_dump(stored, fresh, level):
    itself = compare(stored / level, stored / level)
    assert len(itself) == RECORDS[level] and set(itself["verdict"]) == {"pass"}
    assert (itself["max_abs"] == 0).all() and (itself["cosine"] == 1).all()  # exact: stored bytes
    today = compare(stored / level, fresh / level)
    assert len(today) == RECORDS[level] and set(today["verdict"]) == {"pass"}
    assert (today["dtype_a"] == today["dtype_b"]).all() and set(today["dtype_a"]) <= {"float32", "int64"}
    floats = today["dtype_a"] == "float32"
    assert (today.loc[floats, "max_abs"] <= 1e-5).all(), today.loc[today["max_abs"] > 1e-5, ["path", "max_abs"]]
    assert (today.loc[~floats, "max_abs"] == 0).all() and (today["mismatches"] == 0).all()  # exact: integers


@pytest.mark.parametrize("level", LEVELS)
def test_verify_and_the_cli_pass_on_the_fixture(stored, fresh, level, capsys, monkeypatch):
    dump = open_dump(stored / level)
    assert verify_dump(dump).ok and verify_dump(dump, deep=True).ok
    run = cli_runner(capsys, monkeypatch)
    verified = run("verify", "--deep", stored / level)
    assert verified.code == 0, verified.out + verified.err
    assert verified.out.splitlines()[-1].startswith("ok: 1 window(s) checked, 0 not committed")
    compared = run("compare", stored / level, fresh / level)
    assert compared.code == 0, compared.out + compared.err
    assert f"PASS: all {RECORDS[level]} records pass" in compared.out
