"""``megadump demo``: run the demo MoE block under L0 and L1 dumps."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
import shlex
import shutil
import sys

from megadump_zarr.cli.common import EXIT_OK, CliError, Context, add_output_flags, human_bytes
from megadump_zarr.layout.sizes import compression, compression_text

__all__ = ["launchers", "register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``demo``."""
    demo = subparsers.add_parser(
        "demo",
        help="run the demo MoE block and dump it (L0 and L1)",
        description="Run the embedded demo MoE block for a few training steps under an L0 "
        "dump (every tensor, every other step), then two steps under an L1 "
        "dump of the expert stages, and summarise what was written.",
    )
    demo.add_argument(
        "--out", default=None, help="output directory (default: ./megadump-demo, or -2, -3, ... if taken)"
    )
    demo.add_argument("--steps", type=int, default=4, help="steps of the L0 phase (default 4)")
    demo.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    demo.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda")
    add_output_flags(demo)
    demo.set_defaults(handler=run)


def check_device(text: str) -> None:
    """Refuse a ``--device`` the demo cannot run on, before anything is written.

    Raises:
        CliError: Not a torch device string, a device without data (``meta``), or one this machine lacks.
    """
    import torch

    try:
        device = torch.device(text)
    except (RuntimeError, ValueError, TypeError):
        raise CliError(
            f"--device {text!r} is not a torch device (e.g. cpu, cuda, cuda:1; npu needs torch_npu)"
        ) from None
    if device.type == "cpu":
        return
    if device.type == "meta":
        raise CliError("--device meta holds no data, so nothing could be dumped; use cpu or an accelerator")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise CliError(f"--device {text}: CUDA is not available here (torch.cuda.is_available() is False)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise CliError(f"--device {text}: this machine has {torch.cuda.device_count()} CUDA device(s)")
        return
    module = getattr(torch, device.type, None)
    available = getattr(module, "is_available", None)
    if not callable(available) or not available():
        raise CliError(f"--device {text}: no {device.type} device is available here")


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Run the demo and print its summary."""
    from megadump_zarr.demo.run import run_demo

    if args.steps < 1:
        raise CliError(f"--steps must be at least 1, got {args.steps}")
    check_device(args.device)
    try:
        summary = run_demo(args.out, steps=args.steps, dtype=args.dtype, device=args.device)
    except FileExistsError as error:
        raise CliError(str(error)) from None
    squeeze = compression(summary.raw_bytes, summary.stored_bytes)
    if ctx.json:
        ctx.emit_json(
            {
                "root": str(summary.root),
                "roots": {k: str(v) for k, v in summary.roots.items()},
                "windows": summary.windows,
                "invocations": summary.invocations,
                "tasks": summary.tasks,
                "tensors": summary.tensors,
                "raw_bytes": summary.raw_bytes,
                "stored_bytes": summary.stored_bytes,
                "compression": squeeze,
                "example_group": summary.example_group,
            }
        )
        return EXIT_OK
    console = ctx.console
    console.print(f"[bold]megadump demo[/bold] wrote {summary.root}", highlight=False)
    if ctx.quiet:
        return EXIT_OK
    for level, root in summary.roots.items():
        console.print(f"  {level}: {root}", highlight=False)
    console.print(
        f"  {summary.windows} windows, {summary.invocations} invocations, {summary.tasks} L1 tasks, "
        f"{summary.tensors} tensors; {human_bytes(summary.raw_bytes)} logical, {human_bytes(summary.stored_bytes)} on "
        f"disk ({compression_text(squeeze)})",
        highlight=False,
        soft_wrap=True,  # one line at any width
    )
    python, megadump = launchers()
    if summary.example_group:
        console.print("Open an L1 task group with xarray (no megadump_zarr import needed):")
        console.print(
            f"  {python} -c \"import xarray as xr; print(xr.open_zarr('{summary.example_group}'))\"",
            highlight=False,
            soft_wrap=True,
        )
    console.print(f"Explore it: {megadump} info {shlex.quote(str(summary.root))}", highlight=False, soft_wrap=True)
    return EXIT_OK


def _shown(path: str) -> str:
    """``path`` relative to the working directory when under it (``.venv/bin/python``), else absolute."""
    absolute = os.path.abspath(path)
    relative = os.path.relpath(absolute)
    return shlex.quote(absolute if relative.startswith("..") else relative)


def _on_path(name: str, path: str) -> bool:
    """Whether typing ``name`` in the shell runs ``path`` (same file, symlinks not followed for the interpreter)."""
    found = shutil.which(name)
    return found is not None and os.path.abspath(found) == os.path.abspath(path)


def launchers() -> tuple[str, str]:
    """How the user's shell runs this interpreter and this ``megadump``: the bare names when ``PATH``
    resolves them to the running ones (an activated virtual environment), else their paths
    (``.venv/bin/python``, ``.venv/bin/megadump``; ``python -m megadump_zarr.cli.main`` when the
    environment has no ``megadump`` script)."""
    executable = sys.executable
    python = "python" if _on_path("python", executable) else _shown(executable)
    script = Path(executable).parent / "megadump"
    if _on_path("megadump", str(script)):
        return python, "megadump"
    if script.is_file():
        return python, _shown(str(script))
    return python, f"{python} -m megadump_zarr.cli.main"
