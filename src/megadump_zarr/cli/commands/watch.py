"""``megadump watch ROOT``: follow a dump while it is written (committed windows only, every rank)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from megadump_zarr.cli.common import (
    EXIT_CHECK_FAILED,
    EXIT_OK,
    CliError,
    Context,
    add_output_flags,
    add_storage_options,
    checked_storage_options,
    read_error,
)

__all__ = ["register"]


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``watch``."""
    parser = subparsers.add_parser(
        "watch",
        help="follow a dump while it is written: newest statistics, anomalies as their windows commit",
        description="Follow a dump (local or URL) while it is written, across ranks, reading only committed "
        "windows. A live view shows the newest step per stage × owner (or core): L2 norm, NaN/Inf counts and "
        "a short trend; each anomaly (a flight recorder's trigger, NaN/Inf in the stored statistics, a "
        "replica that differs across ranks) is named as soon as its window commits. --once reads what is "
        "there and exits; --json writes one event per line. Exit status 1 when an anomaly was found.",
    )
    parser.add_argument("path", metavar="ROOT", help="dump root: directory or URL")
    parser.add_argument("--interval", type=_positive, default=1.0, metavar="SECONDS", help="seconds between polls")
    parser.add_argument("--once", action="store_true", help="read the committed windows now and exit")
    parser.add_argument(
        "--timeout", type=_positive, default=None, metavar="SECONDS", help="stop watching after SECONDS"
    )
    parser.add_argument(
        "--anomalies", type=_count, default=None, metavar="N", help="stop after N anomalies have been named"
    )
    parser.add_argument(
        "--replicas",
        action="append",
        default=[],
        metavar="NAME_PATTERN",
        help="records that should be identical on every rank (shell pattern, repeatable): the first rank and "
        "step that differ are named",
    )
    parser.add_argument("--tensorboard", metavar="OUT", default=None, help="also write the statistics as "
                        "TensorBoard scalars under OUT (one run per rank)")  # fmt: skip
    add_storage_options(parser)
    add_output_flags(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Watch; exit 1 when an anomaly was named."""
    from megadump_zarr.analyse.watch import watch

    options = checked_storage_options(args, args.path)
    scalars = _tensorboard(args.tensorboard)
    events = watch(
        args.path,
        storage_options=options,
        interval=args.interval,
        once=args.once,
        timeout=args.timeout,
        replicas=args.replicas or None,
        on_records=None if scalars is None else scalars.add_records,
    )
    anomalies = 0
    try:
        anomalies = _follow(events, args, ctx)
    except KeyboardInterrupt:
        pass
    except (ValueError, OSError) as error:
        raise read_error(args.path, options, error) from None
    finally:
        if scalars is not None:
            scalars.close()
    return EXIT_CHECK_FAILED if anomalies else EXIT_OK


def _tensorboard(out: str | None) -> Any:
    if out is None:
        return None
    from megadump_zarr.interop.tensorboard import TensorBoardScalars

    try:
        return TensorBoardScalars(out)
    except ValueError as error:
        raise CliError(str(error)) from None


class _Counter:
    def __init__(self) -> None:
        self.anomalies = 0


def _follow(events: Any, args: argparse.Namespace, ctx: Context) -> int:
    """Show the events (JSON lines, a live view, or plain lines); return how many anomalies were named."""
    counter = _Counter()
    limit = args.anomalies
    live = not ctx.json and not ctx.quiet and not args.once and ctx.console.is_terminal
    if live:
        return _live(events, args, ctx, limit)
    for event in events:
        kind = type(event).__name__
        if kind == "AnomalyEvent":
            counter.anomalies += 1
        if ctx.json:
            sys.stdout.write(json.dumps(event.to_dict(), allow_nan=False, default=str) + "\n")
            sys.stdout.flush()
        elif kind == "AnomalyEvent":
            ctx.console.print(f"anomaly {event.describe()}", markup=False, highlight=False, style="bold red")
        elif kind == "WindowEvent" and not ctx.quiet:
            what = "" if event.trigger is None else f" ({event.part} of a {event.trigger} trigger)"
            steps = f"steps {event.steps[0]}..{event.steps[-1]}" if event.steps else "no steps"
            ctx.console.print(f"rank {event.rank} window {event.window} {event.status}: {steps}{what}", markup=False)
        if limit is not None and counter.anomalies >= limit:
            break
    return counter.anomalies


def _live(events: Any, args: argparse.Namespace, ctx: Context, limit: int | None) -> int:
    from rich.live import Live

    from megadump_zarr.cli.watch_view import WatchView

    view = WatchView(args.path)
    with Live(view.render(), console=ctx.console, refresh_per_second=4) as live:
        for event in events:
            view.add(event)
            live.update(view.render())
            if limit is not None and len(view.anomalies) >= limit:
                break
    return len(view.anomalies)
