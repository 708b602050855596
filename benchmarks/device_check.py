"""``make device-check``: the demo's L0 and L1 dumps on CUDA against the same run on CPU.

The demo block draws its weights and inputs from CPU generators, so both runs see the same numbers; only
the device executing the MegaKernel tasks differs. For float32 and bfloat16 it runs ``run_demo`` on CPU
and on ``cuda``, then ``megadump_zarr.compare(cuda_dump, cpu_dump)`` level by level: integer and bool
tensors must be exactly equal (routing, counts, permutations), float tensors within the device tolerance
below (GEMM and reduction order differ between devices; TF32 is switched off). Every record must exist
on both sides. Exit 0 when everything passes, 1 when anything fails (the failing tensors are printed),
and 0 with a ``skipped`` line when this machine has no CUDA device.

Usage: ``python -m benchmarks.device_check [--quick] [--json OUT] [--out DIR] [--device cuda]``
(``--device cpu`` runs the whole check CPU against CPU: how the suite tests it without a GPU).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Device tolerances (rtol, atol) per stored dtype of the CPU side; integers and bools are always exact.
DEVICE_TOLERANCES = {"float32": (1e-4, 1e-5), "bfloat16": (2e-2, 2e-2)}


def cuda_status() -> tuple[bool, str]:
    """Whether CUDA can run the demo here, and a line saying why not."""
    import torch

    if not torch.cuda.is_available():
        built = torch.version.cuda or "none"
        return False, (
            f"no CUDA device: torch.cuda.is_available() is False (torch {torch.__version__}, built with CUDA {built})"
        )
    return True, f"CUDA device {torch.cuda.get_device_name(0)} (torch {torch.__version__}, CUDA {torch.version.cuda})"


def _run(base: Path, label: str, device: str, dtype: str, steps: int, tokens: int) -> tuple[dict[str, Path], float]:
    import torch

    from megadump_zarr.demo.run import run_demo

    start = time.perf_counter()
    summary = run_demo(base / f"{dtype}_{label}", steps=steps, dtype=dtype, device=device, tokens=tokens)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return summary.roots, time.perf_counter() - start


def check(
    base: Path, *, dtypes: tuple[str, ...], steps: int, tokens: int, device: str = "cuda"
) -> list[dict[str, Any]]:
    """Run the demo on ``device`` and on CPU and compare; one row per (dtype, level)."""
    import torch

    from megadump_zarr import compare

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rows = []
    for dtype in dtypes:
        cpu, cpu_s = _run(base, "cpu", "cpu", dtype, steps, tokens)
        cuda, cuda_s = _run(base, "device", device, dtype, steps, tokens)
        rtol, atol = DEVICE_TOLERANCES[dtype]
        for level in ("L0", "L1"):
            result = compare(cuda[level], cpu[level], rtol=rtol, atol=atol)
            exact = result["dtype_b"].astype(str).str.match(r"^(u?int\d+|bool)$")
            failing = result[result["verdict"] != "pass"]
            rows.append(
                {
                    "dtype": dtype,
                    "level": level,
                    "tensors": len(result),
                    "exact": int(exact.sum()),
                    "passed": int((result["verdict"] == "pass").sum()),
                    "failed": len(failing),
                    "max_abs": float(result.loc[~exact, "max_abs"].max()) if (~exact).any() else 0.0,
                    "max_rel": float(result.loc[~exact, "max_rel"].max()) if (~exact).any() else 0.0,
                    "min_cosine": float(result.loc[~exact, "cosine"].min()) if (~exact).any() else 1.0,
                    "cpu_s": cpu_s,
                    "cuda_s": cuda_s,
                    "rtol": rtol,
                    "atol": atol,
                    "failures": [f"{r.path}: {r.verdict} ({r.note})" for r in failing.itertuples()][:20],
                }
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="float32 only, fewer steps")
    parser.add_argument("--json", metavar="OUT", help="write the figures as JSON")
    parser.add_argument("--out", metavar="DIR", help="keep the dumps in DIR (default: a temporary directory)")
    parser.add_argument("--device", default="cuda", help="device to check against CPU (default cuda)")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda"):
        available, why = cuda_status()
        if not available:
            print(f"device-check: skipped: {why}; nothing to compare (run it on a machine with a GPU)")
            return 0
        print(f"device-check: {why}")
    from benchmarks._common import print_table, start_run, write_json

    start_run()  # the JSON's run record (load average, CPU and wall seconds) counts from here

    dtypes = ("float32",) if args.quick else ("float32", "bfloat16")
    steps, tokens = (2, 37) if args.quick else (4, 256)
    with tempfile.TemporaryDirectory(prefix="megadump-device-check-") as tmp:
        rows = check(
            Path(args.out) if args.out else Path(tmp), dtypes=dtypes, steps=steps, tokens=tokens, device=args.device
        )
    print_table(
        rows,
        [
            ("dtype", "dtype"),
            ("level", "level"),
            ("tensors", "tensors"),
            ("exact", "int/bool exact"),
            ("passed", "pass"),
            ("failed", "fail"),
            ("max_abs", "max |device-cpu|"),
            ("max_rel", "max rel"),
            ("min_cosine", "min cosine"),
            ("cpu_s", "cpu s"),
            ("cuda_s", "device s"),
        ],
    )
    failed = [f for row in rows for f in row["failures"]]
    for line in failed:
        print(f"  FAIL {line}")
    write_json(args.json, rows)
    return 1 if any(row["failed"] for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
