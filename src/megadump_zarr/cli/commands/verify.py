"""``megadump verify``: every committed window whole — documents agree, chunks present, checksums hold."""

from __future__ import annotations

import argparse
from typing import Any

from megadump_zarr.cli.cluster import add_cluster_flags
from megadump_zarr.cli.render import safe_text
from megadump_zarr.cli.common import (
    EXIT_CHECK_FAILED,
    EXIT_OK,
    Context,
    add_output_flags,
    add_storage_options,
    checked_storage_options,
    human_bytes,
)

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``verify``."""
    parser = subparsers.add_parser(
        "verify",
        help="check every committed window: documents, chunks, checksums (--deep: statistics)",
        description="Check every committed window of a dump root: its documents parse and agree (status, "
        "consolidated metadata and each node's own document, record attributes against their "
        "arrays), every chunk is present and its crc32c checksum holds. --deep also recomputes each "
        "record's stored statistics from the data. Torn (writing) windows are listed, not checked; "
        "windows holding salvaged partial launches are reported. What could not be checked is printed as a "
        "note line (arrays without a checksum). A raw msprobe directory "
        "(read in place) stores no checksums: verify says so and checks what it can (every tensor file "
        "present and safe, its size and header against the declared shape and dtype, the documents, every "
        "tensor decoding; --deep: msprobe's own statistics); a refused tensor file is a problem. Exit 0 all "
        "that could be checked is good (for msprobe: without checksums), 1 a problem (each one named: window, "
        "key, what), 2 not a dump root.",
    )
    parser.add_argument("path", metavar="ROOT", help="dump root: directory or URL")
    parser.add_argument("--deep", action="store_true", help="also recompute stored statistics from the data")
    add_storage_options(parser)
    add_cluster_flags(parser)
    add_output_flags(parser)
    parser.set_defaults(handler=run)


def _run_with_progress(ctx: Context, root: str, options: dict[str, Any] | None, deep: bool) -> Any:
    from megadump_zarr.verify import verify_dump

    if not ctx.progress:
        return verify_dump(root, options, deep=deep)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} windows"),
        TextColumn("{task.fields[checked]}"),
        TimeElapsedColumn(),
        console=ctx.err,
        transient=True,
        disable=not ctx.err.is_terminal,
    ) as bar:
        task = bar.add_task("verifying", total=None, checked="")
        state = {"bytes": 0}

        def progress(window: str, done: int, total: int, chunk_bytes: int) -> None:
            state["bytes"] += chunk_bytes
            bar.update(
                task,
                total=total,
                completed=done,
                description=window or "verifying",
                checked=human_bytes(state["bytes"]),
            )

        return verify_dump(root, options, deep=deep, progress=progress)


def _line(ctx: Context, text: str) -> None:
    """One output line, never folded, its control characters escaped (a record name cannot forge a line)."""
    ctx.console.print(safe_text(text), highlight=False, markup=False, soft_wrap=True)


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Verify and report; exit 1 when anything is wrong."""
    options = checked_storage_options(args, args.path)
    try:
        report = _run_with_progress(ctx, args.path, options, args.deep)
    except ValueError as error:
        from megadump_zarr.cli.common import read_error

        raise read_error(args.path, options, error) from None
    if ctx.json:
        ctx.emit_json(report.to_dict())
        return EXIT_OK if report.ok else EXIT_CHECK_FAILED
    summary = report.to_dict()
    if report.dump_problems:
        _line(ctx, f"{report.root}: {len(report.dump_problems)} problem(s) ({report.source} directory)")
        for problem in report.dump_problems:
            _line(ctx, f"  {problem.what}")
    # One line per window, never folded: a window's verdict stays one greppable line at any width.
    for check in report.windows:
        _print_window(ctx, check, report.deep)
    if not report.windows and not report.dump_problems:
        _line(ctx, f"{report.root}: no windows")
    for note in report.notes:
        _line(ctx, f"note: {note}")
    verdict = "ok" if report.ok else f"{summary['problems']} problem(s)"
    checksums = "" if summary["checksums"] else f" ({report.source} dump: no checksums)"
    _line(
        ctx,
        f"{verdict}{checksums}: {summary['windows_checked']} window(s) checked, {summary['windows_skipped']} "
        f"not committed, {summary['chunks']} chunks, {human_bytes(summary['stored_bytes'])}",
    )
    return EXIT_OK if report.ok else EXIT_CHECK_FAILED


def _print_window(ctx: Context, check: Any, deep: bool) -> None:
    """A window's line, then its problems and (unless ``--quiet``) its notes, one line each."""
    if not check.checked:
        if not ctx.quiet:
            _line(ctx, f"{check.window}: {check.status}, not committed: not checked")
        return
    partial = ""
    if check.partial_launches or check.partial_records:
        partial = (
            f", holds {len(check.partial_launches)} salvaged partial launch(es) "
            f"({check.partial_records} partial record(s))"
        )
    if check.ok:
        if not ctx.quiet:
            _line(
                ctx,
                f"{check.window}: ok ({check.status}; {check.arrays} arrays, {check.chunks} chunks, "
                f"{human_bytes(check.stored_bytes)}{', statistics recomputed' if deep else ''}){partial}",
            )
    else:
        _line(ctx, f"{check.window}: {len(check.problems)} problem(s) ({check.status}){partial}")
        for problem in check.problems:
            _line(ctx, f"  {problem.key}: {problem.what}")
    if not ctx.quiet:
        for note in check.notes:
            _line(ctx, f"  note: {note}")
