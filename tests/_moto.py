"""A real S3-protocol server (moto's ThreadedMotoServer) on 127.0.0.1 for tests outside tests/s3."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

KEY = SECRET = "testing"


@contextmanager
def moto_s3(*buckets: str) -> Iterator[str]:
    """Start moto on a free loopback port, create ``buckets``, yield the endpoint URL, stop it after.

    Args:
        buckets: Buckets to create.
    """
    moto_server = pytest.importorskip("moto.server")
    boto3 = pytest.importorskip("boto3")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        client = boto3.client(
            "s3", endpoint_url=endpoint, aws_access_key_id=KEY, aws_secret_access_key=SECRET, region_name="us-east-1"
        )
        for bucket in buckets:
            client.create_bucket(Bucket=bucket)
        yield endpoint
    finally:
        server.stop()
