"""The flight recorder's bounded cost: step stall armed vs statistics mode, memory over a long run, time to commit.

    python -m benchmarks.recorder [--quick] [--json OUT] [--steps N] [--soak N] [--dir DIR]

R1 — step-thread time per step of the demo MoE block at L1 (every expert stage, inputs and outputs), run
forward with changing inputs, in four modes interleaved round by round (``--steps`` steps each round, three
rounds; medians): no dumper (``plain``), statistics mode with one window per step (its steady state: every
step exported), statistics mode with one window at exit (capture only), and the flight recorder armed with
its default ring (8 steps) and triggers, nothing firing. Reported: seconds per step and the stall (time above
``plain``); target: recorder stall ≤ 1.2× the statistics-mode stall (window per step).

R2 — RSS over a soak (``--soak`` steps, default 1000; ``--quick`` 150) with the recorder armed and nothing
firing: RSS after warm-up (a tenth of the run, at most 100 steps) vs at the end; target: growth ≤ 5 %.
Also the ring's steps and bytes at the end (bounded by the config).

R3 — time from the triggering step to its committed window: a predicate fires at step 40 (``--quick``: 12)
after a full ring; the ``dumper.step()`` of that step (triggers, window build, write, commit; synchronous
export) is timed, with the window's records and stored bytes.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
import statistics
import time
from typing import Any

import torch

from benchmarks._common import machine, print_table, scratch_dir, start_run, write_json

STAGES = ["expert_up", "expert_down", "unpermute", "combine"]


def _rss() -> int:
    """Resident set size of this process in bytes (Linux)."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * 4096


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _block(quick: bool) -> Any:
    from megadump_zarr.demo.model import DemoConfig, MoEBlock

    config = DemoConfig() if quick else DemoConfig(tokens=128, d_model=64, n_experts=8, tile_rows=16)
    return MoEBlock(config)


def _config(out: Path, mode: str, **fields: Any) -> Any:
    from megadump_zarr import TensorDumpConfig

    return TensorDumpConfig(out, level="L1", kernel_names="moe_experts", stages=STAGES, mode=mode, **fields)


def _steps(block: Any, x0: torch.Tensor, steps: int, dumper: Any | None, start: int = 0) -> list[float]:
    """Per-step wall seconds of ``steps`` forward steps (the dumper's ``step()`` included)."""
    times = []
    for step in range(start, start + steps):
        x = x0 * (1.0 + 0.05 * math.sin(0.7 * step))
        began = time.perf_counter()
        block(x)
        if dumper is not None:
            dumper.step()
        times.append(time.perf_counter() - began)
    return times


def _mode_times(mode: str, block: Any, x0: torch.Tensor, steps: int, scratch: Path, index: int) -> list[float]:
    from megadump_zarr import RecorderConfig, schedule, tensor_dump

    if mode == "plain":
        return _steps(block, x0, steps, None)
    out = scratch / f"{mode}_{index}"
    if mode == "statistics_window_per_step":
        dumper = tensor_dump(_config(out, "statistics"), schedule(wait=0, warmup=0, active=1))
    elif mode == "statistics_one_window":
        dumper = tensor_dump(_config(out, "statistics"))
    else:
        dumper = tensor_dump(_config(out, "tensor", recorder=RecorderConfig()))
    with dumper:
        times = _steps(block, x0, steps, dumper)
    return times


def run_stall(steps: int, rounds: int, base: str | None, quick: bool) -> dict[str, Any]:
    """R1: seconds per step in each mode, interleaved round by round; medians."""
    modes = ("plain", "statistics_window_per_step", "statistics_one_window", "recorder")
    block = _block(quick)
    x0 = block.make_input()
    per_mode: dict[str, list[float]] = {mode: [] for mode in modes}
    with scratch_dir(base) as scratch:
        _steps(block, x0, 3, None)  # warm-up
        for index in range(rounds):
            for mode in modes:
                per_mode[mode] += _mode_times(mode, block, x0, steps, Path(scratch), index)
    medians = {mode: statistics.median(times) for mode, times in per_mode.items()}
    stall = {mode: max(medians[mode] - medians["plain"], 1e-9) for mode in modes}
    return {
        "workload": f"R1 stall: demo block L1, {steps} steps x {rounds} rounds per mode",
        **{f"{mode}_s_per_step": medians[mode] for mode in modes},
        "recorder_stall_s": stall["recorder"],
        "statistics_stall_s": stall["statistics_window_per_step"],
        "stall_ratio": stall["recorder"] / stall["statistics_window_per_step"],
        "stall_ratio_capture_only": stall["recorder"] / stall["statistics_one_window"],
        "step_ratio": medians["recorder"] / medians["statistics_window_per_step"],
        "pass": stall["recorder"] / stall["statistics_window_per_step"] <= 1.2,
    }


def run_soak(steps: int, base: str | None, quick: bool) -> dict[str, Any]:
    """R2: RSS over ``steps`` steps with the recorder armed and nothing firing."""
    from megadump_zarr import RecorderConfig, tensor_dump

    warmup = min(100, max(steps // 10, 1))
    block = _block(quick)
    x0 = block.make_input()
    with scratch_dir(base) as scratch:
        out = Path(scratch) / "soak"
        dumper = tensor_dump(_config(out, "tensor", recorder=RecorderConfig()))
        rss_warm = 0
        started = time.perf_counter()
        with dumper:
            for step in range(steps):
                _steps(block, x0, 1, dumper, start=step)
                if step + 1 == warmup:
                    rss_warm = _rss()
            rss_end = _rss()
            ring = dumper.recorder
            ring_steps = len(ring.ring_steps) if ring is not None else -1
            ring_bytes = ring.ring_bytes if ring is not None else -1
        elapsed = time.perf_counter() - started
        written = _du(out) if out.exists() else 0
    return {
        "workload": f"R2 soak: recorder armed, nothing firing, {steps} steps",
        "steps": steps,
        "rss_after_warmup": rss_warm,
        "rss_end": rss_end,
        "rss_growth": rss_end / rss_warm - 1,
        "ring_steps": ring_steps,
        "ring_bytes": ring_bytes,
        "bytes_written": written,
        "seconds_per_step": elapsed / steps,
        "pass": rss_end / rss_warm - 1 <= 0.05 and written == 0,
    }


def run_commit(fire_at: int, base: str | None, quick: bool) -> dict[str, Any]:
    """R3: the triggering step's ``dumper.step()``: triggers, window build, write and commit."""
    from megadump_zarr import RecorderConfig, open_dump, tensor_dump

    block = _block(quick)
    x0 = block.make_input()
    with scratch_dir(base) as scratch:
        out = Path(scratch) / "commit"
        recorder = RecorderConfig(nonfinite=False, norm_k=None, predicate=lambda row: row["step"] == fire_at)
        dumper = tensor_dump(_config(out, "tensor", recorder=recorder))
        with dumper:
            for step in range(fire_at):
                _steps(block, x0, 1, dumper, start=step)
            block(x0)
            began = time.perf_counter()
            dumper.step()
            seconds = time.perf_counter() - began
        records = open_dump(out).records()
        return {
            "workload": f"R3 trigger to committed window: ring 8 + the triggering step (step {fire_at})",
            "trigger_to_commit_s": seconds,
            "steps_in_window": int(records["step"].nunique()),
            "records": len(records),
            "stored_bytes": _du(out),
            "pass": int(records["step"].nunique()) == 9,
        }


def main(argv: list[str] | None = None) -> int:
    """Run R1, R2 and R3 and print the ratios."""
    start_run()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke)")
    parser.add_argument("--json", default=None, help="write results as JSON")
    parser.add_argument("--steps", type=int, default=None, help="R1 steps per mode and round (default 100, quick 10)")
    parser.add_argument("--soak", type=int, default=None, help="R2 steps (default 1000, quick 150)")
    parser.add_argument("--dir", default=None, help="scratch parent directory (default: system temp)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    steps = args.steps or (10 if args.quick else 100)
    soak = args.soak or (150 if args.quick else 1000)
    print(f"machine: {machine()}")
    stall = run_stall(steps, 2 if args.quick else 3, args.dir, args.quick)
    print_table(
        [stall],
        [
            ("plain_s_per_step", "plain s/step"),
            ("statistics_window_per_step_s_per_step", "stats (window/step) s/step"),
            ("statistics_one_window_s_per_step", "stats (capture) s/step"),
            ("recorder_s_per_step", "recorder s/step"),
            ("stall_ratio", "stall ratio"),
            ("stall_ratio_capture_only", "vs capture only"),
        ],
    )
    soaked = run_soak(soak, args.dir, args.quick)
    print_table(
        [soaked],
        [
            ("steps", "steps"),
            ("rss_after_warmup", "RSS warm"),
            ("rss_end", "RSS end"),
            ("rss_growth", "growth"),
            ("ring_steps", "ring steps"),
            ("ring_bytes", "ring B"),
            ("bytes_written", "written B"),
        ],
    )
    commit = run_commit(12 if args.quick else 40, args.dir, args.quick)
    print_table(
        [commit],
        [("trigger_to_commit_s", "trigger->commit s"), ("steps_in_window", "steps"), ("records", "records"),
         ("stored_bytes", "stored B")],
    )  # fmt: skip
    entries = [stall, soaked, commit]
    for entry in entries:
        print(f"{entry['workload']}: {'PASS' if entry['pass'] else 'FAIL'}")
    write_json(args.json, entries)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
