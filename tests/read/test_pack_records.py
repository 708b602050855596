"""A committed packed window's records table comes from its packs' arrays along ``task`` (``read.pack_records``):
one block of rows per record array, the same table, value for value, as the task groups its rows stand for."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from megadump_zarr import open_dump
from megadump_zarr.read.catalog import WindowInfo, records_frame
from tests.store.test_packs_writer import _write, mixed_invocation

FIXTURE = Path(__file__).parent / "data" / "format9" / "packs"


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pack-records") / "packed"
    _write(root, True, mixed_invocation(seed=3))
    return root


def _expanded_records(root: Path) -> pd.DataFrame:
    """The records table read from the task groups, record arrays and row coordinates the packs stand for."""
    dump = open_dump(root)
    frames = []
    for info in dump._scan():  # noqa: SLF001 - the catalogue's windows, as records() reads them
        nodes = info.nodes
        plain = WindowInfo(info.rank, info.window, info.key, info.status, info.attrs, nodes, pack_rows=info.pack_rows)
        frames.append(records_frame([(plain, nodes)]))
    return pd.concat(frames, ignore_index=True)


@pytest.mark.parametrize("which", ["written", "fixture"])
def test_records_from_the_packs_arrays_equal_the_task_groups_they_stand_for(packed, which):
    root = packed if which == "written" else FIXTURE
    records = open_dump(root).records()
    assert records["pack_array"].notna().sum() >= 8
    pd.testing.assert_frame_equal(records, _expanded_records(root))  # exact: one dump, two routes


def test_records_of_a_packed_window_build_no_task_group(packed, monkeypatch):
    """``records()`` reads the packs' arrays, never a document per task group or record."""

    def refuse(*args, **kwargs):
        raise AssertionError("the packs were expanded into task groups")

    monkeypatch.setattr("megadump_zarr.read.catalog.expand_window", refuse)
    monkeypatch.setattr("megadump_zarr.read.pack_nodes.expand_pack", refuse)
    records = open_dump(packed).records()
    assert len(records) == 16 and records["pack_array"].notna().sum() == 15
    assert (records.loc[records["pack_array"].notna(), "pack_row"] >= 0).all()
