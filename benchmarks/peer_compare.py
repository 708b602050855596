"""Peer benchmark: ``msprobe compare`` against ``megadump compare`` on the same tensors, one run.

Workload: msprobe's own dumps (``PrecisionDebugger``, tensor task, one step, forward and backward) of a
torch MLP of ``layers`` ``Linear(hidden, hidden)`` + ReLU blocks on a ``batch x hidden`` float32 input,
once as golden and once with one weight element of a middle layer perturbed (the target). Then, each as
its own CLI process, from a cold start (page cache dropped where permitted, else all read warm files),
wall time and the child's peak RSS (``os.wait4``'s ``ru_maxrss``):

* ``megadump compare TARGET_DIR GOLDEN_DIR --json`` on msprobe's raw directories, read in place
  (exit 1: records differ) -- the end-to-end figure;
* ``msprobe compare -tp TARGET/dump.json -gp GOLDEN/dump.json -o OUT`` (its CSV);
* the old way, as a second line: ``megadump convert`` of each side, then ``megadump compare`` of the
  two Zarr dumps (the three processes' times summed, the largest RSS).

All must name the same root cause: msprobe's is the first tensor of its table (execution order) whose
MaxAbsErr is non-zero, ours the JSON's ``root_cause``; both should be the perturbed weight,
``Functional.linear.{k}.forward.input.1``. Printed: bytes per side, the wall times, ratios, peak RSS and
the load average (figures on a loaded machine are indicative only).

Usage: ``python -m benchmarks.peer_compare [--quick] [--json OUT] [--keep DIR]``. Needs mindstudio-probe.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from benchmarks._common import machine, print_table, start_run, sync_disk, write_json

# A child process: msprobe patches torch's API globally, so it never runs in the benchmark's process.
_DUMPER = textwrap.dedent("""
    import json, sys
    import torch
    from msprobe.pytorch import PrecisionDebugger
    out, hidden, batch, layers, perturb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    config = {"task": "tensor", "dump_path": out, "rank": [], "step": [], "level": "L1",
              "tensor": {"scope": [], "list": [], "data_mode": ["all"]}}
    with open(out + ".config.json", "w") as handle:
        json.dump(config, handle)
    torch.manual_seed(0)
    blocks = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(hidden, hidden), torch.nn.ReLU()]
    model = torch.nn.Sequential(*blocks)
    if perturb:
        with torch.no_grad():
            model[2 * (layers // 2)].weight[1, 2] += perturb
    x = torch.randn(batch, hidden, generator=torch.Generator().manual_seed(1))
    debugger = PrecisionDebugger(config_path=out + ".config.json")
    debugger.start(model)
    model(x).sum().backward()
    debugger.stop()
    debugger.step()
""")


def _dump(out: Path, hidden: int, batch: int, layers: int, perturb: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _DUMPER, str(out), str(hidden), str(batch), str(layers), str(perturb)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _drop_caches() -> bool:
    sync_disk()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as handle:
            handle.write("3\n")
        return True
    except OSError:
        return False


def _tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _timed(cmd: list[str], ok: tuple[int, ...]) -> tuple[float, int, str]:
    """Run ``cmd``; its wall time (s), its peak RSS (bytes, ``os.wait4``) and its stdout."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode not in ok:
        raise RuntimeError(f"{' '.join(cmd[:4])} exited {proc.returncode}: {(stdout + stderr)[-3000:]}")
    return elapsed, usage.ru_maxrss * 1024, stdout


def _msprobe_root_cause(csv_dir: Path) -> tuple[str | None, int]:
    import pandas as pd

    [csv] = csv_dir.glob("compare_result_*.csv")
    table = pd.read_csv(csv)
    errors = pd.to_numeric(table["MaxAbsErr"], errors="coerce")
    differing = table[errors > 0]
    return (str(differing["NPU Name"].iloc[0]) if len(differing) else None), len(table)


def run(base: Path, *, hidden: int, batch: int, layers: int) -> dict[str, Any]:
    """Dump, then time the in-place compare, msprobe's compare and convert+compare; the figures as a dict."""
    msprobe = Path(sys.executable).with_name("msprobe")
    megadump = [sys.executable, "-m", "megadump_zarr.cli.main"]  # this checkout (PYTHONPATH), not an install
    sides = {"golden": 0.0, "target": 0.5}
    procs = {name: _dump(base / name, hidden, batch, layers, perturb) for name, perturb in sides.items()}
    for name, proc in procs.items():
        _, err = proc.communicate()
        if proc.returncode:
            raise RuntimeError(f"msprobe dump ({name}) failed: {err[-3000:]}")
    dump_json = {name: next((base / name).glob("step0/*/dump.json")) for name in sides}
    tensor_bytes = {name: _tree_bytes(path.parent / "dump_tensor_data") for name, path in dump_json.items()}

    cold = _drop_caches()
    ours_s, ours_rss, out = _timed([*megadump, "compare", str(base / "target"), str(base / "golden"), "--json"], (0, 1))
    _drop_caches()
    theirs_s, theirs_rss, _ = _timed(
        [
            str(msprobe),
            "compare",
            "-tp",
            str(dump_json["target"]),
            "-gp",
            str(dump_json["golden"]),
            "-o",
            str(base / "msprobe_out"),
        ],
        (0,),
    )
    _drop_caches()
    convert_s, convert_rss = 0.0, 0
    for name in sides:
        took, rss, _ = _timed(
            [*megadump, "convert", "--from", "msprobe", "-q", str(base / name), str(base / f"{name}.zarr")], (0,)
        )
        convert_s, convert_rss = convert_s + took, max(convert_rss, rss)
    _drop_caches()
    zarr_s, zarr_rss, zarr_out = _timed(
        [*megadump, "compare", str(base / "target.zarr"), str(base / "golden.zarr"), "--json"], (0, 1)
    )
    summary, converted = json.loads(out), json.loads(zarr_out)
    our_cause = (summary.get("root_cause") or {}).get("name")
    their_cause, their_rows = _msprobe_root_cause(base / "msprobe_out")
    return {
        "workload": f"MLP {layers}x Linear({hidden},{hidden}) batch {batch}, fp32, fwd+bwd",
        "tensors": summary.get("compared"),
        "msprobe_rows": their_rows,
        "bytes_per_side": tensor_bytes["target"],
        "msprobe_s": theirs_s,
        "megadump_s": ours_s,
        "ratio": theirs_s / ours_s,
        "msprobe_rss": theirs_rss,
        "megadump_rss": ours_rss,
        "rss_ok": ours_rss <= theirs_rss,
        "convert_compare_s": convert_s + zarr_s,
        "convert_compare_ratio": theirs_s / (convert_s + zarr_s),
        "convert_compare_rss": max(convert_rss, zarr_rss),
        "zarr_compare_s": zarr_s,
        "root_cause_msprobe": their_cause,
        "root_cause_megadump": our_cause,
        "root_cause_converted": (converted.get("root_cause") or {}).get("name"),
        "same_root_cause": their_cause is not None
        and their_cause == our_cause == (converted.get("root_cause") or {}).get("name"),
        "cold_cache": cold,
        "load_average": list(os.getloadavg()),
    }


def main(argv: list[str] | None = None) -> int:
    start_run()  # the JSON's run record (load average, CPU and wall seconds) counts from here
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small model (a few MB per side)")
    parser.add_argument("--json", metavar="OUT", help="write the figures as JSON")
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and keep the dumps (default: a temporary directory)")
    args = parser.parse_args(argv)
    hidden, batch, layers = (256, 256, 2) if args.quick else (2048, 2048, 4)  # ~2 MB or ~500 MB per side
    tmp = None
    if args.keep:
        base = Path(args.keep)
        base.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.mkdtemp(prefix="megadump-peer-")
        base = Path(tmp)
    try:
        row = run(base, hidden=hidden, batch=batch, layers=layers)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"peer_compare on {machine()}{'' if row['cold_cache'] else ' (page cache not dropped: not root)'}")
    print_table(
        [row],
        [
            ("workload", "workload"),
            ("tensors", "tensors"),
            ("bytes_per_side", "bytes/side"),
            ("msprobe_s", "msprobe compare s"),
            ("megadump_s", "megadump in place s"),
            ("ratio", "ratio"),
            ("msprobe_rss", "msprobe RSS"),
            ("megadump_rss", "megadump RSS"),
            ("same_root_cause", "same root cause"),
        ],
    )
    print_table(
        [row],
        [
            ("convert_compare_s", "convert+compare s"),
            ("convert_compare_ratio", "ratio"),
            ("convert_compare_rss", "peak RSS"),
            ("zarr_compare_s", "compare of Zarr s"),
        ],
    )
    print(f"load average {row['load_average']}")
    print(f"root cause: msprobe {row['root_cause_msprobe']!r}, megadump {row['root_cause_megadump']!r}")
    write_json(args.json, [row])
    return 0 if row["same_root_cause"] else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    sys.exit(main())
