"""The reader keeps reading schema-5 dumps (consolidated metadata in every group, chunks without crc32c).

``tests/read/data/schema5`` holds an L0 and an L1 dump of one demo step stored by the schema-5 writer.
Its files hash to the list stored with it (``SHA256SUMS``); zarr-python, xarray and tensorstore read the
same values from them as our reader (stored against stored, exact). The same step dumped now must give
the same records and the same values: integers and metadata exactly, floats within the dtype's tolerance
(the fixture's floats were computed on another machine).
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
import shutil
import warnings

import numpy as np
import pytest
import xarray as xr
import zarr

from megadump_zarr.layout.write_model import SCHEMA_VERSION
from megadump_zarr.read import open_dump
from megadump_zarr.read.catalog import scan_windows, window_nodes
from tests.read._fixture_checks import assert_records_close, assert_stored_bytes_unchanged, assert_values_close

DATA = Path(__file__).parent / "data" / "schema5"
LEVELS = ("l0", "l1")


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> Path:
    """A copy of the stored schema-5 dumps (the reader never writes, but the fixture stays pristine)."""
    base = tmp_path_factory.mktemp("schema5")
    for level in LEVELS:
        shutil.copytree(DATA / level, base / level)
    return base


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> Path:
    """The same demo step dumped by today's writer (the fixture's own generator)."""
    base = tmp_path_factory.mktemp("schema6")
    spec = importlib.util.spec_from_file_location("schema5_generate", DATA / "generate.py")
    script = spec.loader.get_source("schema5_generate")
    code = compile(script, str(DATA / "generate.py"), "exec")
    import sys

    argv = sys.argv
    sys.argv = ["generate.py", str(base)]
    try:
        exec(code, {"__name__": "__main__"})
    finally:
        sys.argv = argv
    return base


def _window_doc(root: Path) -> dict:
    return json.loads((root / "rank_0" / "window_0000" / "zarr.json").read_bytes())


def test_the_stored_bytes_match_the_checksums_stored_with_the_fixture():
    assert assert_stored_bytes_unchanged(DATA, LEVELS) == 112


@pytest.mark.parametrize("level", LEVELS)
def test_the_fixture_is_schema_5(stored, level):
    doc = _window_doc(stored / level)
    assert doc["attributes"]["schemaVersion"] == 5
    nodes = doc["consolidated_metadata"]["metadata"]
    arrays = [d for d in nodes.values() if d["node_type"] == "array"]
    assert arrays and all(c["name"] != "crc32c" for d in arrays for c in d["codecs"])
    groups = [p for p, d in nodes.items() if d["node_type"] == "group"]
    for path in groups:  # every group of the old layout repeats its descendants
        assert "consolidated_metadata" in json.loads(
            (stored / level / "rank_0" / "window_0000" / path / "zarr.json").read_bytes()
        )


@pytest.mark.parametrize("level", LEVELS)
def test_records_and_values_equal_todays_dump_of_the_same_step(stored, fresh, level):
    assert _window_doc(fresh / level)["attributes"]["schemaVersion"] == SCHEMA_VERSION
    old, new = open_dump(stored / level), open_dump(fresh / level)
    a, b = old.records(), new.records()
    assert len(a) > 0 and len(a) == len(b)
    keep = [c for c in a.columns if c not in ("status",)]
    assert_records_close(a[keep], b[keep])
    for path in a["path"]:
        assert_values_close(old.record_array(path).values, new.record_array(path).values, path)


@pytest.mark.parametrize("level", LEVELS)
def test_every_data_group_opens_with_plain_xarray_and_every_array_with_zarr(stored, level):
    root = stored / level
    dump = open_dump(root)
    records = dump.records()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for group in sorted(set(records["group"])):
            ds = xr.open_zarr(os.path.join(root, group))
            assert set(ds.data_vars) >= {p.rpartition("/")[2] for p in records.loc[records["group"] == group, "path"]}
        for path in records["path"]:
            np.testing.assert_array_equal(
                zarr.open_array(os.path.join(root, path), mode="r")[...],  # exact: stored bytes
                dump.record_array(path).values,
            )
        tree = dump.tree()
    assert tree["rank_0/window_0000"].attrs["schemaVersion"] == 5
    assert {node.path for node in tree.subtree} >= {f"/{group}" for group in records["group"]}


@pytest.mark.parametrize("level", LEVELS)
def test_window_nodes_lists_every_node_of_the_old_layout(stored, level):
    root = stored / level
    dump = open_dump(root)
    (info,) = scan_windows(dump.store)
    nodes = window_nodes(dump.store, info)
    on_disk = {
        os.path.relpath(d, root / info.key)
        for d, _, files in os.walk(root / info.key)
        if "zarr.json" in files and Path(d) != root / info.key
    }
    assert set(nodes) == on_disk


def test_tensorstore_reads_every_old_array(stored):
    ts = pytest.importorskip("tensorstore")
    for level in LEVELS:
        root = stored / level
        dump = open_dump(root)
        for path in dump.records()["path"]:
            doc = json.loads((root / path / "zarr.json").read_bytes())
            if doc["data_type"] not in ("float32", "int64", "bool", "float16", "int32"):
                continue
            spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(root / path)}}
            np.testing.assert_array_equal(
                ts.open(spec).result().read().result(),  # exact: stored bytes
                dump.record_array(path).values,
            )
