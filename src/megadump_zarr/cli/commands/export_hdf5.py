"""``megadump export-hdf5``: one window to an HDF5/netCDF4 file."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from megadump_zarr.cli.common import (
    EXIT_OK,
    CliError,
    Context,
    add_location_flags,
    add_output_flags,
    add_storage_options,
    checked_storage_options,
    human_bytes,
    progress_on_stderr,
)

__all__ = ["register", "resolve_window"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``export-hdf5``."""
    parser = subparsers.add_parser(
        "export-hdf5",
        help="export one window to HDF5/netCDF4",
        description="Write one window group (ROOT/rank_R/window_WWWW) to an HDF5 file that "
        "xr.open_dataset(FILE, engine='h5netcdf', group=...) reads, with the same group paths "
        "(megadump_zarr.interop.export_hdf5). WINDOW may also be a dump root: --rank/--window pick "
        "the window (optional when the root holds only one); a --rank/--window that matches no window is bad "
        "input (exit 2): the message lists the windows that exist.",
    )
    parser.add_argument("window", metavar="WINDOW", help="window group path/URL, or a dump root with --rank/--window")
    parser.add_argument("file", metavar="FILE.h5", help="HDF5 file to create")
    parser.add_argument(
        "--compression",
        choices=("gzip", "lzf", "none"),
        default="gzip",
        help="HDF5 compression (default gzip with byte shuffle)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing FILE.h5")
    parser.add_argument(
        "--allow-incomplete",
        action="store_true",
        help="also export an aborted or writing (torn) window; its status is kept in the attributes",
    )
    add_location_flags(
        parser,
        rank="rank, when WINDOW is a dump root",
        window="window index, when WINDOW is a dump root",
        invocation=None,
        window_flags=("--window-index", "--window"),
        window_dest="window_index",
    )
    add_storage_options(parser)
    add_output_flags(parser)
    parser.set_defaults(handler=run)


def _join(root: str, key: str) -> str:
    return f"{root.rstrip('/')}/{key}" if "://" in root else os.path.join(root, key)


def resolve_window(path: str, rank: int | None, window: int | None, options: dict[str, Any] | None) -> str:
    """``path`` itself when it is a window group, else the chosen window of the dump root ``path``."""
    from megadump_zarr.read import open_dump

    try:
        dump = open_dump(path, storage_options=options)
    except (ValueError, OSError):
        if rank is not None or window is not None:
            raise CliError(f"{path} is not a dump root; --rank/--window need one") from None
        return path  # a window group (or not a dump at all: export_hdf5 says which)
    windows = dump.windows()
    if rank is not None:
        windows = windows[windows["rank"] == rank]
    if window is not None:
        windows = windows[windows["window"] == window]
    if len(windows) != 1:
        listed = ", ".join(f"--rank {r.rank} --window {r.window} ({r.status})" for r in dump.windows().itertuples())
        what = "no window matches" if windows.empty else f"{len(windows)} windows match"
        raise CliError(f"{path} is a dump root and {what}; choose one of: {listed or 'none'}")
    return _join(path, str(windows["path"].iloc[0]))


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Export and report the file written."""
    from megadump_zarr.cli.outputs import claim_output
    from megadump_zarr.interop import export_hdf5
    from megadump_zarr.read.errors import DumpIntegrityError

    options = checked_storage_options(args, args.window)
    window = resolve_window(args.window, args.rank, args.window_index, options)
    target = Path(args.file).expanduser()
    compression = None if args.compression == "none" else args.compression
    try:
        with claim_output(target, args.overwrite) as temp, progress_on_stderr(ctx) as progress:
            export_hdf5(
                window,
                temp,
                storage_options=options,
                compression=compression,
                allow_incomplete=args.allow_incomplete,
                overwrite=True,
                progress=progress,
            )
        written = target
    except DumpIntegrityError:
        raise  # exit 1: the window is damaged
    except FileNotFoundError as error:
        raise CliError(str(error)) from None
    except FileExistsError as error:
        raise CliError(str(error).replace("overwrite=True", "--overwrite")) from None
    except ValueError as error:
        message = str(error).replace("allow_incomplete=True", "--allow-incomplete")
        raise CliError(message) from None
    size = Path(written).stat().st_size
    if ctx.json:
        ctx.emit_json({"window": window, "file": str(written), "bytes": size, "compression": args.compression})
        return EXIT_OK
    ctx.console.print(f"wrote {written} ({human_bytes(size)}) from {window}", highlight=False)
    return EXIT_OK
