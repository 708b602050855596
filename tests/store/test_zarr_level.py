"""bfloat16/float8 arrays open with plain zarr, dask and xarray calls in fresh interpreters.

Each case runs in a new ``python -W error`` subprocess, so nothing this test process imported or
registered helps: what is checked is what a user gets with megadump_zarr merely installed (the entry
points in pyproject.toml, see ``store/zarr_plugin.py``), or after ``import megadump_zarr``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import zarr

import megadump_zarr.store.dtypes  # noqa: F401  (this process writes the arrays)

VALUES = {
    "bfloat16": np.array([0.5, -1.25, 3.0e38, np.nan], dtype=ml_dtypes.bfloat16),
    "float8_e4m3fn": np.array([0.5, -1.25, 448.0, np.nan], dtype=ml_dtypes.float8_e4m3fn),
    "float8_e5m2": np.array([0.5, -1.25, np.inf, np.nan], dtype=ml_dtypes.float8_e5m2),
}


@pytest.fixture(scope="module")
def arrays(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("zarr_level")
    group = zarr.open_group(root / "group", mode="w", zarr_format=3)
    for name, values in VALUES.items():
        array = zarr.create_array(root / name, shape=values.shape, chunks=(2,), dtype=values.dtype, zarr_format=3)
        array[:] = values
        group.create_array(name, shape=values.shape, chunks=(2,), dtype=values.dtype, dimension_names=("x",))[:] = (
            values
        )
    return root


def _run(code: str, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr == ""
    return result.stdout


def _assert_read(out: str, name: str) -> None:
    """The child printed the dtype name and the raw bits it read: both must be the written ones."""
    dtype, bits = out.split(" ", 1)
    assert dtype == name
    assert bits.strip() == repr(VALUES[name].view(f"u{VALUES[name].itemsize}").tolist())


@pytest.mark.parametrize("name", sorted(VALUES))
def test_dask_from_zarr_is_the_first_zarr_call(arrays, name):
    out = _run(
        """
        import sys
        import dask.array as da
        a = da.from_zarr(sys.argv[1])
        v = a.compute()
        print(v.dtype.name, v.view(f"u{v.itemsize}").tolist())
    """,
        str(arrays / name),
    )
    _assert_read(out, name)


@pytest.mark.parametrize("name", sorted(VALUES))
def test_zarr_open_array_after_import_megadump_zarr(arrays, name):
    out = _run(
        """
        import sys
        import megadump_zarr
        import zarr
        assert "torch" not in sys.modules and "xarray" not in sys.modules and "pandas" not in sys.modules
        v = zarr.open_array(sys.argv[1], mode="r")[:]
        print(v.dtype.name, v.view(f"u{v.itemsize}").tolist())
    """,
        str(arrays / name),
    )
    _assert_read(out, name)


@pytest.mark.parametrize("name", sorted(VALUES))
def test_zarr_group_read_then_array_without_importing_us(arrays, name):
    out = _run(
        """
        import sys
        import zarr
        g = zarr.open_group(sys.argv[1], mode="r")
        v = g[sys.argv[2]][:]
        w = zarr.open_array(sys.argv[3], mode="r")[:]
        assert v.tobytes() == w.tobytes()
        print(v.dtype.name, v.view(f"u{v.itemsize}").tolist())
    """,
        str(arrays / "group"),
        name,
        str(arrays / name),
    )
    _assert_read(out, name)


@pytest.mark.parametrize("name", sorted(VALUES))
def test_xarray_open_zarr_without_importing_us(arrays, name):
    out = _run(
        """
        import sys
        import xarray as xr
        ds = xr.open_zarr(sys.argv[1], consolidated=False)
        v = ds[sys.argv[2]].values
        print(v.dtype.name, v.view(f"u{v.itemsize}").tolist())
    """,
        str(arrays / "group"),
        name,
    )
    _assert_read(out, name)
