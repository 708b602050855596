"""The records table names where a packed record is stored: ``pack_array`` (the pack's record array, relative to
the root) and ``pack_row`` (its row there); ``None`` and -1 for a record of a task group or an L0 window (missing: ``None`` or NaN).
Plain zarr, given only those two columns, reads the record's bytes (issue 21: address packs natively)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import zarr

from megadump_zarr import open_dump
from tests.store.test_packs_writer import INV, _write, mixed_invocation


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pack-columns") / "packed"
    _write(root, True)
    return root


def _check_rows_read_back(root: Path, records) -> None:
    dump = open_dump(root)
    for path, array, row in zip(records["path"], records["pack_array"], records["pack_row"]):
        stored = zarr.open_array(str(root / array), mode="r")[int(row)]
        read = np.asarray(dump.record_array(path).values)
        assert stored.tobytes() == read.tobytes(), path  # exact: stored bytes


def test_packed_records_name_their_array_and_row(packed):
    records = open_dump(packed).records()
    window = "rank_0/window_0000"
    at = dict(zip(records["path"], zip(records["pack_array"], records["pack_row"])))
    assert at[f"{window}/{INV}/stages/up/task_000003/input_00_x"] == (
        f"{window}/{INV}/stages/up/pack_0000/input_00_x",
        3,
    )
    assert at[f"{window}/{INV}/stages/up/task_000011_worker_002/input_00_w"] == (
        f"{window}/{INV}/stages/up/pack_0001/input_00_w",
        1,
    )
    assert at[f"{window}/{INV}/stages/down/task_000032/input_00_h"] == (
        f"{window}/{INV}/stages/down/pack_0000/input_00_h",
        2,
    )
    big = at[f"{window}/{INV}/stages/up/task_000020/input_00_x"]  # 8 MiB: not packable
    assert pd.isna(big[0]) and big[1] == -1
    assert records["pack_row"].dtype == np.int64
    inside = records[records["pack_array"].notna()]
    assert len(inside) == len(records) - 1
    _check_rows_read_back(packed, inside)


def test_task_layout_records_have_no_pack(tmp_path):
    _write(tmp_path, False)
    records = open_dump(tmp_path).records()
    assert len(records) > 0
    assert records["pack_array"].isna().all() and (records["pack_row"] == -1).all()


def test_torn_window_records_name_their_pack_rows(tmp_path):
    from megadump_zarr.store.writer import WindowWriter

    writer = WindowWriter(tmp_path, durable=False, pack=True)
    session = writer.begin(0, 0, {"level": "L1"})
    session.write_invocation(mixed_invocation())
    writer.close()  # never committed: the window stays "writing"
    records = open_dump(tmp_path).records(include_incomplete=True)
    assert (records["status"] == "writing").all()
    inside = records[records["pack_array"].notna()]
    assert len(inside) == len(records) - 1
    _check_rows_read_back(tmp_path, inside)
