"""Ragged L1 tiles (issue 21): the tasks and packs layouts against a prototype "concatenated" layout.

    python -m benchmarks.ragged [--quick] [--json OUT] [--repeats N] [--dir DIR]

MoE expert tiles are ragged: each expert gets its own number of tokens, so in ``layout="packs"`` a task whose
shape is unique in its stage stays a task group (``store.pack_groups.MIN_PACK_TASKS``) and the packs layout
stores about what the tasks layout does. This benchmark prices a layout built for ragged rows: per stage and
record one array of the tasks' rows concatenated along the split axis, with ``{dim}_start``/``{dim}_stop``
per task and a row -> task coordinate (``benchmarks/_ragged_concat.py``, a prototype written with plain
zarr-python 3, not product code). Workloads:

* demo — the demo's L1 window, as ``tests/store/test_packs_demo_size.py`` dumps it (two training steps, the
  expert stages of experts 0 and 1: 4 invocations, 12 tasks, 44 records);
* synthetic — one stage of 64 (and 512) expert tasks of two fp32 records (``x``, ``y``) of
  ``rows x 512``, ``rows`` drawn (fixed seed) from a log-normal around 64 (sigma 0.5), rows of a task
  adjacent in the declared tensor (so each task has its ``token`` row coordinate, as the dumper makes it).

Each workload's windows are captured once as the writer receives them (``WindowWrite``) and every layout
writes the same descriptions: tasks (``WindowWriter()``, the default), packs (``WindowWriter(pack=True)``),
concat256 (ragged arrays in chunks of 256 rows), concat4m (the product's chunk rule: whole rows up to
4 MiB) and concat_lean (concat4m with the task ids, row bounds and source row ranges in the stage group's
attributes: only the record arrays and the row -> task coordinate are arrays). Per layout: files, directories and stored bytes below the root (and bytes/payload), files and PUTs
(files opened for writing, temporary files included) per record, write seconds (wall and CPU, median of
``--repeats`` interleaved runs, each ending with ``os.sync()``), the file-system floor of the layout (its
files and directories written again with plain ``os`` calls and one ``os.sync()``, ``export.fs_floor``: what
the layout costs whatever writes it, since the prototype's zarr-python writes carry zarr's own per-array
overheads), seconds to read one task's ragged record
(the product reader ``open_dump(root).record_array(path).values``; the prototype: read the stage's
``task_id`` and row bounds, slice the rows) and, with plain xarray (``xr.open_zarr`` of the task group or of
the concatenated stage group), seconds for the records table (``Dump.records()``; the prototype: a table
built from the consolidated metadata and row bounds, without the product's checks). Every read is checked
byte for byte against the record written.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
import copy
import os
from pathlib import Path
import statistics
import time
from typing import Any

import numpy as np
import torch
import xarray as xr
import zarr.storage._local as zarr_local

from benchmarks._common import cpu_seconds, machine, print_table, scratch_dir, start_run, sync_disk, write_json
from benchmarks.export import fs_floor, tree_template
from benchmarks._ragged_concat import ConcatWriter, concat_records, read_concat_task
from megadump_zarr import tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from megadump_zarr.dump.config import TensorDumpConfig
from megadump_zarr.dump.l1_plan import L1RecordPlan
from megadump_zarr.dump.snapshots import payload_snapshot
from megadump_zarr.dump.window import DumpInvocation, build_window
from megadump_zarr.l1 import (
    L1_DUMP_PAYLOAD_BASE,
    L1_DUMP_RECORD_SIZE,
    L1_DUMP_RECORDS_OFFSET,
    pack_l1_buffer,
    plan_slots,
    read_l1_buffer,
)
from megadump_zarr.layout.write_model import WindowWrite
from megadump_zarr.read import open_dump
from megadump_zarr.store import writer as store_writer

LAYOUTS = ("tasks", "packs", "concat256", "concat4m", "concat_lean")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR


@contextmanager
def captured_windows() -> Iterator[list[WindowWrite]]:
    """Record (deep copies of) the windows every ``WindowWriter`` session writes while active."""
    windows: list[WindowWrite] = []
    begin, write_all = store_writer.WindowWriter.begin, store_writer.WindowSession.write_all

    def begin_hook(self: Any, rank: int, window_index: int, attrs: dict[str, Any]) -> Any:
        session = begin(self, rank, window_index, attrs)
        session.captured = WindowWrite(rank, window_index, copy.deepcopy(attrs))
        return session

    def write_all_hook(self: Any, invocations: Any, status: str = "complete", **options: Any) -> str:
        invocations = list(invocations)
        self.captured.invocations.extend(copy.deepcopy(invocations))
        windows.append(self.captured)
        return write_all(self, invocations, status, **options)

    store_writer.WindowWriter.begin, store_writer.WindowSession.write_all = begin_hook, write_all_hook
    try:
        yield windows
    finally:
        store_writer.WindowWriter.begin, store_writer.WindowSession.write_all = begin, write_all


def demo_windows(scratch: Path) -> list[WindowWrite]:
    """The demo's L1 windows, dumped as ``tests/store/test_packs_demo_size.py`` does (``_write_demo_l1``)."""
    torch.manual_seed(0)
    block = MoEBlock(DemoConfig(tokens=37, d_model=16, n_experts=4, dtype=torch.float32, device="cpu"))
    config = TensorDumpConfig(
        scratch / "demo_capture",
        level="L1",
        kernel_names=("moe_experts", "moe_experts_backward"),
        stages=("expert_up", "expert_down", "expert_up_bwd"),
        owner_ids=(0, 1),
    )
    with captured_windows() as windows, tensor_dump(config) as dumper:
        for _ in range(2):
            x = block.make_input().requires_grad_()  # demo.run's training step
            block(x).float().pow(2).mean().backward()
            dumper.step()
    return windows


def ragged_rows(tasks: int, mean_rows: int, seed: int = 0) -> list[int]:
    """Rows per task: log-normal (sigma 0.5) scaled to a mean of ``mean_rows``, at least 1 (fixed seed)."""
    draws = np.random.default_rng(seed).lognormal(0.0, 0.5, tasks)
    return [max(1, int(round(x))) for x in draws * mean_rows / np.exp(0.125)]


def synthetic_window(rows: list[int], cols: int, seed: int = 0) -> WindowWrite:
    """One L1 window of one stage (``expert_up``): per task an input ``x`` and an output ``y`` of
    ``rows[t] x cols`` fp32, task ``t``'s rows adjacent in the declared ``(sum(rows), cols)`` tensors."""
    sizes = [r * cols * 4 for r in rows for _ in range(2)]
    offsets = plan_slots(sizes)
    plans, start = [], 0
    for task, r in enumerate(rows):
        for k, io in enumerate(("input", "output")):
            i = 2 * task + k
            plans.append(
                L1RecordPlan(
                    task_id=task,
                    task_index=task,
                    stage="expert_up",
                    owner_id=task,
                    owner_label="expert",
                    core_type="MIX",
                    core_id=task % 4,
                    io=io,
                    index=0,
                    phase="before" if io == "input" else "after",
                    parameter_position=k,
                    tensor_name="x" if io == "input" else "y",
                    dtype=torch.float32,
                    source_offset_bytes=start * cols * 4,
                    actual_shape=(r, cols),
                    payload_offset=offsets[i],
                    payload_bytes=sizes[i],
                    full_bytes=sizes[i],
                    truncated=False,
                    note="",
                    record_offset=L1_DUMP_RECORDS_OFFSET + i * L1_DUMP_RECORD_SIZE,
                    dims=("token", "hidden"),
                    declared_shape=(sum(rows), cols),
                )
            )
        start += r
    buffer = torch.frombuffer(pack_l1_buffer([p.entry for p in plans]), dtype=torch.uint8)
    area = buffer[L1_DUMP_PAYLOAD_BASE:]
    values = torch.randn(area.numel() // 4, generator=torch.Generator().manual_seed(seed)) * 0.5
    area[: values.numel() * 4].copy_(values.view(torch.uint8))
    for plan in plans:  # mark CAPTURED, as the device worker would
        buffer[plan.record_offset + 28] = 1
    invocation = DumpInvocation(0, 0, "bench", "forward", 0, "cpu", "L1", execution_mode="event_driven")
    invocation.l1_snapshots = [
        payload_snapshot(plan, record.payload) for plan, record in zip(plans, read_l1_buffer(buffer).records)
    ]
    return copy.deepcopy(build_window("L1", 0, 0, [invocation]))  # own its payloads (no views of the buffer)


def write_layout(layout: str, windows: list[WindowWrite], root: Path) -> None:
    """Write ``windows`` below ``root`` in ``layout`` (one of :data:`LAYOUTS`)."""
    if layout in ("tasks", "packs"):
        with store_writer.WindowWriter(root, pack=layout == "packs") as writer:
            for window in windows:
                writer.write_window(window)
    else:
        ConcatWriter(str(root), row_chunk=256 if layout == "concat256" else 0, lean=layout == "concat_lean").write(
            windows
        )


def count_puts(layout: str, windows: list[WindowWrite], root: Path) -> int:
    """Files opened for writing (temporary files of atomic writes included) by one untimed write."""
    count = [0]
    real_open, real_put = os.open, zarr_local._put

    def counting_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & _WRITE_FLAGS:
            count[0] += 1
        return real_open(path, flags, *args, **kwargs)

    def counting_put(*args: Any, **kwargs: Any) -> int:  # one stored file (a failed set_if_not_exists is none)
        written = real_put(*args, **kwargs)
        count[0] += 1
        return written

    os.open, zarr_local._put = counting_open, counting_put
    try:
        write_layout(layout, windows, root)
    finally:
        os.open, zarr_local._put = real_open, real_put
    return count[0]


def footprint(root: Path) -> tuple[int, int, int]:
    """``(files, directories, bytes)`` below ``root``."""
    files = [p for p in root.rglob("*") if p.is_file()]
    return len(files), sum(1 for p in root.rglob("*") if p.is_dir()), sum(p.stat().st_size for p in files)


def ragged_target(windows: list[WindowWrite]) -> tuple[str, str, str, int, np.ndarray]:
    """A record whose shape differs between the tasks of its stage, of the middle task:
    ``(record path below the root, stage path below the root, record name, task id, data)``."""
    for window in windows:
        for invocation in window.invocations:
            groups = {g.path: g for g in invocation.groups if g.task}
            by_stage_name: dict[tuple[str, str], list[Any]] = {}
            for a in invocation.arrays:
                group, _, name = a.path.rpartition("/")
                if group in groups:
                    by_stage_name.setdefault((group.rpartition("/")[0], name), []).append(a)
            for (stage, name), arrays in by_stage_name.items():
                if len({a.data.shape for a in arrays}) > 1:
                    a = arrays[len(arrays) // 2]
                    task_id = groups[a.path.rpartition("/")[0]].attrs["taskId"]
                    base = f"{window.path}/{invocation.name}"
                    return f"{base}/{a.path}", f"{base}/{stage}", name, int(task_id), a.data
    raise ValueError("no ragged record in these windows")


def _median_s(run: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median seconds of ``repeats`` calls after one untimed warm-up call (imports, first-use caches)."""
    times, result = [], run()
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def read_figures(layout: str, root: Path, windows: list[WindowWrite], repeats: int) -> dict[str, Any]:
    """Seconds to read one ragged record (reader and plain xarray) and the records table, each checked."""
    path, stage, name, task_id, expected = ragged_target(windows)
    records = sum(len(i.arrays) for w in windows for i in w.invocations)
    if layout in ("tasks", "packs"):
        one, got = _median_s(lambda: open_dump(root).record_array(path).values, repeats)
        table_s, table = _median_s(lambda: open_dump(root).records(), repeats)
        group = root / path.rpartition("/")[0]
        xr_s, xr_got = (
            _median_s(lambda: xr.open_zarr(group, consolidated=True)[name].values, repeats)
            if (group / "zarr.json").exists()  # a task group (a packed task has none: its pack holds it)
            else (None, expected)
        )
    else:
        one, got = _median_s(lambda: read_concat_task(str(root), stage, name, task_id), repeats)
        table_s, table = _median_s(lambda: concat_records(str(root)), repeats)

        def xr_one() -> np.ndarray:
            ds = xr.open_zarr(root / stage, consolidated=True)
            dim = ds[name].dims[0]
            return ds[name].isel({dim: (ds[f"{dim}_task_id"] == task_id).values}).values

        xr_s, xr_got = _median_s(xr_one, repeats)
    for what, value in (("reader", got), ("xarray", xr_got)):
        if np.asarray(value).tobytes() != expected.tobytes():
            raise AssertionError(f"{layout}: {what} read of {path} differs from the record written")
    if len(table) != records:
        raise AssertionError(f"{layout}: records table has {len(table)} rows, the windows {records} records")
    return {"read_one_s": one, "read_one_xr_s": xr_s, "records_s": table_s}


def run_workload(name: str, windows: list[WindowWrite], repeats: int, scratch: Path) -> list[dict[str, Any]]:
    """Every layout on one workload: footprint, PUTs, interleaved write timings, reads."""
    records = sum(len(i.arrays) for w in windows for i in w.invocations)
    payload = sum(a.data.nbytes for w in windows for i in w.invocations for a in i.arrays)
    load_before = os.getloadavg()
    times: dict[str, list[float]] = {k: [] for k in LAYOUTS}
    cpu: dict[str, list[float]] = {k: [] for k in LAYOUTS}
    floor: dict[str, list[float]] = {k: [] for k in LAYOUTS}
    templates: dict[str, list[tuple[str, bytes | None]]] = {}
    for repeat in range(repeats):
        for layout in LAYOUTS:
            root = scratch / f"{name}_{layout}_{repeat}"
            sync_disk()
            start, cpu_start = time.perf_counter(), sum(cpu_seconds())
            write_layout(layout, windows, root)
            sync_disk()
            times[layout].append(time.perf_counter() - start)
            cpu[layout].append(sum(cpu_seconds()) - cpu_start)
            if repeat == 0:
                templates[layout] = tree_template(root)
        for layout in LAYOUTS:  # the same files and directories with plain os calls: the layout's own cost
            sync_disk()
            start = time.perf_counter()
            fs_floor(templates[layout], scratch / f"{name}_{layout}_floor_{repeat}")
            floor[layout].append(time.perf_counter() - start)
    rows = []
    for layout in LAYOUTS:
        root = scratch / f"{name}_{layout}_0"
        files, dirs, stored = footprint(root)
        puts = count_puts(layout, windows, scratch / f"{name}_{layout}_puts")
        rows.append(
            {
                "workload": name,
                "layout": layout,
                "records": records,
                "payload_bytes": payload,
                "files": files,
                "dirs": dirs,
                "bytes": stored,
                "bytes_per_payload": stored / payload,
                "files_per_record": files / records,
                "puts": puts,
                "puts_per_record": puts / records,
                "packs": len(list(root.rglob("pack_*"))),
                "write_s": statistics.median(times[layout]),
                "write_cpu_s": statistics.median(cpu[layout]),
                "floor_s": statistics.median(floor[layout]),
                **read_figures(layout, root, windows, repeats),
                "times": times[layout],
            }
        )
    by = {r["layout"]: r for r in rows}
    for row in rows:
        for base in ("tasks", "packs"):
            for key in ("files", "bytes", "puts", "write_s", "write_cpu_s", "floor_s", "read_one_s", "records_s"):
                row[f"{key}_vs_{base}"] = row[key] / by[base][key]
        row["load_average_before"] = [round(x, 2) for x in load_before]
        row["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the ragged-layout benchmark and print its table."""
    start_run()  # the JSON's run record (load average, CPU and wall seconds) counts from here
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes (CI smoke)")
    parser.add_argument("--json", default=None, help="write results as JSON")
    parser.add_argument("--repeats", type=int, default=None, help="runs per layout (default 3, quick 1)")
    parser.add_argument("--dir", default=None, help="scratch parent directory (default: system temp)")
    args = parser.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 3)
    sizes = [(16, 16, 64)] if args.quick else [(64, 64, 512), (512, 64, 512)]
    print(f"machine: {machine()}; load average {os.getloadavg()}")
    entries: list[dict[str, Any]] = []
    with scratch_dir(args.dir) as scratch_name:
        scratch = Path(scratch_name)
        workloads = [("demo L1 window", lambda: demo_windows(scratch))]
        for tasks, mean_rows, cols in sizes:
            rows = ragged_rows(tasks, mean_rows)
            label = f"synthetic {tasks} tasks ~{mean_rows}x{cols} fp32 ({len(set(rows))} distinct row counts)"
            workloads.append((label, lambda rows=rows, cols=cols: [synthetic_window(rows, cols)]))
        for label, build in workloads:
            entries.extend(run_workload(label, build(), repeats, scratch))
            print(f"{label}: done, load average {os.getloadavg()}", flush=True)
    print_table(
        entries,
        [
            ("workload", "workload"),
            ("layout", "layout"),
            ("files", "files"),
            ("dirs", "dirs"),
            ("bytes", "bytes"),
            ("bytes_per_payload", "bytes/payload"),
            ("files_per_record", "files/rec"),
            ("puts_per_record", "PUTs/rec"),
            ("packs", "packs"),
            ("write_s", "write s"),
            ("write_cpu_s", "write cpu s"),
            ("floor_s", "fs floor s"),
            ("read_one_s", "read-one s"),
            ("read_one_xr_s", "xr read-one s"),
            ("records_s", "records() s"),
        ],
    )
    print()
    print_table(
        [e for e in entries if e["layout"].startswith("concat")],
        [
            ("workload", "workload"),
            ("layout", "layout"),
            ("files_vs_tasks", "files/tasks"),
            ("files_vs_packs", "files/packs"),
            ("bytes_vs_tasks", "bytes/tasks"),
            ("bytes_vs_packs", "bytes/packs"),
            ("puts_vs_tasks", "PUTs/tasks"),
            ("write_s_vs_tasks", "write/tasks"),
            ("write_s_vs_packs", "write/packs"),
            ("write_cpu_s_vs_tasks", "cpu/tasks"),
            ("write_cpu_s_vs_packs", "cpu/packs"),
            ("floor_s_vs_tasks", "floor/tasks"),
            ("floor_s_vs_packs", "floor/packs"),
            ("read_one_s_vs_tasks", "read-one/tasks"),
            ("records_s_vs_tasks", "records/tasks"),
        ],
    )
    print(f"load average at the end {os.getloadavg()}")
    for entry in entries:
        entry.pop("times", None)
    write_json(args.json, entries)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
