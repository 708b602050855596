"""``megadump show``: statistics and the first values of one tensor."""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table
from rich.text import Text

from megadump_zarr.cli.common import (
    EXIT_OK,
    CliError,
    Context,
    add_filters,
    add_output_flags,
    add_storage_options,
    checked_storage_options,
    open_dump_arg,
)
from megadump_zarr.cli.render import cell, is_missing, safe_text, shape_text
from megadump_zarr.cli.tensors import Selected, flat_head, select_tensor

from megadump_zarr.read.open_snippet import record_snippet

__all__ = ["register", "tensor_stats"]

_STATS = ("min", "max", "mean", "l2norm", "nan_count", "inf_count")


def add_selector(parser: argparse.ArgumentParser) -> None:
    """PATH, SELECTOR and the filters that narrow a tensor name."""
    parser.add_argument("path", metavar="PATH", help="dump root: directory or URL")
    parser.add_argument(
        "selector",
        metavar="SELECTOR",
        nargs="?",
        help="a record path relative to the root (the 'path' column of 'megadump ls'), or a tensor "
        "name (taken as it is: names holding '/' work) narrowed by the filters; several L1 "
        "records of one tensor are stitched along axis 0 (Dump.tensor), --owner/--core keep "
        "that owner's or core's records; without SELECTOR, --name names the tensor",
    )
    add_filters(parser)
    add_storage_options(parser)
    add_output_flags(parser)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``show``."""
    parser = subparsers.add_parser(
        "show",
        help="stats and the first values of one tensor",
        description="Show one tensor: where it is stored (a packed record: its pack array and row), dtype and shape, statistics (the stored stats of a "
        "single record; computed from the data for a stitched tensor) and its first N values in C "
        "order (truncated records read NaN where nothing was captured). JSON: NaN is null, "
        'infinities are "inf"/"-inf".',
    )
    add_selector(parser)
    parser.add_argument(
        "--head", type=int, default=10, metavar="N", help="how many leading values to print (default 10)"
    )
    parser.set_defaults(handler=run)


def _as_float(values: Any) -> Any:
    import numpy as np

    values = np.asarray(values)
    if values.dtype.kind in "biu":
        return values
    return values.astype(np.float64)


def tensor_stats(data: Any) -> dict[str, Any]:
    """min/max/mean/L2 norm over finite elements and NaN/Inf counts, computed block by block."""
    import dask.array as dsa
    import numpy as np

    array = data.data if hasattr(data, "data") else data
    if not isinstance(array, dsa.Array):
        array = dsa.from_array(np.asarray(array))
    if array.dtype.kind == "b":
        array = array.astype(np.int8)
    values = array.astype(np.float64)
    finite = dsa.isfinite(values)
    count = finite.sum()
    safe = dsa.where(finite, values, 0.0)
    results = dsa.compute(
        dsa.where(finite, values, np.inf).min(),
        dsa.where(finite, values, -np.inf).max(),
        safe.sum(),
        (safe * safe).sum(),
        dsa.isnan(values).sum(),
        dsa.isinf(values).sum(),
        count,
    )
    lo, hi, total, squares, nans, infs, n = (np.asarray(r).item() for r in results)
    return {
        "min": lo if n else None,
        "max": hi if n else None,
        "mean": total / n if n else None,
        "l2norm": squares**0.5,
        "nan_count": int(nans),
        "inf_count": int(infs),
    }


def _stored_stats(row: Any) -> dict[str, Any]:
    return {k: (None if is_missing(row.get(k)) else row.get(k)) for k in _STATS}


def _captured_stats(data: Any) -> dict[str, Any]:
    """:func:`tensor_stats` of the rows a truncated view holds stored values in (its ``captured`` coordinate),
    so NaN padding is not counted as NaN."""
    import numpy as np

    captured = data.coords.get("captured") if hasattr(data, "coords") else None
    if captured is None or not data.ndim:
        return tensor_stats(data)
    mask = np.asarray(captured.values, dtype=bool)
    return tensor_stats(data.isel({data.dims[0]: np.flatnonzero(mask)}))


def describe(selected: Selected, root: str = ".") -> dict[str, Any]:
    """What ``show`` reports, JSON-ready apart from numpy values.

    Args:
        selected: The selected tensor.
        root: The dump root (for the line that opens a record with plain xarray).
    """
    data = selected.data
    attrs = data.attrs
    info: dict[str, Any] = {
        "name": selected.name,
        "dtype": str(data.dtype),
        "shape": [int(s) for s in data.shape],
        "dims": [str(d) for d in data.dims],
    }
    if selected.path is not None and len(selected.records):
        row = selected.records.iloc[0]
        info.update(
            path=selected.path,
            stored_shape=row.get("stored_shape"),
            truncated=bool(row.get("truncated")),
            dtype=str(row.get("dtype")),
            status=row.get("status"),
            note=row.get("note"),
        )
        pack_array = row.get("pack_array")
        if not is_missing(pack_array):  # layout="packs": where the record's bytes are (a row of a pack array)
            info.update(pack_array=str(pack_array), pack_row=int(row.get("pack_row")))
        if info["truncated"]:
            info.update(captured_rows=attrs.get("capturedRows"), missing_rows=attrs.get("missingRows"))
        snippet = record_snippet(root, row)
        if snippet is not None:  # the line that opens its stored values with plain xarray
            info["open_with"] = snippet
        stats = _stored_stats(row)
        if all(v is None for v in stats.values()):
            stats, source = _captured_stats(data), "computed"
        else:
            scope = row.get("stats_scope")
            source = "stored, prefix only" if scope == "prefix" else "stored"
    else:
        snippets = [record_snippet(root, r) for _, r in selected.records.iterrows()]
        info.update(
            open_with=[s for s in snippets if s is not None],
            paths=[str(p) for p in selected.records["path"]],
            records=attrs.get("records"),
            captured_rows=attrs.get("capturedRows"),
            missing_rows=attrs.get("missingRows"),
            truncated_records=attrs.get("truncatedRecords"),
        )
        stats, source = _captured_stats(data), "computed"
    if selected.notes:
        info["notes"] = list(selected.notes)
    info["stats_source"] = source
    info["stats"] = stats
    return info


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Print the tensor's description, statistics and first values."""
    import numpy as np

    if args.head < 0:
        raise CliError(f"--head must not be negative, got {args.head}")
    dump = open_dump_arg(args.path, checked_storage_options(args, args.path))
    selected = select_tensor(dump, args.selector, args)
    info = describe(selected, str(dump.root))
    head = _as_float(flat_head(selected.data, args.head))
    info["head"] = head.tolist()
    if ctx.json:
        ctx.emit_json(info)
        return EXIT_OK
    console = ctx.console
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    table.add_row("tensor", Text(safe_text(str(info["name"]))))
    if "path" in info:
        table.add_row("record", Text(safe_text(str(info["path"]))))
        if "pack_array" in info:
            table.add_row(
                "stored", Text(safe_text(f"{info['pack_array']} row {info['pack_row']} (a task-record pack)"))
            )
    else:
        paths = info["paths"]
        table.add_row(
            "records",
            f"{len(paths)} stitched along axis 0"
            + (
                f" ({info['captured_rows']} rows captured, {info['missing_rows']} missing)"
                if info.get("captured_rows") is not None and info.get("missing_rows") is not None
                else ""
            ),
        )
    open_with = info.get("open_with")
    if isinstance(open_with, str):
        table.add_row("open with", Text(safe_text(open_with)))
    elif open_with:
        more = f"  (and {len(open_with) - 1} more records: megadump ls)" if len(open_with) > 1 else ""
        table.add_row("open with", Text(safe_text(open_with[0] + more)))
    table.add_row("dtype", info["dtype"])
    table.add_row("shape", f"{shape_text(info['shape'])}  dims ({', '.join(info['dims'])})")
    if info.get("truncated"):
        rows = (
            f", {info['captured_rows']} of {info['shape'][0]} rows whole"
            if info.get("captured_rows") is not None and info["shape"]
            else ""
        )
        table.add_row(
            "truncated",
            f"yes: stored {shape_text(info.get('stored_shape'))} elements{rows} (max_bytes_per_tensor); "
            "NaN past them, coordinate 'captured' False there",
        )
    elif info.get("truncated_records"):
        table.add_row(
            "truncated",
            f"{info['truncated_records']} of its records (max_bytes_per_tensor): rows not stored are NaN, "
            "coordinate 'captured' False there; stats over the captured rows",
        )
    if info.get("status") not in (None, "complete"):
        table.add_row("window", f"[red]{info['status']}[/red]")
    if info.get("note"):
        table.add_row("note", str(info["note"]))
    for note in info.get("notes", []):
        table.add_row("selection", note)
    stats = info["stats"]
    table.add_row(
        f"stats ({info['stats_source']})",
        "  ".join(f"{k.removesuffix('_count')}={cell(stats[k]) or '—'}" for k in _STATS),
    )
    console.print(table)
    if args.head:
        shown = np.array2string(
            head,
            precision=6,
            separator=", ",
            max_line_width=max(40, console.width - 2),
            threshold=max(1000, args.head + 1),
        )
        console.print(f"[bold]first {len(head)} values[/bold] (C order):", highlight=False)
        console.print(shown, highlight=False, markup=False)
    return EXIT_OK
