"""The statistics table of an msprobe statistics-task API call (see :mod:`megadump_zarr.interop.msprobe` and :mod:`.store`).

msprobe records no NaN/Inf counts: they are 0 when all four statistics are finite (msprobe's torch
reductions run over every element, so a NaN or Inf would show) or the dtype is integral or bool, else
unknown (``-1``); the element count is the shape's product; the digest is 0 (none, ``digests``
false in the table's attributes). msprobe's ``md5`` digests (``summary_mode: "md5"``) go in the table's
``msprobeMd5`` attribute, one per row.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from megadump_zarr.layout.statistics import MSPROBE_MD5

__all__ = ["statistics_table"]


def _integral(dtype: str) -> bool:
    return dtype == "bool" or dtype.startswith(("int", "uint"))


def statistics_table(key: str, tensors: Sequence[Any], names: list[str]) -> Any:
    """The ``statistics`` table of one msprobe API call of the statistics task (no payload).

    Args:
        key: msprobe's API call name (``Functional.linear.0.forward``).
        tensors: The call's tensor leaves (``name``, ``io``, ``dtype``, ``shape``, ``stats``), in record order.
        names: Their component names in the invocation group.
    """
    from megadump_zarr.layout.write_model import StatisticsTable

    n = len(tensors)

    def column(stat: str) -> np.ndarray:
        out = np.full(n, np.nan)
        for i, item in enumerate(tensors):
            value = item.stats.get(stat)
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[i] = float(value)
        return out

    text = lambda values: np.array(values, dtype=object)
    # msprobe keeps no NaN/Inf counts; its Max/Min/Mean/Norm are torch reductions over every element, so
    # when all four are finite the tensor holds no NaN or Inf (0); otherwise the counts are unknown (-1).
    # An integer or bool tensor holds neither (msprobe gives it no Mean/Norm).
    finite = [
        _integral(t.dtype)
        or all(
            isinstance(t.stats.get(k), int | float)
            and not isinstance(t.stats.get(k), bool)
            and math.isfinite(t.stats[k])
            for k in ("Max", "Min", "Mean", "Norm")
        )
        for t in tensors
    ]
    counts = np.array([0 if ok else -1 for ok in finite], dtype=np.int64)
    coords = {
        "stage": text([""] * n),
        "task_id": np.full(n, -1, np.int64),
        "owner_id": np.full(n, -1, np.int64),
        "core_type": text([""] * n),
        "core_id": np.full(n, -1, np.int64),
        "worker": np.full(n, -1, np.int64),
        "io": text([t.io for t in tensors]),
        "index": np.arange(n, dtype=np.int64),
        "name": text([t.name for t in tensors]),
        "param_position": np.arange(n, dtype=np.int64),
        "shape": text([json.dumps(list(t.shape)) for t in tensors]),
        "dtype": text([t.dtype for t in tensors]),
        "path": text(names),
        "payload": np.zeros(n, dtype=bool),
    }
    variables = {
        "element_count": np.array([math.prod(t.shape) for t in tensors], dtype=np.int64),
        "nan_count": counts,
        "inf_count": counts,
        # a norm is never negative: msprobe's Norm of a 0-d tensor is the value itself (signed)
        "min": column("Min"),
        "max": column("Max"),
        "mean": column("Mean"),
        "l2norm": np.abs(column("Norm")),
        "digest": np.zeros(n, dtype=np.uint64),  # msprobe has none: "digests": False tells readers
    }
    attrs: dict[str, Any] = {"source": "msprobe statistics task", "msprobeCall": key, "digests": False}
    digests = [t.stats.get("md5") for t in tensors]
    if any(d is not None for d in digests):  # summary_mode "md5": msprobe's digest per row, read as records' md5
        attrs[MSPROBE_MD5] = digests
    return StatisticsTable(coords, variables, attrs)
