"""``upload`` never follows a symbolic link out of the root: real links (file, directory, rank, window, root
document) planted in a real demo dump are refused by name before anything is sent to a real S3 server (moto)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import pytest

from megadump_zarr.cli.main import main
from megadump_zarr.transfer import upload
from tests.s3.conftest import all_objects

WINDOW = "rank_0/window_0000"


def _outside(tmp_path: Path) -> Path:
    secret = tmp_path / "outside"
    secret.mkdir(exist_ok=True)
    (secret / "id_rsa").write_bytes(b"PRIVATE KEY never to leave this machine")
    return secret


def _plant(root: Path, tmp_path: Path, kind: str) -> Path:
    """Plant one link of ``kind`` in the dump ``root``; returns the link's path."""
    secret = _outside(tmp_path)
    window = root / WINDOW
    if kind == "file":
        link = window / "stolen"
        link.symlink_to(secret / "id_rsa")
    elif kind == "chunk":  # an existing chunk replaced by a link
        link = next(p for p in sorted(window.rglob("c*")) if p.is_file())
        link.unlink()
        link.symlink_to(secret / "id_rsa")
    elif kind == "directory":
        link = window / "invocation_999999_forward"
        link.symlink_to(secret, target_is_directory=True)
    elif kind == "window":
        real = tmp_path / "elsewhere-window"
        os.rename(window, real)
        link = window
        link.symlink_to(real, target_is_directory=True)
    elif kind == "rank":
        link = root / "rank_7"
        link.symlink_to(secret, target_is_directory=True)
    elif kind == "root-document":
        document = root / "zarr.json"
        real = tmp_path / "elsewhere-zarr.json"
        os.rename(document, real)
        link = document
        link.symlink_to(real)
    else:
        raise AssertionError(kind)
    return link


@pytest.mark.parametrize("kind", ["file", "chunk", "directory", "window", "rank", "root-document"])
def test_links_are_refused_before_anything_is_sent(
    kind: str, bucket: str, options: dict[str, Any], copy_dump: Callable[[str], Path], s3_client: Any, tmp_path: Path
) -> None:
    root = copy_dump("L1")
    link = _plant(root, tmp_path, kind)
    with pytest.raises(ValueError) as info:
        upload(root, f"s3://{bucket}/run", storage_options=options, threads=2)
    message = str(info.value)
    assert str(link) in message and "symbolic link" in message
    assert all_objects(s3_client, bucket) == {}


def test_cli_names_the_link_exit_2(
    bucket: str,
    options: dict[str, Any],
    copy_dump: Callable[[str], Path],
    s3_client: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = copy_dump("L1")
    link = _plant(root, tmp_path, "directory")
    args = ["upload", str(root), f"s3://{bucket}/run", "--quiet"]
    for key, value in options.items():
        args += ["-S", f"{key}={value}"]
    capsys.readouterr()
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: refusing to upload") and str(link) in lines[0]
    assert options["secret"] not in err
    assert all_objects(s3_client, bucket) == {}


def test_a_fifo_is_refused_not_read(
    bucket: str, options: dict[str, Any], copy_dump: Callable[[str], Path], s3_client: Any
) -> None:
    root = copy_dump("L1")
    fifo = root / WINDOW / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="is not a regular file"):
        upload(root, f"s3://{bucket}/run", storage_options=options, threads=2)
    assert all_objects(s3_client, bucket) == {}


def test_a_linked_root_itself_is_the_users_choice(
    bucket: str, options: dict[str, Any], copy_dump: Callable[[str], Path], tmp_path: Path
) -> None:
    """The root path the user names may itself be a link; only links below it are refused."""
    root = copy_dump("L1")
    alias = tmp_path / "alias"
    alias.symlink_to(root, target_is_directory=True)
    report = upload(alias, f"s3://{bucket}/run", storage_options=options, threads=2)
    assert report.ok and report.windows == [WINDOW]
