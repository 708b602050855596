"""``megadump ls``: the records table of a dump, filtered."""

from __future__ import annotations

import argparse
from typing import Any

from megadump_zarr.cli.common import (
    EXIT_OK,
    Context,
    add_filters,
    add_output_flags,
    add_storage_options,
    checked_storage_options,
    human_bytes,
    matching_records,
    open_dump_arg,
)
from megadump_zarr.cli.render import Column, cell, fit_table, is_missing, print_fitted, safe_text
from megadump_zarr.read.open_snippet import record_snippet

__all__ = ["register", "selected_records", "truncated_cell"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``ls``."""
    parser = subparsers.add_parser(
        "ls",
        help="list the stored tensors (records), filtered",
        description="List the records of a dump (one per stored tensor) from metadata only, filtered by the "
        "options below, each with the line of Python that opens its stored values with plain xarray "
        "(xr.open_zarr(GROUP)[VARIABLE], .isel(task=ROW) for a record stored in a task-record pack). --json gives "
        "every column of Dump.records() (stats_scope says whether a record's statistics cover its stored prefix "
        "only); --quiet prints only the record paths (what 'show' and 'plot' take as SELECTOR). 'trunc' shows how "
        "many rows a truncated record stored (max_bytes_per_tensor).",
    )
    parser.add_argument("path", metavar="PATH", help="dump root: directory or URL")
    add_filters(parser)
    add_storage_options(parser)
    add_output_flags(parser)
    parser.set_defaults(handler=run)


def selected_records(args: argparse.Namespace) -> tuple[Any, Any]:
    """Open ``args.path`` and return ``(dump, filtered records)``.

    Raises:
        CliError: The filters match nothing (exit 2; the message names the filter and the values that exist).
    """
    dump = open_dump_arg(args.path, checked_storage_options(args, args.path))
    return dump, matching_records(dump, args)


def _status_style(row: Any) -> str | None:
    status = row.get("status")
    return {"aborted": "red", "writing": "yellow"}.get(status) if isinstance(status, str) else None


def _port(row: Any) -> str:
    if not is_missing(row.get("io")):
        index = row.get("index")
        return f"{_PORT.get(row['io'], row['io'])}[{'' if is_missing(index) else int(index)}]"
    return "" if is_missing(row.get("role")) else str(row["role"])


_PORT = {"input": "in", "output": "out"}


def truncated_cell(row: Any) -> str:
    """``no``, or how much of a truncated record was stored: ``4/16 rows`` (whole rows of its logical shape),
    ``5/16 el`` when not one row was stored whole."""
    truncated = row.get("truncated")
    if is_missing(truncated) or not bool(truncated):
        return "no"
    shape, stored = row.get("shape"), row.get("stored_shape")
    if not isinstance(shape, tuple | list) or not shape or not isinstance(stored, tuple | list):
        return "yes"
    elements = 1
    for d in stored:
        elements *= int(d)
    per_row = 1
    for d in shape[1:]:
        per_row *= int(d)
    rows = elements // per_row if per_row else int(shape[0])
    if rows == 0:
        total = per_row * int(shape[0])
        return f"{elements}/{total} el"
    return f"{min(rows, int(shape[0]))}/{int(shape[0])} rows"


def _kernel(row: Any) -> str:
    kernel = row.get("kernel")
    if is_missing(kernel):
        return ""
    backward = row.get("direction") == "backward" and not str(kernel).endswith("backward")
    return f"{kernel}{' (bwd)' if backward else ''}"


OPEN_WITH = "open with xarray"
"""The heading of the column holding the line that opens a record's stored values with plain xarray."""

COLUMNS = (
    Column("rank", justify="right", hoist=True, drop=3),
    Column("win", key="window", justify="right", hoist=True, drop=3),
    Column("inv", key="invocation", justify="right", hoist=True),
    Column("step", justify="right", hoist=True, drop=5),
    Column("kernel", _kernel, key="kernel", hoist=True, drop=6),
    Column("stage", hoist=True),
    Column("task", key="task_id", justify="right", hoist=True),
    Column("owner", key="owner_id", justify="right", hoist=True, drop=2),
    Column(
        "core",
        lambda r: "" if is_missing(r.get("core_type")) else f"{r['core_type']}{cell(r.get('core_id'))}",
        hoist=True,
        drop=4,
    ),
    Column("port", _port),
    Column("name", style="bold", elide=True),
    Column("dtype", hoist=True),
    Column("shape"),
    Column(
        "size", lambda r: r.get("bytes"), justify="right", fmt=lambda v: "" if is_missing(v) else human_bytes(v), drop=7
    ),
    Column("trunc", truncated_cell, key="truncated", hoist=True, drop=1),
    Column(
        "stored",
        lambda r: "stats only" if r.get("payload") is False or r.get("payload") == False else "",  # noqa: E712
        key="payload",
        hoist=True,  # never dropped: whether a row holds its tensor at all
    ),
    Column("status", style=_status_style, hoist=True),
    Column("path", drop=10),
)


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Print the filtered records."""
    dump, records = selected_records(args)
    if ctx.json:
        ctx.emit_json(records.to_dict(orient="records"))
        return EXIT_OK
    if ctx.quiet:
        for path in records["path"]:
            ctx.console.print(safe_text(str(path)), highlight=False, markup=False, soft_wrap=True)
        return EXIT_OK
    root = str(dump.root)
    columns = [*COLUMNS, Column(OPEN_WITH, lambda r: record_snippet(root, r) or "", key="zarr_group")]
    if records["rank"].nunique() <= 1:
        columns = [c for c in columns if c.key != "rank"]
    if not args.include_incomplete:
        columns = [c for c in columns if c.key != "status"]
    fitted = fit_table(records, columns, width=ctx.console.width)
    # the paths: --quiet gives them; the locations, when too wide for a column: each on a line of its own, whole
    unlisted = [heading for heading in ("path", OPEN_WITH) if heading in fitted.dropped]
    if unlisted:
        fitted.dropped = [heading for heading in fitted.dropped if heading not in unlisted]
        fitted.below = [line for line in fitted.below if not line.startswith("columns left out")]
        if fitted.dropped:
            fitted.below.append(f"columns left out to fit {ctx.console.width} columns: {', '.join(fitted.dropped)}")
    print_fitted(ctx.console, fitted)
    if OPEN_WITH in unlisted:
        ctx.console.print(f"\n{OPEN_WITH}, row by row (each whole, to paste):", highlight=False, markup=False)
        for _, row in records.iterrows():
            snippet = record_snippet(root, row)
            if snippet is not None:
                ctx.console.print(safe_text(snippet), highlight=False, markup=False, soft_wrap=True)
    shown = "path" in fitted.headings
    hint = "" if shown else " (record paths, what show and plot take: --quiet, or a wider console)"
    ctx.note(
        f"{len(records)} record{'s' if len(records) != 1 else ''}, "
        f"{human_bytes(float(records['bytes'].fillna(0).sum()))} logical{hint}"
    )
    return EXIT_OK
