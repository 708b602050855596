"""``megadump plot``: a heatmap, difference heatmap, histogram or error map, written to an image file."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from megadump_zarr.cli.common import (
    EXIT_OK,
    CliError,
    Context,
    checked_storage_options,
    matching_pair,
    open_dump_arg,
    progress_on_stderr,
)
from megadump_zarr.cli.commands.show import add_selector
from megadump_zarr.cli.render import is_missing, shape_text
from megadump_zarr.cli.tensors import Selected, select_tensor

__all__ = ["register", "where_of"]

_KINDS = ("heatmap", "hist", "errormap")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``plot``."""
    parser = subparsers.add_parser(
        "plot",
        help="heatmap, A−B heatmap, histogram or error map to a PNG",
        description="Draw with matplotlib (Agg, no display needed). heatmap: the first two dimensions of one "
        "tensor (further dimensions at index 0; 1-D as one row; axes longer than --max-size strided "
        "down), a diverging colormap centred on 0 for signed data, a sequential one otherwise; with "
        "--diff B, the A−B heatmap (diverging, symmetric about 0). hist: the finite values (of A−B "
        "with --diff). errormap (needs --diff, no SELECTOR): compares A with B and draws a stage × "
        "owner (--by core: × core, --by task: × task) heatmap of the worst relative error over "
        "invocations, failing cells marked. Every heatmap has a labelled colour bar and a title "
        "naming the tensor, window, invocation, step and stage. SELECTOR as for 'show'; the filters "
        "narrow it (and choose the records an error map compares). The image is written to a "
        "temporary file and renamed into place; an existing FILE is kept unless --overwrite, and "
        "anything that is not a regular file is never replaced.",
    )
    add_selector(parser)
    parser.add_argument(
        "--out",
        "-o",
        required=True,
        metavar="FILE.png",
        help="image file to write (format from the suffix: .png, .svg, .pdf, ...)",
    )
    parser.add_argument("--kind", choices=_KINDS, default="heatmap", help="plot kind (default heatmap)")
    parser.add_argument("--diff", metavar="B", help="reference dump: draw A−B (heatmap, hist) or the error map")
    parser.add_argument(
        "--by",
        choices=("owner", "core", "task"),
        default="owner",
        help="errormap: columns per owner (default; by core, then task, where the records have no owners), core or task",
    )
    parser.add_argument(
        "--value",
        choices=("max_rel", "max_abs"),
        default="max_rel",
        help="errormap: which worst error to draw (default max_rel)",
    )
    parser.add_argument("--bins", type=int, default=100, help="histogram bins (default 100)")
    parser.add_argument(
        "--max-size", type=int, default=512, metavar="N", help="heatmap: most cells per side (default 512)"
    )
    parser.add_argument("--dpi", type=int, default=100, help="resolution of raster formats (default 100)")
    parser.add_argument("--overwrite", action="store_true", help="replace FILE when it exists (a regular file only)")
    parser.set_defaults(handler=run)


def where_of(records: Any) -> dict[str, Any]:
    """Window, invocation, step, stage and kernel shared by ``records`` (for plot titles)."""
    where: dict[str, Any] = {}
    for key in ("window", "invocation", "step", "stage", "kernel"):
        if key not in records.columns:
            continue
        values = {v.item() if hasattr(v, "item") else v for v in records[key] if not is_missing(v)}
        if len(values) == 1:
            where[key] = values.pop()
        elif len(values) > 1:
            where[key] = "/".join(str(v) for v in sorted(values, key=str))
    return where


def _check_args(args: argparse.Namespace) -> Path:
    out = Path(args.out).expanduser()
    if not out.parent.is_dir():
        raise CliError(f"cannot write {out}: directory {out.parent} does not exist")
    if not out.suffix:
        raise CliError(f"cannot tell the image format of {out}: give it a suffix such as .png")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    formats = FigureCanvasAgg(Figure()).get_supported_filetypes()
    if out.suffix[1:].lower() not in formats:
        raise CliError(
            f"cannot write {out}: unknown image format {out.suffix!r}; formats: {', '.join(sorted(formats))}"
        )
    if args.bins < 1 or args.max_size < 1 or args.dpi < 1:
        raise CliError("--bins, --max-size and --dpi must be positive")
    if args.kind == "errormap" and not args.diff:
        raise CliError("--kind errormap compares two dumps: give the reference with --diff B")
    if args.kind == "errormap" and args.selector is not None:
        raise CliError("--kind errormap draws every compared record: narrow it with the filters, not a SELECTOR")
    if out.exists() and not args.overwrite:
        raise CliError(f"{out} already exists (pass --overwrite to replace it)")
    return out


def _same_rows(a: Selected, b: Selected) -> None:
    """A and B must hold the same elements to be subtracted: equal shapes and, stitched, equal rows."""
    import numpy as np

    if tuple(a.data.shape) != tuple(b.data.shape):
        raise CliError(
            f"cannot draw A−B of {a.name}: shapes differ ({shape_text(a.data.shape)} in A, "
            f"{shape_text(b.data.shape)} in B); compare them with 'megadump compare'"
        )
    dim = a.data.dims[0] if a.data.ndim else None
    if dim is not None and dim in a.data.coords and dim in b.data.coords:
        rows_a, rows_b = np.asarray(a.data[dim].values), np.asarray(b.data[dim].values)
        if rows_a.shape == rows_b.shape and not np.array_equal(rows_a, rows_b):
            raise CliError(
                f"cannot draw A−B of {a.name}: A and B hold different {dim} rows (their tasks captured "
                "different rows); narrow both to one task with --task or --owner"
            )


def _errormap(args: argparse.Namespace, ctx: Context, dump_a: Any, dump_b: Any, figure: Any) -> dict[str, Any]:
    from megadump_zarr.analyse import compare
    from megadump_zarr.analyse.errormap import error_map, mapped_by
    from megadump_zarr.analyse.errormap_plot import error_grid, plot_error_map

    records_a, records_b = matching_pair(dump_a, dump_b, args, f"{args.path} or {args.diff}")
    paths = sorted(set(records_a["path"]) | set(records_b["path"]))
    with progress_on_stderr(ctx) as progress:
        result = compare(dump_a, dump_b, progress=progress, path=paths)
    by = mapped_by(result, args.by)
    if by != args.by:
        ctx.note(f"these records have no {args.by}s: the error map is by {by}")
    table = error_map(result, by=by)
    ax = figure.add_subplot()
    try:
        plot_error_map(table, ax, by=by, value=args.value)
    except ValueError as error:
        raise CliError(str(error)) from None
    ax.set_title(f"{args.path} vs {args.diff} · {_span(result)}\n" + ax.get_title(), fontsize=9)
    worst, failures, stages, columns = error_grid(table, by=by, value=args.value)
    return {
        "by": by,
        "value": args.value,
        "stages": stages,
        "columns": columns,
        "worst": worst.tolist(),
        "failures": failures.tolist(),
        "compared": len(result),
    }


def _span(result: Any) -> str:
    """The windows, invocations and steps an error map covers, e.g. ``window 0 · invocations 0, 2 · step 1``
    (runs of more than four values as ``first–last``)."""
    parts = []
    for key, one, many in (
        ("window", "window", "windows"),
        ("invocation", "invocation", "invocations"),
        ("step", "step", "steps"),
    ):
        values = sorted({int(v) for v in result[key] if not is_missing(v)}) if key in result.columns else []
        if not values:
            continue
        text = ", ".join(map(str, values)) if len(values) <= 4 else f"{values[0]}–{values[-1]}"
        parts.append(f"{one if len(values) == 1 else many} {text}")
    return " · ".join(parts)


def _tensor_plot(args: argparse.Namespace, dump_a: Any, figure: Any, options: dict[str, Any] | None) -> dict[str, Any]:
    from megadump_zarr.analyse.plot import plot_diff, plot_heatmap, plot_histogram

    selected = select_tensor(dump_a, args.selector, args)
    where = where_of(selected.records)
    ax = figure.add_subplot()
    data = selected.data
    if args.diff:
        reference = select_tensor(open_dump_arg(args.diff, options), args.selector, args)
        _same_rows(selected, reference)
        if args.kind == "heatmap":
            plot_diff(data, reference.data, ax, max_size=args.max_size, where=where)
        else:
            import xarray as xr

            difference = xr.DataArray(
                data.data.astype("float64") - reference.data.data.astype("float64"),
                dims=data.dims,
                name=f"{selected.name} (A − B)",
            )
            plot_histogram(difference, ax, bins=args.bins, where=where)
    elif args.kind == "heatmap":
        plot_heatmap(data, ax, max_size=args.max_size, where=where)
    else:
        plot_histogram(data, ax, bins=args.bins, where=where)
    return {"name": selected.name, "shape": [int(s) for s in data.shape], "path": selected.path, "where": where}


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Select, draw, claim the output and save the figure."""
    out = _check_args(args)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from megadump_zarr.cli.outputs import claim_output

    options = checked_storage_options(args, args.path, args.diff)
    dump_a = open_dump_arg(args.path, options)
    figure = Figure(figsize=(8, 5) if args.kind == "hist" else (8, 6), layout="constrained")
    FigureCanvasAgg(figure)
    if args.kind == "errormap":
        info = _errormap(args, ctx, dump_a, open_dump_arg(args.diff, options), figure)
    else:
        info = _tensor_plot(args, dump_a, figure, options)
    with claim_output(out, args.overwrite) as temporary:
        figure.savefig(temporary, dpi=args.dpi, format=out.suffix[1:].lower())
    info = {"out": str(out), "kind": args.kind, "diff": args.diff, **info, "bytes": out.stat().st_size}
    if ctx.json:
        ctx.emit_json(info)
        return EXIT_OK
    if args.kind == "errormap":
        what = f"error map of {info['compared']} compared records ({len(info['stages'])} stages × {len(info['columns'])} {args.by}s)"
    else:
        what = f"{args.kind}{' of A−B' if args.diff else ''} of {info['name']} [{shape_text(info['shape'])}]"
    ctx.console.print(f"wrote {out} ({what})", highlight=False)
    return EXIT_OK
