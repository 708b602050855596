"""Integrity on an object store (moto): a deleted or altered chunk object of a committed window is refused on
read (DumpIntegrityError naming the key) and named by ``verify``; a whole upload verifies clean."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import pytest

from megadump_zarr.cli.main import main
from megadump_zarr.read import open_dump
from megadump_zarr.read.errors import DumpIntegrityError
from megadump_zarr.transfer import upload
from megadump_zarr.verify import verify_dump


def test_chunk_objects_checked_on_s3(bucket: str, options: dict[str, Any], copy_dump: Callable[[str], Path],
                                     s3_client: Any, capsys: pytest.CaptureFixture[str]) -> None:
    root = copy_dump("L1")
    url = f"s3://{bucket}/run"
    assert upload(root, url, storage_options=options, workers=4).ok
    report = verify_dump(url, options, deep=True)
    assert report.ok and report.windows[0].chunks > 0

    dump = open_dump(url, storage_options=options)
    path = str(dump.records()["path"].iloc[0])
    objects = s3_client.list_objects_v2(Bucket=bucket, Prefix=f"run/{path}/")["Contents"]
    chunk_key = next(o["Key"] for o in objects if not o["Key"].endswith("zarr.json"))
    key = chunk_key.removeprefix("run/")
    body = s3_client.get_object(Bucket=bucket, Key=chunk_key)["Body"].read()

    s3_client.delete_object(Bucket=bucket, Key=chunk_key)
    with pytest.raises(DumpIntegrityError, match="is missing") as info:
        open_dump(url, storage_options=options).record_array(path).values
    assert info.value.key == key
    assert [(p.key, p.what) for p in verify_dump(url, options).problems] == [(key, "chunk is missing")]

    altered = bytearray(body)
    altered[len(altered) // 2] ^= 0xFF
    s3_client.put_object(Bucket=bucket, Key=chunk_key, Body=bytes(altered))
    with pytest.raises(DumpIntegrityError, match="is corrupt") as info:
        open_dump(url, storage_options=options).record_array(path).values
    assert key in str(info.value)
    args = ["verify", url, "--quiet"]
    for name, value in options.items():
        args += ["-S", f"{name}={value}"]
    capsys.readouterr()
    assert main(args) == 1
    out, err = capsys.readouterr()
    assert key in out and options["secret"] not in out + err
