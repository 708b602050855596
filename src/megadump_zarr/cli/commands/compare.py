"""``megadump compare``: compare two dumps record by record, in execution order."""

from __future__ import annotations

import argparse
import os
from typing import Any

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from megadump_zarr.cli.cluster import add_cluster_flags
from megadump_zarr.cli.common import (
    EXIT_CHECK_FAILED,
    EXIT_OK,
    Context,
    add_filters,
    add_output_flags,
    add_storage_options,
    add_tolerance_flags,
    checked_storage_options,
    matching_pair,
    open_dump_arg,
    to_jsonable,
)
from megadump_zarr.cli.compare_table import compare_table
from megadump_zarr.cli.render import print_fitted, safe_text

__all__ = ["compare_in_order", "register", "step_pair"]

_FAILING = (
    "fail",
    "differs_within_stats",
    "pass_partial",
    "shape_mismatch",
    "dtype_mismatch",
    "missing_data",
    "error",
    "missing",
)
_DESCRIPTION = """\
Compare the records of dump A with those of dump B, matched by identity (rank, step, kernel,
direction, the invocation's order within its step, then stage, task, port, name; never by the
position of a window), in execution order, with megadump_zarr.analyse.compare
(exact for integers, tolerances by dtype for floats; cosine, max abs/rel error, RMSE as msprobe).
A step present in one dump only is named on one line and its records are missing; --pair A_STEP:B_STEP
(repeatable) compares A's step A_STEP with B's step B_STEP explicitly.
Exit status 1 when any record does not pass (fail, differs_within_stats, shape_mismatch,
dtype_mismatch, missing_data, error), is missing on one side, or was compared on the stored part of a
truncated record only (pass_partial, unless --accept-partial). The summary names the first divergence (first failing record in
execution order) and the root cause (first failing record whose own task's or stage's inputs pass).
--fail-fast stops after the first such record: records are compared one at a time in execution
order (inputs before outputs, tasks in order) and the rest are skipped. --by owner|core|task prints
verdict counts and worst errors per stage, invocation and owner (core, task) instead of the records.
--bitwise is a determinism check: any differing bit fails, by the stored bytes, else (statistics
dumps) by the record digests; a record that cannot be proven equal is an error, never a pass; no
--rtol/--atol. With --by task|core over many steps it names the tasks or cores whose records are
not reproducible run to run and the steps where they differ (rules below).
--format msprobe-csv writes msprobe's compare CSV (its columns, then ours) to stdout, or to
--output FILE (--csv-msprobe FILE is the same); the summary then goes to stderr.
The filters select records of both dumps; --storage-option applies to both."""


def _rules_epilog(parser: argparse.ArgumentParser) -> None:
    """The verdict rules and tolerance table as the help's epilog, imported only when help is shown
    (building the parser of every command must not import the analysis layer)."""
    format_help = parser.format_help

    def with_rules() -> str:
        from megadump_zarr.analyse.verdict import BITWISE_RULES_TEXT, RULES_TEXT

        parser.epilog = f"{RULES_TEXT}\n{BITWISE_RULES_TEXT}"
        return format_help()

    parser.format_help = with_rules  # type: ignore[method-assign]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``compare``."""
    parser = subparsers.add_parser(
        "compare",
        help="compare dump A (under test) with dump B (reference)",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _rules_epilog(parser)
    parser.add_argument("a", metavar="A", help="dump under test (root directory or URL)")
    parser.add_argument("b", metavar="B", help="reference dump (root directory or URL)")
    add_tolerance_flags(parser)
    parser.add_argument(
        "--by",
        choices=("owner", "core", "task"),
        help="print verdict counts and worst errors per stage, invocation and owner/core/task; "
        "with --bitwise: per stage and owner/core/task over all steps, the records that "
        "differ and the steps where they do",
    )
    parser.add_argument(
        "--bitwise",
        action="store_true",
        help="determinism check: any differing bit fails (stored bytes, else the record digests "
        "of statistics dumps; not provable: error); no tolerances",
    )
    parser.add_argument("--fail-fast", "-x", action="store_true", help="stop at the first failing record")
    parser.add_argument("--failures-only", action="store_true", help="table: only records that do not pass")
    parser.add_argument(
        "--accept-within-stats",
        action="store_true",
        help="exit 0 on differs_within_stats: statistics-only finite float records whose digests "
        "differ (the bits differ) but whose statistics are within tolerance",
    )
    parser.add_argument(
        "--accept-partial",
        action="store_true",
        help="exit 0 on pass_partial: truncated records (max_bytes_per_tensor) that pass on the "
        "elements both dumps stored (the note says how many rows were compared)",
    )
    parser.add_argument(
        "--pair",
        action="append",
        metavar="A_STEP:B_STEP",
        type=step_pair,
        help="compare step A_STEP of dump A with step B_STEP of dump B (repeatable; default: "
        "each step with the same step)",
    )
    parser.add_argument(
        "--format",
        dest="output_format",
        choices=("table", "msprobe-csv"),
        default="table",
        help="table (default), or msprobe-csv: msprobe's compare CSV columns plus ours (verdict, "
        "worst element, root cause) on stdout, or in --output FILE",
    )
    parser.add_argument(
        "--output",
        "-o",
        metavar="FILE",
        help="--format msprobe-csv: write the CSV to FILE (must not exist) instead of stdout",
    )
    parser.add_argument(
        "--csv-msprobe",
        metavar="OUT.csv",
        help="also write the result as msprobe's compare CSV "
        "columns plus ours (verdict, worst element, root cause); OUT.csv must not exist "
        "(the same as --format msprobe-csv --output OUT.csv, with the table on stdout)",
    )
    add_filters(parser)
    add_storage_options(parser)
    add_cluster_flags(parser)
    add_output_flags(parser)
    parser.set_defaults(handler=run)


def step_pair(text: str) -> tuple[int, int]:
    """``--pair A_STEP:B_STEP`` as ``(a, b)``."""
    a, sep, b = text.partition(":")
    if not sep or not a.strip().isdigit() or not b.strip().isdigit():
        raise argparse.ArgumentTypeError(f"expected A_STEP:B_STEP (two step numbers), got {text!r}")
    return int(a), int(b)


class RecordsView:
    """A dump seen through a fixed subset of its records (what ``analyse.compare`` reads of a dump);
    everything else (the store, record metadata, its source for workers) is the dump's own."""

    def __init__(self, dump: Any, records: Any) -> None:
        self._dump = dump
        self._records = records

    def records(self, *, include_incomplete: bool = False) -> Any:
        return self._records

    def record_array(self, path: str) -> Any:
        return self._dump.record_array(path)

    def tensor(self, name: str, **select: Any) -> Any:
        return self._dump.tensor(name, **select)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dump, name)


def compare_in_order(
    a: Any,
    b: Any,
    records_a: Any,
    records_b: Any,
    *,
    rtol: float | None,
    atol: float | None,
    fail_fast: bool,
    advance: Any = None,
    bitwise: bool = False,
    pair: Any = None,
) -> tuple[Any, int, bool]:
    """Compare the given records of two dumps in execution order with ``megadump_zarr.analyse.compare``
    (``bitwise``: any differing bit fails, see ``megadump_zarr.analyse.bitwise``; ``pair``: steps of A
    compared with other steps of B, ``{a: b}``).

    Returns:
        ``(result frame, records to compare, stopped early)``.
    """
    from megadump_zarr.analyse import compare

    total = _record_total(records_a, records_b, pair)
    result = compare(
        RecordsView(a, records_a),
        RecordsView(b, records_b),
        rtol=rtol,
        atol=atol,
        fail_fast=fail_fast,
        progress=advance if advance is not None else False,
        bitwise=bitwise,
        pair=pair,
    )
    return result, total, bool(fail_fast and len(result) < total)


def _record_total(records_a: Any, records_b: Any, pair: Any) -> int:
    """How many rows a comparison of these records gives (records paired by identity, one side only)."""
    from megadump_zarr.analyse.matching import execution_order, match_records

    return len(match_records(execution_order(records_a), execution_order(records_b), pair))


_LOCATION_KEYS = (
    "name",
    "path",
    "verdict",
    "note",
    "rank",
    "window",
    "invocation",
    "step",
    "kernel",
    "stage",
    "task_id",
    "owner_id",
    "core_type",
    "core_id",
    "io",
    "index",
    "worst_index",
)


def _where_row(row: Any, extra: tuple[str, ...] = ()) -> dict[str, Any] | None:
    if row is None:
        return None
    return {k: to_jsonable(row.get(k)) for k in (*_LOCATION_KEYS, *extra)}


def _summary(
    result: Any, total: int, stopped: bool, accept_within_stats: bool = False, accept_partial: bool = False
) -> dict[str, Any]:
    from megadump_zarr.analyse import first_divergence, root_cause
    from megadump_zarr.analyse.verdict import VERDICTS

    counts = {v: int((result["verdict"] == v).sum()) for v in VERDICTS}
    accepted = {"differs_within_stats": accept_within_stats, "pass_partial": accept_partial}
    failing = result["verdict"].isin([v for v in _FAILING if not accepted.get(v)]).any()
    pairing = dict(getattr(result, "attrs", {}).get("pairing") or {})
    return {
        "pairing": pairing,
        "verdict": "fail" if failing else "pass",
        "compared": len(result),
        "total": total,
        "stopped_early": stopped,
        "counts": counts,
        "first_divergence": _where_row(first_divergence(result)),
        "root_cause": _where_row(root_cause(result), ("root_reason", "root_stage")),
    }


def _place(where: dict[str, Any]) -> str:
    from megadump_zarr.cli.render import location

    text = location(where)
    owner, core_type, core_id = where.get("owner_id"), where.get("core_type"), where.get("core_id")
    if owner is not None:
        text += f" owner {owner}"
    if core_id is not None:
        text += f" core {core_type or ''}{core_id}"
    if where.get("stage") is None and where.get("root_stage"):  # an L0 output: the stage that wrote it
        text += f", written by stage {where['root_stage']}"
    return text


def _summary_line(summary: dict[str, Any]) -> str:
    counts = summary["counts"]
    steps = (summary.get("pairing") or {}).get("line")
    line = _verdict_line(summary, counts)
    return line if not steps else f"{escape(safe_text(steps))}\n{line}"


def _verdict_line(summary: dict[str, Any], counts: dict[str, int]) -> str:
    accepted = [
        f"{counts[v]} {v} accepted ({flag})"
        for v, flag in (("differs_within_stats", "--accept-within-stats"), ("pass_partial", "--accept-partial"))
        if counts.get(v)
    ]
    if summary["verdict"] == "pass" and accepted:
        return (
            f"[bold green]PASS[/bold green]: {counts['pass']} pass, {', '.join(accepted)} "
            f"of {summary['compared']} compared"
        )
    if summary["verdict"] == "pass" and summary.get("bitwise"):
        return f"[bold green]PASS[/bold green]: all {summary['compared']} records bitwise identical"
    if summary["verdict"] == "pass":
        return f"[bold green]PASS[/bold green]: all {summary['compared']} records pass"
    parts = ", ".join(f"{counts[v]} {v}" for v in _FAILING if counts.get(v))
    line = f"[bold red]FAIL[/bold red]: {parts}, {counts['pass']} pass of {summary['compared']} compared"
    if summary.get("bitwise"):
        line += " (bitwise)"
    if summary["stopped_early"]:
        line += f" (stopped at the first failure, {summary['total'] - summary['compared']} not compared)"
    for label, key in (("first divergence", "first_divergence"), ("root cause", "root_cause")):
        where = summary[key]
        if where is not None:
            line += (
                f"\n{label}: [bold]{escape(safe_text(str(where['name'])))}[/bold] ({where['verdict']}) at "
                f"{escape(safe_text(_place(where)))}"
            )
    return line


def _print_folded(console: Any, text: str) -> None:
    """Print summary lines (rich markup); a line wider than the console folds at spaces with its
    continuation indented (plain text then), so its tail never reads as a line of its own."""
    from rich.text import Text

    from megadump_zarr.cli.render import hanging_lines

    for line in text.split("\n"):
        plain = Text.from_markup(line).plain
        if len(plain) <= console.width:
            console.print(line, highlight=False)
            continue
        for part in hanging_lines(plain, console.width):
            console.print(part, markup=False, highlight=False, no_wrap=True, overflow="ignore", crop=False)


def _error_map_table(result: Any, by: str, width: int) -> Any:
    """The ``--by`` aggregation as a table fitted to ``width``."""
    from megadump_zarr.analyse import error_map
    from megadump_zarr.analyse.errormap import BY_KEYS
    from megadump_zarr.cli.render import Column, fit_table

    table = error_map(result, by=by)
    columns = [
        Column("inv", key="invocation", justify="right", hoist=True),
        Column("kernel", hoist=True),
        Column("stage", hoist=True),
    ]
    columns += [Column(k.replace("_id", "").replace("core_type", "type"), key=k, justify="right") for k in BY_KEYS[by]]
    columns += [
        Column("records", justify="right"),
        Column("pass", justify="right"),
        Column("failing", justify="right", style=lambda r: "bold red" if r.get("failing") else None),
        Column("max_abs", justify="right"),
        Column("max_rel", justify="right"),
        Column("worst", key="worst_name", drop=1),
    ]
    return table, fit_table(table, columns, width=width)


def _bitwise_map_table(result: Any, by: str, width: int) -> Any:
    """The ``--bitwise --by`` table (per stage and owner/core/task over every step) fitted to ``width``."""
    from megadump_zarr.analyse.bitwise import BITWISE_BY_KEYS, bitwise_map
    from megadump_zarr.cli.render import Column, fit_table

    table = bitwise_map(result, by=by)
    columns = [Column("kernel", hoist=True), Column("stage")]
    columns += [
        Column(k.replace("_id", "").replace("core_type", "type"), key=k, justify="right") for k in BITWISE_BY_KEYS[by]
    ]
    columns += [
        Column("records", justify="right"),
        Column("differing", justify="right", style=lambda r: "bold red" if r.get("differing") else None),
        Column("steps", key="steps_differing", justify="right"),
        Column("at steps", key="steps", wrap=True),
        Column("worst", key="worst_name", drop=1),
    ]
    return table, fit_table(table, columns, width=width)


def _check_flags(args: argparse.Namespace, ctx: Context) -> None:
    """Refuse flag combinations that mean nothing (one ``error:`` line, exit 2)."""
    from megadump_zarr.cli.common import CliError

    if getattr(args, "bitwise", False):
        given = [flag for flag, value in (("--rtol", args.rtol), ("--atol", args.atol)) if value is not None]
        if given:
            raise CliError(f"--bitwise compares bits: {' and '.join(given)} do not apply, leave them out")
        if args.accept_within_stats:
            raise CliError("--bitwise compares bits: --accept-within-stats does not apply, leave it out")
        if getattr(args, "accept_partial", False):
            raise CliError("--bitwise compares bits: --accept-partial does not apply, leave it out")
    fmt, output = getattr(args, "output_format", "table"), getattr(args, "output", None)
    if output is not None and fmt != "msprobe-csv":
        raise CliError("--output FILE goes with --format msprobe-csv (the table is written to stdout)")
    if fmt == "msprobe-csv" and ctx.json:
        raise CliError("--format msprobe-csv and --json both write to stdout: choose one")
    if fmt == "msprobe-csv" and args.csv_msprobe:
        raise CliError(
            "--format msprobe-csv and --csv-msprobe both write the CSV: use --format msprobe-csv --output FILE"
        )
    for flag, path in (("--csv-msprobe", args.csv_msprobe), ("--output", output)):
        if path and os.path.lexists(path):
            raise FileExistsError(f"{flag}: {path} already exists (refusing to overwrite it)")


def _compare(
    args: argparse.Namespace, ctx: Context, dump_a: Any, dump_b: Any, records_a: Any, records_b: Any
) -> tuple[Any, int, bool]:
    """Run the comparison, with a progress bar on stderr unless ``--quiet``."""
    pair = list(args.pair) if getattr(args, "pair", None) else None
    options = dict(
        rtol=args.rtol, atol=args.atol, fail_fast=args.fail_fast, bitwise=getattr(args, "bitwise", False), pair=pair
    )
    if not ctx.progress:
        return compare_in_order(dump_a, dump_b, records_a, records_b, **options)
    total = _record_total(records_a, records_b, pair)
    with Progress(
        TextColumn("comparing records"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=ctx.err,
        transient=True,
    ) as bar:
        task = bar.add_task("compare", total=total)
        return compare_in_order(dump_a, dump_b, records_a, records_b, advance=lambda: bar.advance(task), **options)


def _write_csv(args: argparse.Namespace, result: Any, records_a: Any, records_b: Any, summary: dict[str, Any]) -> bool:
    """``--csv-msprobe``/``--format msprobe-csv``: write the CSV; True when it went to stdout."""
    from megadump_zarr.cli.msprobe_csv import msprobe_frame, write_msprobe_csv

    to_stdout = getattr(args, "output_format", "table") == "msprobe-csv" and not getattr(args, "output", None)
    path = args.csv_msprobe or getattr(args, "output", None)
    if path is None and not to_stdout:
        return False
    root = summary["root_cause"]["path"] if summary["root_cause"] else None
    frame = msprobe_frame(result, records_a, records_b, root)
    if to_stdout:
        import sys

        write_msprobe_csv(sys.stdout, frame)
        sys.stdout.flush()
        return True
    write_msprobe_csv(path, frame, flag="--csv-msprobe" if args.csv_msprobe else "--output")
    return False


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Compare, print the table (or the ``--by`` error map) and the verdict; exit 1 on any failing record."""
    _check_flags(args, ctx)
    options = checked_storage_options(args, args.a, args.b)
    dump_a, dump_b = open_dump_arg(args.a, options), open_dump_arg(args.b, options)
    records_a, records_b = matching_pair(dump_a, dump_b, args, f"{args.a} or {args.b}")
    result, total, stopped = _compare(args, ctx, dump_a, dump_b, records_a, records_b)
    summary = _summary(
        result, total, stopped, getattr(args, "accept_within_stats", False), getattr(args, "accept_partial", False)
    )
    bitwise = bool(getattr(args, "bitwise", False))
    summary["bitwise"] = bitwise
    code = EXIT_CHECK_FAILED if summary["verdict"] == "fail" else EXIT_OK
    by = getattr(args, "by", None)
    by_table = _bitwise_map_table if bitwise else _error_map_table
    if _write_csv(args, result, records_a, records_b, summary):  # the CSV is stdout: the summary goes to stderr
        if not ctx.quiet:
            _print_folded(ctx.err, _summary_line(summary))
        return code
    if getattr(args, "output_format", "table") == "msprobe-csv":  # the CSV went to --output: only the summary here
        _print_folded(ctx.console, _summary_line(summary))
        return code
    if ctx.json:
        document = {**summary, "a": args.a, "b": args.b, "results": result.to_dict(orient="records")}
        if by:
            document["by"] = by
            document["error_map"] = by_table(result, by, 120)[0].to_dict(orient="records")
        ctx.emit_json(document)
        return code
    if not ctx.quiet:
        if by:
            print_fitted(ctx.console, by_table(result, by, ctx.console.width)[1])
        else:
            print_fitted(ctx.console, compare_table(result, width=ctx.console.width, failures_only=args.failures_only))
    _print_folded(ctx.console, _summary_line(summary))
    if summary["root_cause"] is not None and not ctx.quiet:  # the SELECTOR of `megadump show A`, never wrapped
        ctx.console.print(
            f"root cause path: {safe_text(str(summary['root_cause']['path']))}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
    return code
