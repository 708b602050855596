"""Accuracy analysis of tensor dumps: compare with another dump or an eager reference, find divergences.

::

    from megadump_zarr.analyse import compare, first_divergence, first_nonfinite, root_cause

    result = compare("run_npu/l0", "run_ref/l0")            # dump vs dump, one row per record
    result = compare(dump, {"out": eager_out}, invocation=2)  # dump vs eager tensors
    first_divergence(result)                                # first failing row in execution order
    root_cause(result)                                      # first failing row whose own inputs pass
    error_map(result, by="owner")                           # verdicts and worst errors per owner/core/task
    first_nonfinite(dump)                                   # first record whose stats show NaN/Inf
"""

from __future__ import annotations

from megadump_zarr.analyse.compare import RESULT_COLUMNS, compare, first_divergence, first_nonfinite
from megadump_zarr.analyse.errormap import error_map
from megadump_zarr.analyse.rootcause import root_cause

__all__ = ["RESULT_COLUMNS", "compare", "error_map", "first_divergence", "first_nonfinite", "root_cause"]
