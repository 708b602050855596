"""Accuracy analysis of tensor dumps: compare with another dump or an eager reference, find divergences.

::

    from megadump_zarr.analyse import compare, first_divergence, first_nonfinite

    result = compare("run_npu/l0", "run_ref/l0")            # dump vs dump, one row per record
    result = compare(dump, {"out": eager_out}, invocation=2)  # dump vs eager tensors
    first_divergence(result)                                # first failing row in execution order
    first_nonfinite(dump)                                   # first record whose stats show NaN/Inf
"""

from __future__ import annotations

from megadump_zarr.analyse.compare import RESULT_COLUMNS, compare, first_divergence, first_nonfinite

__all__ = ["RESULT_COLUMNS", "compare", "first_divergence", "first_nonfinite"]
