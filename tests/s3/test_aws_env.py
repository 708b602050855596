"""The AWS CLI's configuration, from the environment alone, for uploads, direct writes and reads (issue 15.6).

Each CLI case runs ``megadump`` in a subprocess whose environment holds no AWS variable except the ones
the case sets (a user's shell), against moto on loopback. Configuration errors fail at once: one
``error:`` line, exit 2, no retries.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
import subprocess
import sys
from typing import Any

import pytest

from megadump_zarr import open_dump
from megadump_zarr.store.object_backend import ObjectStoreBackend, s3_config
from tests.s3.conftest import ACCESS_KEY, SECRET, run_dump

SMALL = Path(__file__).resolve().parents[1] / "read" / "data" / "format10" / "l0"
MEGADUMP = [sys.executable, "-m", "megadump_zarr.cli.main"]


@pytest.fixture
def aws_home(tmp_path: Path) -> dict[str, str]:
    """A clean user environment: no AWS_* variables, a profile ``moto`` in private config files."""
    (tmp_path / "credentials").write_text(
        f"[moto]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET}\n"
    )
    (tmp_path / "config").write_text("[profile moto]\nregion = eu-west-1\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        HOME=str(tmp_path),
        AWS_CONFIG_FILE=str(tmp_path / "config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "credentials"),
        AWS_EC2_METADATA_DISABLED="true",
    )
    return env


def megadump(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*MEGADUMP, *argv], env=env, capture_output=True, text=True, timeout=120)


def keys_env(endpoint: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ALLOW_HTTP": "true",
        "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_DEFAULT_REGION": "us-east-1",
    }


def local_records() -> list[str]:
    return sorted(open_dump(SMALL).records()["path"])


def remote_records(env: dict[str, str], url: str, *extra: str) -> list[str]:
    result = megadump(env, "ls", url, "--json", *extra)
    assert result.returncode == 0, result.stderr
    return sorted(row["path"] for row in json.loads(result.stdout))


def test_upload_and_read_with_environment_only(moto, bucket, aws_home):
    env = dict(aws_home, **keys_env(moto["endpoint"]))
    result = megadump(env, "upload", str(SMALL), f"s3://{bucket}/run")
    assert result.returncode == 0, result.stderr
    assert remote_records(env, f"s3://{bucket}/run") == local_records()
    info = megadump(env, "info", f"s3://{bucket}/run", "--json")
    assert info.returncode == 0, info.stderr
    assert SECRET not in info.stdout + info.stderr


def test_profile_and_shared_credentials_file(moto, bucket, aws_home):
    env = dict(
        aws_home, AWS_ENDPOINT_URL=moto["endpoint"], AWS_PROFILE="moto"
    )  # plain http allowed: it is the endpoint
    result = megadump(env, "upload", str(SMALL), f"s3://{bucket}/run")
    assert result.returncode == 0, result.stderr
    assert remote_records(env, f"s3://{bucket}/run") == local_records()


def test_storage_options_and_environment_together(moto, bucket, aws_home):
    env = dict(aws_home, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET)
    endpoint = f"endpoint_url={moto['endpoint']}"
    result = megadump(env, "upload", str(SMALL), f"s3://{bucket}/run", "-S", endpoint)
    assert result.returncode == 0, result.stderr
    assert remote_records(env, f"s3://{bucket}/run", "-S", endpoint) == local_records()


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ({"AWS_PROFILE": "nope"}, "error: AWS profile 'nope' not found in "),
        ({}, "error: no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE"),
        (
            {"AWS_ENDPOINT_URL": "localhost:9", "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"},
            "error: S3 endpoint 'localhost:9' is not an http(s):// URL",
        ),
        (
            {"AWS_ALLOW_HTTP": "false", "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"},
            "error: S3 endpoint http://127.0.0.1:",
        ),
        (
            {"AWS_ALLOW_HTTP": "maybe", "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"},
            "error: AWS_ALLOW_HTTP must be true or false, got 'maybe'",
        ),
    ],
    ids=["unknown-profile", "no-credentials", "bad-endpoint", "http-refused", "bad-allow-http"],
)
def test_configuration_errors_fail_at_once_in_one_line(moto, bucket, aws_home, case, message):
    env = dict(aws_home, **{"AWS_ENDPOINT_URL": moto["endpoint"], **case})
    for argv in (["upload", str(SMALL), f"s3://{bucket}/run"], ["ls", f"s3://{bucket}/run"]):
        result = megadump(env, *argv)
        assert result.returncode == 2, (argv, result.stdout, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(message), (argv, result.stderr)
        assert "attempts" not in result.stderr and "Traceback" not in result.stderr
        assert SECRET not in result.stderr + result.stdout


def test_builder_errors_are_not_retried(moto, bucket, monkeypatch):
    """An obstore client that cannot build a request (the old 'HTTP error: builder error' after 10 s)."""
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    config, client, _ = s3_config({"key": ACCESS_KEY, "secret": SECRET, "endpoint_url": moto["endpoint"]})
    assert client == {"allow_http": True} and config["endpoint"] == moto["endpoint"]
    backend = ObjectStoreBackend(
        f"s3://{bucket}/run", {"key": ACCESS_KEY, "secret": SECRET, "endpoint_url": moto["endpoint"]}
    )
    assert backend._client.kind(RuntimeError("Generic S3 error: ... - HTTP error: builder error")) == "permanent"


def test_region_and_endpoint_resolution(monkeypatch, tmp_path):
    (tmp_path / "config").write_text("[profile p]\nregion = ap-south-1\nendpoint_url = https://s3.example.test\n")
    (tmp_path / "credentials").write_text("[p]\naws_access_key_id = PK\naws_secret_access_key = PS\n")
    for name in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_PROFILE", "p")
    config, client, provider = s3_config(None)
    assert config == {
        "endpoint": "https://s3.example.test",
        "region": "ap-south-1",
        "virtual_hosted_style_request": False,
    }
    assert client == {} and provider().get("access_key_id") == "PK"
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-1")
    assert s3_config(None)[0]["region"] == "us-west-1"
    monkeypatch.setenv("AWS_REGION", "eu-north-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    config, client, _ = s3_config(None)
    assert (config["region"], config["endpoint"], client) == ("eu-north-1", "http://127.0.0.1:9", {"allow_http": True})
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "https://s3-only.example.test")
    assert s3_config(None)[0]["endpoint"] == "https://s3-only.example.test"
    # options win over everything; env keys win over the profile unless a profile option names one
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "EK")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "ES")
    config, _, provider = s3_config({"region_name": "sa-east-1", "endpoint_url": "https://o.example.test"})
    assert (config["region"], config["endpoint"], config["access_key_id"], provider) == (
        "sa-east-1",
        "https://o.example.test",
        "EK",
        None,
    )
    config, _, provider = s3_config({"profile": "p"})
    assert "access_key_id" not in config and provider()["access_key_id"] == "PK"


def test_direct_write_and_read_from_environment(moto, bucket, monkeypatch, tmp_path):
    for name, value in keys_env(moto["endpoint"]).items():
        monkeypatch.setenv(name, value)
    url = f"s3://{bucket}/direct"
    run_dump(url, "L0", steps=1)
    dump = open_dump(url)
    frame = dump.records()
    assert len(frame) > 0 and set(frame["window"]) == {0}
    first: Any = frame.iloc[0]
    assert dump.record_array(first["path"]).shape == tuple(first["shape"])
