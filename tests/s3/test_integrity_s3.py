"""Integrity on an object store (moto): a deleted or altered chunk object of a committed window (schema 7: the
pack shard holding a record's chunk) is refused on read (DumpIntegrityError naming the record's chunk key) and
named by ``verify``; a whole upload verifies clean."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from megadump_zarr.cli.main import main
from megadump_zarr.read import open_dump
from megadump_zarr.read.errors import DumpIntegrityError
from megadump_zarr.store.packs import decode_index, index_nbytes
from megadump_zarr.transfer import upload
from megadump_zarr.verify import verify_dump


def test_chunk_objects_checked_on_s3(
    bucket: str, options: dict[str, Any], tmp_path: Path, s3_client: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.s3.conftest import run_dump

    root = tmp_path / "packed"  # layout="packs": the records' bytes are rows of pack shards
    # combine packs its 4 full tiles (the expert tiles are ragged: task groups)
    run_dump(root, "L1", layout="packs", kernel_names=("moe_experts",), stages=("expert_up", "combine"), owner_ids=None)
    url = f"s3://{bucket}/run"
    assert upload(root, url, storage_options=options, threads=4).ok
    report = verify_dump(url, options, deep=True)
    assert report.ok and report.windows[0].chunks > 0

    dump = open_dump(url, storage_options=options)
    records = dump.records()
    packed = records[records["pack_array"].notna()]
    assert len(packed), "the demo's combine records are packed"
    row = packed.iloc[0]
    path = str(row["path"])
    pack_doc = json.loads(s3_client.get_object(Bucket=bucket, Key=f"run/{row['pack_array']}/zarr.json")["Body"].read())
    per_shard = pack_doc["chunk_grid"]["configuration"]["chunk_shape"][0]  # rows (one inner chunk each) per shard
    zeros = ".0" * (len(pack_doc["shape"]) - 1)

    def shard_of(pack_array: str, pack_row: int) -> str:  # the object holding a packed record's bytes
        return f"{pack_array}/c.{int(pack_row) // per_shard}{zeros}"

    key = f"{path}/c{zeros}"  # the record's one chunk, as readers name it
    stored = shard_of(row["pack_array"], row["pack_row"])
    object_key = f"run/{stored}"
    body = s3_client.get_object(Bucket=bucket, Key=object_key)["Body"].read()
    shared = sorted(  # the records whose rows that shard holds
        f"{p}/c{zeros}"
        for p, a, r in zip(packed["path"], packed["pack_array"], packed["pack_row"])
        if shard_of(a, r) == stored
    )

    s3_client.delete_object(Bucket=bucket, Key=object_key)
    with pytest.raises(DumpIntegrityError, match="is missing") as info:
        open_dump(url, storage_options=options).record_array(path).values
    assert info.value.key == key
    assert [(p.key, p.what) for p in verify_dump(url, options).problems] == [(k, "chunk is missing") for k in shared]

    rows = json.loads(
        s3_client.get_object(Bucket=bucket, Key=f"{object_key.rpartition('/')[0]}/zarr.json")["Body"].read()
    )
    count = rows["chunk_grid"]["configuration"]["chunk_shape"][0]  # inner chunks (one row each) per shard
    altered = bytearray(body)
    for entry in decode_index(body[-index_nbytes(count) :], count, stored):  # one byte inside every stored row
        if entry is not None:
            altered[entry[0] + entry[1] // 2] ^= 0xFF
    s3_client.put_object(Bucket=bucket, Key=object_key, Body=bytes(altered))
    with pytest.raises(DumpIntegrityError, match="is corrupt") as info:
        open_dump(url, storage_options=options).record_array(path).values
    assert key in str(info.value) and "crc32c checksum mismatch" in str(info.value)
    args = ["verify", url, "--quiet"]
    for name, value in options.items():
        args += ["-S", f"{name}={value}"]
    capsys.readouterr()
    assert main(args) == 1
    out, err = capsys.readouterr()
    assert key in out and options["secret"] not in out + err
