"""The reader keeps reading schema-6 dumps (one group per L1 task, one array per record and row coordinate).

``tests/read/data/schema6`` holds an L0 and an L1 dump of one demo step stored by the schema-6 writer
(commit 314ca76, see its README). Its files hash to the list stored with it (``SHA256SUMS``), and
plain xarray, zarr-python and tensorstore read the same values from them as our reader (stored bytes
against stored bytes, exact). The same step dumped by today's writer must give the same records, the
same values, the same stitched tensors and a passing ``compare``, whatever today's on-disk layout is:
the fresh dump is read only through the public API, its floats agree with the fixture's within the
dtype's tolerance (they were computed on another machine), integers and metadata exactly.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
import runpy
import warnings

import numpy as np
import pytest
import xarray as xr
import zarr

from megadump_zarr import compare, open_dump
from megadump_zarr.read.catalog import scan_windows, window_nodes
from tests.cli._helpers import cli_runner
from tests.read._fixture_checks import (
    copy_stored,
    assert_dataarray_close,
    assert_records_close,
    assert_stored_bytes_unchanged,
)

DATA = Path(__file__).parent / "data" / "schema6"
LEVELS = ("l0", "l1")
WINDOW = Path("rank_0") / "window_0000"
# The fixture's record counts (L0: three invocations; L1: expert_up tasks 0-3 and combine tasks 13-17).
RECORDS = {"l0": 18, "l1": 18}


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> Path:
    """A copy of the stored schema-6 dumps (the reader never writes, but the fixture stays pristine)."""
    return copy_stored(DATA, tmp_path_factory.mktemp("schema6"))


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> Path:
    """The same demo step dumped by today's writer (the fixture's own generator, run with today's code)."""
    base = tmp_path_factory.mktemp("today")
    runpy.run_path(str(DATA / "generate.py"))["write"](base)
    return base


def _doc(path: Path) -> dict:
    return json.loads((path / "zarr.json").read_bytes())


def _group_nodes(root: Path) -> dict[str, dict]:
    """Every node document below the window on disk, by path relative to the window."""
    window = root / WINDOW
    return {
        os.path.relpath(d, window): _doc(Path(d))
        for d, _, files in os.walk(window)
        if "zarr.json" in files and Path(d) != window
    }


def test_the_stored_bytes_match_the_checksums_stored_with_the_fixture():
    assert assert_stored_bytes_unchanged(DATA, LEVELS) == 112


@pytest.mark.parametrize("level", LEVELS)
def test_the_fixture_is_schema_6_and_the_catalog_lists_its_nodes(stored, level):
    root = stored / level
    window = _doc(root / WINDOW)
    assert window["attributes"]["schemaVersion"] == 6
    assert window["attributes"]["status"] == "complete"
    assert (
        window["attributes"]["stageViewStorage"]
        == {"l0": "array_per_tensor_with_ports", "l1": "array_per_task_record"}[level]
    )
    nodes = _group_nodes(root)
    # The window's consolidated metadata lists every node on disk, and nothing else.
    assert set(window["consolidated_metadata"]["metadata"]) == set(nodes)
    arrays = {p: d for p, d in nodes.items() if d["node_type"] == "array"}
    assert arrays and all(d["codecs"][-1] == {"name": "crc32c"} for d in arrays.values())
    assert not any(d["node_type"] == "group" and "megadumpPack" in d["attributes"] for d in nodes.values())
    # Compact layout: only data groups (L0 invocations, L1 tasks) repeat their children's documents.
    data_groups = {p for p, d in nodes.items() if d["node_type"] == "group" and "consolidated_metadata" in d}
    parents = {p.rpartition("/")[0] for p in arrays}
    assert data_groups == parents
    if level == "l1":
        assert len(data_groups) == 9 and all(p.rpartition("/")[2].startswith("task_") for p in data_groups)
    store = open_dump(root).store
    (info,) = scan_windows(store)
    assert set(window_nodes(store, info)) == set(nodes)


@pytest.mark.parametrize("level", LEVELS)
def test_records_and_values_equal_todays_dump_of_the_same_step(stored, fresh, level):
    from megadump_zarr.layout.write_model import SCHEMA_VERSION

    assert SCHEMA_VERSION >= 6
    assert _doc(fresh / level / WINDOW)["attributes"]["schemaVersion"] == SCHEMA_VERSION
    old, new = open_dump(stored / level), open_dump(fresh / level)
    a, b = old.records(), new.records()
    assert len(a) == RECORDS[level] and len(b) == RECORDS[level]
    assert_records_close(a, b)
    for path in a["path"]:
        assert_dataarray_close(old.record_array(path).load(), new.record_array(path).load(), path)


@pytest.mark.parametrize("level", LEVELS)
def test_stitched_tensors_equal_todays(stored, fresh, level):
    old, new = open_dump(stored / level), open_dump(fresh / level)
    records = old.records()
    keys = ["invocation", "name"] if level == "l0" else ["stage", "io", "name"]
    selections = records[keys].drop_duplicates().to_dict("records")
    assert len(selections) == {"l0": 18, "l1": 4}[level]
    for select in selections:
        name = select.pop("name")
        assert_dataarray_close(old.tensor(name, **select).load(), new.tensor(name, **select).load(), f"{name} {select}")


@pytest.mark.parametrize("level", LEVELS)
def test_compare_of_the_fixture_with_todays_dump_passes(stored, fresh, level):
    result = compare(stored / level, fresh / level)
    assert len(result) == RECORDS[level]
    assert set(result["verdict"]) == {"pass"}
    # Computed on another machine: a few float32 ulps of values below ~10, never a bit-for-bit promise.
    assert (result["dtype_a"] == result["dtype_b"]).all() and set(result["dtype_a"]) <= {"float32", "int64"}
    floats = result["dtype_a"] == "float32"
    assert (result.loc[floats, "max_abs"] <= 1e-5).all(), result.loc[result["max_abs"] > 1e-5, ["path", "max_abs"]]
    assert (result.loc[~floats, "max_abs"] == 0).all()  # exact: integers
    assert (result["mismatches"] == 0).all() and (result["nonfinite_mismatch"] == 0).all()
    assert (result["cosine"] > 1 - 1e-6).all()


@pytest.mark.parametrize("level", LEVELS)
def test_every_data_group_opens_with_plain_xarray_and_every_array_with_zarr(stored, level):
    root = stored / level
    dump = open_dump(root)
    records = dump.records()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for group in sorted(set(records["group"])):
            ds = xr.open_zarr(os.path.join(root, group))
            rows = records.loc[records["group"] == group]
            assert set(ds.data_vars) >= {p.rpartition("/")[2] for p in rows["path"]}
            for path in rows["path"]:
                np.testing.assert_array_equal(
                    ds[path.rpartition("/")[2]].values,
                    dump.record_array(path).values,  # exact: stored bytes
                    err_msg=path,
                )
        for path in records["path"]:
            np.testing.assert_array_equal(
                zarr.open_array(os.path.join(root, path), mode="r")[...],  # exact: stored bytes
                dump.record_array(path).values,
                err_msg=path,
            )
        tree = dump.tree()
    assert tree["rank_0/window_0000"].attrs["schemaVersion"] == 6
    assert {node.path for node in tree.subtree} >= {f"/{group}" for group in records["group"]}


def test_tensorstore_reads_every_old_array(stored):
    ts = pytest.importorskip("tensorstore")
    for level in LEVELS:
        root = stored / level
        dump = open_dump(root)
        paths = list(dump.records()["path"])
        assert len(paths) == RECORDS[level]
        for path in paths:
            spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(root / path)}}
            np.testing.assert_array_equal(
                ts.open(spec).result().read().result(),  # exact: stored bytes
                dump.record_array(path).values,
                err_msg=path,
            )


@pytest.mark.parametrize("level", LEVELS)
def test_cli_verify_and_compare_pass_on_the_fixture(stored, fresh, level, capsys, monkeypatch):
    run = cli_runner(capsys, monkeypatch)
    verified = run("verify", "--deep", stored / level)
    assert verified.code == 0, verified.out + verified.err
    assert verified.out.splitlines()[-1].startswith("ok: 1 window(s) checked, 0 not committed")
    compared = run("compare", stored / level, fresh / level)
    assert compared.code == 0, compared.out + compared.err
    assert f"PASS: all {RECORDS[level]} records pass" in compared.out
