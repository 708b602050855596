"""Window-writer throughput against the seed layout (one ``torch.save`` file per tensor plus JSON).

Run as ``python -m benchmarks.store_write [--root DIR] [--repeat N] [--workers N] [--skip-large]``.
Each case writes a fresh window and prints wall seconds per repeat:

- ``small``: 4096 float32 arrays of 8 KiB (16 x 128), two per L1 task group (2048 task groups in 4
  stages), with statistics; ``seed small`` writes the same tensors the seed's way (task directory,
  ``torch.save`` per tensor after a clone, ``task.json`` per task, ``manifest.json``).
- ``large``: 256 bfloat16 arrays of 4 MiB (1 GiB) with compression none / zstd-1, statistics on and
  off; ``seed large`` is the same with ``torch.save``.

The disk of a shared machine varies several-fold between runs: compare cases from one invocation,
and run with ``--root /dev/shm`` to see the CPU cost without the disk. Cases are interleaved per repeat
and nothing is deleted until the end: on a file system mounted with ``discard`` (this machine's is),
deleting tens of thousands of files stalls the next run's creates for seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time

import ml_dtypes
import numpy as np

from megadump_zarr.layout.write_model import ArrayWrite, GroupWrite, InvocationWrite, WindowWrite
from megadump_zarr.store.writer import WindowWriter

INV = "invocation_000000_forward"


def small_window(index: int, n_arrays: int = 4096) -> WindowWrite:
    """4096 x 8 KiB float32 arrays, two per task group.

    Args:
        index: Window index.
        n_arrays: Number of arrays.
    """
    data = np.random.default_rng(index).standard_normal((n_arrays, 16, 128), dtype=np.float32)
    groups, arrays = [], []
    for task in range(n_arrays // 2):
        path = f"stages/stage_{task % 4}/task_{task:06d}"
        groups.append(GroupWrite(path, {"taskId": task, "stage": f"stage_{task % 4}"}))
        for io, k in (("input_00_a", 2 * task), ("output_00_b", 2 * task + 1)):
            attrs = {"paramPosition": k % 7, "capturePhase": "before", "storedShape": [16, 128]}
            arrays.append(ArrayWrite(f"{path}/{io}", data[k], (f"{io}_d0", f"{io}_d1"), attrs))
    return WindowWrite(0, index, {"level": "L1"}, [InvocationWrite(INV, {"step": 0}, groups, arrays)])


def large_window(index: int, n_arrays: int = 256) -> WindowWrite:
    """256 x 4 MiB bfloat16 arrays of activation-like values (1 GiB).

    Args:
        index: Window index.
        n_arrays: Number of arrays.
    """
    rng = np.random.default_rng(index)
    block = rng.standard_normal((2048, 1024), dtype=np.float32).astype(ml_dtypes.bfloat16)  # 4 MiB
    arrays = [ArrayWrite(f"t{k:03d}", block, ("row", "col")) for k in range(n_arrays)]
    return WindowWrite(0, index, {"level": "L0"}, [InvocationWrite(INV, {"step": 0}, [], arrays)])


def seed_write(root: str, window: WindowWrite) -> None:
    """The seed layout: directories per task, one torch.save per tensor (after a clone), JSON files.

    Args:
        root: Dump root.
        window: Window to write.
    """
    import torch

    window_dir = os.path.join(root, window.path)
    os.makedirs(window_dir)
    manifest = {"invocations": []}
    for inv in window.invocations:
        by_group: dict[str, list[ArrayWrite]] = {}
        for item in inv.arrays:
            by_group.setdefault(item.path.rpartition("/")[0], []).append(item)
        tasks = []
        for group, items in by_group.items():
            task_dir = os.path.join(window_dir, inv.name, group)
            os.makedirs(task_dir, exist_ok=True)
            meta = []
            for item in items:
                data = item.data
                tensor = torch.from_numpy(data.view(np.int16) if data.dtype == ml_dtypes.bfloat16 else data)
                if data.dtype == ml_dtypes.bfloat16:
                    tensor = tensor.view(torch.bfloat16)
                name = item.path.rpartition("/")[2] + ".pt"
                torch.save(tensor.clone(), os.path.join(task_dir, name))
                meta.append({**dict(item.attrs), "file": name})
            with open(os.path.join(task_dir, "task.json"), "w") as handle:
                handle.write(json.dumps({"tensors": meta}, indent=2))
            tasks.append(meta)
        manifest["invocations"].append({"name": inv.name, "tasks": tasks})
    with open(os.path.join(window_dir, "manifest.json"), "w") as handle:
        handle.write(json.dumps(manifest, indent=2))


def _run(root: str, window: WindowWrite, options: dict | None) -> float:
    start = time.perf_counter()
    if options is None:
        seed_write(root, window)
    else:
        with WindowWriter(root, **options) as writer:
            writer.write_window(window)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default=None, help="parent directory to write into (default: a temp dir)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--skip-large", action="store_true")
    parser.add_argument("--skip-seed", action="store_true")
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="store_write_", dir=args.root)
    small: dict[str, dict | None] = {"small zstd-1": {"compressor": "zstd-1"}, "small none": {"compressor": "none"}}
    large: dict[str, dict | None] = {
        "large none": {"compressor": "none"},
        "large none, no stats": {"compressor": "none", "stats": False},
        "large zstd-1": {"compressor": "zstd-1"},
        "large zstd-1, no stats": {"compressor": "zstd-1", "stats": False},
    }
    if not args.skip_seed:
        small["seed small (torch.save)"] = None
        large["seed large (torch.save)"] = None
    groups = [(small_window, small)] + ([] if args.skip_large else [(large_window, large)])
    try:
        for factory, cases in groups:
            times: dict[str, list[float]] = {label: [] for label in cases}
            for repeat in range(args.repeat):
                window = factory(repeat)
                for n, (label, options) in enumerate(cases.items()):
                    if options is not None:
                        options = {"max_workers": args.workers, **options}
                    times[label].append(_run(os.path.join(base, f"{factory.__name__}{repeat}_{n}"), window, options))
            for label, values in times.items():
                print(
                    f"{label:26s} median {statistics.median(values):6.3f}s  min {min(values):6.3f}s   "
                    + " ".join(f"{t:.3f}" for t in values),
                    flush=True,
                )
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
