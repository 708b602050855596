"""Injected faults: a proxy in front of moto answers a seeded fraction of requests with 503 SlowDown or
500, or drops the connection (before or after moto applied the request)."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import boto3
import pytest

from megadump_zarr.read import open_dump
from megadump_zarr.store.object_backend import (
    ObjectStoreBackend,
    ObjectStoreError,
    RetryPolicy,
    status_kind,
    redact_options,
    retry_policy,
)
from megadump_zarr.transfer import UploadError, upload
from tests.s3._fault_proxy import FaultProxy
from tests.s3.conftest import SECRET, all_objects, local_files, run_dump, s3_options


def not_probe(method: str, path: str) -> bool:
    """The dumper probes its root on entry through fsspec (``.megadump-probe-*``, s3fs's own retries);
    the tests that fail every request aim at the window writer, so they let the probe through."""
    return ".megadump-probe" not in path and not (method == "POST" and "delete" in path)  # its bulk delete


@pytest.fixture
def proxy(moto):
    with FaultProxy((moto["host"], moto["port"]), rate=0.0, seed=1234) as running:
        yield running


def test_upload_completes_and_verifies_under_20_percent_faults(proxy, bucket, options, copy_dump, s3_client):
    root = copy_dump("L1")
    proxy.rate = 0.2
    report = upload(root, f"s3://{bucket}/up", storage_options=s3_options(proxy.endpoint), threads=8)
    proxy.rate = 0.0
    assert report.ok and report.windows == ["rank_0/window_0000"]
    assert sum(proxy.counts[k] for k in ("503", "500", "drop", "drop-after")) >= 5, proxy.counts
    assert report.verified_objects == report.uploaded_objects + report.present_objects
    remote = {k[len("up/") :]: v for k, v in all_objects(s3_client, bucket, "up/").items()}
    assert remote == local_files(root)
    again = upload(root, f"s3://{bucket}/up", storage_options=options)
    assert again.uploaded_objects == 0


def test_direct_write_under_faults_commits_or_is_visibly_incomplete(proxy, bucket, options, local_dumps):
    url = f"s3://{bucket}/faulty"
    proxy.rate = 0.2
    try:
        run_dump(url, "L0", storage_options=s3_options(proxy.endpoint), every_step=True, save_plans=False)
        raised = None
    except Exception as error:  # allowed, as long as nothing looks complete that is not
        raised = error
    proxy.rate = 0.0
    assert sum(proxy.counts[k] for k in ("503", "500", "drop", "drop-after")) >= 5, proxy.counts
    dump = open_dump(url, storage_options=options)  # read straight from moto
    windows = dump.windows()
    complete = windows[windows["status"] == "complete"]
    local = open_dump(local_dumps["L0"])
    expected = local.records()
    got = dump.records()
    for window in complete["window"]:
        a = got[got["window"] == window].reset_index(drop=True)
        b = expected[expected["window"] == window].reset_index(drop=True)
        pd.testing.assert_frame_equal(a, b)
        for path in a["path"]:
            np.testing.assert_array_equal(dump.record_array(path).values, local.record_array(path).values)
    if raised is None:  # with 8 tries per request a 20% fault rate never exhausts them in practice
        assert list(windows["status"]) == ["complete", "complete"]


def test_failed_chunk_writes_leave_the_window_visibly_not_complete(proxy, bucket, options):
    url = f"s3://{bucket}/chunks-fail"
    proxy.predicate = lambda method, path: (
        method == "PUT"
        and not path.split("?")[0].endswith("zarr.json")
        and "/.session-" not in path
        and not_probe(method, path)
    )
    proxy.rate = 1.0
    start = time.perf_counter()
    with retry_policy(attempts=3):
        with pytest.raises(ObjectStoreError) as info:
            run_dump(url, "L0", storage_options=s3_options(proxy.endpoint), on_error="discard")
    assert time.perf_counter() - start < 30
    message = str(info.value)
    assert "failed after 3 attempts" in message and f"{url}/rank_0/window_0000/" in message
    assert SECRET not in message
    assert "was discarded (on_error='discard')" in " ".join(getattr(info.value, "__notes__", ()))
    proxy.rate = 0.0
    s3 = boto3.client(
        "s3",
        endpoint_url=options["endpoint_url"],
        aws_access_key_id=options["key"],
        aws_secret_access_key=options["secret"],
        region_name="us-east-1",
    )
    left = s3.list_objects_v2(Bucket=bucket, Prefix="chunks-fail/rank_0/window_0000/").get("Contents", [])
    assert left == []  # on_error="discard": nothing of the window stays, not even an "aborted" document


def test_failed_chunk_writes_with_on_error_keep_commit_the_window_aborted(proxy, bucket, options):
    url = f"s3://{bucket}/chunks-keep"
    proxy.predicate = lambda method, path: (  # chunk writes fail; documents and the window inventory go through
        method == "PUT"
        and not path.split("?")[0].endswith(("zarr.json", "inventory.json"))
        and "/.session-" not in path
        and not_probe(method, path)
    )
    proxy.rate = 1.0
    with retry_policy(attempts=3):
        with pytest.raises(ObjectStoreError):
            run_dump(url, "L0", storage_options=s3_options(proxy.endpoint), on_error="keep")
    proxy.rate = 0.0
    dump = open_dump(url, storage_options=options)
    assert list(dump.windows()["status"]) == ["aborted"]  # the writer committed what it had as aborted
    assert len(dump.records()) == 0  # default reads see nothing of it


def test_all_requests_failing_raises_a_clear_error_quickly(proxy, bucket):
    proxy.predicate = not_probe
    proxy.rate = 1.0
    start = time.perf_counter()
    with retry_policy(attempts=4, base_delay=0.001, max_delay=0.01):
        with pytest.raises(ObjectStoreError) as info:
            run_dump(f"s3://{bucket}/down", "L0", storage_options=s3_options(proxy.endpoint))
    elapsed = time.perf_counter() - start
    assert elapsed < 20, elapsed
    error = info.value
    assert error.attempts == 4 and error.transient
    text = str(error) + " ".join(getattr(error, "__notes__", ()))
    assert "failed after 4 attempts; last error:" in text and f"s3://{bucket}/down/rank_0/window_0000" in text
    assert any(word in text for word in ("503", "500", "error sending request", "connection")), text
    assert SECRET not in text and SECRET not in repr(error) and SECRET not in "".join(getattr(error, "__notes__", []))


def test_upload_with_everything_failing_reports_failed_windows(proxy, bucket, copy_dump):
    root = copy_dump("L0")
    proxy.predicate = lambda method, path: "/rank_0/window_0001/" in path
    proxy.rate = 1.0
    with pytest.raises(UploadError) as info:
        upload(
            root,
            f"s3://{bucket}/half",
            storage_options=s3_options(proxy.endpoint),
            retry=RetryPolicy(attempts=2, base_delay=0.001, max_delay=0.001),
        )
    report = info.value.report
    assert report.windows == ["rank_0/window_0000"] and list(report.failed) == ["rank_0/window_0001"]
    assert SECRET not in str(info.value)
    assert (root / "rank_0" / "window_0001").is_dir()  # nothing deleted


def test_retried_claim_whose_first_attempt_landed(proxy, bucket, options):
    proxy.kinds = ("drop-after",)
    proxy.predicate = lambda method, path: method == "PUT"
    backend = ObjectStoreBackend(f"s3://{bucket}/claim", s3_options(proxy.endpoint))
    proxy.rate = 1.0
    # every PUT lands in moto but its answer is lost; allow one: the retry then gets 412 and finds its token
    calls = {"n": 0}
    original = proxy._decide

    def decide(method, path):
        calls["n"] += 1
        return original(method, path) if calls["n"] == 1 else None

    proxy._decide = decide
    backend.claim("rank_0/window_0000")
    assert calls["n"] >= 2
    with pytest.raises(FileExistsError):
        ObjectStoreBackend(f"s3://{bucket}/claim", options).claim("rank_0/window_0000")


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Server returned non-2xx status code: 503 Service Unavailable: <Code>SlowDown</Code>", "transient"),
        ("Server returned non-2xx status code: 500 Internal Server Error", "transient"),
        ("Server returned non-2xx status code: 429 Too Many Requests", "transient"),
        ("Server returned non-2xx status code: 400 Bad Request: <Code>RequestTimeout</Code>", "transient"),
        ("Server returned non-2xx status code: 403 Forbidden: <Code>AccessDenied</Code>", "permanent"),
        ("Server returned non-2xx status code: 404 Not Found", "not found"),
        ("Server returned non-2xx status code: 501 Not Implemented", "unsupported"),
        ("HTTP error: error sending request", None),
    ],
)
def test_status_classification(text, kind):
    assert status_kind(text) == kind


def test_backoff_grows_with_jitter_and_is_bounded():
    policy = RetryPolicy(attempts=10, base_delay=0.1, max_delay=1.0)
    import random

    rng = random.Random(0)
    delays = [policy.delay(n, rng) for n in range(1, 10)]
    assert 0.05 <= delays[0] <= 0.1 and all(0.5 <= d <= 1.0 for d in delays[4:])
    assert len({round(d, 6) for d in delays}) == len(delays)  # jittered
    with pytest.raises(ValueError):
        RetryPolicy(attempts=0)


def test_redact_options():
    options = {
        "key": "AK",
        "secret": "S",
        "token": "T",
        "endpoint_url": "http://x",
        "client_kwargs": {"aws_secret_access_key": "S2", "region_name": "r"},
    }
    assert redact_options(options) == {
        "key": "***",
        "secret": "***",
        "token": "***",
        "endpoint_url": "http://x",
        "client_kwargs": {"aws_secret_access_key": "***", "region_name": "r"},
    }


def test_s3_config_translation():
    from megadump_zarr.store.object_backend import s3_config

    config, client, provider = s3_config(
        {
            "key": "A",
            "secret": "S",
            "token": "T",
            "client_kwargs": {"endpoint_url": "http://127.0.0.1:9", "region_name": "eu-west-1"},
        }
    )
    assert config == {
        "access_key_id": "A",
        "secret_access_key": "S",
        "session_token": "T",
        "endpoint": "http://127.0.0.1:9",
        "region": "eu-west-1",
        "virtual_hosted_style_request": False,
    }
    assert client == {"allow_http": True} and provider is None
    assert s3_config({"anon": True})[0] == {"skip_signature": True}
    assert s3_config({"key": "A", "secret": "S", "client_kwargs": {"use_ssl": False}}) is None  # -> s3fs
    assert s3_config({"key": "A", "secret": "S", "weird_option": 1}) is None
