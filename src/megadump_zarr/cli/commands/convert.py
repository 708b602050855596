"""``megadump convert``: import a legacy (schema version 4, torch.save per tensor) dump or msprobe dumps."""

from __future__ import annotations

import argparse

from megadump_zarr.cli.common import (
    EXIT_OK,
    CliError,
    Context,
    add_output_flags,
    add_storage_options,
    checked_storage_options,
    progress_on_stderr,
)

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``convert``."""
    parser = subparsers.add_parser(
        "convert",
        help="import a legacy torch.save dump or msprobe dumps into Zarr",
        description="Convert every legacy window (rank_*/window_*/manifest.json, schema version 4) below "
        "LEGACY_DIR into the Zarr layout below URL (megadump_zarr.interop.convert_legacy). Tensor "
        "files are untrusted: they are loaded with torch.load(weights_only=True) only, and a file "
        "that is not a plain tensor is refused (exit 2; the windows written so far are removed: a refused "
        "input leaves no output). With --from msprobe (the default when LEGACY_DIR holds step*/rank*|proc*/dump.json), "
        "import Ascend msprobe PyTorch dumps (tensor or statistics task) instead, one window per rank "
        "and step (megadump_zarr.interop.msprobe).",
    )
    parser.add_argument(
        "legacy_dir",
        metavar="LEGACY_DIR",
        help="directory holding the legacy rank_R/ directories, or msprobe's dump_path (step*/)",
    )
    parser.add_argument("url", metavar="URL", help="destination dump root (directory or URL)")
    parser.add_argument(
        "--compressor", default="default", help="compressor of the new arrays (default, none, zstd-3, blosc-lz4, ...)"
    )
    parser.add_argument(
        "--from",
        dest="source",
        choices=("auto", "legacy", "msprobe"),
        default="auto",
        help="input format (default auto: msprobe when LEGACY_DIR holds msprobe dumps, else legacy)",
    )
    add_storage_options(parser)
    add_output_flags(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Convert and list the windows written."""
    from megadump_zarr.interop import convert_legacy
    from megadump_zarr.interop.msprobe import convert_msprobe, is_msprobe_dump

    source = getattr(args, "source", "auto")
    if source == "auto":
        source = "msprobe" if is_msprobe_dump(args.legacy_dir) else "legacy"
    convert = convert_msprobe if source == "msprobe" else convert_legacy
    options = checked_storage_options(args, args.url)
    try:
        with progress_on_stderr(ctx) as progress:
            windows = convert(
                args.legacy_dir,
                args.url,
                storage_options=options,
                compressor=args.compressor,
                progress=progress,
            )
    except FileNotFoundError as error:
        raise CliError(str(error)) from None
    except ValueError as error:
        raise CliError(f"conversion refused: {error}") from None
    if ctx.json:
        ctx.emit_json({"url": args.url, "windows": [str(w) for w in windows]})
        return EXIT_OK
    ctx.console.print(
        f"converted {len(windows)} window{'s' if len(windows) != 1 else ''} into {args.url}", highlight=False
    )
    if not ctx.quiet:
        for window in windows:
            ctx.console.print(f"  {window}", highlight=False)
    return EXIT_OK
