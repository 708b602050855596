"""The on-disk dtype table: every Zarr ``data_type`` a dump stores, its bytes per element and its numpy dtype."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

__all__ = ["DATA_TYPES", "ITEMSIZES", "ML_FLOATS", "NUMPY_DTYPES", "itemsize"]

ITEMSIZES = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "uint8": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "float16": 2,
    "float32": 4,
    "float64": 8,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}
"""Bytes per element of every ``data_type`` a dump stores (numpy's names; ml_dtypes' for bfloat16 and float8)."""
DATA_TYPES = tuple(ITEMSIZES)
"""The stored ``data_type`` names, in the order messages list them."""
ML_FLOATS = frozenset({"bfloat16", "float8_e4m3fn", "float8_e5m2"})
"""The floating-point types numpy knows only through ml_dtypes (their numpy ``kind`` is not ``"f"``)."""


def itemsize(data_type: Any) -> int:
    """Bytes per element of a stored ``data_type`` (0 when unknown or not a string).

    Args:
        data_type: The array document's ``data_type`` (``float32``, ``bfloat16``, ...).
    """
    return ITEMSIZES.get(data_type, 0) if isinstance(data_type, str) else 0


class _NumpyDtypes(Mapping[str, "np.dtype[Any]"]):
    """Stored ``data_type`` -> numpy dtype. The ``ml_dtypes`` ones (:data:`ML_FLOATS`) are looked up, and
    ``ml_dtypes`` imported, only when asked for: a float32 lookup imports nothing (``ml_dtypes`` costs half a
    second of start-up)."""

    def __getitem__(self, name: str) -> np.dtype[Any]:
        if name not in ITEMSIZES:
            raise KeyError(name)
        if name in ML_FLOATS:
            import ml_dtypes

            return np.dtype(getattr(ml_dtypes, name))
        return np.dtype(name)

    def __iter__(self) -> Iterator[str]:
        return iter(DATA_TYPES)

    def __len__(self) -> int:
        return len(DATA_TYPES)


NUMPY_DTYPES: Mapping[str, np.dtype[Any]] = _NumpyDtypes()
"""The numpy dtype of every stored ``data_type`` (torch's names), in :data:`DATA_TYPES` order (a read-only mapping)."""
