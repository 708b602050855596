"""Reading a window lists only zarr nodes: no path of the library asks zarr to list a group that has no consolidated
metadata, so zarr never warns ``Object at inventory.json is not recognized as a component of a Zarr hierarchy``
(a torn window holds non-zarr objects beside its groups: the window inventory, groups without a document).

Every read path of each format-9 fixture layout, committed and torn, runs with warnings as errors."""

from __future__ import annotations

from pathlib import Path
import shutil
import warnings

import pytest
import xarray as xr

from megadump_zarr import open_dump, verify_dump
from megadump_zarr.interop import export_hdf5
from tests._layout import tear

FIXTURES = Path(__file__).parent / "data" / "format10"
WINDOW = "rank_0/window_0000"


@pytest.fixture(params=["l0-committed", "l0-torn", "tasks-committed", "tasks-torn", "packs-committed", "packs-torn"])
def root(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    layout, state = request.param.split("-")
    root = tmp_path / layout
    shutil.copytree(FIXTURES / layout, root)
    if state == "torn":
        tear(root)
        assert (root / WINDOW / "inventory.json").is_file()  # a non-zarr object zarr would name if it listed
    return root


def test_every_read_path_lists_only_zarr_nodes(root: Path, tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dump = open_dump(str(root))
        tree = dump.tree(include_incomplete=True)
        assert WINDOW in {node.relative_to(tree).lstrip("/") for node in tree.subtree}
        records = dump.records(include_incomplete=True)
        assert len(records)
        for path in records["path"]:
            dump.record_array(path).values  # noqa: B018  (read it)
        export_hdf5(str(root / WINDOW), tmp_path / "window.h5", allow_incomplete=True)
        xr.open_datatree(str(root), engine="megadump")
        verify_dump(str(root))
