"""The ``megadump`` subcommands: one module per command.

Each module defines ``register(subparsers)``, which adds its parser (``subparsers.add_parser(...)``),
calls ``megadump_zarr.cli.common.add_output_flags`` on it (``--quiet``/``--json``) and sets
``handler=fn`` with ``fn(args, ctx) -> int`` (``ctx``: :class:`megadump_zarr.cli.common.Context`).
Handlers import heavy dependencies (torch, zarr, xarray) inside, so ``megadump --help`` stays fast.

Modules are discovered: a new ``commands/upload.py`` with ``register`` appears in ``megadump --help``
with no other change. ``ORDER`` fixes the order of the known ones; others follow alphabetically.
"""

from __future__ import annotations

from importlib import import_module
import pkgutil
from types import ModuleType

__all__ = ["ORDER", "command_modules"]

ORDER = (
    "demo",
    "info",
    "ls",
    "show",
    "stats",
    "compare",
    "plot",
    "replay",
    "decode_buffer",
    "convert",
    "export_hdf5",
    "upload",
)


def command_modules() -> list[ModuleType]:
    """Every command module of this package, in ``ORDER`` then alphabetically."""
    names = [m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")]
    rank = {name: i for i, name in enumerate(ORDER)}
    names.sort(key=lambda n: (rank.get(n, len(ORDER)), n))
    modules = [import_module(f"{__name__}.{name}") for name in names]
    return [m for m in modules if callable(getattr(m, "register", None))]
