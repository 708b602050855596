"""Object-store errors are one ``error:`` line naming the bucket (and key), exit 2 (moto's server on loopback)."""

from __future__ import annotations

import pytest

from megadump_zarr.cli.service import condense
from tests._moto import KEY, SECRET, moto_s3


@pytest.fixture(scope="module")
def s3_options():
    pytest.importorskip("s3fs")
    with moto_s3("dumps") as endpoint:
        yield ["-S", f"endpoint_url={endpoint}", "-S", f"key={KEY}", "-S", f"secret={SECRET}"]


def _one_line(result, code: int = 2) -> str:
    assert result.code == code, (result.code, result.out, result.err)
    lines = result.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.err
    assert "<" not in lines[0] and "Traceback" not in result.err + result.out
    return lines[0]


def test_upload_to_a_missing_bucket(cli, demo, s3_options):
    line = _one_line(cli("upload", demo.roots["L1"], "s3://missing-bucket/x", *s3_options, "--quiet"))
    assert line.startswith("error: cannot upload to s3://missing-bucket/x: bucket 'missing-bucket' does not exist")
    assert "s3://missing-bucket/x/zarr.json" in line and "NoSuchBucket" in line


@pytest.mark.parametrize("command", ["ls", "info", "verify", "stats"])
def test_reading_a_missing_bucket(cli, s3_options, command):
    line = _one_line(cli(command, "s3://missing-bucket/x", *s3_options))
    assert line == "error: cannot read s3://missing-bucket/x: bucket 'missing-bucket' does not exist"


def test_condense_keeps_code_message_bucket_and_key():
    raw = (
        "ObjectStoreError: GET s3://b/k/zarr.json failed: Error performing GET http://h/b/k in 3ms - "
        'Server returned non-2xx status code: 403 Forbidden: <?xml version="1.0" encoding="utf-8"?>\n'
        "<Error><Code>AccessDenied</Code><Message>Access\n Denied</Message><BucketName>b</BucketName>"
        "<Key>k/zarr.json</Key><RequestId>XYZ</RequestId></Error>"
    )
    assert condense(raw) == "GET s3://b/k/zarr.json failed: AccessDenied: Access Denied (bucket b, key k/zarr.json)"
    assert condense("plain\n  text") == "plain text"
