"""A run that dies in a launch (its plan saved, no window begun) leaves a root every reader opens."""

from __future__ import annotations

from pathlib import Path
import warnings

import xarray as xr
import zarr

from megadump_zarr.store.metadata import dumps, group_document
from megadump_zarr.store.writer import WindowWriter
from tests._faults import dump_demo_step

PLAN = ".plans_20261201T000000Z_1_00000000/rank_0_window_0001_invocation_000000_forward/zarr.json"


def _hang_after_saving_a_plan(root: Path) -> None:
    """What a dumper does before an L1 launch that never returns: save the plan, begin nothing."""
    writer = WindowWriter(root)
    writer.put_sidecar(PLAN, dumps(group_document({"plan": "saved before the launch"})))
    writer.close()  # the process dies here: no window, no index_root


def test_a_fresh_root_is_a_dump_root_after_a_hung_first_launch(tmp_path: Path) -> None:
    root = tmp_path / "fresh"
    _hang_after_saving_a_plan(root)
    group = zarr.open_group(root, mode="r")  # GroupNotFoundError before: only the plan existed
    assert dict(group.attrs)["megadump_zarr"]["layoutVersion"]
    from megadump_zarr import open_dump

    assert open_dump(root).records().empty


def test_the_root_index_survives_a_hung_launch_of_a_later_run(tmp_path: Path) -> None:
    root = tmp_path / "dump"
    dump_demo_step(root, "L1")
    _hang_after_saving_a_plan(root)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # xarray warns (RuntimeWarning) on a root without consolidated metadata
        tree = xr.open_datatree(root, engine="zarr")
    assert "rank_0" in tree.children and "window_0000" in tree["rank_0"].children
