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
    assert dtypes.NUMPY_DTYPES[name] == native


def test_numpy_dtypes_name_every_data_type_and_nothing_else() -> None:
    assert list(dtypes.NUMPY_DTYPES) == list(dtypes.DATA_TYPES) and len(dtypes.NUMPY_DTYPES) == len(dtypes.DATA_TYPES)
    for unknown in ("complex64", "float8_e4m3", "torch.float32"):
        assert dtypes.NUMPY_DTYPES.get(unknown) is None


@pytest.mark.parametrize("name", dtypes.DATA_TYPES)
def test_numpy_dtypes_read_the_same_bits_as_torch(name: str) -> None:
    """The torch dtype of the same name interprets every bit pattern identically (msprobe's tensor files)."""
    torch = pytest.importorskip("torch")
    dtype = dtypes.NUMPY_DTYPES[name]
    torch_dtype = getattr(torch, name)
    if name == "bool":
        raw = bytes([0, 1] * 8)
    elif dtype.itemsize <= 2:
        raw = np.arange(256**dtype.itemsize, dtype=f"u{dtype.itemsize}").tobytes()
    else:
        raw = np.random.default_rng(0).integers(0, 256, size=4096 * dtype.itemsize, dtype=np.uint8).tobytes()

    with np.errstate(invalid="ignore"):  # signalling NaNs set the invalid flag on conversion
        ours = np.frombuffer(raw, dtype=dtype).astype(np.float64)
    theirs = torch.frombuffer(bytearray(raw), dtype=torch_dtype).to(torch.float64).numpy()

    assert torch_dtype.itemsize == dtype.itemsize
    np.testing.assert_array_equal(ours, theirs)  # exact: stored bytes


@pytest.mark.parametrize("value", ["complex64", "float8_e4m3", "", None, 4, ["float32"]])
def test_unknown_data_types_have_no_itemsize(value: object) -> None:
    assert dtypes.itemsize(value) == 0


def test_every_table_is_the_layout_table() -> None:
    assert digest.DIGEST_ITEMSIZES is dtypes.ITEMSIZES
    assert set(digest.DIGEST_DTYPE_CODES) == set(dtypes.ITEMSIZES)
    assert documents.itemsize is dtypes.itemsize
    assert dtypes.ML_FLOATS == {"bfloat16", "float8_e4m3fn", "float8_e5m2"} <= set(dtypes.DATA_TYPES)


def test_the_writer_refuses_what_the_table_lacks() -> None:
    with pytest.raises(TypeError, match=r"unsupported dtype complex64 .*'float8_e5m2'\]"):
        metadata.data_type_name(np.dtype("complex64"))
    assert [metadata.data_type_name(np.dtype(np.float32)), metadata.data_type_name(np.dtype(ml_dtypes.bfloat16))] == [
        "float32",
        "bfloat16",
    ]
