"""Read-layer benchmarks: partial reads of large records (P4) and the records table of a big window (P5).

Run as ``python -m benchmarks.read [--quick] [--json OUT] [--root DIR]``.

- ``P4 row``: one stored float32 tensor of >= 1 GiB (``--quick``: 64 MiB), 4 MiB chunks, written by the
  store's ``WindowWriter`` (default compressor). Reading one row through
  ``open_dump(root).record_array(path)`` against reading the whole array the same way; chunk reads
  are counted by a wrapper store. Targets: <= 2 chunks for one row, ratio >= 100x.
- ``P4 truncated row``: the same bytes stored as the flat prefix of a truncated L1 record whose logical
  shape has twice the rows; one row of the logical-shape view against the whole view.
- ``P5 records``: ``open_dump(root).records()`` of one window of 4096 L1 records (512 task groups of 8),
  cold (a fresh ``Dump`` each time), against walking the same window with zarr (every array's
  ``zarr.json`` opened). Target: <= 0.5 s.
- ``P6 packed reads``: the P5 window in the packs layout (each record a row of its pack, ``read.pack_arrays``)
  against the same window in the tasks layout (a group per task), same run: 512 records' values
  (``record_array(path).values``), ``compare(dump, dump)`` of all 4096 and ``verify_dump``. A ratio above 1
  means the packs layout reads faster.

Prints a table; ``--json`` writes ``{"machine", "run", "entries": [{workload, baseline_s, ours_s, ratio,
chunks_read}, ...]}`` (``run``: date, nproc, load average before/after, CPU and wall seconds; see
:func:`benchmarks._common.run_info`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
import os
import shutil
import statistics
import tempfile
import time
from typing import Any

import numpy as np
import zarr
from zarr.storage import LocalStore, WrapperStore

from benchmarks._common import start_run, write_json
from megadump_zarr.layout.write_model import FORMAT_VERSION, ArrayWrite, GroupWrite, InvocationWrite, WindowWrite
from megadump_zarr.read import open_dump
from megadump_zarr.store.writer import WindowWriter

CHUNK_BYTES = 4 << 20
ROW_ELEMENTS = 4096  # float32 columns: 16 KiB per row, 256 rows per 4 MiB chunk


class CountingStore(WrapperStore):
    """Counts chunk reads (keys that are not ``zarr.json``)."""

    def __init__(self, store: Any) -> None:
        super().__init__(store)
        self.chunks = 0

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        if not key.endswith("zarr.json"):
            self.chunks += 1
        return await self._store.get(key, prototype, byte_range)


def _median(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _large_windows(root: str, total_bytes: int) -> tuple[str, str]:
    rows = total_bytes // (ROW_ELEMENTS * 4)
    data = np.random.default_rng(0).standard_normal((rows, ROW_ELEMENTS), dtype=np.float32)
    plain = ArrayWrite(
        "big",
        data,
        ("row", "col"),
        {
            "name": "big",
            "role": "final_output",
            "capturePhase": "after",
            "actualShape": list(data.shape),
            "declaredShape": list(data.shape),
        },
    )
    l0 = WindowWrite(
        0,
        0,
        {"level": "L0", "windowIndex": 0, "invocations": ["invocation_000000_forward"]},
        [InvocationWrite("invocation_000000_forward", {"invocationId": 0, "level": "L0"}, [], [plain])],
    )
    logical = [2 * rows, ROW_ELEMENTS]
    flat = data.reshape(-1)
    task = "stages/s/task_000000"
    truncated = ArrayWrite(
        f"{task}/output_00_big",
        flat,
        ("output_00_element",),
        {
            "name": "big",
            "io": "output",
            "index": 0,
            "capturePhase": "after",
            "sourceOffsetBytes": 0,
            "declaredShape": logical,
            "actualShape": logical,
            "storedShape": [flat.size],
            "originalDtype": "float32",
            "storedDtype": "float32",
            "fullBytes": 2 * data.nbytes,
            "storedBytes": data.nbytes,
            "truncated": True,
            "note": "",
        },
    )
    groups = [GroupWrite("stages/s", {"stage": "s"}), GroupWrite(task, {"taskId": 0, "stage": "s"})]
    l1 = WindowWrite(
        0,
        1,
        {"level": "L1", "windowIndex": 1, "invocations": ["invocation_000001_forward"]},
        [InvocationWrite("invocation_000001_forward", {"invocationId": 1, "level": "L1"}, groups, [truncated])],
    )
    with WindowWriter(root, chunk_bytes=CHUNK_BYTES) as writer:
        writer.write_window(l0)
        writer.write_window(l1)
    return (
        "rank_0/window_0000/invocation_000000_forward/big",
        f"rank_0/window_0001/invocation_000001_forward/{task}/output_00_big",
    )


def bench_p4(root: str, total_bytes: int, repeat: int) -> list[dict[str, Any]]:
    """P4: one row vs the whole tensor, plain and truncated."""
    plain, truncated = _large_windows(root, total_bytes)
    results = []
    for label, path in (("P4 row", plain), ("P4 truncated row", truncated)):
        store = CountingStore(LocalStore(root, read_only=True))
        dump = open_dump(store)
        view = dump.record_array(path)
        row = view.shape[0] // 2 - 1 if label == "P4 truncated row" else view.shape[0] // 2
        baseline = _median(lambda: view.values, max(1, repeat // 2))
        store.chunks = 0
        view.isel(row=row).values
        chunks = store.chunks
        ours = _median(lambda: view.isel(row=row).values, repeat)
        results.append(
            {
                "workload": f"{label} ({total_bytes >> 20} MiB stored)",
                "baseline_s": baseline,
                "ours_s": ours,
                "ratio": baseline / ours,
                "chunks_read": chunks,
            }
        )
    return results


def _records_window(n_records: int, pack: bool = True) -> WindowWrite:
    rng = np.random.default_rng(1)
    groups, arrays = [], []
    per_task = 8
    stages = ("expert_up", "expert_down", "unpermute", "combine")
    for task in range(n_records // per_task):
        stage = stages[task % len(stages)]
        path = f"stages/{stage}/task_{task:06d}"
        if task < len(stages):
            groups.append(GroupWrite(f"stages/{stage}", {"stage": stage}))
        groups.append(
            GroupWrite(
                path,
                {
                    "taskId": task,
                    "stageTaskIndex": task // 4,
                    "stage": stage,
                    "owner": {"label": "expert", "id": task % 8},
                    "coreType": "AIV",
                    "coreId": task % 24,
                    "workerId": None,
                    "tensorCount": per_task,
                },
                task=pack,
            )
        )
        for k in range(per_task):
            io = "input" if k < 6 else "output"
            data = rng.standard_normal((4, 16), dtype=np.float32)
            attrs = {
                "name": f"t{k}",
                "paramPosition": k,
                "io": io,
                "index": k % 6,
                "capturePhase": "before",
                "sourceOffsetBytes": 4 * 64 * task,
                "declaredShape": [4096, 16],
                "actualShape": [4, 16],
                "storedShape": [4, 16],
                "originalDtype": "float32",
                "storedDtype": "float32",
                "fullBytes": 256,
                "storedBytes": 256,
                "truncated": False,
                "note": f"expert {task % 8} rows",
            }
            arrays.append(
                ArrayWrite(
                    f"{path}/{io}_{k % 6:02d}_t{k}",
                    data,
                    ("token", "hidden"),
                    attrs,
                    {"token": np.arange(4 * task, 4 * task + 4)},
                )
            )
    invocation = InvocationWrite(
        "invocation_000000_forward",
        {"invocationId": 0, "step": 0, "direction": "forward", "kernelName": "moe_experts", "level": "L1"},
        groups,
        arrays,
    )
    attrs = {"schemaVersion": FORMAT_VERSION, "level": "L1", "windowIndex": 0, "invocations": [invocation.name]}
    return WindowWrite(0, 0, attrs, [invocation])


def bench_p5(root: str, repeat: int, n_records: int = 4096) -> list[dict[str, Any]]:
    """P5: records() of a 4096-record window (cold) vs walking its tasks layout with zarr; the window written
    in the tasks layout (the default: a group per task) and in the packs layout (task-record packs)."""
    roots = {layout: os.path.join(root, layout.replace(" ", "_")) for layout in ("tasks layout", "packs layout")}
    for layout, path in roots.items():
        with WindowWriter(path, pack=layout == "packs layout") as writer:
            writer.write_window(_records_window(n_records, pack=layout == "packs layout"))

    def walk() -> int:
        group = zarr.open_group(
            os.path.join(roots["tasks layout"], "rank_0", "window_0000"), mode="r", use_consolidated=False
        )
        return sum(
            1 for _, node in group.members(max_depth=None) if isinstance(node, zarr.Array) and "name" in node.attrs
        )

    baseline = _median(walk, 1)
    results = []
    for layout, path in roots.items():
        store = CountingStore(LocalStore(path, read_only=True))
        records = open_dump(store).records()
        assert len(records) == n_records, len(records)
        ours = _median(lambda path=path: open_dump(path).records(), repeat)
        results.append(
            {
                "workload": f"P5 records() of {n_records} ({layout})",
                "baseline_s": baseline,
                "ours_s": ours,
                "ratio": baseline / ours,
                "chunks_read": store.chunks,
            }
        )
    return results


def bench_p6(root: str, repeat: int) -> list[dict[str, Any]]:
    """P6: reads of the P5 window in the packs layout against the tasks layout (written by :func:`bench_p5`)."""
    from megadump_zarr import compare
    from megadump_zarr.verify import verify_dump

    roots = {layout: os.path.join(root, layout) for layout in ("tasks_layout", "packs_layout")}
    paths = list(open_dump(roots["tasks_layout"]).records()["path"][::8])  # 512 records, one per task

    def values(path: str) -> None:
        dump = open_dump(path)
        for record in paths:
            dump.record_array(record).values

    def both_ways(path: str) -> None:
        frame = compare(path, path)
        assert len(frame) == 4096 and set(frame["verdict"]) == {"pass"}

    def verified(path: str) -> None:
        assert verify_dump(path).ok

    results = []
    for name, run in (("512 record_array values", values), ("compare(dump, dump)", both_ways), ("verify", verified)):
        tasks = _median(lambda: run(roots["tasks_layout"]), repeat)
        packs = _median(lambda: run(roots["packs_layout"]), repeat)
        results.append(
            {
                "workload": f"P6 {name} (packs vs tasks)",
                "baseline_s": tasks,
                "ours_s": packs,
                "ratio": tasks / packs,
                "chunks_read": 0,
            }
        )
    return results


def _table(results: list[dict[str, Any]]) -> str:
    lines = [f"{'workload':46s} {'baseline_s':>11s} {'ours_s':>10s} {'ratio':>9s} {'chunks':>7s}"]
    for r in results:
        lines.append(
            f"{r['workload']:46s} {r['baseline_s']:11.4f} {r['ours_s']:10.5f} {r['ratio']:8.1f}x {r['chunks_read']:7d}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    start_run()  # the JSON's run record (load average, CPU and wall seconds) counts from here
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="64 MiB instead of 1 GiB for P4")
    parser.add_argument("--json", default=None, help="write the results as JSON to this file")
    parser.add_argument("--root", default=None, help="directory to write the dumps into (default: a temp dir)")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    base = args.root or tempfile.mkdtemp(prefix="bench_read_")
    try:
        total = (64 << 20) if args.quick else (1 << 30)
        results = bench_p4(os.path.join(base, "p4"), total, args.repeat)
        results += bench_p5(os.path.join(base, "p5"), args.repeat)
        results += bench_p6(os.path.join(base, "p5"), max(1, args.repeat // 2))
    finally:
        if args.root is None:
            shutil.rmtree(base, ignore_errors=True)
    print(_table(results))
    print("targets: P4 ratio >= 100x with <= 2 chunks for one row; P5 ours_s <= 0.5 s; P6 reported (packs vs tasks)")
    write_json(args.json, results)
    return results


if __name__ == "__main__":
    main()
