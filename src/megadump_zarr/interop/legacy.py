"""Import legacy (schema version 4, ``torch.save`` per tensor) dumps into this project's Zarr layout.

The predecessor wrote one directory per rank window::

    rank_{r}/window_{wwww}/manifest.json                 schemaVersion 4, level, windowIndex, rank, invocations
      invocation_{iiiiii}_{direction}/
        L1: stages/{stage}/task_{tttttt}[_worker_{ccc}]/{io}_{index:02d}_{name}.pt + task.json
        L0: one primary ``.pt`` per logical tensor, hard links for its other stage ports

:func:`convert_legacy` writes each window into the Zarr layout of ``DESIGN.md`` ("Store layout") with the
same group paths, array names and attribute names the dumper itself writes (see
``megadump_zarr.dump.window``), window ``schemaVersion`` ``FORMAT_VERSION`` (with a group per task: converted
tasks are not packed) and ``convertedFrom`` naming the source.

Legacy directories are untrusted input:

* tensors are read only with ``torch.load(path, map_location="cpu", weights_only=True)``; a file that is not
  a plain tensor (the restricted unpickler refuses it, or it holds anything but one tensor) is a
  ``ValueError`` naming the file; nothing in it is executed;
* every ``file`` in a manifest or ``task.json`` must be a relative path without ``..`` that resolves
  (symbolic links included) to a regular file inside its window directory;
* manifests are validated (schema version, required keys, types) before a single window is written,
  and every window's destination is checked to be free first.

Limits (the legacy format does not carry them): L1 arrays get dimension names
``{array}_dim_{i}`` (or ``{io}_{index:02d}_element`` for truncated records) and no row coordinates,
L0 arrays ``{array}_dim_{i}``; ``declaredShape`` (L1) and ``executionMode`` appear only if the legacy
metadata has them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
import os
from pathlib import Path
import pickle
from typing import Any
import warnings

from megadump_zarr.layout.write_model import ArrayWrite, InvocationWrite
from megadump_zarr.interop._undo import UndoableWrites
from megadump_zarr.interop.legacy_manifest import LEGACY_SCHEMA_VERSION, LegacyTensor, read_legacy_window, window_dirs
from megadump_zarr.layout.paths import window_path

__all__ = ["LEGACY_SCHEMA_VERSION", "convert_legacy"]


def _check_representable(window: Any, url: str | os.PathLike[str]) -> None:
    """Refuse (before anything is written) indices readers cannot represent and a destination window
    that a planted link leads out of a local root."""
    from megadump_zarr.layout.limits import INT64_LIMIT, check_index, check_inside_root

    check_index(window.rank, f"legacy manifest {window.manifest} 'rank'")
    check_index(window.window_index, f"legacy manifest {window.manifest} 'windowIndex'")
    for invocation in window.invocations:
        check_index(
            invocation.attrs.get("invocationId"), f"legacy manifest {window.manifest} 'invocationId'", limit=INT64_LIMIT
        )
        step = invocation.attrs.get("step")
        if not isinstance(step, int) or not -INT64_LIMIT <= step < INT64_LIMIT:
            raise ValueError(f"legacy manifest {window.manifest} 'step' must be an int64, got {step!r}")
    if "://" not in os.fspath(url):
        check_inside_root(url, window_path(window.rank, window.window_index))


# --------------------------------------------------------------------------- loading (untrusted files)
def _load_tensor(item: LegacyTensor) -> Any:
    """Load one legacy tensor with torch's restricted unpickler and check it against its metadata."""
    import torch

    from megadump_zarr.tensor_arrays import dtype_name, tensor_to_numpy

    try:
        with warnings.catch_warnings():  # torch warns about pickle protocols it may not support; we report errors
            warnings.filterwarnings("ignore", message="Detected pickle protocol", category=UserWarning)
            obj = torch.load(item.file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise ValueError(
            f"refusing legacy tensor file {item.file}: it is not a plain tensor file, torch.load(weights_only=True) "
            f"refused it ({_first_reason(error)}); it was not unpickled"
        ) from None
    except Exception as error:  # corrupt or truncated archives, unsupported storage types, ...
        raise ValueError(
            f"cannot load legacy tensor file {item.file}: {type(error).__name__}: {_first_reason(error)}"
        ) from None
    if not isinstance(obj, torch.Tensor):
        raise ValueError(f"legacy tensor file {item.file} holds a {type(obj).__name__}, not a single torch.Tensor")
    if obj.layout != torch.strided or obj.is_quantized:
        raise ValueError(
            f"legacy tensor file {item.file} holds a {obj.layout} tensor; only dense tensors are supported"
        )
    stored = dtype_name(obj.dtype)
    if item.dtype is not None and stored != item.dtype:
        raise ValueError(
            f"legacy tensor file {item.file} holds dtype {stored}, its metadata says storedDtype {item.dtype!r}"
        )
    shape = tuple(obj.shape)
    if item.shape is not None and shape != item.shape:
        raise ValueError(
            f"legacy tensor file {item.file} holds shape {list(shape)}, its metadata says {list(item.shape)}"
        )
    try:
        return tensor_to_numpy(obj)
    except TypeError as error:
        raise ValueError(f"legacy tensor file {item.file}: {error}") from None


def _first_reason(error: BaseException) -> str:
    """The informative line of a (possibly very long) torch error message, without torch's boilerplate
    (which suggests retrying with ``weights_only=False``: exactly what must not be done here)."""
    boilerplate = ("Weights only load failed", "Check the documentation", "Please file an issue")
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    for line in lines:
        if not line.startswith(boilerplate):
            return line
    return lines[-1] if lines else type(error).__name__


def _array(item: LegacyTensor, data: Any) -> ArrayWrite:
    dims = item.dims if item.dims is not None else tuple(f"{item.component}_dim_{i}" for i in range(data.ndim))
    return ArrayWrite(item.path, data, dims, item.attrs)


# --------------------------------------------------------------------------- progress
@contextmanager
def progress_bar(enabled: bool, total: int, label: str = "converting legacy tensors") -> Iterator[Any]:
    if not enabled:
        yield lambda description=None: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()) as bar:
        task = bar.add_task(label, total=total)

        def tick(description: str | None = None) -> None:
            bar.update(task, advance=1, description=description or label)

        yield tick


# --------------------------------------------------------------------------- public API
def convert_legacy(
    legacy_dir: str | os.PathLike[str],
    url: str | os.PathLike[str],
    *,
    storage_options: Mapping[str, Any] | None = None,
    compressor: str | None = "default",
    progress: bool = False,
) -> list[str]:
    """Import every legacy window (``rank_*/window_*/manifest.json``, schema version 4) below ``legacy_dir``.

    Every manifest is read and validated, and every tensor file path checked, before anything is
    written; each destination window must not exist yet. Then each window is written invocation by
    invocation (one invocation's tensors in memory at a time) and committed ``"complete"``. If a
    tensor file is refused while the windows are being written, every window this call wrote is
    removed again (with the rank/root documents it created) and the error is raised: a refused input
    leaves no output.

    Args:
        legacy_dir: Directory holding the legacy ``rank_{r}/`` directories.
        url: Destination dump root: a local directory or an fsspec URL.
        storage_options: fsspec options for a URL destination.
        compressor: Compressor of the destination arrays (see :mod:`megadump_zarr.codecs`).
        progress: Show a rich progress bar (one tick per tensor).

    Returns:
        The converted windows' paths (local) or URLs, in (rank, window) order.

    Raises:
        ValueError: A manifest or ``task.json`` that is invalid (naming the file and key), a file path that
            escapes its window directory, or a tensor file that is not a plain tensor (naming the file).
        FileExistsError: A destination window already exists (nothing written).
        FileNotFoundError: ``legacy_dir`` is not a directory.
    """
    from megadump_zarr.store.writer import WindowWriter, window_status

    root = Path(legacy_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"legacy dump directory not found: {root}")
    legacy_root = root.resolve(strict=True)
    windows = [read_legacy_window(directory, legacy_root) for directory in window_dirs(root)]
    if not windows:
        raise ValueError(f"no legacy windows (rank_*/window_*/manifest.json) found below {root}")
    options = dict(storage_options) if storage_options is not None else None
    seen: dict[tuple[int, int], Path] = {}
    for window in windows:
        _check_representable(window, url)
        key = (window.rank, window.window_index)
        if key in seen:
            raise ValueError(
                f"legacy manifests {seen[key]} and {window.manifest} both describe rank {key[0]} window {key[1]}"
            )
        seen[key] = window.manifest
        if window_status(url, window.rank, window.window_index, storage_options=options) is not None:
            raise FileExistsError(
                f"Tensor dump window already exists: rank {window.rank} window {window.window_index} below {url} "
                f"(converting {window.manifest})"
            )

    urls: list[str] = []
    total = sum(window.tensor_count for window in windows)
    with (
        WindowWriter(url, storage_options=options, compressor=compressor, pack=False) as writer,
        progress_bar(progress, total) as tick,
    ):
        undo = UndoableWrites(writer)
        try:
            for window in windows:
                session = undo.begin(window.rank, window.window_index, window.attrs)
                for invocation in window.invocations:
                    arrays = []
                    for item in invocation.tensors:
                        arrays.append(_array(item, _load_tensor(item)))
                        tick(f"rank {window.rank} window {window.window_index} {invocation.name}")
                    session.write_invocation(
                        InvocationWrite(invocation.name, dict(invocation.attrs), list(invocation.groups), arrays)
                    )
                    del arrays
                urls.append(session.commit("complete"))
        except BaseException as error:  # a refused input leaves no output: remove every window begun
            try:
                undo.undo()
            except Exception as undo_error:
                error.add_note(f"removing the windows this conversion wrote below {url} also failed: {undo_error!r}")
            raise
        writer.index_root()
    return urls
