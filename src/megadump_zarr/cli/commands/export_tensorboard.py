"""``megadump export-tensorboard ROOT OUT``: the stored statistics as TensorBoard scalars."""

from __future__ import annotations

import argparse

from megadump_zarr.cli.common import (
    EXIT_OK,
    CliError,
    Context,
    add_output_flags,
    add_storage_options,
    checked_storage_options,
    open_dump_arg,
)

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``export-tensorboard``."""
    parser = subparsers.add_parser(
        "export-tensorboard",
        help="write the stored statistics as TensorBoard scalars",
        description="Write every committed record's statistics (L2 norm, min, max, NaN and Inf counts) as "
        "TensorBoard scalars under OUT, one run per rank: tag STAGE/OWNER_OR_CORE/RECORD/STATISTIC, step = "
        "the record's user step. Open with 'tensorboard --logdir OUT'. Needs the tensorboard package "
        "(pip install 'megadump_zarr[tensorboard]').",
    )
    parser.add_argument("path", metavar="ROOT", help="dump root: directory or URL")
    parser.add_argument("out", metavar="OUT", help="TensorBoard log directory to write")
    add_storage_options(parser)
    add_output_flags(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Export the scalars."""
    from megadump_zarr.interop.tensorboard import export_tensorboard

    dump = open_dump_arg(args.path, checked_storage_options(args, args.path))
    try:
        count = export_tensorboard(dump, args.out)
    except ValueError as error:
        raise CliError(str(error)) from None
    if ctx.json:
        ctx.emit_json({"out": args.out, "scalars": count})
    else:
        ctx.note(f"{count} scalars written under {args.out}")
    return EXIT_OK
