"""``megadump migrate``: rewrite a dump of the previous format (9) as this one (10), in place, metadata only."""

from __future__ import annotations

import argparse

from megadump_zarr.cli.render import safe_text
from megadump_zarr.cli.common import EXIT_OK, Context, add_output_flags, add_storage_options, checked_storage_options

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``migrate``."""
    parser = subparsers.add_parser(
        "migrate",
        help="rewrite a format-9 dump as format 10, in place (metadata only)",
        description="Rewrite a dump of format 9 as format 10, in place: each array document drops the chunk "
        "digests (chunkCrc32c, shardCrc32c) the window inventory also lists; chunks are never written. Every "
        "window is checked against its inventory first (every chunk read): a damaged window is refused, naming "
        "it, and nothing is written. Each window's document is written last, so a run that is killed is "
        "finished by running it again; a window already of format 10 is skipped, and so is a window not "
        "committed (a note says so). Exit 0 done, 2 refused or not a dump root.",
    )
    parser.add_argument("path", metavar="ROOT", help="dump root: directory or URL")
    add_storage_options(parser)
    add_output_flags(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Migrate and say what was done with each window."""
    from megadump_zarr.migrate import migrate_dump

    report = migrate_dump(args.path, checked_storage_options(args, args.path))
    if ctx.json:
        ctx.emit_json(report.to_dict())
        return EXIT_OK
    for window in report.windows:
        if window.outcome == "migrated":
            text = f"{window.window}: migrated to format 10 ({window.documents} documents rewritten)"
        elif window.outcome == "current":
            text = f"{window.window}: already format 10"
        else:
            text = f"{window.window}: skipped: {window.note}"
        if not ctx.quiet or window.outcome == "skipped":
            ctx.console.print(safe_text(text), highlight=False, markup=False, soft_wrap=True)
    ctx.console.print(
        safe_text(f"{report.root}: {report.migrated} window(s) migrated, {len(report.windows)} in all"),
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    return EXIT_OK
