"""Report benchmark: size and browser load time of ``megadump report`` on a 4096-record L1 window.

    python -m benchmarks.report [--quick] [--json OUT] [--dir DIR]

Two windows of the export benchmark's P2 workload (4096 × 8 KiB float32 records by default) are written
with our writer; in the second, every 64th task's output is perturbed. Measured in one run:

* the report's size (target: under ~5 MB) and the time to build it (compare + collect + render);
* the time headless chromium takes to load and render it (``--dump-dom``, the script has run), against
  the same browser loading a blank page in the same run, and the page's own time from navigation start
  to rendered (``data-render-ms``, measured by its script): target under a second.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
import shutil
import statistics
import subprocess
import time
from typing import Any

import torch

from benchmarks._common import machine, print_table, scratch_dir, start_run, write_json
from benchmarks.export import make_workload, ours


def _browser_seconds(browser: str, url: str, repeats: int) -> tuple[float, float | None]:
    """Median wall time of a headless load, and the page's own navigation-to-rendered time (seconds)."""
    times, rendered = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", url],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        times.append(time.perf_counter() - start)
        if "blank" in url:
            continue
        found = re.search(r'data-render-ms="(\d+)"', done.stdout)
        if 'data-ready="1"' not in done.stdout or found is None:
            raise RuntimeError(f"the report did not finish rendering in chromium: {done.stderr[-500:]}")
        rendered.append(int(found.group(1)) / 1000)
    return statistics.median(times), (statistics.median(rendered) if rendered else None)


def run(count: int, repeats: int, base: str | None) -> dict[str, Any]:
    """Build both windows, the report, and time the browser."""
    from megadump_zarr.cli.main import main as cli

    buffer_a, plans = make_workload(count, 8 << 10, torch.float32, seed=0)
    buffer_b = buffer_a.clone()
    for plan in plans[1::128]:  # every 64th task's output
        view = buffer_b.narrow(0, plan.payload_offset, plan.payload_bytes).view(torch.float32)
        view.mul_(1.05)
    with scratch_dir(base) as scratch:
        root = Path(scratch)
        ours(buffer_b, plans, root / "a", "default")
        ours(buffer_a, plans, root / "b", "default")
        page = root / "report.html"
        start = time.perf_counter()
        code = cli(["report", str(root / "a"), str(root / "b"), "-o", str(page), "-q"])
        build_s = time.perf_counter() - start
        if code not in (0, 1):
            raise RuntimeError(f"megadump report exited {code}")
        size = page.stat().st_size
        blank = root / "blank.html"
        blank.write_text("<!DOCTYPE html><html><body>blank</body></html>")
        browser = shutil.which("chromium") or shutil.which("chromium-browser")
        result: dict[str, Any] = {
            "workload": f"report of {count} records",
            "records": count,
            "bytes": size,
            "build_s": build_s,
        }
        if browser:
            result["blank_s"], _ = _browser_seconds(browser, blank.as_uri(), repeats)
            result["report_s"], result["rendered_s"] = _browser_seconds(browser, page.as_uri(), repeats)
            result["render_extra_s"] = result["report_s"] - result["blank_s"]
        return result


def main(argv: list[str] | None = None) -> int:
    """Run the report benchmark and print its figures."""
    start_run()  # the JSON's run record (load average, CPU and wall seconds) counts from here
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="512 records, one browser run")
    parser.add_argument("--json", default=None, help="write results as JSON")
    parser.add_argument("--dir", default=None, help="scratch parent directory (default: system temp)")
    args = parser.parse_args(argv)
    count, repeats = (512, 1) if args.quick else (4096, 3)
    print(f"machine: {machine()}")
    entry = run(count, repeats, args.dir)
    entry["megabytes"] = entry["bytes"] / 1e6
    print_table(
        [entry],
        [
            ("workload", "workload"),
            ("megabytes", "size MB"),
            ("build_s", "build s"),
            ("blank_s", "chromium blank s"),
            ("report_s", "chromium report s"),
            ("render_extra_s", "report - blank s"),
            ("rendered_s", "page rendered s"),
        ],
    )
    write_json(args.json, [entry])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
