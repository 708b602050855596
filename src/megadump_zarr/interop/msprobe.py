"""Import Ascend msprobe (PyPI ``mindstudio-probe``) PyTorch dumps into this project's Zarr layout.

msprobe's ``PrecisionDebugger`` writes, per step and rank (or process)::

    {dump_path}/step{N}/rank{R}|proc{PID}/dump.json          task, level, framework, dump_data_dir, data
                                        /dump_tensor_data/{data_name}   tensor task: one .pt (or .npy) per tensor
                                        /stack.json, construct.json     (not imported)

``data`` maps each API call (``Functional.linear.0.forward``, ``Module.fc1.Linear.forward.0``,
``Module.fc1.Linear.parameters_grad.0``) to its arguments: ``input_args`` (list), ``input_kwargs``
(mapping), ``output`` (forward) or ``input``/``output`` (backward), nested lists/mappings of leaves; a
module's forward at msprobe level L0 or mix also has ``parameters`` (its weights and buffers by name), and
its ``parameters_grad`` entry maps each parameter to its gradient. A tensor leaf has ``type``
``torch.Tensor``, ``dtype``, ``shape``, msprobe's ``Max``/``Min``/``Mean``/``Norm`` and, in the tensor
task, ``data_name``. Every level (L0 modules, L1 APIs, mix both) converts the same way.

:func:`convert_msprobe` writes one window per (rank, step), ``rank_{r}/window_{wwww}`` with windows
numbered in step order, level ``L0``: each API call in ``data`` order (msprobe's execution order) is
one invocation ``invocation_{iiiiii}_{forward|backward}`` (``kernelName`` the API, e.g.
``Functional.linear``), each tensor leaf one record whose ``name`` is msprobe's full data name without
extension (``Functional.linear.0.forward.input.0``), with ``api``, ``callIndex``, ``direction``, ``io``,
``argIndex`` (``"0"``, ``"0.1"`` for nested, the keyword for kwargs, the parameter's name) and
``msprobeKey`` (``input_args``, ``parameters``, ``parameters_grad``, ...) as attributes and msprobe's
own statistics as ``msprobeStats``. Non-tensor arguments are kept in the invocation's ``nonTensorArgs``.
A module's parameters are *inputs* of its forward, recorded after its arguments and before its outputs
(so a perturbed weight, not the output it feeds, is the root cause); ``parameters_grad`` is a backward
invocation whose records (``Module.fc1.Linear.parameters_grad.0.weight``) are *outputs*.

Statistics task (no tensor files): every invocation gets a ``statistics`` table
(:mod:`megadump_zarr.read.msprobe.statistics_table`: one row per tensor leaf, ``payload`` false, so
``records()`` lists them as statistics-only records) holding msprobe's Max/Min/Mean/Norm as
min/max/mean/l2norm, and no payload arrays. The invocation's ``records`` attribute keeps every record's
attributes, msprobe's statistics included.

msprobe directories are untrusted input, handled like the legacy importer's (:mod:`.legacy`): every
``data_name`` must be a plain file name that resolves (links included) to a regular file inside its
``dump_tensor_data`` directory; ``.pt`` files load only through ``torch.load(weights_only=True)`` and must
hold one dense tensor of the dtype and shape ``dump.json`` states; ``.npy`` files load with
``allow_pickle=False``; every ``dump.json`` is validated and every file checked before anything is
written, and every destination window must be free.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
import os
from pathlib import Path
from typing import Any

from megadump_zarr.read.msprobe.attrs import invocation_attrs, invocation_name, record_attrs, window_attrs
from megadump_zarr.read.msprobe.load import load_tensor
from megadump_zarr.read.msprobe.dump_json import Window, is_msprobe_dump, msprobe_windows
from megadump_zarr.read.msprobe.statistics_table import statistics_table

__all__ = ["convert_msprobe", "is_msprobe_dump"]


def _invocations(window: Window, tick: Any) -> Iterator[Any]:
    """The window's invocations, one API call at a time (tensor files are loaded here, one call in memory)."""
    from megadump_zarr.layout.write_model import ArrayWrite, InvocationWrite
    from megadump_zarr.layout.names import NameTable

    for i, call in enumerate(window.calls):
        name = invocation_name(i, call)
        table = NameTable(f"{name} of {window.source}")
        components = [table.add(item.name) for item in call.tensors]
        arrays = []
        statistics = None
        if window.task == "tensor":
            for position, (item, component) in enumerate(zip(call.tensors, components)):
                data = load_tensor(item)
                dims = tuple(f"{component}_dim_{d}" for d in range(data.ndim))
                arrays.append(ArrayWrite(component, data, dims, record_attrs(window, call, position, item)))
                tick(f"rank {window.rank} step {window.step} {call.key}")
        elif call.tensors:
            statistics = statistics_table(call.key, call.tensors, components)
            for _ in call.tensors:
                tick(f"rank {window.rank} step {window.step} {call.key}")
        attrs = invocation_attrs(window, i, call)
        if window.task != "tensor":
            attrs["records"] = [record_attrs(window, call, p, t) for p, t in enumerate(call.tensors)]
        yield InvocationWrite(name, attrs, [], arrays, statistics)


def convert_msprobe(
    dump_dir: str | os.PathLike[str],
    url: str | os.PathLike[str],
    *,
    storage_options: Mapping[str, Any] | None = None,
    compressor: str | None = "default",
    progress: bool = False,
) -> list[str]:
    """Import every msprobe PyTorch dump (``step*/rank*|proc*/dump.json``) below ``dump_dir``.

    Every ``dump.json`` is read and validated and every tensor file checked before anything is written;
    each destination window must not exist yet. Windows are then written call by call and committed
    ``"complete"``; a tensor file refused while the windows are written removes every window this call
    wrote (a refused input leaves no output).

    Args:
        dump_dir: msprobe's ``dump_path`` (holding ``step{N}/`` directories), or one ``step{N}`` directory,
            or one ``step{N}/rank{R}|proc{PID}`` directory (the step number is kept either way).
        url: Destination dump root: a local directory or an fsspec URL.
        storage_options: fsspec options for a URL destination.
        compressor: Compressor of the destination arrays (see :mod:`megadump_zarr.codecs`).
        progress: Show a rich progress bar (one tick per tensor).

    Returns:
        The converted windows' paths (local) or URLs, in (rank, window) order.

    Raises:
        ValueError: An invalid ``dump.json`` (naming the file and key), a ``data_name`` escaping its
            directory, or a tensor file that is not a plain tensor/array (naming the file).
        FileExistsError: A destination window already exists (nothing written).
        FileNotFoundError: ``dump_dir`` is not a directory.
    """
    from megadump_zarr.interop._undo import UndoableWrites
    from megadump_zarr.interop.legacy import progress_bar
    from megadump_zarr.store.writer import WindowWriter, window_status

    root = Path(dump_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"msprobe dump directory not found: {root}")
    windows = msprobe_windows(root)
    options = dict(storage_options) if storage_options is not None else None
    for window in windows:
        if window_status(url, window.rank, window.index, storage_options=options) is not None:
            raise FileExistsError(
                f"Tensor dump window already exists: rank {window.rank} window {window.index} below "
                f"{url} (converting {window.source})"
            )
    urls: list[str] = []
    total = sum(w.tensor_count for w in windows)
    with (
        WindowWriter(url, storage_options=options, compressor=compressor, pack=False) as writer,
        progress_bar(progress, total, "converting msprobe tensors") as tick,
    ):
        undo = UndoableWrites(writer)
        try:
            for window in windows:
                session = undo.begin(window.rank, window.index, window_attrs(window))
                urls.append(session.write_all(_invocations(window, tick)))
        except BaseException as error:  # a refused file: every window this call wrote is removed again
            try:
                undo.undo()
            except Exception as undo_error:
                error.add_note(f"removing the windows this conversion wrote below {url} also failed: {undo_error!r}")
            raise
        writer.index_root()
    return urls
