"""What every ``megadump`` subcommand shares: the run context, shared options, errors, opening dumps.

A subcommand handler is ``handler(args, ctx) -> int`` (exit status); it raises :class:`CliError` (or a
``ValueError``/``OSError`` whose message is fit for a user) for bad input, which ``main`` turns into a
one-line ``error: ...`` on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
import contextlib
from dataclasses import dataclass
import json
import os
import re
from pathlib import Path
import sys
from typing import Any

from rich.console import Console

from megadump_zarr.layout.sizes import human_bytes as human_bytes
from megadump_zarr.store.option_keys import check_storage_options
from megadump_zarr.tables import to_jsonable  # shared with the report

__all__ = [
    "EXIT_CHECK_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "CliError",
    "Context",
    "add_filters",
    "add_global_flags",
    "FILTER_KEYS",
    "add_location_flags",
    "add_output_flags",
    "add_tolerance_flags",
    "tolerance_type",
    "add_storage_options",
    "check_endpoint",
    "checked_storage_options",
    "child_roots",
    "filter_records",
    "human_bytes",
    "incomplete_hint",
    "matching_pair",
    "matching_records",
    "no_records_error",
    "open_dump_arg",
    "read_error",
    "progress_on_stderr",
    "record_select",
]

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2


class CliError(Exception):
    """Bad input: reported as ``error: {message}`` on stderr with exit status ``code`` (default 2)."""

    def __init__(self, message: str, code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Context:
    """One run of the command line.

    Args:
        console: Rich console on stdout (tables, trees, summaries).
        err: Rich console on stderr (errors, warnings, progress bars).
        json: ``--json``: write machine-readable JSON to stdout instead of rich output.
        quiet: ``--quiet``: no progress bars, no headings or hints; only the essential result.
    """

    console: Console
    err: Console
    json: bool = False
    quiet: bool = False

    @property
    def progress(self) -> bool:
        """Whether to draw progress bars (on stderr)."""
        return not self.quiet

    def emit_json(self, document: Any) -> None:
        """Write ``document`` as JSON to stdout (plain text, no rich markup)."""
        sys.stdout.write(json.dumps(to_jsonable(document), indent=2, allow_nan=False) + "\n")
        sys.stdout.flush()

    def note(self, message: str) -> None:
        """An informational line on stderr (suppressed by ``--quiet``)."""
        if not self.quiet:
            self.err.print(message, highlight=False)


# ---------------------------------------------------------------------------------------------- JSON values
# ---------------------------------------------------------------------------------------------- options
def add_global_flags(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """``--quiet``/``--json`` on the top-level parser (``top``) or a subcommand's.

    A subcommand's copies default to ``SUPPRESS`` so they never overwrite a value given before the
    subcommand (``megadump --json ls ...`` and ``megadump ls ... --json`` both work).
    """
    default = False if top else argparse.SUPPRESS
    parser.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=default,
        help="no progress bars, headings or hints; print only the essential result",
    )
    parser.add_argument(
        "--json", action="store_true", default=default, help="write machine-readable JSON to stdout instead of tables"
    )


def add_output_flags(parser: argparse.ArgumentParser) -> None:
    """``--quiet`` and ``--json`` on a subcommand (also accepted before the subcommand)."""
    add_global_flags(parser, top=False)


def _storage_option(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        value = json.loads(raw)
    except ValueError:
        value = raw
    return key.strip(), value


def add_storage_options(parser: argparse.ArgumentParser) -> None:
    """``--storage-option KEY=VALUE`` (repeatable): fsspec options for URL roots."""
    parser.add_argument(
        "-S",
        "--storage-option",
        dest="storage_option",
        metavar="KEY=VALUE",
        action="append",
        type=_storage_option,
        default=[],
        help="fsspec option for URL roots (repeatable), e.g. endpoint_url=http://127.0.0.1:9000; "
        "VALUE is parsed as JSON when it can be (true, 3, {...}), else kept as a string",
    )


_OPTION_OBJECTS = ("client_kwargs", "config_kwargs", "s3_additional_kwargs", "headers")
_OPTION_STRINGS = ("endpoint_url", "key", "secret", "token", "profile", "region_name", "session_token")
_OPTION_BOOLS = ("anon", "use_ssl", "requester_pays", "version_aware", "allow_http")


def _storage_options(args: argparse.Namespace) -> dict[str, Any] | None:
    """The ``--storage-option`` values as a dict (None when none were given).

    Raises:
        CliError: A well-known option of the wrong type (``client_kwargs=abc``: not a JSON object;
            ``endpoint_url=5``: not a string), named with an example.
    """
    pairs = getattr(args, "storage_option", None) or []
    if not pairs:
        return None
    options = dict(pairs)
    for key, value in options.items():
        if key in _OPTION_OBJECTS and not isinstance(value, dict):
            raise CliError(
                f'-S {key}: expected a JSON object such as {key}=\'{{"region_name": "us-east-1"}}\', '
                f"got {str(value)[:40]!r}"
            )
        if key in _OPTION_STRINGS and not isinstance(value, str):
            shown = "a secret value" if key in ("secret", "token", "session_token", "key") else repr(value)
            raise CliError(f"-S {key}: expected a string, got {shown}")
        if key in _OPTION_BOOLS and not isinstance(value, bool):
            raise CliError(f"-S {key}: expected true or false, got {str(value)[:40]!r}")
    for url in _urls(args):
        try:
            check_storage_options(url, options)
        except ValueError as error:
            raise CliError(str(error)) from None
    return options


def _urls(args: argparse.Namespace) -> list[str]:
    """The URL arguments of a command (dump roots, upload targets): what ``-S`` options are for."""
    values = [v for value in vars(args).values() for v in (value if isinstance(value, list) else [value])]
    return [str(v) for v in values if isinstance(v, (str, os.PathLike)) and "://" in str(v)]


def _invocation(text: str) -> int | str:
    return int(text) if text.isdigit() else text


def _core(text: str) -> int | str:
    text = text.strip()
    if text.isdigit():
        return int(text)
    if not text or not text[-1].isdigit() or not text.rstrip("0123456789").replace("_", "").isalpha():
        raise argparse.ArgumentTypeError(f"expected a core id (5) or core type and id (MIX5), got {text!r}")
    return text


def tolerance_type(name: str) -> Any:
    """An argparse type: a finite, non-negative float (NaN, inf, negative: one ``error:`` line, exit 2).

    Args:
        name: The option's name without dashes (``rtol``), for the message.
    """

    def parse(text: str) -> float:
        from megadump_zarr.analyse.verdict import check_tolerance

        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a finite number >= 0, got {text!r}") from None
        try:
            return check_tolerance(name, value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = name
    return parse


_NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$|^-(inf|infinity|nan)$", re.IGNORECASE)


def add_tolerance_flags(parser: argparse.ArgumentParser, *, default: str = "by dtype, see below") -> None:
    """``--rtol`` and ``--atol``, the one declaration every command that judges floats uses.

    argparse reads ``-1e-3`` and ``-inf`` as unknown options ("expected one argument"); the parser is told
    they are numbers, so they reach the tolerance check, which names the bad value.

    Args:
        parser: The subcommand's parser.
        default: What the default is, in the help (``by dtype, see below``).
    """
    parser._negative_number_matcher = _NEGATIVE_NUMBER
    parser.add_argument(
        "--rtol", type=tolerance_type("rtol"), help=f"relative tolerance of float comparisons (default: {default})"
    )
    parser.add_argument(
        "--atol", type=tolerance_type("atol"), help=f"absolute tolerance of float comparisons (default: {default})"
    )


def add_location_flags(
    parser: Any,
    *,
    rank: str = "rank",
    window: str = "window index",
    invocation: str | None = "invocation id (e.g. 2) or group name (invocation_000002_forward)",
    invocation_names: bool = True,
    window_flags: tuple[str, ...] = ("--window",),
    window_dest: str = "window",
) -> None:
    """``--rank``, ``--window`` and ``--invocation``: where in a dump, declared once for every command.

    Args:
        parser: The subcommand's parser or an argument group of it.
        rank: Help of ``--rank``.
        window: Help of ``--window``.
        invocation: Help of ``--invocation`` (``None``: the command takes no ``--invocation``).
        invocation_names: Whether ``--invocation`` also takes a group name (else an id only).
        window_flags: The spellings of the window flag (``("--window-index", "--window")`` in export-hdf5).
        window_dest: The attribute the window flag sets (``window``).
    """
    parser.add_argument("--rank", type=int, metavar="R", help=rank)
    parser.add_argument(*window_flags, type=int, metavar="W", dest=window_dest, help=window)
    if invocation is not None:
        parser.add_argument(
            "--invocation",
            type=_invocation if invocation_names else int,
            metavar="ID|NAME" if invocation_names else "ID",
            help=invocation,
        )


FILTER_KEYS = (
    "rank",
    "window",
    "invocation",
    "kernel",
    "direction",
    "stage",
    "task",
    "owner",
    "core_type",
    "core",
    "io",
    "name",
)
"""The record filters the commands take (``--core-type`` is ``core_type``); see
:func:`megadump_zarr.read.select.filter_mask` for what each value means."""


def add_filters(parser: argparse.ArgumentParser, *, names: bool = True, incomplete: bool = True) -> None:
    """The record filters shared by ls, stats, compare, show and plot.

    Args:
        parser: The subcommand's parser.
        names: Add ``--name`` (repeatable patterns).
        incomplete: Add ``--include-incomplete``.
    """
    group = parser.add_argument_group(
        "record filters",
        "A filter that matches nothing is bad input (exit 2): the message names it and lists the values that exist.",
    )
    add_location_flags(group)
    group.add_argument("--kernel", help="kernel name, e.g. moe_experts")
    group.add_argument("--direction", choices=("forward", "backward"), help="invocation direction")
    group.add_argument("--stage", help="L1 stage name")
    group.add_argument(
        "--task", type=_invocation, metavar="ID|NAME", help="L1 task id or task group name (task_000003_worker_001)"
    )
    group.add_argument("--owner", type=int, metavar="ID", help="L1 owner id (e.g. the expert)")
    group.add_argument("--core", type=_core, metavar="ID|TYPEID", help="L1 core: id (5) or type and id (MIX5)")
    group.add_argument("--core-type", dest="core_type", metavar="TYPE", help="L1 core type: AIC, AIV or MIX")
    group.add_argument("--io", choices=("input", "output"), help="L1 port")
    if names:
        group.add_argument(
            "--name",
            action="append",
            metavar="PATTERN",
            help="tensor name or shell-style pattern (repeatable: any of them); a name equal to "
            "the pattern always matches, so names holding '/', '*' or '[' select themselves",
        )
    if incomplete:
        group.add_argument(
            "--include-incomplete", action="store_true", help="also list records of aborted and torn (writing) windows"
        )


def record_select(args: argparse.Namespace) -> dict[str, Any]:
    """The filters given on the command line, by name (only those set)."""
    return {k: getattr(args, k) for k in FILTER_KEYS if getattr(args, k, None) is not None}


def filter_records(frame: Any, args: argparse.Namespace) -> Any:
    """Rows of a ``records()`` frame matching the command-line filters."""
    from megadump_zarr.read.select import select_records

    return select_records(frame, record_select(args))


def no_records_error(
    frame: Any, args: argparse.Namespace, where: str, *, extra: dict[str, Any] | None = None, hint: str = ""
) -> CliError:
    """The input error (exit 2) for filters that keep nothing of ``frame``: which filter and which values exist.

    Args:
        frame: The unfiltered ``records()`` frame.
        args: The command line (its filters).
        where: The dump, for the message.
        extra: Further filters (e.g. the SELECTOR's tensor name).
        hint: Appended to the message (e.g. incomplete windows that were not searched).
    """
    from megadump_zarr.read.select import no_match_message

    select = {**record_select(args), **(extra or {})}
    message = no_match_message(frame, select) or "no records match"
    return CliError(f"{message} (in {where}){hint}", code=EXIT_USAGE)


def incomplete_hint(dump: Any, args: argparse.Namespace) -> str:
    """``; pass --include-incomplete to see ...`` when the dump has windows that were not searched."""
    if getattr(args, "include_incomplete", False):
        return ""
    windows = dump.windows()
    incomplete = windows[windows["status"] != "complete"]
    if not len(incomplete):
        return ""
    listed = ", ".join(f"{r.path} ({r.status})" for r in incomplete.itertuples())
    return f" (complete windows only); pass --include-incomplete to see {listed}"


def matching_records(dump: Any, args: argparse.Namespace, *, extra: dict[str, Any] | None = None) -> Any:
    """The records of ``dump`` that the command-line filters (and ``extra``) keep.

    Raises:
        CliError: Nothing matches (exit 2), naming the filter and the values that exist.
    """
    from megadump_zarr.read.select import select_records

    records = dump.records(include_incomplete=bool(getattr(args, "include_incomplete", False)))
    selected = select_records(records, {**record_select(args), **(extra or {})})
    if selected.empty:
        raise no_records_error(records, args, dump.root, extra=extra, hint=incomplete_hint(dump, args))
    return selected


def matching_pair(dump_a: Any, dump_b: Any, args: argparse.Namespace, where: str) -> tuple[Any, Any]:
    """The records of two dumps that the command-line filters keep (``compare``, ``plot --diff``).

    Raises:
        CliError: Nothing matches in either dump (exit 2), naming the filter and the values that exist in A.
    """
    include = bool(getattr(args, "include_incomplete", False))
    all_a = dump_a.records(include_incomplete=include)
    records_a = filter_records(all_a, args)
    records_b = filter_records(dump_b.records(include_incomplete=include), args)
    if records_a.empty and records_b.empty:
        raise no_records_error(all_a, args, where, hint=incomplete_hint(dump_a, args))
    return records_a, records_b


# ---------------------------------------------------------------------------------------------- dumps
def child_roots(path: str) -> list[str]:
    """Dump roots directly below a local directory (e.g. the ``l0``/``l1`` roots a demo run writes)."""
    if "://" in path or not os.path.isdir(path):
        return []
    found = []
    for entry in sorted(os.scandir(path), key=lambda e: e.name):
        marker = Path(entry.path) / "zarr.json"
        if entry.is_dir() and marker.is_file():
            try:
                attrs = json.loads(marker.read_text(encoding="utf-8")).get("attributes") or {}
            except (OSError, ValueError):
                continue
            if "megadump_zarr" in attrs:
                found.append(entry.path)
    return found


_PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
_CONNECT_SECONDS = 3.0


def check_endpoint(url: str, options: dict[str, Any] | None) -> None:
    """Fail at once, in one line, when an object store's explicit endpoint cannot be reached at all.

    Without this, an unreachable endpoint is found only after the client library's retries (10-20 s). Only an
    explicit endpoint (``-S endpoint_url=...``, ``AWS_ENDPOINT_URL(_S3)`` for ``s3://``, or an ``http(s)://`` URL)
    is probed, with one TCP connection; behind a proxy nothing is probed.

    Raises:
        CliError: The endpoint refuses or does not answer the connection (exit 2).
    """
    import socket
    from urllib.parse import urlsplit

    scheme = url.split("://", 1)[0].lower() if isinstance(url, str) and "://" in url else ""
    if not scheme or scheme == "file" or any(os.environ.get(name) for name in _PROXY_VARIABLES):
        return
    options = options or {}
    client = options.get("client_kwargs") if isinstance(options.get("client_kwargs"), dict) else {}
    endpoint = options.get("endpoint_url") or client.get("endpoint_url")
    if endpoint is None and scheme in ("s3", "s3a"):
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint is None and scheme in ("http", "https"):
        endpoint = url
    if not isinstance(endpoint, str) or "://" not in endpoint:
        return
    try:
        parts = urlsplit(endpoint)
        host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return  # a malformed endpoint: the storage layer says what is wrong with it
    if not host:
        return
    try:
        socket.create_connection((host, port), timeout=_CONNECT_SECONDS).close()
    except OSError as error:
        reason = error.strerror or str(error) or type(error).__name__
        raise CliError(
            f"cannot reach the object store endpoint {parts.scheme}://{host}:{port} for {url}: {reason} "
            "(nothing was read or written)"
        ) from None


def checked_storage_options(args: argparse.Namespace, *urls: str | None) -> dict[str, Any] | None:
    """The ``-S`` storage options of a command as a dict (None when none were given), each checked against the
    command's URLs, and each URL's explicit endpoint probed (:func:`check_endpoint`): every command that takes a
    dump root, window or destination reads its options here.

    Args:
        args: The parsed command line.
        urls: The dump roots, windows or destinations the options are for (``None``: an optional one not given).

    Raises:
        CliError: An option of the wrong type or unknown to the URL's file system, or an endpoint that cannot
            be reached (exit 2).
    """
    options = _storage_options(args)
    for url in dict.fromkeys(u for u in urls if u is not None):
        check_endpoint(url, options)
    return options


def open_dump_arg(path: str, options: dict[str, Any] | None = None) -> Any:
    """``open_dump(path)`` with a command-line error (and a hint when ``path`` holds dump roots).

    Args:
        path: The dump root given.
        options: The storage options from :func:`checked_storage_options` (``path``'s endpoint already probed).
    """
    from megadump_zarr.read import open_dump

    try:
        return open_dump(path, storage_options=options)
    except (ValueError, OSError) as error:
        raise read_error(path, options, error) from None


def read_error(path: str, options: dict[str, Any] | None, error: BaseException) -> CliError:
    """The one-line input error for a dump that cannot be opened: a missing bucket named, an object store's
    XML error body condensed, a hint when ``path`` holds dump roots.

    Args:
        path: The dump root given.
        options: The ``-S`` storage options.
        error: What opening it raised.
    """
    from megadump_zarr.cli.service import condense, missing_bucket

    bucket = missing_bucket(path, options) if isinstance(error, (FileNotFoundError, ValueError)) else None
    if bucket:
        return CliError(f"cannot read {path}: bucket {bucket!r} does not exist")
    message = condense(str(error))
    children = child_roots(path)
    if children:
        message += f"; it holds the dump roots {', '.join(children)}: pass one of them"
    return CliError(message)


# ---------------------------------------------------------------------------------------------- output
@contextlib.contextmanager
def progress_on_stderr(ctx: Context) -> Iterator[bool]:
    """Route progress bars that library code draws on rich's global console to stderr.

    ``megadump_zarr.analyse``/``interop`` build ``rich.progress.Progress()`` without a console, i.e. on
    rich's global console (stdout), which would mix with tables and JSON. For the duration of the block
    the global console is a stderr console. Yields whether progress bars are wanted.
    """
    import rich

    saved = getattr(rich, "_console", None)
    rich._console = ctx.err  # type: ignore[attr-defined]
    try:
        yield ctx.progress
    finally:
        rich._console = saved  # type: ignore[attr-defined]
