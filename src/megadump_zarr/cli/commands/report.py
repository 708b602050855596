"""``megadump report``: one self-contained HTML file of a comparison (or of one dump) to attach to a bug."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from megadump_zarr.cli.common import (
    EXIT_CHECK_FAILED,
    EXIT_OK,
    CliError,
    Context,
    add_filters,
    add_output_flags,
    add_storage_options,
    add_tolerance_flags,
    checked_storage_options,
    matching_pair,
    matching_records,
    open_dump_arg,
)
from megadump_zarr.cli.commands.compare import RecordsView, step_pair  # the same record views and --pair

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``report``."""
    parser = subparsers.add_parser(
        "report",
        help="write one self-contained HTML report of A vs B (or of A alone)",
        description="Compare dump A (under test) with dump B (reference) as 'megadump compare' does and write "
        "one HTML file that needs no network to view: the verdict summary, the root cause and the "
        "first divergence with where they live, a stage x owner (or core) error map per invocation, "
        "the per-record table (sortable, filterable, failures first), the A-B heatmap and error "
        "histogram of the worst records, and how to open each record with xarray. Without B: the "
        "dump's statistics and its NaN/Inf records. Exit status 1 when a record does not pass "
        "(or, without B, holds NaN/Inf); an existing output is kept unless --overwrite. Records pair by step "
        "(--pair A_STEP:B_STEP pairs other steps).",
    )
    parser.add_argument("a", metavar="A", help="dump under test (root directory or URL)")
    parser.add_argument("b", metavar="B", nargs="?", help="reference dump (root directory or URL)")
    parser.add_argument("-o", "--output", required=True, metavar="FILE.html", help="the report file to write")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing report file")
    add_tolerance_flags(parser, default="by dtype, as in 'megadump compare'")
    parser.add_argument("--by", choices=("owner", "core"), default="owner", help="error-map columns (default owner)")
    parser.add_argument(
        "--worst", type=int, default=6, metavar="N", help="worst records with a heatmap and histogram (default 6)"
    )
    parser.add_argument(
        "--pair",
        action="append",
        metavar="A_STEP:B_STEP",
        type=step_pair,
        help="compare step A_STEP of A with step B_STEP of B (repeatable), as in 'megadump compare'",
    )
    parser.add_argument(
        "--accept-partial",
        action="store_true",
        help="truncated records that pass on the elements both dumps stored pass (as in 'megadump compare')",
    )
    add_filters(parser)
    add_storage_options(parser)
    add_output_flags(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Build the report, write it, print where it is."""
    from megadump_zarr.cli.outputs import claim_output
    from megadump_zarr.report import render_html

    if args.worst < 0:
        raise CliError(f"--worst must be >= 0, got {args.worst}")
    output = Path(args.output)
    options = checked_storage_options(args, args.a, args.b)
    with claim_output(output, args.overwrite) as temp:  # claimed before any work: a taken name fails at once
        data = _collect(args, options)
        page = render_html(data)
        temp.write_text(page, encoding="utf-8")
    failing = data.summary["nonfinite"] if args.b is None else data.summary["failing"]
    if ctx.json:
        ctx.emit_json(
            {
                "output": str(output),
                "bytes": len(page.encode()),
                "summary": data.summary,
                "root_cause": data.root_cause,
                "first_divergence": data.first_divergence,
                "first_nonfinite": data.first_nonfinite,
            }
        )
    elif not ctx.quiet:
        ctx.console.print(
            f"wrote {output} ({len(page.encode()) / 1e6:.2f} MB): {data.summary['verdict']}", highlight=False
        )
    else:
        ctx.console.print(str(output), highlight=False)
    return EXIT_CHECK_FAILED if failing else EXIT_OK


def _collect(args: argparse.Namespace, options: dict[str, Any] | None) -> Any:
    """The report's data: a comparison of A with B, or A's statistics."""
    from megadump_zarr.report import collect_comparison, collect_single

    dump_a = open_dump_arg(args.a, options)
    if args.b is None:
        data = collect_single(RecordsView(dump_a, matching_records(dump_a, args)))
    else:
        dump_b = open_dump_arg(args.b, options)
        records_a, records_b = matching_pair(dump_a, dump_b, args, f"{args.a} or {args.b}")
        data = collect_comparison(
            RecordsView(dump_a, records_a),
            RecordsView(dump_b, records_b),
            rtol=args.rtol,
            atol=args.atol,
            by=args.by,
            worst=args.worst,
            pair=list(args.pair) if args.pair else None,
            accept_partial=args.accept_partial,
        )
    data.sources["a"], data.sources["root_a"] = args.a, str(dump_a.root)
    if args.b is not None:
        data.sources["b"] = args.b
    return data
