"""``compare --bitwise`` of a long statistics-mode pair: the per-window overhead of the compare path.

    python -m benchmarks.bitwise [--steps N] [--seeded] [--json OUT] [--dir DIR]

B1 — the demo MoE block, forward only, at L1 in statistics mode (``moe_experts`` / ``expert_down``
outputs: 4 records a step), ``--steps`` steps (default 1000: 4000 statistics-only records). A is written
with ``AccumulationOrder(("expert_down",), seed=0)``; B is a copy of A (``--seeded``: a second run with
seed 1, whose every record differs bitwise; it costs another write). Timed, each on freshly opened dumps:
``compare(a, b, bitwise=True)``, the default ``compare(a, b)``, and ``bitwise_map(result, by="core")``.
Target: the 1000-step pair compares in seconds. Writing the dumps is timed too (not a target).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
import shutil
import time
from typing import Any

import torch

from benchmarks._common import machine, print_table, scratch_dir, start_run, write_json
from megadump_zarr import TensorDumpConfig, tensor_dump
from megadump_zarr.analyse import compare
from megadump_zarr.analyse.bitwise import bitwise_map
from megadump_zarr.demo.model import MoEBlock
from megadump_zarr.read import open_dump
from megadump_zarr.runtime import AccumulationOrder


def write_run(out: Path, steps: int, seed: int) -> float:
    """Write one statistics-mode run; returns its wall time in seconds."""
    start = time.perf_counter()
    block = MoEBlock(accumulation_order=AccumulationOrder(("expert_down",), seed=seed))
    cfg = TensorDumpConfig(
        out, level="L1", kernel_names="moe_experts", stages="expert_down", io="output", mode="statistics"
    )
    with tensor_dump(cfg) as dumper, torch.no_grad():
        for _ in range(steps):
            block(block.make_input())
            dumper.step()
    return time.perf_counter() - start


def _timed(run: Any) -> tuple[float, Any]:
    start = time.perf_counter()
    value = run()
    return time.perf_counter() - start, value


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Run B1 and print/record the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--seeded", action="store_true", help="B is a second run (seed 1), not a copy of A")
    parser.add_argument("--json", help="write the figures as JSON here")
    parser.add_argument("--dir", help="scratch directory (default: a temporary one)")
    args = parser.parse_args(argv)
    start_run()  # the JSON's run record (load average, CPU and wall seconds) counts from here
    with scratch_dir(args.dir) as scratch:
        a, b = Path(scratch) / "a", Path(scratch) / "b"
        write_a = write_run(a, args.steps, 0)
        if args.seeded:
            write_b = write_run(b, args.steps, 1)
        else:
            start = time.perf_counter()
            shutil.copytree(a, b)
            write_b = time.perf_counter() - start
        bitwise_s, result = _timed(lambda: compare(open_dump(a), open_dump(b), bitwise=True))
        default_s, plain = _timed(lambda: compare(open_dump(a), open_dump(b)))
        map_s, table = _timed(lambda: bitwise_map(result, by="core"))
    figures = {
        "benchmark": "bitwise",
        "steps": args.steps,
        "records": len(result),
        "seeded": args.seeded,
        "write_a_s": round(write_a, 3),
        "write_b_s": round(write_b, 3),
        "compare_bitwise_s": round(bitwise_s, 3),
        "compare_default_s": round(default_s, 3),
        "bitwise_map_s": round(map_s, 3),
        "bitwise_differing": int((result["verdict"] != "pass").sum()),
        "default_failing": int(plain["verdict"].isin(["fail", "error"]).sum()),
        "cores_differing": int((table["differing"] > 0).sum()),
        "machine": machine(),
    }
    print_table(
        [{"figure": k, "value": v} for k, v in figures.items() if k != "machine"],
        [("figure", "figure"), ("value", "value")],
    )
    print(json.dumps(figures))
    write_json(args.json, [figures])
    return figures


if __name__ == "__main__":
    main()
