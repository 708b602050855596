"""``megadump decode-buffer``: salvage a raw L1 Device buffer saved from a failed or hung launch."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from megadump_zarr.cli.common import (
    EXIT_OK, CliError, Context, add_output_flags, add_storage_options, storage_options,
)
from megadump_zarr.cli.render import Column, frame_table

__all__ = ["load_buffer", "register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``decode-buffer``."""
    parser = subparsers.add_parser(
        "decode-buffer", help="post-mortem: decode a saved L1 Device buffer into an aborted window",
        description="Decode a raw L1 Device buffer against the plan the dumper saved before the launch "
                    "({root}/.plans/rank_R/window_WWWW/invocation_IIIIII_DIRECTION.json): CAPTURED records are "
                    "written as a window with status 'aborted' below --out; PENDING records (the launch never "
                    "reached them) are listed. BUFFER is the buffer's raw bytes, or a .npy (uint8) or .pt "
                    "(torch uint8 tensor, loaded with weights_only=True) file. Exit 0 when the window was written.")
    parser.add_argument("buffer", metavar="BUFFER", help="the saved Device buffer (raw bytes, .npy or .pt)")
    parser.add_argument("plan", metavar="PLAN", help="the launch's plan JSON")
    parser.add_argument("--out", required=True, metavar="URL", help="dump root to write the aborted window to")
    parser.add_argument("--window", type=int, metavar="N", help="window index to write (default: the plan's)")
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
            raise CliError(f"cannot read buffer {file} as a torch tensor file (weights_only=True): "
                           f"{str(error).splitlines()[0] if str(error) else type(error).__name__}") from None
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


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Salvage, write the aborted window, list what was pending."""
    import pandas as pd

    from megadump_zarr.dump.plan_io import load_plan, salvage_window
    from megadump_zarr.store.writer import WindowWriter

    if args.window is not None and args.window < 0:
        raise CliError(f"--window must not be negative, got {args.window}")
    plan = load_plan(args.plan)
    buffer = load_buffer(args.buffer)
    window, pending = salvage_window(buffer, plan, window_index=args.window)
    errors = [p["error"] for p in pending if "error" in p]
    if errors:
        raise CliError(f"cannot decode {args.buffer} against {args.plan}: {errors[0]}")
    captured = sum(len(invocation.arrays) for invocation in window.invocations)
    with WindowWriter(args.out, storage_options=storage_options(args)) as writer:
        try:
            url = writer.write_window(window, status="aborted")
        except FileExistsError as error:
            raise CliError(f"{error}; choose another --window or --out") from None
    result = {"window": str(url), "rank": window.rank, "window_index": window.window_index, "status": "aborted",
              "captured": captured, "pending": pending}
    if ctx.json:
        ctx.emit_json(result)
        return EXIT_OK
    if pending and not ctx.quiet:
        ctx.console.print(frame_table(pd.DataFrame(pending), PENDING_COLUMNS, width=ctx.console.width,
                                      title=f"{len(pending)} PENDING record{'s' if len(pending) != 1 else ''} "
                                            "(never captured)"))
    ctx.console.print(f"wrote aborted window {url}: {captured} captured record{'s' if captured != 1 else ''}, "
                      f"{len(pending)} pending", highlight=False)
    return EXIT_OK
