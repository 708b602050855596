"""``megadump decode-buffer``: salvage a raw L1 Device buffer saved from a failed or hung launch."""

from __future__ import annotations

import argparse
import json
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
)
from megadump_zarr.cli.render import Column, frame_table

__all__ = ["load_buffer", "register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``decode-buffer``."""
    parser = subparsers.add_parser(
        "decode-buffer",
        help="post-mortem: decode a saved L1 Device buffer into an aborted window",
        description="Decode a raw L1 Device buffer against the plan the dumper saved before the launch "
        "({root}/.plans_RUN/rank_R_window_WWWW_invocation_IIIIII_DIRECTION/, one group per launch, "
        "RUN the dumper's run id): CAPTURED records are written as a window with status 'aborted' "
        "below --out; PENDING records (the launch never reached them) are listed. PLAN is that plan "
        "directory (or its zarr.json, or a plan JSON file), or the dump root: then the saved plans "
        "that match --run/--rank/--window/--invocation and whose record table matches the buffer are "
        "candidates, and exactly one must remain (else the candidates are listed, exit 2). BUFFER is "
        "the buffer's raw bytes, or a .npy (uint8) or .pt (torch uint8 tensor, loaded with "
        "weights_only=True) file. Exit 0 when the window was written.",
    )
    parser.add_argument("buffer", metavar="BUFFER", help="the saved Device buffer (raw bytes, .npy or .pt)")
    parser.add_argument("plan", metavar="PLAN", help="the launch's saved plan, or the dump root to search")
    parser.add_argument("--out", required=True, metavar="URL", help="dump root to write the aborted window to")
    add_location_flags(
        parser,
        rank="with a dump root as PLAN: that rank's plans only",
        window="window index to write (default: the plan's); with a dump root as PLAN, also selects "
        "that window's plans",
        invocation="with a dump root as PLAN: that invocation's plan only (id or group name)",
    )
    parser.add_argument("--run", metavar="ID", help="with a dump root as PLAN: the run's plans only (an id prefix)")
    add_storage_options(parser)
    add_output_flags(parser)
    parser.set_defaults(handler=run)


def load_buffer(path: str) -> Any:
    """The buffer's bytes as a 1-D uint8 numpy array."""
    import numpy as np

    file = Path(path).expanduser()
    if not file.is_file():
        raise CliError(f"buffer file not found: {file}" if not file.exists() else f"buffer {file} is not a file")
    suffix = file.suffix.lower()
    if suffix == ".npy":
        try:
            array = np.load(file, allow_pickle=False)
        except (ValueError, OSError) as error:
            raise CliError(f"cannot read buffer {file} as .npy: {error}") from None
    elif suffix in (".pt", ".pth"):
        import torch

        try:
            tensor = torch.load(file, map_location="cpu", weights_only=True)
        except Exception as error:  # the restricted unpickler refuses anything but tensors
            raise CliError(
                f"cannot read buffer {file} as a torch tensor file (weights_only=True): "
                f"{str(error).splitlines()[0] if str(error) else type(error).__name__}"
            ) from None
        if not isinstance(tensor, torch.Tensor):
            raise CliError(f"buffer {file} holds a {type(tensor).__name__}, not a tensor")
        array = tensor.detach().cpu().contiguous().view(torch.uint8).reshape(-1).numpy()
    else:
        return np.frombuffer(file.read_bytes(), dtype=np.uint8).copy()
    if array.dtype != np.uint8:
        array = np.ascontiguousarray(array).view(np.uint8)
    return np.ascontiguousarray(array).reshape(-1)


PENDING_COLUMNS = (
    Column("record", justify="right"),
    Column("task", key="taskId", justify="right"),
    Column("stage"),
    Column("io"),
    Column("index", justify="right"),
    Column("name", style="bold"),
    Column("status", justify="right"),
)


def _is_plan_directory(path: Path) -> bool:
    from megadump_zarr.dump.saved_plans import PLAN_SCHEMA

    try:
        document = json.loads((path / "zarr.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    if not isinstance(document, dict) or not isinstance(document.get("attributes"), dict):
        return False
    attributes = document["attributes"]  # a plan (or a damaged one: load_plan names what is wrong), not a root
    return attributes.get("schema") == PLAN_SCHEMA or "records" in attributes


def _salvage(buffer: Any, plan: Any, window: int | None, what: str) -> tuple[Any, list[dict[str, Any]]]:
    """Salvage against one plan; a CliError naming ``what`` when the buffer does not decode against it."""
    from megadump_zarr.dump.saved_plans import salvage_window

    salvaged, pending = salvage_window(buffer, plan, window_index=window)
    errors = [p["error"] for p in pending if "error" in p]
    if errors:
        raise CliError(f"cannot decode the buffer against {what}: {errors[0]}")
    return salvaged, pending


def _salvage_from_root(args: argparse.Namespace, root: Path, buffer: Any) -> tuple[Any, list[dict[str, Any]], str]:
    """Find the one saved plan below ``root`` that the selectors and the buffer's record table match."""
    from megadump_zarr.dump.saved_plans import find_plans

    invocation: str | int | None = args.invocation
    if isinstance(invocation, str) and invocation.isdigit():
        invocation = int(invocation)
    every = find_plans(root)
    candidates = find_plans(root, run_id=args.run, rank=args.rank, window_index=args.window, invocation=invocation)
    if not candidates:
        listing = "; ".join(plan.describe() for plan in every) or "none"
        raise CliError(f"no saved L1 plan below {root} matches the selection; saved plans: {listing}")
    matches, refused = [], []
    for plan in candidates:
        try:
            matches.append((plan, *_salvage(buffer, plan.path, args.window, str(plan.path))))
        except (CliError, ValueError) as error:
            refused.append(f"{plan.describe()} ({error})")
    if not matches:
        raise CliError(
            f"the buffer {args.buffer} matches none of the {len(candidates)} saved plan(s) below {root}: "
            + "; ".join(refused)
        )
    if len(matches) > 1:
        raise CliError(
            f"the buffer {args.buffer} matches {len(matches)} saved plans below {root}; choose one with "
            "--run, --rank, --window or --invocation, or pass its directory as PLAN: "
            + "; ".join(plan.describe() for plan, _, _ in matches)
        )
    plan, window, pending = matches[0]
    return window, pending, str(plan.path)


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Salvage, write the aborted window, list what was pending."""
    import pandas as pd

    from megadump_zarr.layout.limits import check_index, check_inside_root
    from megadump_zarr.dump.saved_plans import load_plan
    from megadump_zarr.store.writer import WindowWriter

    if args.window is not None:
        try:
            check_index(args.window, "--window")
        except ValueError as error:
            raise CliError(str(error)) from None
    buffer = load_buffer(args.buffer)
    source = Path(args.plan).expanduser()
    if source.is_dir() and not _is_plan_directory(source):
        window, pending, plan_used = _salvage_from_root(args, source, buffer)
    else:
        window, pending = _salvage(buffer, load_plan(source), args.window, str(args.plan))
        plan_used = str(source)
    captured = sum(len(invocation.arrays) for invocation in window.invocations)
    if "://" not in str(args.out) or str(args.out).startswith("file://"):
        local = Path(str(args.out).removeprefix("file://")).expanduser()
        try:
            check_inside_root(local, window.path)
        except ValueError as error:
            raise CliError(str(error)) from None
    with WindowWriter(args.out, storage_options=checked_storage_options(args, args.out)) as writer:
        try:
            url = writer.write_window(window, status="aborted")
        except FileExistsError as error:
            raise CliError(f"{error}; choose another --window or --out") from None
        writer.index_root()  # plain xarray lists the root's complete windows again (store/root_index.py)
    result = {
        "window": str(url),
        "rank": window.rank,
        "window_index": window.window_index,
        "status": "aborted",
        "captured": captured,
        "pending": pending,
        "plan": plan_used,
    }
    if ctx.json:
        ctx.emit_json(result)
        return EXIT_OK
    if pending and not ctx.quiet:
        ctx.console.print(
            frame_table(
                pd.DataFrame(pending),
                PENDING_COLUMNS,
                width=ctx.console.width,
                title=f"{len(pending)} PENDING record{'s' if len(pending) != 1 else ''} (never captured)",
            )
        )
    ctx.console.print(
        f"wrote aborted window {url}: {captured} captured record{'s' if captured != 1 else ''}, {len(pending)} pending",
        highlight=False,
    )
    return EXIT_OK
