"""``megadump show`` of a packed record (``layout="packs"``) says where its bytes are: the pack array and row that
``records()`` names (``pack_array``/``pack_row``), which plain zarr reads as exactly the values shown; a record of
the tasks layout has no such line (its record path is its array)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

from megadump_zarr import open_dump
from tests._faults import dump_demo_step
from tests.cli._helpers import cli_runner


@pytest.fixture(scope="module")
def roots(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("show-packs")
    for layout in ("packs", "tasks"):
        dump_demo_step(base / layout, "L1", stages=("combine",), layout=layout)
    return {layout: base / layout for layout in ("packs", "tasks")}


def test_a_packed_records_show_names_its_pack_array_and_row(roots, capsys, monkeypatch):
    run = cli_runner(capsys, monkeypatch, columns=300)
    records = open_dump(roots["packs"]).records()
    packed = records[records["pack_array"].notna()]
    assert len(packed) >= 4
    for _, row in packed.iloc[[0, -1]].iterrows():
        text = run("show", roots["packs"], row["path"], "--head", "0")
        assert text.code == 0, text.err
        line = next(line for line in text.out.splitlines() if line.startswith("stored"))
        assert line.split(None, 1)[1].rstrip() == f"{row['pack_array']} row {row['pack_row']} (a task-record pack)"
        shown = run("show", roots["packs"], row["path"], "--json", "--head", "1000000").json()
        assert (shown["pack_array"], shown["pack_row"]) == (row["pack_array"], int(row["pack_row"]))
        stored = zarr.open_array(str(roots["packs"] / shown["pack_array"]), mode="r")[int(shown["pack_row"])]
        np.testing.assert_array_equal(
            np.asarray(shown["head"], dtype=np.float64), stored.reshape(-1).astype(np.float64)
        )


def test_a_task_groups_record_has_no_stored_line(roots, capsys, monkeypatch):
    run = cli_runner(capsys, monkeypatch, columns=300)
    path = open_dump(roots["tasks"]).records()["path"].iloc[0]
    text = run("show", roots["tasks"], path, "--head", "0")
    assert text.code == 0 and "task-record pack" not in text.out and "\nstored" not in text.out
    assert "pack_array" not in run("show", roots["tasks"], path, "--json").json()
