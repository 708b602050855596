"""``megadump info``: the ranks, windows and invocations of a dump, with their sizes."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import Any

from rich.text import Text
from rich.tree import Tree

from megadump_zarr.layout.sizes import COMPRESSION, compression, compression_text

from megadump_zarr.cli.common import (
    EXIT_OK,
    Context,
    add_output_flags,
    add_storage_options,
    checked_storage_options,
    child_roots,
    human_bytes,
    open_dump_arg,
    read_error,
)

__all__ = ["register", "summarise"]

_INVOCATIONS_SHOWN = 32
_STATUS_STYLE = {"complete": "green", "aborted": "bold red", "writing": "bold yellow"}
_STATUS_NOTE = {"aborted": "ABORTED (committed after a failure)", "writing": "WRITING (torn, or still being written)"}


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``info``."""
    parser = subparsers.add_parser(
        "info",
        help="tree of ranks, windows and invocations with sizes",
        description="Show a dump's ranks and windows (status, level, invocations, created/committed) with their "
        "sizes: logical bytes (sum of the records' bytes), stored bytes (sum of stored_bytes: "
        f"truncated records store a prefix), bytes on disk (local roots) and the {COMPRESSION} (local "
        "roots; — on object stores, whose bytes on disk are not measured). Aborted and writing (torn) windows are "
        "marked. PATH may also be a directory holding several dump roots (e.g. a demo run's l0/ and "
        "l1/). JSON: {root, windows: [...]} or, for such a directory, {roots: [...]}.",
    )
    parser.add_argument("path", metavar="PATH", help="dump root: directory or URL (s3://bucket/prefix)")
    add_storage_options(parser)
    add_output_flags(parser)
    parser.set_defaults(handler=run)


def _disk_bytes(dump: Any, window_path: str) -> int | None:
    """Bytes on disk below a window of a local dump (None for URL roots)."""
    from zarr.storage import LocalStore

    store = dump.location.store  # the stored store (dump.store is wrapped by the integrity checks)
    if not isinstance(store, LocalStore):
        return None
    root = store.root
    total = 0
    for dirpath, _, files in os.walk(Path(root) / window_path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                pass
    return total


def _window_attrs(dump: Any, window_path: str) -> dict[str, Any]:
    from megadump_zarr.read.location import get_json

    try:
        doc = get_json(dump.store, f"{window_path}/zarr.json") or {}
    except ValueError:
        return {}
    return doc.get("attributes") or {}


def _int(value: Any) -> int:
    import pandas as pd

    return 0 if value is None or value is pd.NA else int(value)


def summarise(dump: Any) -> dict[str, Any]:
    """The JSON-ready summary of one dump root."""
    import pandas as pd

    windows = dump.windows()
    records = dump.records(include_incomplete=True)
    out = []
    for w in windows.itertuples():
        mine = records[(records["rank"] == w.rank) & (records["window"] == w.window)] if len(records) else records
        raw = int(pd.to_numeric(mine["bytes"], errors="coerce").fillna(0).sum()) if len(mine) else 0
        stored = int(pd.to_numeric(mine["stored_bytes"], errors="coerce").fillna(0).sum()) if len(mine) else 0
        disk = _disk_bytes(dump, w.path)
        attrs = _window_attrs(dump, w.path)
        invocations = []
        if len(mine):
            for name, group in mine.groupby("invocation_name", sort=True):
                first = group.iloc[0]
                invocations.append(
                    {
                        "name": name,
                        "invocation": None if pd.isna(first["invocation"]) else int(first["invocation"]),
                        "kernel": _present(first["kernel"]),
                        "direction": _present(first["direction"]),
                        "step": None if pd.isna(first["step"]) else int(first["step"]),
                        "records": len(group),
                        "tasks": int(group["group"].nunique()) if group["io"].notna().any() else 0,
                        "statistics_only": int((~group["payload"].astype(bool)).sum()) if "payload" in group else 0,
                        "raw_bytes": int(pd.to_numeric(group["bytes"], errors="coerce").fillna(0).sum()),
                        "stored_bytes": int(pd.to_numeric(group["stored_bytes"], errors="coerce").fillna(0).sum()),
                    }
                )
        out.append(
            {
                "rank": int(w.rank),
                "window": int(w.window),
                "path": w.path,
                "status": w.status,
                "level": w.level,
                "invocations": int(w.invocations),
                "created_at": _present(w.created_at),
                "committed_at": _present(w.committed_at),
                "salvaged": bool(attrs.get("salvaged", False)),
                "records": len(mine),
                "raw_bytes": raw,
                "stored_bytes": stored,
                "disk_bytes": disk,
                "compression": compression(raw, disk),
                "invocation_list": invocations,
            }
        )
    return {"root": dump.root, "windows": out}


def _present(value: Any) -> Any:
    """``value``, or ``None`` where the dump does not say (a missing attribute read as ``None`` or NaN).

    Args:
        value: A window's or invocation's attribute as the catalogue holds it.
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value


def _tree(summary: dict[str, Any]) -> Tree:
    windows = summary["windows"]
    raw = sum(w["raw_bytes"] for w in windows)
    disk = [w["disk_bytes"] for w in windows]
    label = Text.assemble(
        ("dump ", "bold"),
        (str(summary["root"]), "bold cyan"),
        f"  {len(windows)} window{'s' if len(windows) != 1 else ''}, {human_bytes(raw)} logical",
    )
    if windows and all(d is not None for d in disk):
        label.append(f", {human_bytes(sum(disk))} on disk")
    tree = Tree(label)
    if not windows:
        tree.add(Text("no windows", style="dim"))
    for rank in sorted({w["rank"] for w in windows}):
        mine = [w for w in windows if w["rank"] == rank]
        branch = tree.add(Text(f"rank {rank}", style="bold"))
        for w in mine:
            status = w["status"]
            text = Text.assemble(
                (f"window {w['window']:04d}", "bold"),
                "  ",
                (_STATUS_NOTE.get(status, status), _STATUS_STYLE.get(status, "")),
            )
            if w["salvaged"]:
                text.append(" salvaged", style="magenta")
            text.append(
                f"  {w['level'] or '?'}  {w['invocations']} invocation{'s' if w['invocations'] != 1 else ''}, "
                f"{w['records']} records"
            )
            text.append(f"\n{human_bytes(w['raw_bytes'])} logical, {human_bytes(w['stored_bytes'])} stored")
            if w["disk_bytes"] is not None:
                text.append(f", {human_bytes(w['disk_bytes'])} on disk")
            text.append(f", {compression_text(w['compression'])}")
            created, committed = w["created_at"], w["committed_at"]
            if committed is None and status == "writing":
                committed = "never (torn, or still being written)"
            text.append(f"\ncreated {created or '—'}, committed {committed or '—'}", style="dim")
            node = branch.add(text)
            for inv in w["invocation_list"][:_INVOCATIONS_SHOWN]:
                tasks = f", {inv['tasks']} tasks" if inv["tasks"] else ""
                if inv.get("statistics_only"):  # statistics-first modes: records without a stored payload
                    tasks += f", {inv['statistics_only']} statistics only"
                node.add(
                    Text(
                        f"{inv['name']}  {inv['kernel'] or 'kernel ?'}  "
                        f"step {'?' if inv['step'] is None else inv['step']}  {inv['records']} records{tasks}, "
                        f"{human_bytes(inv['raw_bytes'])}"
                    )
                )
            hidden = len(w["invocation_list"]) - _INVOCATIONS_SHOWN
            if hidden > 0:
                node.add(Text(f"... and {hidden} more invocations (--json lists them all)", style="dim"))
    return tree


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Print the tree (or JSON) of one dump root, or of each dump root below ``PATH``."""
    options = checked_storage_options(args, args.path)
    from megadump_zarr.read import open_dump

    try:
        dumps = [open_dump(args.path, storage_options=options)]
    except (ValueError, OSError) as error:
        roots = child_roots(args.path)
        if not roots:
            raise read_error(args.path, options, error) from None
        dumps = [open_dump_arg(root, options) for root in roots]
    summaries = [summarise(d) for d in dumps]
    if ctx.json:
        ctx.emit_json(summaries[0] if len(summaries) == 1 and dumps[0].root == args.path else {"roots": summaries})
        return EXIT_OK
    for summary in summaries:
        ctx.console.print(_tree(summary))
    return EXIT_OK
