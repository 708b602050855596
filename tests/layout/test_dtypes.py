"""The on-disk dtype table (``layout.dtypes``) against numpy/ml_dtypes and every table that uses it."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from megadump_zarr.layout import digest, dtypes
from megadump_zarr.read import documents
from megadump_zarr.store import metadata


@pytest.mark.parametrize("name", dtypes.DATA_TYPES)
def test_itemsize_is_the_numpy_itemsize(name: str) -> None:
    native = np.dtype(getattr(ml_dtypes, name)) if name in dtypes.ML_FLOATS else np.dtype(name)
    assert dtypes.itemsize(name) == native.itemsize


@pytest.mark.parametrize("value", ["complex64", "float8_e4m3", "", None, 4, ["float32"]])
def test_unknown_data_types_have_no_itemsize(value: object) -> None:
    assert dtypes.itemsize(value) == 0


def test_every_table_is_the_layout_table() -> None:
    assert digest.DIGEST_ITEMSIZES is dtypes.ITEMSIZES
    assert set(digest.DIGEST_DTYPE_CODES) == set(dtypes.ITEMSIZES)
    assert metadata.SUPPORTED_DTYPES == dtypes.DATA_TYPES
    assert documents.itemsize is dtypes.itemsize
    assert dtypes.ML_FLOATS == {"bfloat16", "float8_e4m3fn", "float8_e5m2"} <= set(dtypes.DATA_TYPES)


def test_the_writer_refuses_what_the_table_lacks() -> None:
    with pytest.raises(TypeError, match=r"unsupported dtype complex64 .*'float8_e5m2'\]"):
        metadata.data_type_name(np.dtype("complex64"))
    assert [metadata.data_type_name(np.dtype(np.float32)), metadata.data_type_name(np.dtype(ml_dtypes.bfloat16))] == [
        "float32",
        "bfloat16",
    ]
