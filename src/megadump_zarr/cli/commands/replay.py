"""``megadump replay``: run one dumped L1 task again on its own inputs and say whether it is the culprit."""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any

from megadump_zarr.cli.common import (
    EXIT_CHECK_FAILED,
    EXIT_OK,
    CliError,
    Context,
    add_location_flags,
    add_output_flags,
    add_storage_options,
    add_tolerance_flags,
    checked_storage_options,
    open_dump_arg,
)

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``replay``."""
    parser = subparsers.add_parser(
        "replay",
        help="replay one L1 task on its dumped inputs: is it wrong on its own inputs?",
        description="Rebuild one task's parameters from its dumped input views (zeros elsewhere), run the "
        "reference operator's tile function in the dump's dtype and in float64, and compare each "
        "dumped output with both (dtype default tolerances, see `megadump compare --help`). An "
        "output passes when it matches either. Verdict: 'wrong on its own inputs' (exit 1: the task "
        "is the culprit) or 'correct on its inputs' (exit 0: look upstream). Dumps of the demo model "
        "need no reference; for other kernels pass --reference module:attr (a tile function "
        "fn(tile), an OperatorNode, or a MegaKernel holding the stage; MODULE is imported from the "
        "installed packages, PYTHONPATH or the current directory). A --stage, --task or --owner that "
        "names no task of the dump is bad input (exit 2): the message lists the ones that exist.",
    )
    parser.add_argument("path", metavar="DUMP", help="dump root: directory or URL")
    parser.add_argument("--stage", required=True, metavar="S", help="the task's stage")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--task", type=int, metavar="N", help="the task's global id")
    which.add_argument("--owner", type=int, metavar="K", help="the owner (e.g. expert) of an owner-split task")
    add_location_flags(
        parser,
        rank="rank (default: the lowest holding the task)",
        window="window index (default: the first holding the task)",
        invocation="invocation id (default: the first holding the task)",
        invocation_names=False,
    )
    parser.add_argument(
        "--reference", metavar="MODULE:ATTR", help="the golden to run instead of the dump's operator source"
    )
    add_tolerance_flags(parser, default="the dtype's")
    add_storage_options(parser)
    add_output_flags(parser)
    parser.set_defaults(handler=run)


def _number(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.4g}"


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Replay and report; exit 1 when the task is wrong on its own inputs."""
    from megadump_zarr.replay import replay

    dump = open_dump_arg(args.path, checked_storage_options(args, args.path))
    if (
        args.reference and os.getcwd() not in sys.path
    ):  # --reference mygolden:fn finds ./mygolden.py, as `python -m` would
        sys.path.append(os.getcwd())  # appended: a file here never shadows an installed module
    try:
        result = replay(
            dump,
            args.stage,
            task_id=args.task,
            owner=args.owner,
            invocation=args.invocation,
            reference=args.reference,
            rank=args.rank,
            window=args.window,
            rtol=args.rtol,
            atol=args.atol,
        )
    except (ValueError, TypeError) as error:
        raise CliError(str(error).splitlines()[0]) from None
    code = EXIT_CHECK_FAILED if result.culprit else EXIT_OK
    if ctx.json:
        ctx.emit_json(result.to_dict())
        return code
    owner = "" if result.owner_id is None else f" (owner {result.owner_id})"
    ctx.console.print(
        f"replayed {result.kernel} stage {result.stage} task {result.task_id}{owner}, rank {result.rank} "
        f"window {result.window} invocation {result.invocation}, reference {result.reference}",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    if not ctx.quiet:
        for row in result.outputs.itertuples(index=False):
            core = "" if row.core_id is None else f" core {row.core_id}"
            ctx.console.print(
                f"  {row.verdict:<4} {row.name}{core} [{row.dtype}]  vs {row.dtype}: max_abs "
                f"{_number(row.max_abs)} max_rel {_number(row.max_rel)} cosine {_number(row.cosine)}; "
                f"vs float64: {row.f64_verdict} max_abs {_number(row.f64_max_abs)}",
                highlight=False,
                markup=False,
                soft_wrap=True,
            )
    advice = "the task is the culprit" if result.culprit else "look upstream"
    ctx.console.print(
        f"task {result.task_id} is {result.verdict}: {advice}", highlight=False, markup=False, soft_wrap=True
    )
    return code
