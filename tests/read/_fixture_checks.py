"""Checks shared by the stored-fixture tests (``tests/read/test_fixtures.py``); imported as ``tests.read._fixture_checks``.

A fixture's floats were computed on another machine: a fresh run of the same step may differ from them
by an ulp (another CPU capability, another thread count, another BLAS). So stored bytes are checked
against the checksum list stored with the fixture (exact), and a fresh run is compared with the fixture
within the dtype's tolerance, integers, booleans, strings and metadata exact.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
import shutil
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr


SUMS = "SHA256SUMS"
# Tolerance of a fresh recomputation against a stored float, by stored dtype name: (rtol, atol).
TOLERANCE = {"float64": (1e-7, 1e-9), "float32": (1e-5, 1e-6), "float16": (1e-3, 1e-4), "bfloat16": (1e-2, 1e-2)}


def file_digests(root: Path) -> dict[str, str]:
    """The sha256 of every file below ``root`` except the checksum list, by path relative to ``root``.

    Args:
        root: The fixture directory.
    """
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != SUMS
    }


def copy_stored(data: Path, dest: Path) -> Path:
    """A working copy of the stored dumps in ``data`` (their files only: no generator, README or SHA256SUMS), so a
    test reads them while the fixture stays pristine.

    Args:
        data: The fixture directory.
        dest: An existing (empty) directory to copy into.
    """
    return Path(
        shutil.copytree(data, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.py", "*.md", "SHA256SUMS"))
    )


def write_sums(root: Path, levels: tuple[str, ...]) -> None:
    """Write ``root/SHA256SUMS`` (``sha256sum`` format) for the files of ``levels`` below ``root``.

    Args:
        root: The fixture directory.
        levels: The dump directories inside it (``l0``, ``l1``).
    """
    lines = [f"{digest}  {level}/{rel}" for level in levels for rel, digest in file_digests(root / level).items()]
    (root / SUMS).write_text("\n".join(lines) + "\n")


def assert_stored_bytes_unchanged(root: Path, levels: tuple[str, ...]) -> int:
    """Every stored file of ``levels`` hashes to its line of ``root/SHA256SUMS``, and no file is missing or extra.

    Args:
        root: The fixture directory.
        levels: The dump directories inside it.

    Returns:
        The number of files checked.
    """
    listed = {}
    for line in (root / SUMS).read_text().splitlines():
        digest, _, rel = line.partition("  ")
        listed[rel] = digest
    on_disk = {f"{level}/{rel}": d for level in levels for rel, d in file_digests(root / level).items()}
    assert set(on_disk) == set(listed), sorted(set(on_disk) ^ set(listed))
    changed = sorted(rel for rel in listed if on_disk[rel] != listed[rel])
    assert not changed, f"stored fixture files changed: {changed}"
    return len(listed)


def tolerance(dtype: Any) -> tuple[float, float]:
    """(rtol, atol) for a recomputed float of ``dtype`` against a stored one.

    Args:
        dtype: A numpy dtype or dtype name.
    """
    return TOLERANCE[str(np.dtype(dtype)) if not isinstance(dtype, str) else dtype]


def assert_values_close(stored: np.ndarray, fresh: np.ndarray, what: str) -> None:
    """``fresh`` equals ``stored``: same dtype and shape; integers and booleans exact, floats within tolerance.

    Args:
        stored: Values read from the fixture.
        fresh: Values of today's run.
        what: Names the array in a failure.
    """
    stored, fresh = np.asarray(stored), np.asarray(fresh)
    assert stored.dtype == fresh.dtype and stored.shape == fresh.shape, (what, stored.dtype, fresh.dtype)
    if np.issubdtype(stored.dtype, np.floating) or np.issubdtype(stored.dtype, np.complexfloating):
        rtol, atol = tolerance(stored.dtype)
        np.testing.assert_allclose(fresh, stored, rtol=rtol, atol=atol, err_msg=what)
    else:
        np.testing.assert_array_equal(fresh, stored, err_msg=what)  # exact: integers


def _split_stats(attrs: dict) -> tuple[dict, dict]:
    rest = dict(attrs)
    return rest, rest.pop("stats", {})


def assert_dataarray_close(stored: xr.DataArray, fresh: xr.DataArray, what: str) -> None:
    """Same name, dims, coordinates and attributes; values and float stats within tolerance.

    Args:
        stored: A record or tensor read from the fixture.
        fresh: The same record or tensor of today's run.
        what: Names it in a failure.
    """
    assert stored.name == fresh.name and stored.dims == fresh.dims, what
    assert set(stored.coords) == set(fresh.coords), what
    for name in stored.coords:
        assert_values_close(stored.coords[name].values, fresh.coords[name].values, f"{what} coord {name}")
    (a, sa), (b, sb) = _split_stats(stored.attrs), _split_stats(fresh.attrs)
    assert a == b, what
    assert set(sa) == set(sb), what
    for key, value in sa.items():
        if isinstance(value, float):
            assert np.isclose(sb[key], value, rtol=1e-5, atol=1e-6), (what, key, value, sb[key])
        else:
            assert sb[key] == value, (what, key)
    assert_values_close(stored.values, fresh.values, what)


def assert_records_close(stored: pd.DataFrame, fresh: pd.DataFrame) -> None:
    """Same records: every non-float column exact, float columns (stats) within float32 tolerance.

    Args:
        stored: ``records()`` of the fixture.
        fresh: ``records()`` of today's run.
    """
    assert list(stored.columns) == list(fresh.columns)
    # where a record's bytes are (a pack's array and row, the group and variable that open it) is the layout's, not the record's
    layout = ["pack_array", "pack_row", "zarr_group", "variable"]
    stored = stored.drop(columns=layout).reset_index(drop=True)
    fresh = fresh.drop(columns=layout).reset_index(drop=True)
    floats = [c for c in stored.columns if pd.api.types.is_float_dtype(stored[c])]
    exact = [c for c in stored.columns if c not in floats]
    pd.testing.assert_frame_equal(stored[exact], fresh[exact])
    pd.testing.assert_frame_equal(stored[floats], fresh[floats], check_exact=False, rtol=1e-5, atol=1e-6)


def assert_records_read_as_stored(root: Path) -> Any:
    """Every record of the dump at ``root`` reads exactly as zarr-python reads its stored bytes (its own array, or
    the row of the pack array the records name), in its dtype and shape, and carries the statistics the writer
    stored (floats within tolerance: recomputed here; integers exactly). Warnings are errors.

    Returns:
        The opened dump.
    """
    import warnings

    import zarr

    from megadump_zarr import open_dump

    dump = open_dump(root)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for row in dump.records().itertuples():
            values = dump.record_array(row.path).values
            if pd.isna(row.pack_array):  # a task group's array, as stored
                on_disk = zarr.open_array(str(root / row.path), mode="r")[...]
            else:  # the row of the pack array the records name
                on_disk = zarr.open_array(str(root / row.pack_array), mode="r")[row.pack_row]
            np.testing.assert_array_equal(values, on_disk, err_msg=row.path)  # exact: stored bytes
            assert values.dtype == np.dtype(row.dtype) and values.shape == tuple(row.shape), row.path
            if values.dtype.kind == "f":  # stats stored by the writer, recomputed here: tolerance
                assert np.isclose(values.min(), row.min, rtol=1e-6) and np.isclose(values.max(), row.max, rtol=1e-6)
                assert np.isclose(values.mean(dtype=np.float64), row.mean, rtol=1e-5, atol=1e-6), row.path
            else:  # exact: integers
                assert values.min() == row.min and values.max() == row.max, row.path
    return dump
