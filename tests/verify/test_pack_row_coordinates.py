"""Pack format 3: each pack stores its rows' global row coordinates (``global_{dim}``, dims ``("task", dim)``).

Plain ``xr.open_zarr(pack)`` shows them as coordinates, value for value the tasks layout's row coordinate of
each task; ``verify`` names a ``global_{dim}`` array that disagrees with the rows' ``coords`` (the readers place
rows by those), one that lost its chunk, and a format-3 pack that lost the array; an array that lost its marker
reads as a record and is refused as a malformed pack, never skipped."""

from __future__ import annotations

import json
from pathlib import Path
import shutil
import warnings

import numpy as np
import pytest

from megadump_zarr.store.packs import PACK_VERSION
from tests._packs import stored_rows

from megadump_zarr import open_dump
from megadump_zarr.verify import verify_dump
from tests._faults import dump_demo_step

WINDOW = "rank_0/window_0000"
STAGE = "invocation_000000_forward/stages/combine"
PACK = f"{STAGE}/pack_0000"


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("rowcoords")
    dump_demo_step(base / "packs", "L1", layout="packs")
    dump_demo_step(base / "tasks", "L1", layout="tasks")
    return base / "packs", base / "tasks"


@pytest.fixture
def packed(dumps, tmp_path) -> Path:
    return Path(shutil.copytree(dumps[0], tmp_path / "packs"))


def _packs(root: Path) -> list[Path]:
    return sorted(p for p in (root / WINDOW).rglob("pack_*") if p.is_dir())


def test_plain_xarray_on_a_pack_shows_each_rows_global_rows_as_the_tasks_layout_stores_them(dumps):
    import xarray as xr

    packs, tasks = dumps
    assert _packs(packs), "the demo in packs layout holds packs"
    checked = 0
    for pack in _packs(packs):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            dataset = xr.open_zarr(str(pack))
        assert dataset.attrs["megadumpPack"] == PACK_VERSION
        entries = stored_rows(pack.parents[3], pack.relative_to(pack.parents[3]).as_posix())[0]
        dims = list(entries[0]["coords"])
        assert dims, pack
        for dim in dims:
            name = f"global_{dim}"
            assert name in dataset.coords and dataset[name].dims == ("task", dim)
            assert dataset[name].attrs["megadumpRowCoordinate"] == dim
            for row, entry in enumerate(entries):
                with warnings.catch_warnings():
                    warnings.simplefilter("error")
                    group = xr.open_zarr(str(tasks / pack.relative_to(packs).parent / entry["group"]))
                assert dataset[name].isel(task=row).values.tolist() == group[dim].values.tolist()
                checked += 1
    assert checked >= 4


def test_a_fresh_packs_dump_verifies(packed):
    report = verify_dump(open_dump(packed))
    assert report.ok, report.problems


def test_swapped_global_rows_are_a_verify_problem(packed):
    import zarr

    array = zarr.open_array(str(packed / WINDOW / PACK / "global_token"), mode="r+")
    values = array[...]
    values[[1, 2]] = values[[2, 1]]
    array[...] = values  # written through zarr: the chunk's crc32c is valid
    report = verify_dump(open_dump(packed))
    spans = [e["coords"]["token"] for e in stored_rows(packed / WINDOW, PACK)[0]]
    shown = f"{values[1][0]}..{values[1][-1]}"
    assert [str(p) for p in report.problems] == [
        f"{WINDOW}/{PACK}/global_token: row 1 holds token {shown} but attributes.tasks[1].coords.token names "
        f"{spans[1]!r}: plain xarray would place the task's rows elsewhere than the readers do",
        f"{WINDOW}/{PACK}/global_token/c.0.0: chunk has digest {_digest(packed, 'global_token/c.0.0')} but the "
        f"window inventory records {_listed(packed, 'global_token')} for this place: a chunk from elsewhere "
        "(another task, window or dump, or swapped with another)",
    ]
    # the readers place rows by coords: the records table still reads right
    assert len(open_dump(packed).records()) == 52


def test_a_missing_global_row_chunk_is_a_verify_problem(packed):
    (packed / WINDOW / PACK / "global_token" / "c.0.0").unlink()
    report = verify_dump(open_dump(packed))
    assert [str(p) for p in report.problems] == [f"{WINDOW}/{PACK}/global_token/c.0.0: chunk is missing"]


def _digest(root: Path, chunk: str) -> str:
    """A stored chunk's inventory digest (``layout.inventory.chunk_digest``), as 8 hex digits."""
    from megadump_zarr.layout.inventory import chunk_digest

    return f"{chunk_digest((root / WINDOW / PACK / chunk).read_bytes())[0]:08x}"


def _listed(root: Path, array: str) -> str:
    """The digest the window inventory lists for the array's one chunk."""
    return json.loads((root / WINDOW / "inventory.json").read_text())["arrays"][f"{PACK}/{array}"][1]


def _drop_node(root: Path, node: str) -> None:
    """Remove a pack array everywhere: its directory, and its entries in the pack's and the window's documents."""
    shutil.rmtree(root / WINDOW / node)
    pack, _, name = node.rpartition("/")
    for doc_path, key in ((root / WINDOW / pack / "zarr.json", name), (root / WINDOW / "zarr.json", node)):
        doc = json.loads(doc_path.read_bytes())
        del doc["consolidated_metadata"]["metadata"][key]
        doc_path.write_text(json.dumps(doc))


def test_a_pack_without_its_row_coordinate_array_is_a_verify_problem(packed):
    _drop_node(packed, f"{PACK}/global_token")
    assert len(open_dump(packed).records())  # the readers place rows by coords
    report = verify_dump(open_dump(packed))
    assert [str(p) for p in report.problems] == [
        f"{WINDOW}/{PACK}/global_token/zarr.json: the pack has no such array (format 4 stores each row coordinate)",
        f"{WINDOW}/{PACK}/global_token: array is in the window inventory but the window does not hold it",
    ]


def test_a_row_coordinate_without_its_marker_reads_as_a_malformed_record_never_skipped(packed):
    node = f"{PACK}/global_token"
    for doc_path, key in (
        (packed / WINDOW / node / "zarr.json", None),
        (packed / WINDOW / PACK / "zarr.json", "global_token"),
        (packed / WINDOW / "zarr.json", node),
    ):
        doc = json.loads(doc_path.read_bytes())
        entry = doc if key is None else doc["consolidated_metadata"]["metadata"][key]
        del entry["attributes"]["megadumpRowCoordinate"]
        doc_path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"malformed task-record pack: .*global_token/zarr\.json"):
        open_dump(packed).records()


def test_records_named_like_a_row_coordinate_are_not_packed(tmp_path):
    """A record (or a dimension) starting with ``global_`` keeps its task group: a pack could not tell it from
    a row coordinate array."""

    import megadump_zarr.store.pack_groups as pg

    rows = [np.zeros((2, 3), np.float32), np.ones((2, 3), np.float32)]

    class Declared:
        def __init__(self, path: str, task_id: int) -> None:
            self.path, self.task, self.attrs = path, True, {"taskId": task_id, "coreId": 0}

    declared = [Declared("stages/s/task_000000", 0), Declared("stages/s/task_000001", 1)]
    groups = {"stages": {}, "stages/s": {}, **{d.path: d.attrs for d in declared}}
    encoded = {path: json.dumps(attrs).encode() for path, attrs in groups.items()}
    for record, dims in (("global_x", ("token", "h")), ("input_00_x", ("token", "global_h"))):
        records = [(f"{d.path}/{record}", rows[i], dims, {}) for i, d in enumerate(declared)]
        packs, packed = pg.pack_groups_of(
            declared,
            groups,
            encoded,
            records,
            {},
            chunk_bytes=1 << 20,
            encode=lambda attrs, path: json.dumps(attrs).encode(),
            label=str,
        )
        assert (packs, packed) == ([], set()), record
    records = [(f"{d.path}/input_00_x", rows[i], ("token", "h"), {}) for i, d in enumerate(declared)]
    packs, _ = pg.pack_groups_of(
        declared, groups, encoded, records, {}, chunk_bytes=1 << 20, encode=lambda a, p: b"{}", label=str
    )
    assert len(packs) == 1  # the control: the same tasks pack under another name
