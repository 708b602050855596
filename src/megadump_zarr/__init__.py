"""megadump_zarr: dump MegaKernel tensors (L0 kernel boundary, L1 task boundary) into Zarr v3, read them with xarray.

Public API (``__all__``; stable and documented in the API reference)::

    TensorDumpConfig, tensor_dump, schedule, DiagnosticAction        # capture
    RecorderConfig                                                    # flight recorder (TensorDumpConfig(recorder=))
    open_dump, Dump, DumpIntegrityError, verify_dump, VerifyReport    # read and check
    compare, first_divergence, root_cause, first_nonfinite, error_map # analyse
    plot_diff                                                         # look
    replay, ReplayResult, register_reference                          # run one dumped task again
    watch                                                             # follow a dump while it is written

The reference runtime a kernel is written on is ``megadump_zarr.runtime`` (its own ``__all__``). Every
other module is private to its layer.

Everything is imported on first use: zarr loads ``megadump_zarr.store.dtypes`` in every interpreter
that reads a dump (see ``store/zarr_plugin.py``), and that must not pull in torch, xarray or pandas; importing
the package registers those data types with zarr and nothing more.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# Register bfloat16/float8 with zarr now: zarr 3.1 parses an array's data type before loading any plugin,
# so `zarr.open_array` of a bf16 array works after `import megadump_zarr` (store/zarr_plugin.py).
from megadump_zarr.store import dtypes as _dtypes  # noqa: F401

from megadump_zarr._version import __version__ as __version__

__all__ = [
    "DiagnosticAction",
    "Dump",
    "DumpIntegrityError",
    "RecorderConfig",
    "ReplayResult",
    "TensorDumpConfig",
    "VerifyReport",
    "compare",
    "error_map",
    "first_divergence",
    "first_nonfinite",
    "open_dump",
    "plot_diff",
    "register_reference",
    "replay",
    "root_cause",
    "schedule",
    "tensor_dump",
    "verify_dump",
    "watch",
]

_PUBLIC = {
    "DiagnosticAction": "megadump_zarr.diagnostics",
    "schedule": "megadump_zarr.diagnostics",
    "TensorDumpConfig": "megadump_zarr.dump.config",
    "RecorderConfig": "megadump_zarr.dump.recorder_config",
    "tensor_dump": "megadump_zarr.api",
    "open_dump": "megadump_zarr.read",
    "Dump": "megadump_zarr.read",
    "DumpIntegrityError": "megadump_zarr.read.errors",
    "verify_dump": "megadump_zarr.verify",
    "VerifyReport": "megadump_zarr.verify",
    "compare": "megadump_zarr.analyse",
    "error_map": "megadump_zarr.analyse",
    "first_divergence": "megadump_zarr.analyse",
    "first_nonfinite": "megadump_zarr.analyse",
    "root_cause": "megadump_zarr.analyse",
    "plot_diff": "megadump_zarr.analyse.plot",
    "replay": "megadump_zarr.replay",
    "ReplayResult": "megadump_zarr.replay",
    "register_reference": "megadump_zarr.replay",
    "watch": "megadump_zarr.analyse.watch",
}


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'megadump_zarr' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
