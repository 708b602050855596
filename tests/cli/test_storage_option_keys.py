"""A storage option the object store does not take is named before any I/O, with the closest known key:
one ``error:`` line, exit status 2 (s3fs would hand it to the botocore session, a bare ``TypeError``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from megadump_zarr.store.option_keys import accepted_storage_options, check_storage_options
from megadump_zarr.store.roots import open_backend
from tests.cli._helpers import assert_input_error


@pytest.mark.parametrize("command", [["ls"], ["verify"], ["info"], ["stats"]])
def test_a_misspelt_key_is_named_with_the_one_meant(cli, command) -> None:
    result = cli(*command, "s3://bucket/run/l0", "-S", "endpont_url=http://127.0.0.1:9")
    assert_input_error(result, "'endpont_url'", "s3fs.S3FileSystem", "did you mean endpoint_url?")
    assert len([line for line in result.err.splitlines() if line.strip()]) == 1


def test_an_upload_target_is_checked_too(cli, tmp_path: Path) -> None:
    result = cli("upload", tmp_path, "s3://bucket/run", "-S", "endpoint_ur=http://127.0.0.1:9")
    assert_input_error(result, "'endpoint_ur'", "did you mean endpoint_url?")


def test_a_key_far_from_every_known_one_lists_them(cli) -> None:
    result = cli("ls", "s3://bucket/run/l0", "-S", "colour=blue")
    assert_input_error(result, "'colour'", "options it takes: anon, ", "endpoint_url", "client_kwargs")


def test_known_keys_pass_and_other_schemes_are_not_checked() -> None:
    system, keys = accepted_storage_options("s3://b/x")
    assert system == "s3fs.S3FileSystem"
    assert {"endpoint_url", "key", "secret", "client_kwargs", "config_kwargs", "anon", "profile"} <= keys
    check_storage_options("s3://b/x", {"endpoint_url": "http://h", "client_kwargs": {}, "skip_instance_cache": True})
    check_storage_options("memory://x", {"endpont_url": "x"})  # memory:// takes any key
    check_storage_options("/local/dir", {"endpont_url": "x"})  # local roots ignore options
    assert accepted_storage_options("http://h/x") is None


def test_the_writer_refuses_the_key_before_opening_anything() -> None:
    with pytest.raises(
        ValueError, match=r"'endpont_url' is not an option of s3fs.S3FileSystem .*did you mean endpoint_url\?"
    ):
        open_backend("s3://bucket/run", {"endpont_url": "http://127.0.0.1:9"})
