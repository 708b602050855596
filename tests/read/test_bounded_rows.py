"""Issue 23 item 4: a truncated record whose ``actualShape`` and ``fullBytes`` were edited consistently in all
three copies of its metadata (its own ``zarr.json``, its task group's and its window's consolidated entries).

Reads stay bounded by what the record stores: ``record_array`` builds a lazy row range (it allocated one int64 per
logical row), a stitch refuses logical rows out of all proportion to the stored prefix (it materialised and
sorted them: minutes and gigabytes), and a slice reaching past its declared tensor is refused by the reader and
named by ``verify``. Memory is measured with ``tracemalloc``; nothing is timed.
"""

from __future__ import annotations

import json
from pathlib import Path
import tracemalloc
from typing import Any

# The readers import dask and xarray on first use: imported here, so a peak measures the read, not the imports,
# whichever test ran first in this process (alone, the first record_array's imports traced 31 MB).
import dask.array  # noqa: F401
import numpy as np
import pytest
import xarray  # noqa: F401

from megadump_zarr import open_dump
from tests._layout import document_in_inventory
from megadump_zarr.cli.main import main
from megadump_zarr.read.errors import DumpIntegrityError
from megadump_zarr.read.truncated import MAX_DERIVED_ROWS, MAX_NAN_BLOCKS
from megadump_zarr.store.writer import WindowWriter
from megadump_zarr.verify import verify_dump

ROWS = 1 << 24  # 16 Mi rows x 4 float32: 256 MiB logical, 16 bytes stored


@pytest.fixture
def tiny(hand: Any, tmp_path: Path) -> Path:
    record = hand.Record("big", np.arange(4, dtype=np.float32), 0, logical_shape=(200000, 4), declared_rows=200000)
    with WindowWriter(tmp_path / "dump") as writer:
        writer.write_window(hand.window({1: [record]}))
    return tmp_path / "dump"


def _edit_everywhere(root: Path, rows: int, *, declared: bool) -> int:
    """Set actualShape (and fullBytes, and declaredShape when asked) of record ``big`` in every copy, the window
    inventory included; returns the copies edited."""
    copies = 0

    def walk(node: Any) -> None:
        nonlocal copies
        if isinstance(node, dict):
            if node.get("name") == "big" and "actualShape" in node:
                node["actualShape"], node["fullBytes"] = [rows, 4], rows * 16
                if declared:
                    node["declaredShape"] = [rows, 4]
                copies += 1
            for value in node.values():
                walk(value)

    for document in root.rglob("zarr.json"):
        doc = json.loads(document.read_text())
        walk(doc)
        document.write_text(json.dumps(doc))
    for array in root.rglob("output_00_big/zarr.json"):  # the forger rewrites the window inventory too
        document_in_inventory(root, array.parent.relative_to(root).as_posix())
    return copies


def _peak(call: Any) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        try:
            result = call()
        except Exception as error:  # returned, for the caller to assert on
            result = error
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_consistent_edit_passes_the_old_checks_but_views_stay_bounded(tiny: Path) -> None:
    assert _edit_everywhere(tiny, ROWS, declared=True) == 3
    dump = open_dump(tiny)
    path = dump.records()["path"].iloc[0]
    view, peak = _peak(lambda: dump.record_array(path))
    assert view.shape == (ROWS, 4)
    assert peak < 1 << 20  # was 2 x 128 MiB: one int64 row index per logical row
    assert view.data.numblocks[0] <= 1 + MAX_NAN_BLOCKS
    rows = view["row"]
    assert rows.variable.chunks is not None  # a lazy range
    np.testing.assert_array_equal(rows[:3].values, [0, 1, 2])
    np.testing.assert_array_equal(view[:2].values, [[0, 1, 2, 3], [np.nan] * 4])


def test_stitch_refuses_rows_out_of_proportion_to_the_prefix(tiny: Path) -> None:
    _edit_everywhere(tiny, ROWS, declared=True)
    dump = open_dump(tiny)
    error, peak = _peak(lambda: dump.tensor("big"))
    assert isinstance(error, DumpIntegrityError), error
    assert (
        "task_000001/output_00_big/zarr.json: attributes.actualShape [16777216, 4] describes 16777216 rows for a "
        "stored prefix of 4 elements"
        in str(error)
        and f"at most {MAX_DERIVED_ROWS} rows" in str(error)
    )
    assert peak < 4 << 20  # was gigabytes


def test_show_is_bounded(tiny: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _edit_everywhere(tiny, ROWS, declared=True)
    open_dump(tiny).records()  # imports and caches out of the measurement
    capsys.readouterr()
    code, peak = _peak(lambda: main(["show", str(tiny), "big"]))
    out, err = capsys.readouterr()
    assert code == 0 and "16777216×4" in out and "[ 0.,  1.,  2.,  3., nan," in out, (code, out, err)
    assert peak < 64 << 20  # the one record's lazy view: the first values read, no row index per logical row


def test_rows_within_the_bound_still_stitch(tiny: Path) -> None:
    _edit_everywhere(tiny, MAX_DERIVED_ROWS, declared=True)
    tensor = open_dump(tiny).tensor("big")
    assert tensor.shape == (MAX_DERIVED_ROWS, 4)
    np.testing.assert_array_equal(tensor[:1].values, [[0, 1, 2, 3]])


def test_slice_past_its_declared_tensor_is_refused_and_verify_names_it(tiny: Path) -> None:
    _edit_everywhere(tiny, 400000, declared=False)  # actualShape and fullBytes agree; declaredShape is [200000, 4]
    dump = open_dump(tiny)
    path = dump.records()["path"].iloc[0]
    with pytest.raises(
        DumpIntegrityError,
        match=r"output_00_big/zarr.json: attributes.actualShape \[400000, 4\] at "
        r"attributes.sourceOffsetBytes 0 \(row 0\) reaches past "
        r"attributes.declaredShape \[200000, 4\]",
    ):
        dump.record_array(path)
    report = verify_dump(dump, deep=True)
    assert [p.key for p in report.problems] == [f"{path}/zarr.json"]
    assert "reaches past attributes.declaredShape [200000, 4]" in report.problems[0].what
