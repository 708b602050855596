"""``megadump compare``: compare two dumps record by record, in execution order."""

from __future__ import annotations

import argparse
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from megadump_zarr.cli.common import (
    EXIT_CHECK_FAILED, EXIT_OK, CliError, Context, add_filters, add_output_flags, add_storage_options, filter_records,
    incomplete_hint, no_records_error, open_dump_arg, storage_options,
)
from megadump_zarr.cli.compare_table import compare_table
from megadump_zarr.cli.render import print_fitted

__all__ = ["compare_in_order", "register"]

_FAILING = ("fail", "error", "missing")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``compare``."""
    parser = subparsers.add_parser(
        "compare", help="compare dump A (under test) with dump B (reference)",
        description="Compare the records of dump A with those of dump B, matched by their path below the root "
                    "(rank, window, invocation, stage, task, port, name), in execution order, with "
                    "megadump_zarr.analyse.compare (cosine, max abs/rel error, RMSE; msprobe-style verdicts). "
                    "Exit status 1 when any record fails, errors (e.g. shape mismatch) or is missing on one "
                    "side. --fail-fast stops after the first such record: the records are compared one at a "
                    "time in execution order (inputs before outputs, tasks in order) and the rest are skipped. "
                    "The filters select records of both dumps; --storage-option applies to both.")
    parser.add_argument("a", metavar="A", help="dump under test (root directory or URL)")
    parser.add_argument("b", metavar="B", help="reference dump (root directory or URL)")
    parser.add_argument("--rtol", type=float, help="also fail unless |a-b| <= atol + rtol*|b| at every finite pair")
    parser.add_argument("--atol", type=float, help="absolute tolerance (with --rtol; a missing one counts as 0)")
    parser.add_argument("--fail-fast", "-x", action="store_true", help="stop at the first failing record")
    parser.add_argument("--failures-only", action="store_true", help="table: only records that do not pass")
    add_filters(parser)
    add_storage_options(parser)
    add_output_flags(parser)
    parser.set_defaults(handler=run)


class _Records:
    """A dump seen through a fixed subset of its records (what ``analyse.compare`` reads of a dump)."""

    def __init__(self, dump: Any, records: Any) -> None:
        self._dump = dump
        self._records = records

    def records(self, *, include_incomplete: bool = False) -> Any:
        return self._records

    def record_array(self, path: str) -> Any:
        return self._dump.record_array(path)

    def tensor(self, name: str, **select: Any) -> Any:
        return self._dump.tensor(name, **select)


def _merged_paths(paths_a: list[str], paths_b: list[str]) -> list[str]:
    """A's paths in order, with B-only paths placed after their predecessor in B's order."""
    in_a = set(paths_a)
    after: dict[str | None, list[str]] = {}
    previous: str | None = None
    for path in paths_b:
        if path in in_a:
            previous = path
        else:
            after.setdefault(previous, []).append(path)
    order = list(after.get(None, []))
    for path in paths_a:
        order.append(path)
        order.extend(after.get(path, []))
    return order


def compare_in_order(a: Any, b: Any, records_a: Any, records_b: Any, *, rtol: float | None, atol: float | None,
                     fail_fast: bool, advance: Any = None) -> tuple[Any, int, bool]:
    """Compare the given records one at a time in execution order.

    Each record pair goes through the public ``megadump_zarr.analyse.compare`` on one-record views of
    the two dumps, so verdicts and metrics are exactly the library's.

    Returns:
        ``(result frame, records to compare, stopped early)``.
    """
    import pandas as pd

    from megadump_zarr.analyse import compare
    from megadump_zarr.analyse.compare import RESULT_COLUMNS, execution_order

    ordered_a = execution_order(records_a) if len(records_a) else records_a
    ordered_b = execution_order(records_b) if len(records_b) else records_b
    position_a = {str(p): i for i, p in enumerate(ordered_a["path"])}
    position_b = {str(p): i for i, p in enumerate(ordered_b["path"])}
    order = _merged_paths(list(position_a), list(position_b))
    empty_a, empty_b = ordered_a.iloc[0:0], ordered_b.iloc[0:0]
    rows = []
    stopped = False
    for count, path in enumerate(order, start=1):
        side_a = ordered_a.iloc[[position_a[path]]] if path in position_a else empty_a
        side_b = ordered_b.iloc[[position_b[path]]] if path in position_b else empty_b
        result = compare(_Records(a, side_a), _Records(b, side_b), rtol=rtol, atol=atol)
        rows.append(result)
        if advance is not None:
            advance()
        if fail_fast and result["verdict"].isin(_FAILING).any() and count < len(order):
            stopped = True
            break
    if not rows:
        return pd.DataFrame(columns=list(RESULT_COLUMNS)), 0, False
    frame = pd.concat(rows, ignore_index=True)
    return frame, len(order), stopped


def _summary(result: Any, total: int, stopped: bool) -> dict[str, Any]:
    counts = {v: int((result["verdict"] == v).sum()) for v in ("pass", "fail", "error", "missing")}
    failing = result[result["verdict"].isin(_FAILING)]
    first = None
    if len(failing):
        row = failing.iloc[0]
        first = {k: row[k] for k in ("name", "path", "verdict", "note", "rank", "window", "invocation", "stage",
                                     "task_id", "io", "index")}
    return {"verdict": "fail" if len(failing) else "pass", "compared": len(result), "total": total,
            "stopped_early": stopped, "counts": counts, "first_divergence": first}


def _summary_line(summary: dict[str, Any]) -> str:
    counts = summary["counts"]
    if summary["verdict"] == "pass":
        return f"[bold green]PASS[/bold green]: all {summary['compared']} records pass"
    parts = ", ".join(f"{counts[v]} {v}" for v in ("fail", "error", "missing") if counts[v])
    line = f"[bold red]FAIL[/bold red]: {parts}, {counts['pass']} pass of {summary['compared']} compared"
    if summary["stopped_early"]:
        line += f" (stopped at the first failure, {summary['total'] - summary['compared']} not compared)"
    first = summary["first_divergence"]
    line += f"\nfirst divergence: [bold]{first['name']}[/bold] ({first['verdict']}) at {first['path']}"
    return line


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Compare, print the table and the verdict; exit 1 on any failing record."""
    if args.atol is not None and args.atol < 0 or args.rtol is not None and args.rtol < 0:
        raise CliError("--rtol and --atol must not be negative")
    options = storage_options(args)
    dump_a, dump_b = open_dump_arg(args.a, options), open_dump_arg(args.b, options)
    include = bool(args.include_incomplete)
    all_a = dump_a.records(include_incomplete=include)
    records_a = filter_records(all_a, args)
    records_b = filter_records(dump_b.records(include_incomplete=include), args)
    if records_a.empty and records_b.empty:
        raise no_records_error(all_a, args, f"{args.a} or {args.b}", hint=incomplete_hint(dump_a, args))
    total = len(set(records_a["path"]) | set(records_b["path"]))
    if ctx.progress:
        with Progress(TextColumn("comparing records"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=ctx.err, transient=True) as bar:
            task = bar.add_task("compare", total=total)
            result, total, stopped = compare_in_order(
                dump_a, dump_b, records_a, records_b, rtol=args.rtol, atol=args.atol, fail_fast=args.fail_fast,
                advance=lambda: bar.advance(task))
    else:
        result, total, stopped = compare_in_order(dump_a, dump_b, records_a, records_b, rtol=args.rtol,
                                                  atol=args.atol, fail_fast=args.fail_fast)
    summary = _summary(result, total, stopped)
    code = EXIT_CHECK_FAILED if summary["verdict"] == "fail" else EXIT_OK
    if ctx.json:
        ctx.emit_json({**summary, "a": args.a, "b": args.b, "results": result.to_dict(orient="records")})
        return code
    if not ctx.quiet:
        print_fitted(ctx.console, compare_table(result, width=ctx.console.width, failures_only=args.failures_only))
    ctx.console.print(_summary_line(summary), highlight=False)
    return code
