"""``--storage-option``: the inspection commands on a dump in S3 (moto's server on loopback)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from megadump_zarr.read import open_dump
from tests._moto import KEY, SECRET, moto_s3
from tests.cli._helpers import assert_input_error


@pytest.fixture(scope="module")
def s3_dump(demo):
    """The demo's L1 dump copied to ``s3://dumps/l1``; yields the ``-S`` options."""
    pytest.importorskip("s3fs")
    import s3fs

    with moto_s3("dumps") as endpoint:
        fs = s3fs.S3FileSystem(key=KEY, secret=SECRET, client_kwargs={"endpoint_url": endpoint})
        local = Path(demo.roots["L1"])
        for file in local.rglob("*"):
            if file.is_file():
                fs.pipe(f"dumps/l1/{file.relative_to(local).as_posix()}", file.read_bytes())
        yield ["-S", f"endpoint_url={endpoint}", "-S", f"key={KEY}", "-S", f"secret={SECRET}"]


def test_info_ls_show_over_s3(cli, demo, s3_dump, tmp_path):
    info = cli("info", "s3://dumps/l1", *s3_dump, "--json")
    assert info.code == 0, info.err
    (window,) = info.json()["windows"]
    assert window["status"] == "complete" and window["disk_bytes"] is None  # no on-disk size for URL roots
    assert window["compression"] is None  # logical / on disk: bytes on disk not measured on object stores
    text = cli("info", "s3://dumps/l1", *s3_dump).out
    assert "compression —" in text and "ratio" not in text
    local = open_dump(demo.roots["L1"]).records()
    rows = cli("ls", "s3://dumps/l1", *s3_dump, "--json").json()
    assert [r["path"] for r in rows] == list(local["path"])
    shown = cli(
        "show", "s3://dumps/l1", "ws", "--stage", "expert_up", "--invocation", "0", "--head", "8", *s3_dump, "--json"
    ).json()
    expected = open_dump(demo.roots["L1"]).tensor("ws", stage="expert_up", invocation=0).values.reshape(-1)[:8]
    np.testing.assert_allclose(shown["head"], expected, rtol=1e-6)
    same = cli("compare", "s3://dumps/l1", demo.roots["L1"], *s3_dump, "--quiet")
    assert same.code == 0 and same.out.startswith("PASS")
    target = tmp_path / "w.h5"
    exported = cli("export-hdf5", "s3://dumps/l1/rank_0/window_0000", target, *s3_dump)
    assert exported.code == 0, exported.err
    group = local["group"].iloc[0].split("/", 2)[2]
    with xr.open_dataset(target, engine="h5netcdf", group=group) as ds:
        assert len(ds.data_vars) > 0


def test_missing_s3_root_is_an_input_error(cli, s3_dump):
    assert_input_error(cli("ls", "s3://dumps/elsewhere", *s3_dump), "s3://dumps/elsewhere", "zarr.json is missing")
