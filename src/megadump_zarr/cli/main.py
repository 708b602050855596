"""The ``megadump`` command line.

Exit status (one rule for every command, see ``EXIT_RULE``): 0 ok; 1 a check failed (``compare`` found a fail,
``verify`` problems, ``replay`` a wrong task...); 2 bad input (usage, missing path, unknown stage/record/selector,
unreadable dump, an object-store error), reported as one ``error: ...``
line on stderr, never a traceback (set ``MEGADUMP_DEBUG=1`` to see one). Subcommands live in
``megadump_zarr.cli.commands`` (one module each, see its docstring).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from typing import Any, NoReturn

from rich.console import Console

from megadump_zarr.cli.common import EXIT_USAGE, CliError, Context, add_global_flags

__all__ = ["build_parser", "main", "run"]

EXIT_RULE = (
    "Exit status, for every command: 0 ok; 1 a check failed (compare fail, verify problems, replay "
    "mismatch, report failures, upload not verified, a missing or corrupt chunk met while reading); 2 bad "
    "input (usage, missing path, unknown "
    "stage/record/selector, a filter that matches nothing, unreadable dump, object-store error)."
)
"""The exit-code rule, printed by ``megadump --help``."""
_INPUT_ERRORS = (CliError, ValueError, OSError)
_PIPE_WIDTH = 160
_INT64_MAX = (1 << 63) - 1
_STORAGE_STACK = (
    "s3fs",
    "aiobotocore",
    "botocore",
    "boto3",
    "fsspec",
    "gcsfs",
    "adlfs",
    "obstore",
    "aiohttp",
    "urllib3",
    "requests",
    "moto",
)
"""Packages whose failures (a bad ``-S`` option, an unreachable endpoint) are input errors, not bugs."""


_CHOICE = re.compile(r"^argument (?P<arg>[^:]+): invalid choice: '(?P<value>[^']*)' \(choose from (?P<choices>.*)\)$")


def _closest(word: str, candidates: list[str]) -> str | None:
    """The candidate nearest ``word`` (difflib), or None when none is close."""
    found = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return found[0] if found else None


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line ``error: ...`` (a "did you mean" or a pointer to ``--help``) instead of the
    usage block."""

    def error(self, message: str) -> NoReturn:
        if not message.startswith("unrecognized argument"):
            message = _choice_message(message) or f"{message} (see '{self.prog} --help')"
        sys.stderr.write(f"error: {message}\n")
        raise SystemExit(EXIT_USAGE)

    def parse_args(self, args: Any = None, namespace: Any = None) -> argparse.Namespace:  # type: ignore[override]
        """``parse_known_args``, then one line for the first unrecognized option, with the nearest known one."""
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            self.error(self._unrecognized(parsed, extras))
        return parsed

    def _unrecognized(self, parsed: argparse.Namespace, extras: list[str]) -> str:
        """``unrecognized argument --rtoll (did you mean --rtol?)``: options of the chosen subcommand and the top."""
        parser: argparse.ArgumentParser = self
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction):
                parser = action.choices.get(getattr(parsed, action.dest, None) or "", self)
        options = sorted({o for p in (self, parser) for a in p._actions for o in a.option_strings})
        flags = [e for e in extras if e.startswith("-") and e != "-"]
        if not flags:
            return (
                f"unrecognized argument{'s' if len(extras) > 1 else ''} {' '.join(extras)} (see '{parser.prog} --help')"
            )
        flag = flags[0].split("=", 1)[0]
        near = _closest(flag, options)
        if near:
            return f"unrecognized argument {flag} (did you mean {near}?)"
        return f"unrecognized argument {flag} (see '{parser.prog} --help')"


def _choice_message(message: str) -> str | None:
    """``invalid choice: 'comapre'`` with the nearest choice (``did you mean compare?``), or None."""
    match = _CHOICE.match(message)
    if not match:
        return None
    choices = re.findall(r"'([^']*)'", match["choices"])
    near = _closest(match["value"], choices)
    what = "unknown command" if match["arg"] == "COMMAND" else f"argument {match['arg']}: invalid choice"
    hint = f"did you mean {near}?" if near else f"choose from {', '.join(choices)}"
    return f"{what} {match['value']!r} ({hint})"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    from megadump_zarr.cli.commands import command_modules

    parser = _Parser(
        prog="megadump",
        description="Dump, inspect, compare and plot MegaKernel tensor dumps stored in Zarr.",
        epilog=f"{EXIT_RULE} Run 'megadump COMMAND --help' for a command's options.",
    )
    parser.add_argument(
        "--version", action="version", version=f"megadump {_version()}", help="print the version and exit"
    )
    add_global_flags(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    for module in command_modules():
        module.register(sub)
    return parser


def _version() -> str:
    """The package version (``megadump_zarr.__version__``)."""
    from megadump_zarr._version import __version__

    return __version__


def _width() -> int | None:
    """Rich's own choice on a terminal or with ``COLUMNS`` set; else wide lines (tables piped to a file)."""
    if "COLUMNS" in os.environ or sys.stdout.isatty():
        return None
    return _PIPE_WIDTH


def _message(error: BaseException) -> str:
    """The error's text on one line (an object store's XML error body condensed, see ``cli.service``)."""
    from megadump_zarr.cli.service import condense

    from megadump_zarr.cli.render import safe_text

    return safe_text(condense(str(error) or type(error).__name__))


def _out_of_range(args: argparse.Namespace) -> str | None:
    """An integer option beyond int64 (``--head 18446744073709551616``), which no command can use."""
    for name, value in vars(args).items():
        if isinstance(value, int) and not isinstance(value, bool) and not -_INT64_MAX - 1 <= value <= _INT64_MAX:
            return f"--{name.replace('_', '-')} {value} is out of range (at most {_INT64_MAX})"
    return None


def _origin(error: BaseException) -> str:
    """The top-level package of the innermost frame that raised ``error`` (or of its type)."""
    module = type(error).__module__.split(".")[0]
    if module in _STORAGE_STACK:
        return module
    tb = error.__traceback__
    frame_module = ""
    while tb is not None:
        frame_module = str(tb.tb_frame.f_globals.get("__name__", "")).split(".")[0]
        tb = tb.tb_next
    return frame_module or module


def _scrub(text: str, args: argparse.Namespace) -> str:
    pairs = getattr(args, "storage_option", None) or []
    if not pairs:
        return text
    from megadump_zarr.store.redact import Scrubber

    return Scrubber(dict(pairs))(text)


def _unexpected(error: Exception, args: argparse.Namespace) -> str:
    """One line for an exception no check anticipated: a storage failure, a missing package, or a bug."""
    kind = type(error).__name__
    text = _message(error)
    if isinstance(error, ImportError):
        return f"{text} (a package this needs is not installed)"
    if isinstance(error, RecursionError):
        return "an input document is nested too deeply to be read"
    if _origin(error) in _STORAGE_STACK:
        return _scrub(f"object store: {kind}: {text} (check the URL and the -S storage options)", args)
    return _scrub(f"internal error: {kind}: {text} (set MEGADUMP_DEBUG=1 for a traceback; please report it)", args)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``megadump``.

    Args:
        argv: Arguments (default: ``sys.argv[1:]``).

    Returns:
        The exit status.
    """
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # --help (0) or a usage error (2, already reported)
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    bad = _out_of_range(args)
    if bad:
        sys.stderr.write(f"error: {bad}\n")
        return EXIT_USAGE
    ctx = Context(console=Console(width=_width()), err=Console(stderr=True), json=args.json, quiet=args.quiet)
    try:
        from megadump_zarr.cli.cluster import cluster_from_args  # --scheduler / --workers, when the command has them

        with cluster_from_args(args):
            return int(args.handler(args, ctx))
    except _INPUT_ERRORS as error:
        if os.environ.get("MEGADUMP_DEBUG"):
            raise
        code = error.code if isinstance(error, CliError) else getattr(error, "exit_code", EXIT_USAGE)
        code = code if isinstance(code, int) else EXIT_USAGE  # DumpIntegrityError: 1 (a failed check)
        cause = error.__context__
        while cause is not None and code == EXIT_USAGE:  # a DumpIntegrityError re-raised as a CliError still exits 1
            code = getattr(cause, "exit_code", code) if isinstance(getattr(cause, "exit_code", None), int) else code
            cause = cause.__context__
        sys.stdout.flush()
        sys.stderr.write(f"error: {_message(error)}\n")
        return code
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        return 130
    except Exception as error:  # never a traceback: a storage failure, a missing package, or a bug, in one line
        if os.environ.get("MEGADUMP_DEBUG"):
            raise
        sys.stdout.flush()
        sys.stderr.write(f"error: {_unexpected(error, args)}\n")
        return EXIT_USAGE


def run() -> None:
    """Console-script wrapper: exit with ``main``'s status."""
    sys.exit(main())


if __name__ == "__main__":
    run()
