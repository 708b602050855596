"""``megadump upload``: copy a local dump's committed windows to an object store, verified."""

from __future__ import annotations

import argparse
import sys

from megadump_zarr.cli.common import (
    EXIT_CHECK_FAILED,
    EXIT_OK,
    CliError,
    Context,
    add_output_flags,
    add_storage_options,
    checked_storage_options,
)

__all__ = ["register"]


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


class _DeprecatedWorkers(argparse.Action):
    """``--workers N``: the old name of ``--threads`` (``--workers`` means dask workers elsewhere); it still
    works for one release and says so on stderr."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        print(
            "warning: megadump upload --workers is deprecated and goes in the next release; use --threads "
            "(upload threads)",
            file=sys.stderr,
        )
        setattr(namespace, self.dest, values)


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``upload``."""
    parser = subparsers.add_parser(
        "upload",
        help="upload a local dump to S3 (or another object store), verified and resumable",
        description="Upload every committed window (status complete or aborted) of the dump at LOCAL to URL "
        "(megadump_zarr.transfer.upload): objects in parallel, each window's zarr.json last, every "
        "object checked (size and MD5/ETag) after upload. Objects already uploaded are skipped, so an "
        "interrupted upload resumes where it stopped. Windows still 'writing' are skipped with a note. "
        "Exit status 1 when some window could not be uploaded or verified.",
    )
    parser.add_argument("local", metavar="LOCAL", help="local dump root (directory holding zarr.json and rank_*/)")
    parser.add_argument("url", metavar="URL", help="destination dump root, e.g. s3://bucket/run1")
    parser.add_argument(
        "--threads",
        type=_positive,
        default=16,
        metavar="N",
        help="upload threads: objects uploaded concurrently (default 16)",
    )
    parser.add_argument(
        "--workers",
        type=_positive,
        dest="threads",
        metavar="N",
        action=_DeprecatedWorkers,
        help="deprecated alias of --threads (goes in the next release)",
    )
    parser.add_argument(
        "--delete-local", action="store_true", help="remove each local window directory once its upload is verified"
    )
    add_storage_options(parser)
    add_output_flags(parser)
    parser.set_defaults(handler=run)


def _refuse_bad_destination(url: str, failed: dict[str, str]) -> None:
    """Exit 2 in one line when every failure is the store refusing the destination itself (no such bucket,
    access denied, bad credentials): bad input, not a failed upload.

    Raises:
        CliError: Naming the bucket (and key) the store refused.
    """
    from megadump_zarr.cli.service import INPUT_CODES, condense, service_code

    codes = {service_code(str(reason)) for reason in failed.values()}
    if not failed or not codes <= INPUT_CODES:
        return
    first = condense(str(next(iter(failed.values()))))
    bucket = url.split("://", 1)[1].split("/", 1)[0]
    what = f"bucket {bucket!r} does not exist" if codes == {"NoSuchBucket"} else "the object store refused it"
    raise CliError(f"cannot upload to {url}: {what}, nothing was uploaded ({first})")


def run(args: argparse.Namespace, ctx: Context) -> int:
    """Upload and summarise."""
    from megadump_zarr.cli.service import condense
    from megadump_zarr.transfer import UploadError, upload

    if "://" not in args.url or args.url.startswith("file://"):
        raise CliError(f"URL must be an object-store URL such as s3://bucket/prefix, got {args.url!r}")
    options = checked_storage_options(args, args.url)
    failed = False
    try:
        report = upload(
            args.local,
            args.url,
            storage_options=options,
            threads=args.threads,
            delete_local=args.delete_local,
            progress=ctx.progress and not ctx.json,
        )
    except UploadError as error:
        report, failed = error.report, True
        _refuse_bad_destination(args.url, report.failed)
    if ctx.json:
        ctx.emit_json({**report.as_dict(), "ok": not failed})
    else:
        for key, reason in sorted(report.skipped.items()):
            ctx.note(f"skipped {key}: {reason}")
        for key, reason in sorted(report.failed.items()):
            ctx.err.print(f"error: {key}: {condense(str(reason))}", highlight=False, markup=False, soft_wrap=True)
        ctx.console.print(report.summary(), highlight=False, markup=False)
    return EXIT_CHECK_FAILED if failed else EXIT_OK
