"""What a result looks like to the faces: JSON-ready values and the order failures are shown in.

Both faces that present results use these, ``cli`` (``--json``, the compare table) and ``report`` (the HTML
report's data), so they live in a leaf below both that imports nothing of the package (numpy and pandas load
only when a value needs them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["failures_first", "to_jsonable"]


def to_jsonable(value: Any) -> Any:
    """A value JSON can hold: NaN and missing values become null, infinities the strings "inf"/"-inf",
    tuples lists, numpy scalars and arrays Python values, paths strings."""
    import math

    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value
    try:
        import numpy as np
        import pandas as pd
    except ImportError:  # pragma: no cover - both are dependencies
        return str(value)
    if value is pd.NA or value is pd.NaT:
        return None
    if isinstance(value, np.ndarray):
        return [to_jsonable(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        item = value.item()
        if isinstance(item, (int, float, bool, str)):
            return to_jsonable(item)
        return to_jsonable(float(value))  # bfloat16/float8 scalars
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    return str(value)


def failures_first(result: Any) -> Any:
    """Rows that do not pass, then the passing ones, each in their original (execution) order."""
    import pandas as pd

    if result.empty:
        return result
    failing = result["verdict"] != "pass"
    return pd.concat([result[failing], result[~failing]])
