"""Export benchmark: our Zarr window writer against the seed's layout, on the same decoded Device buffer.

    python -m benchmarks.export [--quick] [--json OUT] [--repeats N] [--dir DIR] [--only P1|P2] [--skip-async]

Workloads (P1, P2 of the export issue) start from one packed L1 Device buffer on the host, as the dumper
has it after the launch's single Device-to-Host copy:

* baseline — the seed (hyper_multicore ``dump/l1.py`` + ``dump/api.py``): decode clones every payload,
  then ``torch.save`` one file per tensor, one ``task.json`` per task and a ``manifest.json``.
* ours — ``read_l1_buffer`` (zero-copy payload views), ``build_window``, ``WindowWriter.write_window``
  with the default settings: default codec, a ``crc32c`` per chunk, durable commit (one ``syncfs``
  before the status is written, then the status fsynced). Also with compression off, without the
  checksums, without the durable commit, and with task-record packs (``pack=True``, ``layout="packs"``;
  ``ours`` is the default tasks layout: a group per task, an array per record), to price each.
* fs floor — the same directories and files the tasks layout writes, with plain ``os.mkdir``/``os.open``/
  ``os.write``/``os.close`` and one ``os.sync()``: what the tasks writer costs above the file system.
* raw — the same payload bytes written to one file: the physical limit.

Isolation (``benchmarks/_isolation.py``): no contender pays for another's dirty pages, deletions or
garbage. Each timed run is a fresh ``python -m benchmarks.export --worker SPEC`` process that builds the
workload untimed, then ``gc.collect()``, ``os.sync()`` and waits until the block device holding the
scratch directory has settled (no request in flight, no discard issued, under 4 MiB written in 0.5 s; at
most 15 s; each workload's JSON counts ``unsettled_runs``), then times its contender writing into a fresh
directory, ``os.sync()`` included, and reports its wall seconds, its own CPU seconds
(``getrusage(RUSAGE_SELF)`` over the timed region, every thread) and its peak RSS above the start.
Contenders run interleaved across repeats (seed, ours, packs, ..., seed, ours, packs, ...) so drift hits
all alike. Outputs are deleted only after all timing is done (this disk is mounted with ``discard``:
deleting tens of thousands of files stalls file creation for seconds); only when the kept outputs would
pass ``--keep-gib`` (default half the free space, at most 16 GiB: P1 at full size) are they deleted
earlier, then synced and settled before the next run. The file-system floor is timed the same way (its
tree is one untimed run of ours, kept, read back by the worker). P2 also runs 16,384 records over four
launches (one window, four invocations; seed, tasks and packs layouts), and counts the file-system
operations per record of one untimed run of each layout after the timed runs (``FsOps``: every
``mkdir``, file ``open``, ``write``/``writev``, ``close``, ``rename``, ``fsync``/``syncfs`` the process
makes). The load average at the start and at the end of timing is printed: other processes on the
machine move the wall times, less so the CPU seconds.
``--durability`` also times the durable commit done with an ``fsync`` of every file and directory.
P3 (async export) runs the demo MoE block under an L0 dump and compares the time the step thread spends
in ``dumper.step()`` with asynchronous vs synchronous export.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from benchmarks._common import machine, print_table, scratch_dir, start_run, sync_disk, write_json
from benchmarks._isolation import SETTLE_TIMEOUT_S, Retained, retained, run_isolated, settle_disk, timed_run
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
from megadump_zarr.store.writer import WindowWriter


def make_workload(
    count: int, payload_bytes: int, dtype: torch.dtype, seed: int = 0
) -> tuple[torch.Tensor, list[L1RecordPlan]]:
    """A filled host Device buffer with ``count`` records (input/output pairs of ``count // 2`` tasks).

    Args:
        count: Records.
        payload_bytes: Bytes per record.
        dtype: Element type (activations drawn from a scaled normal distribution).
        seed: RNG seed.
    """
    element = torch.empty((), dtype=dtype).element_size()
    cols = 1024 if payload_bytes >= 1024 * element * 4 else max(payload_bytes // element // 8, 1)
    rows = payload_bytes // element // cols
    offsets = plan_slots([rows * cols * element] * count)
    plans = []
    for i, offset in enumerate(offsets):
        io = "input" if i % 2 == 0 else "output"
        plans.append(
            L1RecordPlan(
                task_id=i // 2,
                task_index=i // 2,
                stage="expert_up",
                owner_id=(i // 2) % 8,
                owner_label="expert",
                core_type="MIX",
                core_id=(i // 2) % 4,
                io=io,
                index=0,
                phase="before" if io == "input" else "after",
                parameter_position=0 if io == "input" else 1,
                tensor_name="x" if io == "input" else "y",
                dtype=dtype,
                source_offset_bytes=(i // 2) * rows * cols * element,
                actual_shape=(rows, cols),
                payload_offset=offset,
                payload_bytes=rows * cols * element,
                full_bytes=rows * cols * element,
                truncated=False,
                note="",
                record_offset=L1_DUMP_RECORDS_OFFSET + i * L1_DUMP_RECORD_SIZE,
                dims=("token", "hidden"),
                declared_shape=(rows * count, cols),
            )
        )
    buffer = torch.frombuffer(pack_l1_buffer([p.entry for p in plans]), dtype=torch.uint8)
    generator = torch.Generator().manual_seed(seed)
    payload_area = buffer[L1_DUMP_PAYLOAD_BASE:]
    values = (torch.randn(payload_area.numel() // element, generator=generator) * 0.5).to(dtype)
    payload_area[: values.numel() * element].copy_(values.view(torch.uint8))
    for plan in plans:  # mark CAPTURED, as the device worker would
        buffer[plan.record_offset + 28] = 1
    return buffer, plans


def seed_layout(buffer: torch.Tensor, plans: list[L1RecordPlan], root: Path, launches: int = 1) -> None:
    """The seed's decode (clone per payload) and layout (torch.save per tensor, task.json, manifest.json).

    Args:
        buffer: The Device buffer.
        plans: Its records.
        root: Output root.
        launches: Invocations of the window, each decoding and storing the same buffer.
    """
    window = root / "rank_0" / "window_0000"
    window.mkdir(parents=True)
    invocations = [{"invocationId": i, "tasks": _seed_invocation(buffer, plans, window, i)} for i in range(launches)]
    manifest = {"schemaVersion": 4, "level": "L1", "windowIndex": 0, "rank": 0, "invocations": invocations}
    (window / "manifest.json").write_text(json.dumps(manifest, ensure_ascii=False, indent=2), encoding="utf-8")


def _seed_invocation(
    buffer: torch.Tensor, plans: list[L1RecordPlan], window: Path, invocation_id: int
) -> list[dict[str, Any]]:
    invocation = window / f"invocation_{invocation_id:06d}_forward"
    by_task: dict[int, list[L1RecordPlan]] = {}
    for plan in plans:
        by_task.setdefault(plan.task_id, []).append(plan)
    tasks = []
    for task_id, records in by_task.items():
        task_dir = invocation / "stages" / records[0].stage / f"task_{task_id:06d}"
        task_dir.mkdir(parents=True, exist_ok=True)
        tensors = []
        for plan in records:
            data = (
                buffer.narrow(0, plan.payload_offset, plan.payload_bytes)
                .view(plan.dtype)
                .clone()
                .reshape(plan.actual_shape)
            )
            path = task_dir / f"{plan.io}_{plan.index:02d}_{plan.tensor_name}.pt"
            torch.save(data, path)
            tensors.append(
                {
                    "name": plan.tensor_name,
                    "paramPosition": plan.parameter_position,
                    "io": plan.io,
                    "index": plan.index,
                    "capturePhase": plan.phase,
                    "sourceOffsetBytes": plan.source_offset_bytes,
                    "actualShape": list(plan.actual_shape),
                    "storedShape": list(plan.actual_shape),
                    "originalDtype": str(plan.dtype),
                    "storedDtype": str(plan.dtype),
                    "fullBytes": plan.full_bytes,
                    "storedBytes": plan.payload_bytes,
                    "truncated": False,
                    "note": "",
                    "file": path.relative_to(window).as_posix(),
                }
            )
        meta = {
            "taskId": task_id,
            "stageTaskIndex": records[0].task_index,
            "stage": records[0].stage,
            "owner": {"label": records[0].owner_label, "id": records[0].owner_id},
            "coreType": records[0].core_type,
            "coreId": records[0].core_id,
            "tensorCount": len(tensors),
            "tensors": tensors,
        }
        (task_dir / "task.json").write_text(json.dumps(meta, ensure_ascii=False, indent=2), encoding="utf-8")
        tasks.append(meta)
    return tasks


def ours(
    buffer: torch.Tensor,
    plans: list[L1RecordPlan],
    root: Path,
    compressor: str = "default",
    launches: int = 1,
    **writer_options: Any,
) -> None:
    """Our path: zero-copy decode, window description, Zarr window writer.

    Args:
        buffer: The Device buffer.
        plans: Its records.
        root: Output root.
        compressor: Codec name.
        launches: Invocations of the window, each decoding the same buffer.
        writer_options: ``WindowWriter`` options (``checksum``, ``durable``, ``pack``).
    """
    invocations = []
    for i in range(launches):
        decoded = read_l1_buffer(buffer)
        invocation = DumpInvocation(i, 0, "bench", "forward", 0, "cpu", "L1", execution_mode="event_driven")
        invocation.l1_snapshots = [
            payload_snapshot(plan, record.payload) for plan, record in zip(plans, decoded.records)
        ]
        invocations.append(invocation)
    window = build_window("L1", 0, 0, invocations)
    with WindowWriter(root, compressor=compressor, **writer_options) as writer:
        writer.write_window(window)


class FsOps:
    """Counts the process's file-system calls while active (patches the ``os`` functions and our ``syncfs``)."""

    CALLS = ("mkdir", "open", "write", "writev", "close", "replace", "fsync")

    def __init__(self) -> None:
        self.counts = dict.fromkeys((*self.CALLS, "syncfs"), 0)
        self._saved: dict[str, Any] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> FsOps:
        from megadump_zarr.store import backend

        for name in self.CALLS:
            real = self._saved[name] = getattr(os, name)
            setattr(os, name, self._counting(name, real))
        real_syncfs = self._saved["_syncfs"] = backend._syncfs
        backend._syncfs = self._counting("syncfs", real_syncfs)
        return self

    def _counting(self, name: str, real: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.counts[name] += 1
            return real(*args, **kwargs)

        return call

    def __exit__(self, *exc: object) -> None:
        from megadump_zarr.store import backend

        for name in self.CALLS:
            setattr(os, name, self._saved[name])
        backend._syncfs = self._saved["_syncfs"]

    @property
    def metadata_ops(self) -> int:
        """Operations that create or sync a name (``mkdir``, ``open``, ``rename``, ``fsync``, ``syncfs``)."""
        c = self.counts
        return c["mkdir"] + c["open"] + c["replace"] + c["fsync"] + c["syncfs"]


def count_fs_ops(run: Any, root: Path, records: int) -> dict[str, Any]:
    """File-system calls of one untimed run, per record (``torch.save`` and ``Path.write_text`` use ``open()``,
    which goes through ``os.open`` only for some paths: the seed's files are counted by creation instead)."""
    with FsOps() as ops:
        run(root)
    files = sum(1 for p in root.rglob("*") if p.is_file())
    dirs = sum(1 for p in root.rglob("*") if p.is_dir())
    return {
        "calls": ops.counts,
        "files": files,
        "dirs": dirs,
        "files_dirs_per_record": (files + dirs) / records,
        "metadata_ops_per_record": ops.metadata_ops / records,
        "calls_per_record": sum(ops.counts.values()) / records,
    }


def stored_breakdown(root: Path, records: int) -> dict[str, Any]:
    """What a layout stores, per record: files, directories, chunk bytes and ``zarr.json`` bytes (the
    documents: each record's own, its task group's consolidated copy and its window's).

    Args:
        root: A written dump root.
        records: Records written below it.
    """
    files = [p for p in root.rglob("*") if p.is_file()]
    documents = sum(p.stat().st_size for p in files if p.name == "zarr.json")
    chunks = sum(p.stat().st_size for p in files if p.name != "zarr.json")
    dirs = sum(1 for p in root.rglob("*") if p.is_dir())
    kinds: dict[str, int] = {}
    for path in files:
        if path.name == "zarr.json":
            kind = _document_kind(path)
            kinds[kind] = kinds.get(kind, 0) + path.stat().st_size
    return {
        "files_per_record": len(files) / records,
        "dirs_per_record": dirs / records,
        "chunk_bytes_per_record": chunks / records,
        "document_bytes_per_record": documents / records,
        "document_bytes_per_record_by_kind": {kind: size / records for kind, size in sorted(kinds.items())},
    }


def _document_kind(path: Path) -> str:
    """Which document a ``zarr.json`` is, for :func:`stored_breakdown`: ``window`` (consolidated metadata of
    the whole window), ``data group`` (a task group: its attributes and consolidated copies of its arrays'
    documents), ``record array``, ``coordinate array`` (no attributes), or ``other group``."""
    document = json.loads(path.read_bytes())
    if path.parent.name.startswith("window_"):
        return "window"
    if document.get("node_type") == "array":
        return "record array" if document.get("attributes") else "coordinate array"
    return "data group" if document.get("consolidated_metadata") else "other group"


def raw(buffer: torch.Tensor, plans: list[L1RecordPlan], root: Path, launches: int = 1) -> None:
    """The same payload bytes, one file."""
    root.mkdir(parents=True, exist_ok=True)
    start, end = plans[0].payload_offset, plans[-1].payload_offset + plans[-1].payload_bytes
    with open(root / "payload.bin", "wb") as handle:
        for _ in range(launches):
            handle.write(memoryview(buffer.numpy())[start:end])


def floor_template(
    buffer: torch.Tensor, plans: list[L1RecordPlan], root: Path, launches: int = 1
) -> list[tuple[str, bytes | None]]:
    """The directories (``None``) and files (their bytes) the tasks layout writes for this workload, parents
    first: one untimed run of ours, read back.

    Args:
        buffer: The Device buffer.
        plans: Its records.
        root: A scratch directory for the untimed run.
        launches: Invocations of the window.
    """
    ours(buffer, plans, root, launches=launches, durable=False)
    return tree_template(root)


def tree_template(root: Path) -> list[tuple[str, bytes | None]]:
    """The directories (``None``) and files (their bytes) below ``root``, parents first (for :func:`fs_floor`).

    Args:
        root: A written tree.
    """
    entries: list[tuple[str, bytes | None]] = []
    for here, dirs, files in os.walk(root):
        rel = os.path.relpath(here, root)
        if rel != ".":
            entries.append((rel, None))
        entries.extend((os.path.join(rel, name), Path(here, name).read_bytes()) for name in sorted(files))
        dirs.sort()
    return entries


def fs_floor(entries: list[tuple[str, bytes | None]], root: Path) -> None:
    """The file-system floor of the tasks layout: its directories and files written with plain
    ``os.mkdir``/``os.open``/``os.write``/``os.close``, then one ``os.sync()`` (no encoding, no metadata work).

    Args:
        entries: From :func:`floor_template`.
        root: Output root (created).
    """
    os.mkdir(root)
    for rel, data in entries:
        path = os.path.join(root, rel)
        if data is None:
            os.mkdir(path)
            continue
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    os.sync()


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def contender(
    key: str,
    buffer: torch.Tensor,
    plans: list[L1RecordPlan],
    launches: int,
    template: list[tuple[str, bytes | None]],
) -> Callable[[Path], None]:
    """The run of one contender, writing below the root it is given.

    Args:
        key: ``seed``, ``ours``, ``ours_nocrc``, ``ours_nodurable``, ``ours_none``, ``ours_packs``,
            ``ours_fsync``, ``raw`` or ``fs_floor``.
        buffer: The Device buffer.
        plans: Its records.
        launches: Launches (invocations) in the window.
        template: The tasks tree for ``fs_floor`` (:func:`tree_template`).
    """
    runs: dict[str, Callable[[Path], None]] = {
        "seed": lambda root: seed_layout(buffer, plans, root, launches),
        "ours": lambda root: ours(buffer, plans, root, launches=launches),
        "ours_nocrc": lambda root: ours(buffer, plans, root, launches=launches, checksum=False),
        "ours_nodurable": lambda root: ours(buffer, plans, root, launches=launches, durable=False),
        "ours_none": lambda root: ours(buffer, plans, root, "none", launches=launches),
        "ours_packs": lambda root: ours(buffer, plans, root, launches=launches, pack=True),  # layout="packs"
        "ours_fsync": lambda root: ours(buffer, plans, root, launches=launches, durable="fsync"),
        "raw": lambda root: raw(buffer, plans, root, launches),
        "fs_floor": lambda root: fs_floor(template, root),
    }
    return runs[key]


def worker(spec: dict[str, Any]) -> None:
    """One isolated timed run (``--worker SPEC``): build the workload untimed, run the contender on a settled
    disk (:func:`benchmarks._isolation.timed_run`), write the result to ``spec["result"]``.

    Args:
        spec: ``count``, ``payload_bytes``, ``dtype``, ``launches``, ``contender``, ``root``, ``template``
            (the tasks tree for ``fs_floor``, or None), ``result`` and optionally ``settle_timeout``.
    """
    buffer, plans = make_workload(spec["count"], spec["payload_bytes"], DTYPES[spec["dtype"]])
    template = tree_template(Path(spec["template"])) if spec.get("template") else []
    run = contender(spec["contender"], buffer, plans, spec["launches"], template)
    result = timed_run(run, Path(spec["root"]), spec.get("settle_timeout", SETTLE_TIMEOUT_S))
    Path(spec["result"]).write_text(json.dumps(result), encoding="utf-8")


def run_workload(
    name: str,
    count: int,
    payload_bytes: int,
    dtype: str,
    repeats: int,
    keeper: Retained,
    *,
    launches: int = 1,
    variants: bool = True,
    fsync: bool = False,
    fs_ops: bool = False,
    settle_timeout: float = SETTLE_TIMEOUT_S,
) -> dict[str, Any]:
    """Interleaved, isolated timings of every contender on one workload (see the module docstring).

    Args:
        name: Workload label.
        count: Records per launch.
        payload_bytes: Bytes per record.
        dtype: Element type (a key of :data:`DTYPES`).
        repeats: Runs per contender.
        keeper: Where outputs go and stay until all timing is done.
        launches: Launches (invocations) in the window.
        variants: Also time ours without checksums, without the durable commit, and uncompressed, raw and the
            file-system floor of the tasks tree.
        fsync: Also time the durable commit done with an fsync per file and directory.
        fs_ops: Count the file-system calls per record of one untimed run of seed, ours and packs (after
            the timed runs).
        settle_timeout: Most seconds each run waits for the disk to settle.
    """
    buffer, plans = make_workload(count, payload_bytes, DTYPES[dtype])
    payload = sum(p.payload_bytes for p in plans) * launches
    records = count * launches
    keys = ["seed", "ours", "ours_packs"]
    if variants:
        keys += ["ours_nocrc", "ours_nodurable", "ours_none", "raw", "fs_floor"]
    if fsync:
        keys.append("ours_fsync")
    expected = payload * 3 // 2 + records * 3 * 4096  # a run's disk use, for the keep budget
    tag = "".join(c if c.isalnum() else "_" for c in name.split(" (")[0])
    template_root: Path | None = None
    if variants or "fs_floor" in keys:
        template_root = keeper.fresh(f"{tag}_floor_template")
        ours(buffer, plans, template_root, launches=launches, durable=False)  # untimed: the tree to copy
        keeper.keep(template_root, _du(template_root))
    runs: dict[str, list[dict[str, Any]]] = {k: [] for k in keys}
    stored: dict[str, int] = {}
    breakdown: dict[str, dict[str, Any]] = {}
    for repeat in range(repeats):
        for key in keys:  # interleaved: A B C A B C ..., each in a fresh process on a settled disk
            keeper.make_room(expected, protect=(template_root,) if template_root else ())
            root = keeper.fresh(f"{tag}_{key}_{repeat}")
            spec = {
                "count": count,
                "payload_bytes": payload_bytes,
                "dtype": dtype,
                "launches": launches,
                "contender": key,
                "root": str(root),
                "template": str(template_root) if key == "fs_floor" else None,
                "settle_timeout": settle_timeout,
            }
            runs[key].append(run_isolated("benchmarks.export", spec))
            stored[key] = _du(root)
            keeper.keep(root, stored[key])
            if repeat == 0 and key in ("ours", "ours_packs"):
                breakdown[key] = stored_breakdown(root, records)
    ops = {}
    if fs_ops:  # untimed, after every timed run of this workload
        for key in ("seed", "ours", "ours_packs"):
            keeper.make_room(expected, protect=(template_root,) if template_root else ())
            root = keeper.fresh(f"{tag}_{key}_ops")
            ops[key] = count_fs_ops(contender(key, buffer, plans, launches, []), root, records)
            keeper.keep(root, _du(root))
    med = {k: statistics.median(r["wall_s"] for r in v) for k, v in runs.items()}
    cpu = {k: statistics.median(r["cpu_s"] for r in v) for k, v in runs.items()}
    settles = [r for v in runs.values() for r in v]
    result = {
        "workload": name,
        "layout": "tasks",
        "payload_bytes": payload,
        "records": records,
        "baseline_s": med["seed"],
        "ours_s": med["ours"],
        "ratio": med["seed"] / med["ours"],
        "peak_extra_rss_bytes": max(r["peak_extra_rss"] for r in runs["ours"]),
        "peak_extra_rss_share": max(r["peak_extra_rss"] for r in runs["ours"]) / payload,
        "baseline_peak_extra_rss_bytes": max(r["peak_extra_rss"] for r in runs["seed"]),
        "stored_bytes_ours": stored["ours"],
        "stored_bytes_seed": stored["seed"],
        "stored_vs_payload": stored["ours"] / payload,
        "seed_stored_vs_payload": stored["seed"] / payload,
        "baseline_cpu_s": cpu["seed"],
        "ours_cpu_s": cpu["ours"],
        "cpu_ratio": cpu["seed"] / cpu["ours"],
        "ours_packs_s": med["ours_packs"],
        "packs_layout": "packs",
        "packs_vs_seed": med["seed"] / med["ours_packs"],
        "packs_speedup": med["ours"] / med["ours_packs"],
        "packs_cpu_s": cpu["ours_packs"],
        "packs_cpu_ratio": cpu["seed"] / cpu["ours_packs"],
        "stored_vs_payload_packs": stored["ours_packs"] / payload,
        "median_s": med,
        "median_cpu_s": cpu,
        "settle_max_s": max(r["settle_s"] for r in settles),
        "unsettled_runs": sum(not r["settled"] for r in settles),
        "isolation": "fresh process per run, fresh directory, os.sync() + disk settled before each",
        "times": {k: [r["wall_s"] for r in v] for k, v in runs.items()},
    }
    if variants:
        result |= {
            "ours_none_s": med["ours_none"],
            "raw_s": med["raw"],
            "none_vs_raw": med["ours_none"] / med["raw"],
            "ours_nocrc_s": med["ours_nocrc"],
            "crc_cost": med["ours"] / med["ours_nocrc"] - 1,
            "ours_nodurable_s": med["ours_nodurable"],
            "durable_cost": med["ours"] / med["ours_nodurable"] - 1,
            "fs_floor_s": med["fs_floor"],
            "tasks_vs_floor": med["ours"] / med["fs_floor"],
            "fs_floor_cpu_s": cpu["fs_floor"],
        }
    if fsync:
        result |= {"ours_fsync_s": med["ours_fsync"], "fsync_vs_syncfs": med["ours_fsync"] / med["ours"]}
    if ops:
        result["fs_ops"] = ops
    result["stored"] = breakdown
    return result


def run_async(quick: bool, base: str | None) -> dict[str, Any]:
    """P3: time in ``dumper.step()`` with asynchronous vs synchronous export (demo MoE block, L0)."""
    from megadump_zarr import TensorDumpConfig, schedule, tensor_dump
    from megadump_zarr.demo.model import DemoConfig, MoEBlock

    tokens, d_model, steps = (4096, 256, 6) if quick else (32768, 512, 8)
    block = MoEBlock(DemoConfig(tokens=tokens, d_model=d_model, n_experts=8, tile_rows=1024))
    inputs = [block.make_input() for _ in range(steps)]
    result: dict[str, Any] = {"workload": f"P3 async L0 demo T={tokens} D={d_model}", "steps": steps}
    for mode in (False, True):
        with scratch_dir(base) as scratch:
            stalls = []
            config = TensorDumpConfig(Path(scratch) / "dump", async_export=mode)
            with tensor_dump(config, schedule(wait=1, warmup=0, active=1)) as dumper:
                for x in inputs:
                    block(x)
                    start = time.perf_counter()
                    dumper.step()
                    stalls.append(time.perf_counter() - start)
                start = time.perf_counter()
                dumper.flush()
                drain = time.perf_counter() - start
            sync_disk()
            result["async" if mode else "sync"] = {
                "step_s": sum(stalls),
                "final_flush_s": drain,
                "stored_bytes": _du(Path(scratch) / "dump"),
            }
    result["baseline_s"] = result["sync"]["step_s"]
    result["ours_s"] = result["async"]["step_s"]
    result["ratio"] = result["baseline_s"] / max(result["ours_s"], 1e-9)
    result["stall_share"] = result["ours_s"] / result["baseline_s"]
    return result


def main(argv: list[str] | None = None) -> int:
    """Run the export benchmarks and print ratios."""
    start_run()  # the JSON's run record (load average, CPU and wall seconds) counts from here
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes (CI smoke)")
    parser.add_argument("--json", default=None, help="write results as JSON")
    parser.add_argument("--repeats", type=int, default=None, help="runs per contender (default 3, quick 1)")
    parser.add_argument("--dir", default=None, help="scratch parent directory (default: system temp)")
    parser.add_argument("--skip-async", action="store_true")
    parser.add_argument("--durability", action="store_true", help="also time an fsync per file and directory")
    parser.add_argument("--only", choices=("P1", "P2"), default=None, help="run one export workload (and P2x4)")
    parser.add_argument(
        "--keep-gib",
        type=float,
        default=None,
        help="GiB of outputs kept until all timing is done (default: half the free space, at most 16)",
    )
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # one isolated timed run (JSON spec)
    args = parser.parse_args(argv)
    if args.worker is not None:
        worker(json.loads(args.worker))
        return 0
    repeats = args.repeats or (1 if args.quick else 3)
    big = (32, 4 << 20) if args.quick else (256, 4 << 20)
    small = (512, 8 << 10) if args.quick else (4096, 8 << 10)
    print(f"machine: {machine()}")
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    entries: list[dict[str, Any]] = []
    scratch_parent = args.dir or tempfile.gettempdir()
    free = shutil.disk_usage(scratch_parent).free
    budget = int(args.keep_gib * 2**30) if args.keep_gib is not None else min(free // 2, 16 << 30)

    def done(entry: dict[str, Any]) -> None:  # one line per workload as it ends (a long run may be cut short)
        entries.append(entry)
        print(json.dumps({k: v for k, v in entry.items() if k != "times"}), flush=True)

    with retained(args.dir, budget) as keeper:
        if args.only in (None, "P1"):
            done(
                run_workload(
                    f"P1 {big[0]} x {big[1] >> 20} MiB bf16",
                    big[0],
                    big[1],
                    "bfloat16",
                    repeats,
                    keeper,
                    fsync=args.durability,
                )
            )
        if args.only in (None, "P2"):
            done(
                run_workload(
                    f"P2 {small[0]} x {small[1] >> 10} KiB fp32 (tasks layout)",
                    small[0],
                    small[1],
                    "float32",
                    repeats,
                    keeper,
                    fsync=args.durability,
                    fs_ops=True,
                )
            )
            done(
                run_workload(
                    f"P2 {4 * small[0]} records over 4 launches (tasks layout)",
                    small[0],
                    small[1],
                    "float32",
                    repeats,
                    keeper,
                    launches=4,
                    variants=False,
                    fs_ops=True,
                )
            )
        early_clears = keeper.early_clears
    print(f"load average at end of timing: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if early_clears:
        print(f"outputs past the keep budget were removed, synced and settled {early_clears} times")
    print_table(
        entries,
        [
            ("workload", "workload"),
            ("baseline_s", "seed s"),
            ("ours_s", "ours s"),
            ("ratio", "seed/ours"),
            ("ours_nocrc_s", "no-crc s"),
            ("ours_nodurable_s", "no-durable s"),
            ("ours_packs_s", "packs s"),
            ("packs_vs_seed", "seed/packs"),
            ("fs_floor_s", "fs floor s"),
            ("tasks_vs_floor", "tasks/floor"),
            ("ours_none_s", "ours-none s"),
            ("raw_s", "raw s"),
            ("none_vs_raw", "none/raw"),
            ("stored_vs_payload", "stored/payload"),
            ("peak_extra_rss_share", "our extra RSS / payload"),
            ("baseline_cpu_s", "seed cpu s"),
            ("ours_cpu_s", "ours cpu s"),
            ("cpu_ratio", "cpu seed/ours"),
            ("packs_cpu_s", "packs cpu s"),
            ("packs_cpu_ratio", "cpu seed/packs"),
            ("unsettled_runs", "unsettled runs"),
        ],
    )
    for entry in entries:
        for key, ops in entry.get("fs_ops", {}).items():
            print(
                f"{entry['workload']}: {key} {ops['metadata_ops_per_record']:.2f} mkdir/open/rename/sync per record, "
                f"{ops['calls_per_record']:.2f} calls per record, {ops['files_dirs_per_record']:.2f} files+dirs per record"
            )
        for key, kept in entry.get("stored", {}).items():
            print(
                f"{entry['workload']}: {key} stores {kept['files_per_record']:.2f} files + {kept['dirs_per_record']:.2f} "
                f"dirs, {kept['chunk_bytes_per_record']:.0f} chunk bytes + {kept['document_bytes_per_record']:.0f} "
                f"zarr.json bytes per record ("
                + ", ".join(f"{k} {v:.0f}" for k, v in kept["document_bytes_per_record_by_kind"].items())
                + ")"
            )
    if not args.skip_async:
        settle_disk(Path(scratch_parent))  # the kept outputs' deletions and discards end before P3 starts
        p3 = run_async(args.quick, args.dir)
        entries.append(p3)
        print(
            f"{p3['workload']}: step thread {p3['ours_s']:.3f} s async vs {p3['baseline_s']:.3f} s sync "
            f"(stall share {p3['stall_share']:.1%}; final flush {p3['async']['final_flush_s']:.3f} s)"
        )
    for entry in entries:
        entry.pop("times", None)
    write_json(args.json, entries)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
