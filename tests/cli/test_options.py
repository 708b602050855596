"""One declaration of each shared CLI option (issue 25): ``add_tolerance_flags``, ``add_location_flags``,
and upload's ``--threads`` with ``--workers`` as a deprecated alias for one release."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from megadump_zarr.cli.main import build_parser, main

CLI = Path(__file__).resolve().parents[2] / "src" / "megadump_zarr" / "cli"


def _declarations(flag: str) -> list[str]:
    """Where ``add_argument(..., flag, ...)`` is written in the CLI's source (file:line)."""
    sites = []
    for path in sorted(CLI.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and getattr(node.func, "attr", None) == "add_argument"
                and any(isinstance(arg, ast.Constant) and arg.value == flag for arg in node.args)
            ):
                sites.append(f"{path.relative_to(CLI).as_posix()}:{node.lineno}")
    return sites


@pytest.mark.parametrize("flag", ["--rtol", "--atol", "--rank", "--invocation", "--threads", "--workers"])
def test_each_shared_flag_is_declared_once(flag: str) -> None:
    sites = _declarations(flag)
    home = "commands/upload.py:" if flag == "--threads" else "common.py:"
    if flag == "--workers":  # dask workers (cluster.py) and upload's deprecated alias of --threads
        assert [site.split(":")[0] for site in sites] == ["cluster.py", "commands/upload.py"], sites
    else:
        assert len(sites) == 1 and sites[0].startswith(home), sites


def test_window_is_declared_only_by_add_location_flags() -> None:
    assert _declarations("--window") == []  # spelled once, as add_location_flags' default window_flags
    assert '("--window",)' in (CLI / "common.py").read_text()


def _parse(*argv: str):
    return build_parser().parse_args(list(argv))


def test_the_commands_share_the_declarations() -> None:
    compare = _parse(
        "compare",
        "a",
        "b",
        "--rtol",
        "0.5",
        "--atol",
        "1e-3",
        "--rank",
        "1",
        "--invocation",
        "invocation_000002_forward",
    )
    assert (compare.rtol, compare.atol, compare.rank, compare.invocation) == (0.5, 1e-3, 1, "invocation_000002_forward")
    report = _parse("report", "a", "-o", "r.html", "--rtol", "2", "--window", "3", "--invocation", "7")
    assert (report.rtol, report.atol, report.window, report.invocation) == (2.0, None, 3, 7)
    replay = _parse("replay", "d", "--stage", "s", "--task", "1", "--atol", "0", "--window", "4", "--invocation", "2")
    assert (replay.atol, replay.rtol, replay.window, replay.invocation) == (0.0, None, 4, 2)
    hdf5 = _parse("export-hdf5", "w", "o.h5", "--window", "5")
    assert hdf5.window_index == 5 and _parse("export-hdf5", "w", "o.h5", "--window-index", "6").window_index == 6


@pytest.mark.parametrize(
    "argv",
    [["compare", "a", "b"], ["report", "a", "b", "-o", "r.html"], ["replay", "d", "--stage", "s", "--task", "1"]],
)
@pytest.mark.parametrize(
    ("flag", "value"), [("--rtol", "-1e-3"), ("--atol", "nan"), ("--rtol", "inf"), ("--atol", "x")]
)
def test_a_bad_tolerance_is_one_error_line(capsys, argv, flag, value) -> None:
    assert main([*argv, flag, value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and flag[2:] in err[0] and "Traceback" not in err[0], err


def test_replay_invocation_takes_an_id_only(capsys) -> None:
    assert main(["replay", "d", "--stage", "s", "--task", "1", "--invocation", "invocation_000002_forward"]) == 2
    assert "--invocation" in capsys.readouterr().err


def test_upload_threads(capsys) -> None:
    args = _parse("upload", "local", "s3://bucket/run", "--threads", "3")
    assert args.threads == 3 and _parse("upload", "local", "s3://bucket/run").threads == 16
    assert capsys.readouterr().err == ""


def test_upload_workers_is_a_deprecated_alias(capsys) -> None:
    args = _parse("upload", "local", "s3://bucket/run", "--workers", "5")
    assert args.threads == 5 and not hasattr(args, "workers")
    assert capsys.readouterr().err == (
        "warning: megadump upload --workers is deprecated and goes in the next "
        "release; use --threads (upload threads)\n"
    )


@pytest.mark.parametrize("flag", ["--threads", "--workers"])
def test_upload_threads_must_be_positive(capsys, flag) -> None:
    assert main(["upload", "local", "s3://bucket/run", flag, "0"]) == 2
    assert "expected a positive integer, got 0" in capsys.readouterr().err


def test_upload_api_workers_is_deprecated(tmp_path) -> None:
    from megadump_zarr.transfer import upload

    with pytest.warns(DeprecationWarning, match=r"upload\(workers=\.\.\.\) is deprecated .* use threads="):
        with pytest.raises(ValueError, match="workers must be a positive integer, got 0"):
            upload(tmp_path, "s3://bucket/run", workers=0)
    with pytest.raises(ValueError, match="threads must be a positive integer, got -1"):
        upload(tmp_path, "s3://bucket/run", threads=-1)
