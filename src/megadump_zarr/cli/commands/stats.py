"""``megadump stats``: per-tensor statistics from the records' stored stats (no tensor data read)."""

from __future__ import annotations

import argparse
from typing import Any

from megadump_zarr.cli.cluster import add_cluster_flags
from megadump_zarr.cli.common import EXIT_OK, Context, add_filters, add_output_flags, add_storage_options
from megadump_zarr.cli.commands.ls import truncated_cell
from megadump_zarr.cli.render import Column, fit_table, is_missing, location, location_parts, print_fitted
from megadump_zarr.read.open_snippet import record_snippet

__all__ = ["register"]

JSON_COLUMNS = (
    "rank",
    "window",
    "invocation",
    "kernel",
    "direction",
    "stage",
    "task_id",
    "owner_id",
    "io",
    "index",
    "name",
    "dtype",
    "shape",
    "truncated",
    "stats_scope",
    "min",
    "max",
    "mean",
    "l2norm",
    "nan_count",
    "inf_count",
    "status",
    "path",
    "zarr_group",
    "variable",
    "pack_row",
)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``stats``."""
    parser = subparsers.add_parser(
        "stats",
        help="per-tensor min/max/mean/L2 norm/NaN/Inf from the stored stats",
        description="Per-record statistics written with the dump (min, max, mean and L2 norm over finite "
        "elements; NaN and Inf counts). Reads metadata only, never tensor data. Rows holding NaN or "
        "Inf are highlighted; --nonfinite shows only those. The 'stats of' column says what the statistics "
        "cover: 'whole' (every element) or 'prefix' (a truncated record's stored elements only).",
    )
    parser.add_argument("path", metavar="PATH", help="dump root: directory or URL")
    parser.add_argument("--nonfinite", action="store_true", help="only records whose stats count a NaN or Inf")
    add_filters(parser)
    add_storage_options(parser)
    add_cluster_flags(parser)
    add_output_flags(parser)
    parser.set_defaults(handler=run)


def _scope(row: Any) -> str:
    """What a record's statistics cover: ``whole``, ``prefix`` (the stored elements of a truncated record)."""
    scope = row.get("stats_scope")
    return "" if is_missing(scope) else str(scope)


def _nonfinite(row: Any) -> bool:
    return any(not is_missing(row.get(k)) and int(row.get(k)) > 0 for k in ("nan_count", "inf_count"))


COLUMNS = (
    Column("name", style="bold", elide=True),
    Column("where", location, parts=lambda r: location_parts(r, kernel_with_stage=False)),
    Column("dtype", hoist=True),
    Column("shape", drop=2),
    Column("min", justify="right"),
    Column("max", justify="right"),
    Column("mean", justify="right", drop=3),
    Column("l2norm", justify="right", drop=1),
    Column("nan", key="nan_count", justify="right", hoist=True),
    Column("inf", key="inf_count", justify="right", hoist=True),
    Column("stats of", _scope, key="stats_scope", hoist=True),
    Column("trunc", truncated_cell, key="truncated", hoist=True, drop=4),
)


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Print the statistics table."""
    from megadump_zarr.analyse.compare import execution_order

    from megadump_zarr.analyse.records import prefetch_records
    from megadump_zarr.cli.common import checked_storage_options, matching_records, open_dump_arg

    options = checked_storage_options(args, args.path)
    dump = prefetch_records(open_dump_arg(args.path, options))  # per-window tables on the cluster
    records = matching_records(dump, args)
    if len(records):
        records = execution_order(records)
    if args.nonfinite and len(records):
        records = records[[_nonfinite(row) for _, row in records.iterrows()]]
    if ctx.json:
        ctx.emit_json(records[[c for c in JSON_COLUMNS if c in records.columns]].to_dict(orient="records"))
        return EXIT_OK
    if records.empty:  # --nonfinite: nothing to show is the good answer
        ctx.note("no records with NaN or Inf")
        return EXIT_OK
    if records["min"].isna().all() and records["nan_count"].isna().all():
        ctx.err.print("[yellow]warning:[/yellow] these records carry no statistics (dump written with stats=False)")
    root = str(dump.root)
    flags = [_nonfinite(row) for _, row in records.iterrows()]
    first = records.iloc[sorted(range(len(records)), key=lambda i: not flags[i])]  # NaN/Inf first, then the rest
    prefix = int((records["stats_scope"] == "prefix").sum()) if "stats_scope" in records.columns else 0
    columns = COLUMNS if prefix else [c for c in COLUMNS if c.key != "stats_scope"]
    print_fitted(
        ctx.console,
        fit_table(
            first,
            [*columns, Column("open with xarray", lambda r: record_snippet(root, r) or "", key="zarr_group", drop=5)],
            width=ctx.console.width,
            row_style=lambda r: "red" if _nonfinite(r) else None,
        ),
    )
    bad = sum(flags)
    if prefix:
        ctx.note(
            f"{prefix} truncated record{'s' if prefix != 1 else ''} (stats of prefix): statistics of the stored "
            "elements only, not of the whole tensor (max_bytes_per_tensor)"
        )
    ctx.note(f"{len(records)} records, {bad} with NaN/Inf")
    return EXIT_OK
