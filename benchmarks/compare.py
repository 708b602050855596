"""Compare at read speed: ``compare`` of two dumps against just reading (decompressing) both of them.

Run as ``python -m benchmarks.compare [--quick] [--json OUT] [--root DIR] [--repeat N]``.

Two L0 dumps written by the store's ``WindowWriter`` (default codec, 4 MiB chunks, CRC-32C), each one
window of float32 tensors of 1024 columns, 224 MiB per side in all (``--quick``: 32 MiB): 4 tensors
of 56 MiB and 16 small ones of 256 KiB (the shape of a real kernel's records). Side B is side A with
noise of relative size 1e-7 on every element, so every block is really compared (identical blocks
would take a shortcut) and every record passes at float32's tolerance.

Measured in one run, median of ``--repeat`` runs each (files warm in the page cache for both):

* ``read both``: every record of both dumps decompressed, nothing else, the way compare reads them
  (chunk-aligned blocks of A and B through the dump's own store, checksums verified, in compare's
  threads), the floor of any comparison; ``whole`` each array read whole with zarr's own concurrent
  decode (``array[...]``), ``via dask`` through ``Dump.record_array(path).values`` (for information);
* ``compare``: ``megadump_zarr.analyse.compare(dump_a, dump_b)`` (all metrics, verdicts, worst element);
* ``MiB/s per side``: the logical bytes of one side over the compare time;
* ``ratio``: compare time / read-both time (target <= 1.5), target >= 400 MiB/s per side on 2 cores;
* ``peak extra RSS`` during compare (sampled every 5 ms) and ``peak traced`` (tracemalloc's peak of
  one separate run, numpy buffers included), against the size of one 4 MiB chunk (target: a few chunks
  per thread, never whole tensors);
* ``1 lane``: the same compare in one thread (the serial path; its frame must equal the threaded one);
  ``CPU/wall`` above 1 means the threads ran at once;
* ``eager``: ``compare(dump_a, reference)`` with the reference a mapping name -> numpy array holding side B's
  tensors in memory (an eager run's tensors), in the block lanes, and ``eager 1 lane`` the same in one thread
  (the serial path it took before; frames must be equal); ``eager/compare``: its time over the dump-vs-dump
  compare's (the dump side is read through ``Dump.tensor``'s dask view, chunk-aligned);
* the CPU seconds (all threads) of read both and of compare, their ratio and MiB per side per CPU
  second, and the load average: on a shared machine the wall times move with the other processes,
  the CPU seconds much less.

Prints a table; ``--json`` writes the numbers.
"""

from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor
import os
import time
from typing import Any

import numpy as np

from benchmarks._common import PeakRss, machine, print_table, scratch_dir, start_run, write_json
from megadump_zarr.layout.write_model import ArrayWrite, InvocationWrite, WindowWrite
from megadump_zarr.store.writer import WindowWriter

COLUMNS = 1024
CHUNK_BYTES = 4 << 20
SMALL_ROWS = 64  # 256 KiB records


def _window(
    rng: np.random.Generator, big: int, big_rows: int, noise: float, seed_data: list[np.ndarray]
) -> WindowWrite:
    arrays = []
    names = [f"big_{k}" for k in range(big)] + [f"small_{k:02d}" for k in range(16)]
    for k, name in enumerate(names):
        rows = big_rows if name.startswith("big") else SMALL_ROWS
        if len(seed_data) <= k:
            seed_data.append(rng.standard_normal((rows, COLUMNS), dtype=np.float32))
        data = seed_data[k]
        if noise:
            data = data * (1 + noise * rng.standard_normal(data.shape, dtype=np.float32))
        role = "external_input" if k % 2 == 0 else "stage_output"
        attrs = {
            "name": name,
            "role": role,
            "capturePhase": "before" if k % 2 == 0 else "after",
            "actualShape": list(data.shape),
            "declaredShape": list(data.shape),
            "producers": [],
            "consumers": [],
            "ports": [],
        }
        arrays.append(ArrayWrite(name, data, (f"{name}_row", "col"), attrs))
    invocation = InvocationWrite(
        "invocation_000000_forward",
        {"invocationId": 0, "step": 0, "direction": "forward", "kernelName": "bench", "level": "L0"},
        [],
        arrays,
    )
    return WindowWrite(0, 0, {"level": "L0", "windowIndex": 0, "invocations": [invocation.name]}, [invocation])


def write_pair(base: str, side_bytes: int) -> tuple[str, str, int]:
    """Dumps A and B (B = A with relative noise 1e-7); returns their roots and the logical bytes per side."""
    rng = np.random.default_rng(0)
    small_bytes = 16 * SMALL_ROWS * COLUMNS * 4
    big = 4
    big_rows = max(1, (side_bytes - small_bytes) // (big * COLUMNS * 4))
    seed: list[np.ndarray] = []
    roots = []
    for side, noise in (("a", 0.0), ("b", 1e-7)):
        root = os.path.join(base, side)
        with WindowWriter(root, chunk_bytes=CHUNK_BYTES, durable=False) as writer:
            writer.write_window(_window(rng, big, big_rows, noise, seed))
        roots.append(root)
    total = sum(x.nbytes for x in seed)
    return roots[0], roots[1], total


def _median(fn: Any, repeat: int, cpu: list[float] | None = None) -> tuple[float, Any]:
    """Median wall time of ``repeat`` runs (and, into ``cpu``, the median CPU time of this process)."""
    times, cpus, out = [], [], None
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        out = fn()
        times.append(time.perf_counter() - start)
        cpus.append(time.process_time() - start_cpu)
    if cpu is not None:
        cpu.append(float(np.median(cpus)))
    return float(np.median(times)), out


def bench(base: str, side_bytes: int, repeat: int) -> dict[str, Any]:
    from megadump_zarr.analyse import compare
    from megadump_zarr.read import open_dump

    root_a, root_b, logical = write_pair(base, side_bytes)
    dump_a, dump_b = open_dump(root_a), open_dump(root_b)
    paths = list(dump_a.records()["path"])

    from megadump_zarr.analyse import lanes as lane_module
    from megadump_zarr.analyse.metrics import (
        DEFAULT_BLOCK_BYTES,
        iter_blocks,
        read_native_block,
        row_chunks,
        shape_of,
    )
    from megadump_zarr.analyse.record_pairs import record_source

    def read_both_dask() -> int:
        n = 0
        for dump in (dump_a, dump_b):
            for path in paths:
                n += dump.record_array(path).values.nbytes
        return n

    def read_both_whole() -> int:  # zarr's own read of each whole array (concurrent chunk decode), same store
        n = 0
        for dump in (dump_a, dump_b):
            for path in paths:
                n += record_source(dump, path, False)[...].nbytes
        return n

    def read_both() -> int:
        """Decompress only, the way compare reads: chunk-aligned blocks of A and B, in the same threads."""

        def lane(work: list[tuple[Any, Any, Any]]) -> int:
            return sum(read_native_block(xa, i).nbytes + read_native_block(xb, i).nbytes for xa, xb, i in work)

        work = []
        for path in paths:
            xa, xb = record_source(dump_a, path, False), record_source(dump_b, path, False)
            work += [(xa, xb, i) for i in iter_blocks(shape_of(xa), DEFAULT_BLOCK_BYTES, row_chunks(xa))]
        lanes = lane_module._THREADS
        with ThreadPoolExecutor(lanes) as pool:
            return sum(pool.map(lane, [work[k::lanes] for k in range(lanes)]))

    def run_compare() -> Any:
        return compare(dump_a, dump_b)

    def run_serial() -> Any:  # the same comparison in one lane (for information: the threads' gain)
        threads, lane_module._THREADS = lane_module._THREADS, 1
        try:
            return compare(dump_a, dump_b)
        finally:
            lane_module._THREADS = threads

    names = list(dict.fromkeys(dump_a.records()["name"]))
    reference = {name: np.asarray(dump_b.tensor(name).values) for name in names}  # the eager run, in memory

    def run_eager() -> Any:
        return compare(dump_a, reference)

    def run_eager_serial() -> Any:
        threads, lane_module._THREADS = lane_module._THREADS, 1
        try:
            return compare(dump_a, reference)
        finally:
            lane_module._THREADS = threads

    load_before = os.getloadavg()
    read_both()  # warm the page cache and the catalogues for both contenders
    run_compare()
    read_cpu: list[float] = []
    compare_cpu: list[float] = []
    serial_cpu: list[float] = []
    read_s, nbytes = _median(read_both, repeat, read_cpu)
    whole_s, whole_bytes = _median(read_both_whole, repeat)
    dask_s, dask_bytes = _median(read_both_dask, repeat)
    assert nbytes == whole_bytes == dask_bytes == 2 * logical, (nbytes, whole_bytes, dask_bytes, logical)
    with PeakRss() as rss:
        compare_s, result = _median(run_compare, repeat, compare_cpu)
    serial_s, serial = _median(run_serial, repeat, serial_cpu)
    assert result.equals(serial), "the threaded comparison differs from the one-lane comparison"
    run_eager()
    eager_cpu: list[float] = []
    eager_serial_cpu: list[float] = []
    eager_s, eager = _median(run_eager, repeat, eager_cpu)
    eager_serial_s, eager_serial = _median(run_eager_serial, repeat, eager_serial_cpu)
    assert eager.equals(eager_serial), "the eager-reference compare differs in lanes and in one lane"
    assert (eager.verdict == "pass").all() and len(eager) == len(names), eager[["name", "verdict", "note"]]
    assert (result.verdict == "pass").all(), result[result.verdict != "pass"][["name", "note"]]
    assert (result.max_abs > 0).all()
    traced = _traced_peak(run_compare)
    mib = logical / 2**20
    return {
        "workload": f"compare 2 x {mib:.0f} MiB float32 L0 ({len(paths)} records)",
        "read_both_s": read_s,
        "read_both_whole_s": whole_s,
        "read_both_dask_s": dask_s,
        "compare_s": compare_s,
        "compare_serial_s": serial_s,
        "eager_s": eager_s,
        "eager_serial_s": eager_serial_s,
        "eager_serial_over_lanes": eager_serial_s / eager_s,
        "eager_over_compare": eager_s / compare_s,
        "eager_cpu_s": eager_cpu[0],
        "eager_serial_cpu_s": eager_serial_cpu[0],
        "read_mib_s_per_side": mib / read_s,
        "compare_mib_s_per_side": mib / compare_s,
        "ratio": compare_s / read_s,
        "read_cpu_s": read_cpu[0],
        "compare_cpu_s": compare_cpu[0],
        "compare_serial_cpu_s": serial_cpu[0],
        "cpu_ratio": compare_cpu[0] / read_cpu[0],
        "compare_mib_per_cpu_s": mib / compare_cpu[0],
        "compare_cpu_per_wall": compare_cpu[0] / compare_s,
        "read_cpu_per_wall": read_cpu[0] / read_s,
        "load_average": os.getloadavg()[0],
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "peak_extra_rss_mib": rss.extra / 2**20,
        "peak_extra_rss_chunks": rss.extra / CHUNK_BYTES,
        "peak_traced_mib": traced / 2**20,
        "peak_traced_chunks": traced / CHUNK_BYTES,
        "threads": lane_module._THREADS,
        "cores": os.cpu_count(),
    }


def _traced_peak(run: Any) -> int:
    """Peak bytes allocated (numpy buffers included) above the start during one ``run()``, by tracemalloc
    (a separate, untimed run: tracing slows allocation down)."""
    import tracemalloc

    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        start = tracemalloc.get_traced_memory()[0]
        run()
        return max(tracemalloc.get_traced_memory()[1] - start, 0)
    finally:
        tracemalloc.stop()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    start_run()  # the JSON's run record (load average, CPU and wall seconds) counts from here
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="32 MiB per side instead of 224 MiB")
    parser.add_argument("--json", default=None, help="write the results as JSON to this file")
    parser.add_argument("--root", default=None, help="directory for the dumps (default: a temp dir)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    side = (32 << 20) if args.quick else (224 << 20)
    with scratch_dir(args.root) as base:
        row = bench(base, side, 1 if args.quick else args.repeat)
    print(machine())
    print_table(
        [row],
        [
            ("workload", "workload"),
            ("read_both_s", "read both s (floor)"),
            ("read_both_whole_s", "whole s"),
            ("read_both_dask_s", "via dask s"),
            ("compare_s", "compare s"),
            ("compare_serial_s", "1 lane s"),
            ("compare_mib_s_per_side", "MiB/s per side"),
            ("ratio", "compare/read"),
        ],
    )
    print_table(
        [row],
        [
            ("read_cpu_s", "read both CPU s"),
            ("compare_cpu_s", "compare CPU s"),
            ("compare_serial_cpu_s", "1 lane CPU s"),
            ("cpu_ratio", "CPU compare/read"),
            ("compare_cpu_per_wall", "compare CPU/wall"),
            ("compare_mib_per_cpu_s", "MiB per side per CPU s"),
        ],
    )
    print_table(
        [row],
        [
            ("eager_s", "eager s"),
            ("eager_serial_s", "eager 1 lane s"),
            ("eager_serial_over_lanes", "1 lane/lanes"),
            ("eager_over_compare", "eager/compare"),
            ("eager_cpu_s", "eager CPU s"),
            ("eager_serial_cpu_s", "eager 1 lane CPU s"),
        ],
    )
    print_table(
        [row],
        [
            ("peak_extra_rss_mib", "peak extra RSS MiB"),
            ("peak_traced_mib", "peak traced MiB"),
            ("peak_traced_chunks", "in 4 MiB chunks"),
            ("threads", "lanes"),
            ("cores", "cores"),
            ("load_average_before", "load before"),
            ("load_average_after", "load after"),
        ],
    )
    print("targets: >= 400 MiB/s per side on 2 cores; compare/read <= 1.5; peak extra RSS a few chunks per thread")
    print(
        "(wall times depend on what else runs: with the load average above the core count, compare the CPU "
        "seconds; on two idle cores the wall time is at best half the CPU time)"
    )
    write_json(args.json, [row])
    return row


if __name__ == "__main__":
    main()
