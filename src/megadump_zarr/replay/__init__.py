"""Replay one dumped L1 task on its own dumped inputs against a golden (analyse level).

``replay(dump, stage, task_id=... | owner=..., invocation=..., reference=...)`` rebuilds the task's
parameters from its dumped input views (zeros elsewhere), runs the reference tile function in the
dump's dtype and in float64, and says whether the task is **wrong on its own inputs** (it is the
culprit) or **correct on its inputs** (look upstream). References: a callable or ``"module:attr"``,
``register_reference(kernel, stage, fn)``, or the source the dump names (the embedded demo model).

This room imports the reference runtime (to run operators), the read layer and analyse; never the dumper.
"""

from megadump_zarr.replay.references import clear_references, register_reference
from megadump_zarr.replay.run import CORRECT, WRONG, ReplayResult, replay

__all__ = ["CORRECT", "WRONG", "ReplayResult", "clear_references", "register_reference", "replay"]


def _make_callable() -> None:
    """``megadump_zarr.replay`` names both this package and its function: make the package callable
    (``megadump_zarr.replay(dump, ...)`` works whichever one an import bound to the name)."""
    import sys
    import types

    class _CallableModule(types.ModuleType):
        def __call__(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN204
            return replay(*args, **kwargs)

    sys.modules[__name__].__class__ = _CallableModule


_make_callable()
