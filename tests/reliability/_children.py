"""Child-process bodies of the reliability tests (run through ``benchmarks.reliability.kill_context()``,
a forkserver whose server has torch and megadump_zarr imported, so a child starts in milliseconds).

Every child sends its stdout to a log file, line-buffered: ``COMMITTED <window path> <sha256>`` right after a
window's commit returned (hash over the data arrays handed to the store), plus a few other lines.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from typing import Any

from benchmarks.reliability import KILL_L1_STAGES, array_digest, combine_digests

__all__ = ["put_kill_child", "rank_child"]


def _log_to(path: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115


def _spy_store() -> dict[str, dict[str, str]]:
    from megadump_zarr.store.writer import WindowSession

    digests: dict[str, dict[str, str]] = {}
    original = WindowSession.write_invocation

    def spy(self: Any, invocation: Any) -> None:
        mine = digests.setdefault(self.url, {})
        for array in invocation.arrays:
            mine[f"{invocation.name}/{array.path}"] = array_digest(array.data)
        original(self, invocation)

    WindowSession.write_invocation = spy
    return digests


def _config(root: str, level: str, **extra: Any) -> Any:
    from megadump_zarr import TensorDumpConfig

    if level == "L1":
        extra.update(kernel_names=("moe_experts",), stages=KILL_L1_STAGES)
    return TensorDumpConfig(root, level=level, chunk_bytes=128, **extra)


def _step(block: Any) -> None:
    x = block.make_input().requires_grad_()
    block(x).float().pow(2).mean().backward()


def put_kill_child(root: str, log_path: str, level: str, kill_at: int, mode: str = "put") -> None:
    """Commit window 0, then die by SIGKILL inside window 1's export, at an exact store operation.

    ``mode="put"``: just before window 1's ``kill_at``-th backend ``put`` (1 = the window's first
    "writing" document). ``mode="replace"``: after the final window document was written to its
    temporary file, just before ``os.replace`` publishes it. Prints ``PUTS <n>`` when it was not killed.

    Args:
        root: Dump root.
        log_path: stdout goes here.
        level: ``L0`` or ``L1``.
        kill_at: Which put of window 1 (1-based) dies.
        mode: ``put`` or ``replace``.
    """
    _log_to(log_path)
    import torch

    from megadump_zarr import schedule, tensor_dump
    from megadump_zarr.demo.model import DemoConfig, MoEBlock
    import megadump_zarr.store.backend as backend

    torch.set_num_threads(1)
    digests = _spy_store()
    state = {"armed": False, "puts": 0, "replaces": 0}
    lock = threading.Lock()
    put, replace = backend.LocalBackend.put, os.replace

    def counting_put(self: Any, key: str, data: Any, *, atomic: bool = False) -> None:
        with lock:
            if state["armed"]:
                state["puts"] += 1
                if mode == "put" and state["puts"] == kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)
        put(self, key, data, atomic=atomic)

    def killing_replace(source: Any, target: Any, *args: Any, **kwargs: Any) -> None:
        if state["armed"] and mode == "replace" and str(target).endswith(f"window_0001{os.sep}zarr.json"):
            with lock:
                state["replaces"] += 1
                if state["replaces"] == 2:  # the first publishes "writing" at begin, the second the final status
                    os.kill(os.getpid(), signal.SIGKILL)
        replace(source, target, *args, **kwargs)

    backend.LocalBackend.put = counting_put
    backend.os.replace = killing_replace  # the backend module's os is this process's os module

    def report(dumper: Any) -> None:
        for path in dumper.last_window_paths:
            print(f"COMMITTED {path} {combine_digests(digests.pop(str(path), {}))}", flush=True)
        if state["armed"]:  # window 1 committed: its final status was this many puts in (the session's
            print(f"COMMIT_PUTS {state['puts']}", flush=True)  # end then indexes the root: more puts)
        state["armed"] = True

    block = MoEBlock(DemoConfig(tokens=16, d_model=8, seed=3))
    print("READY", flush=True)
    with tensor_dump(_config(root, level), schedule(wait=0, warmup=0, active=1), on_dump_ready=report) as dumper:
        for _ in range(2):
            _step(block)
            dumper.step()
    print(f"PUTS {state['puts']}", flush=True)


def rank_child(
    root: str, log_path: str, rank: int, windows: int, level: str, barrier: Any = None, seed: int | None = None
) -> None:
    """Dump ``windows`` one-step windows of the demo block as ``rank`` (``MoEBlock(rank=rank)``).

    With a ``barrier``, every process waits for the others right before each ``step()`` (the window's
    claim and export), so the exports overlap. A ``FileExistsError`` from ``step()`` prints
    ``LOST <json message>`` and ends the loop.

    Args:
        root: The shared dump root.
        log_path: stdout goes here.
        rank: This process's rank.
        windows: Windows to dump.
        level: ``L0`` or ``L1``.
        barrier: Optional ``multiprocessing.Barrier`` shared by the racing processes.
        seed: Demo block seed (default: the rank), so that racing processes hold different data.
    """
    _log_to(log_path)
    import torch

    from megadump_zarr import schedule, tensor_dump
    from megadump_zarr.demo.model import DemoConfig, MoEBlock

    torch.set_num_threads(1)
    digests = _spy_store()

    def report(dumper: Any) -> None:
        for path in dumper.last_window_paths:
            print(f"COMMITTED {path} {combine_digests(digests.pop(str(path), {}))}", flush=True)

    block = MoEBlock(DemoConfig(tokens=16, d_model=8, seed=rank if seed is None else seed), rank=rank)
    print("READY", flush=True)
    try:
        with tensor_dump(_config(root, level), schedule(wait=0, warmup=0, active=1), on_dump_ready=report) as dumper:
            for _ in range(windows):
                _step(block)
                if barrier is not None:
                    barrier.wait(timeout=120)
                dumper.step()
    except FileExistsError as error:
        print(f"LOST {json.dumps(str(error))}", flush=True)
        return
    print("DONE", flush=True)
