"""Code size of the read path: lines of ``src/megadump_zarr/{read,store,verify}`` now against a baseline commit.

Run as ``python -m benchmarks.code_size [--baseline REF] [--json OUT]`` from a git checkout.

The baseline (default ``88f33f3``, the tree the one-read-path work started from) is read with ``git show``, so
both counts come from the same run and the same rule: every line of every ``.py`` file below each folder
(blank lines, comments and docstrings included, as ``wc -l`` counts them), and the non-blank lines beside it.
Target: at least 1,500 fewer lines in the three folders together, with nothing a user had lost (the test
suite says the latter).
"""

from __future__ import annotations

import argparse
from pathlib import Path
import subprocess
from typing import Any

from benchmarks._common import print_table, start_run, write_json

FOLDERS = ("read", "store", "verify")
PACKAGE = "src/megadump_zarr"
BASELINE = "88f33f3"
TARGET_FEWER = 1500


def _count(texts: list[str]) -> tuple[int, int]:
    """``(lines, non-blank lines)`` of some file texts."""
    lines = [line for text in texts for line in text.splitlines()]
    return len(lines), sum(1 for line in lines if line.strip())


def _tree_texts(root: Path, folder: str) -> list[str]:
    return [p.read_text(encoding="utf-8") for p in sorted((root / PACKAGE / folder).rglob("*.py"))]


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


def _ref_texts(root: Path, ref: str, folder: str) -> list[str]:
    names = _git(root, "ls-tree", "-r", "--name-only", ref, f"{PACKAGE}/{folder}").split()
    return [_git(root, "show", f"{ref}:{name}") for name in names if name.endswith(".py")]


def measure(root: Path, baseline: str) -> list[dict[str, Any]]:
    """One row per folder and one for the three together.

    Args:
        root: The repository root.
        baseline: A git ref to compare with.
    """
    rows: list[dict[str, Any]] = []
    totals = [0, 0, 0, 0]
    for folder in FOLDERS:
        then, then_code = _count(_ref_texts(root, baseline, folder))
        now, now_code = _count(_tree_texts(root, folder))
        for i, value in enumerate((then, now, then_code, now_code)):
            totals[i] += value
        rows.append(
            {
                "workload": f"lines of {folder}/",
                "baseline": then,
                "ours": now,
                "change": now - then,
                "non-blank": f"{then_code} -> {now_code}",
            }
        )
    rows.append(
        {
            "workload": "lines of read/ + store/ + verify/",
            "baseline": totals[0],
            "ours": totals[1],
            "change": totals[1] - totals[0],
            "non-blank": f"{totals[2]} -> {totals[3]}",
            "target": f"<= {totals[0] - TARGET_FEWER}",
            "status": "met" if totals[1] <= totals[0] - TARGET_FEWER else "not met",
        }
    )
    return rows


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=BASELINE, help=f"git ref to compare with (default {BASELINE})")
    parser.add_argument("--json", default=None, help="write the rows here as JSON")
    args = parser.parse_args(argv)
    start_run()
    root = Path(__file__).resolve().parent.parent
    rows = measure(root, args.baseline)
    print_table(
        rows,
        [
            ("workload", "workload"),
            ("baseline", f"at {args.baseline}"),
            ("ours", "now"),
            ("change", "change"),
            ("non-blank", "non-blank"),
            ("target", "target"),
            ("status", "status"),
        ],
    )
    write_json(args.json, rows)
    return rows


if __name__ == "__main__":
    main()
