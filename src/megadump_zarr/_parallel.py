"""Run one function over many items as dask tasks, on whatever dask scheduler is active.

:func:`map_ordered` is the one place where the package hands work to dask (a leaf that imports nothing of
the package, so ``verify`` and ``analyse`` both use it): ``compare`` runs one task per record pair,
``verify``, ``first_nonfinite`` and ``stats`` one per window, on

* the ``distributed.Client`` of the user's session when there is one (``Client(address)`` or
  ``Client(LocalCluster(...))`` makes itself dask's default scheduler): the tasks run on its workers;
* otherwise dask's local scheduler for ``dask.delayed`` (threads, or whatever ``dask.config.set(scheduler=...)``
  names).

Items travel to the workers pickled, so they carry what a worker needs to open the data itself (a dump URL,
its storage options wrapped in :class:`megadump_zarr.read.source.DumpSource`, record paths), never an open
dump. Task keys are ``megadump-<function>-<run id>-<item index>``: nothing about an item (and so no
credential) is hashed or spelled into a key, and a task's ``repr`` shows only its index.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
import contextlib
import sys
from typing import Any
import uuid

__all__ = ["active_client", "map_ordered"]

_LABEL_CHARS = 160


class _Item:
    """An item boxed for the graph: dask treats it as an opaque literal (never traverses or tokenizes it)."""

    __slots__ = ("index", "value")

    def __init__(self, index: int, value: Any) -> None:
        self.index = index
        self.value = value

    def __repr__(self) -> str:  # task reprs in scheduler/worker logs show the index only
        return f"<item {self.index}>"


def _label(index: int, value: Any) -> str:
    label = getattr(value, "label", None)
    if callable(label):
        label = label()
    if not isinstance(label, str) or not label:
        label = repr(value)
        if len(label) > _LABEL_CHARS:
            label = label[: _LABEL_CHARS - 3] + "..."
    return f"item {index} ({label})"


class _Call:
    """``fn(item)`` with the item named in any exception it raises (type and attributes kept)."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def __call__(self, item: _Item) -> Any:
        try:
            return self.fn(item.value)
        except Exception as error:
            label = _label(item.index, item.value)
            if len(error.args) == 1 and isinstance(error.args[0], str) and not error.args[0].startswith(label):
                error.args = (f"{label}: {error.args[0]}",)
            else:
                error.add_note(f"while running {_name(self.fn)} on {label}")
            raise

    def __repr__(self) -> str:
        return f"<{_name(self.fn)}>"


def _name(fn: Any) -> str:
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
    return str(name).replace("<", "").replace(">", "").replace(" ", "_")


def active_client() -> Any | None:
    """The ``distributed.Client`` dask would run ``dask.compute`` on now, or ``None`` (local scheduler, or
    called from inside a task on a worker)."""
    if "distributed" not in sys.modules:  # no client or worker can exist before distributed is imported: skip its
        return None  # import (~0.15 s of every command-line compare's start-up)
    try:
        from distributed import get_worker
    except ImportError:  # distributed not installed: only local schedulers exist
        return None
    try:
        get_worker()
    except ValueError:
        pass
    else:  # inside a task: nested work runs right here (more tasks from a busy worker thread could deadlock)
        return None
    import dask

    return _client_of(dask.base.get_scheduler())


def _client_of(scheduler: Any) -> Any | None:
    try:
        from distributed import Client
    except ImportError:
        return None
    owner = getattr(scheduler, "__self__", None)
    return owner if isinstance(owner, Client) else None


def _delayed(fn: Callable[[Any], Any], items: list[Any]) -> list[Any]:
    import dask

    call = _Call(fn)
    run = f"megadump-{_name(fn)}-{uuid.uuid4().hex[:12]}"
    task = dask.delayed(call, pure=False, traverse=False)
    return [task(_Item(i, item), dask_key_name=f"{run}-{i}") for i, item in enumerate(items)]


def _progress(progress: Callable[[int, int], None], total: int) -> Any:
    """A dask callback calling ``progress(done, total)`` after each of our tasks (dask imported on first use:
    a command-line compare in this process's threads never needs it)."""
    from dask.callbacks import Callback

    class _Progress(Callback):
        def __init__(self) -> None:
            super().__init__()
            self._done = 0

        def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
            if isinstance(key, str) and key.startswith("megadump-"):
                self._done += 1
                progress(self._done, total)

    return _Progress()


def map_ordered(
    fn: Callable[[Any], Any], items: Iterable[Any], *, progress: Callable[[int, int], None] | None = None
) -> list[Any]:
    """``[fn(item) for item in items]``, each call one dask task on the active scheduler, results in item order.

    Args:
        fn: A picklable callable of one item (a module-level function or an instance of a module-level
            class) when a distributed cluster runs it.
        items: Picklable items; each should carry what ``fn`` needs to open its data (URLs, options,
            paths), never open files or dumps.
        progress: Called as ``progress(done, total)`` after each finished item (on the calling process).

    Returns:
        The results, ``results[i] == fn(items[i])``.

    Raises:
        Exception: The first failing item's own exception (same type), its message prefixed with
            ``item <i> (<label>)``, where the label is ``item.label`` when the item has one, else its ``repr``.
    """
    values = list(items)
    if not values:
        return []
    tasks = _delayed(fn, values)
    client = active_client()
    if client is None:
        import dask

        # inside a task dask would pick the worker's client: keep nested work in this process's threads
        local = {"scheduler": "threads"} if _client_of(dask.base.get_scheduler()) is not None else {}
        with _progress(progress, len(values)) if progress is not None else contextlib.nullcontext():
            return list(dask.compute(*tasks, **local))
    futures = client.compute(tasks)
    try:
        if progress is not None:
            from distributed import as_completed

            for done, future in enumerate(as_completed(futures), start=1):
                if future.status == "error":
                    future.result()  # raises the item's exception
                progress(done, len(values))
        return list(client.gather(futures))
    finally:
        for future in futures:
            future.release()
