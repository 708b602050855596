"""``megadump plot``: a heatmap or histogram of one tensor, written to an image file."""

from __future__ import annotations

import argparse
from pathlib import Path

from megadump_zarr.cli.common import EXIT_OK, CliError, Context, open_dump_arg, storage_options
from megadump_zarr.cli.commands.show import add_selector
from megadump_zarr.cli.render import shape_text
from megadump_zarr.cli.tensors import select_tensor

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``plot``."""
    parser = subparsers.add_parser(
        "plot", help="heatmap or histogram of one tensor to a PNG",
        description="Draw one tensor with matplotlib (Agg, no display needed): a heatmap of its first two "
                    "dimensions (further dimensions at index 0; 1-D as one row; axes longer than --max-size "
                    "strided down) or a histogram of its finite values. SELECTOR as for 'show'. Uses "
                    "megadump_zarr.analyse.plot (plot_heatmap, plot_histogram).")
    add_selector(parser)
    parser.add_argument("--out", "-o", required=True, metavar="FILE.png",
                        help="image file to write (format from the suffix: .png, .svg, .pdf, ...)")
    parser.add_argument("--kind", choices=("heatmap", "hist"), default="heatmap", help="plot kind (default heatmap)")
    parser.add_argument("--bins", type=int, default=100, help="histogram bins (default 100)")
    parser.add_argument("--max-size", type=int, default=512, metavar="N",
                        help="heatmap: most cells per side (default 512)")
    parser.add_argument("--dpi", type=int, default=100, help="resolution of raster formats (default 100)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Select the tensor, draw it, save the figure."""
    out = Path(args.out).expanduser()
    if not out.parent.is_dir():
        raise CliError(f"cannot write {out}: directory {out.parent} does not exist")
    if not out.suffix:
        raise CliError(f"cannot tell the image format of {out}: give it a suffix such as .png")
    if args.bins < 1 or args.max_size < 1 or args.dpi < 1:
        raise CliError("--bins, --max-size and --dpi must be positive")
    dump = open_dump_arg(args.path, storage_options(args))
    selected = select_tensor(dump, args.selector, args)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from megadump_zarr.analyse.plot import plot_heatmap, plot_histogram

    figure = Figure(figsize=(8, 6) if args.kind == "heatmap" else (8, 5), layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    if args.kind == "heatmap":
        plot_heatmap(selected.data, ax, max_size=args.max_size)
    else:
        plot_histogram(selected.data, ax, bins=args.bins)
    try:
        figure.savefig(out, dpi=args.dpi)
    except ValueError as error:  # unknown format
        raise CliError(f"cannot write {out}: {error}") from None
    shape = [int(s) for s in selected.data.shape]
    if ctx.json:
        ctx.emit_json({"out": str(out), "kind": args.kind, "name": selected.name, "shape": shape,
                       "path": selected.path, "bytes": out.stat().st_size})
        return EXIT_OK
    ctx.console.print(f"wrote {out} ({args.kind} of {selected.name} [{shape_text(shape)}])", highlight=False)
    return EXIT_OK
