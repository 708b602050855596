"""Direct writes: ``TensorDumpConfig("s3://bucket/run", storage_options=...)`` on moto, read back."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from megadump_zarr.read import open_dump
from megadump_zarr.store.roots import open_backend
from megadump_zarr.store.object_backend import ObjectStoreBackend, ObjectStoreError
from megadump_zarr.store.writer import WindowWriter, window_status
from tests.s3.conftest import SECRET, all_objects, run_dump


def assert_same_dump(remote, local) -> None:
    """Same records table and the same values, record by record."""
    a, b = remote.records(), local.records()
    assert len(a) > 0
    pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True))
    for path in a["path"]:
        np.testing.assert_array_equal(remote.record_array(path).values, local.record_array(path).values)


@pytest.mark.parametrize("level", ["L0", "L1"])
def test_direct_write_reads_back_like_local(level, bucket, options, local_dumps, s3_client):
    url = f"s3://{bucket}/run1"
    dumper = run_dump(url, level, storage_options=options, every_step=level == "L0")
    assert all(str(p).startswith(f"{url}/rank_0/window_") for p in dumper.last_window_paths)
    remote = open_dump(url, storage_options=options)
    assert set(remote.windows()["status"]) == {"complete"}
    assert_same_dump(remote, open_dump(local_dumps[level]))
    # the same layout, object for object, as the local dump (minus hidden sidecars)
    keys = set(all_objects(s3_client, bucket, "run1/"))
    local = {
        p.relative_to(local_dumps[level]).as_posix()
        for p in local_dumps[level].rglob("*")
        if p.is_file() and not any(s.startswith(".") for s in p.relative_to(local_dumps[level]).parts)
    }
    assert {k[len("run1/") :] for k in keys} == local


def test_xarray_opens_a_task_group_over_s3_without_warnings(bucket, options, s3_client):
    """layout="packs" stores an L1 stage's small records as packs: plain xr.open_zarr opens a pack (the physical
    data group) over S3 without warnings; the logical task group opens through the dump's view (open_dump) and the
    stage through engine="megadump", and both hold the pack's row of that task."""
    url = f"s3://{bucket}/run1"
    # combine's four full tiles share a shape: a pack (the expert tiles are ragged, each its own task group)
    run_dump(
        url,
        "L1",
        storage_options=options,
        layout="packs",
        kernel_names=("moe_experts",),
        stages=("expert_up", "combine"),
        owner_ids=None,
    )
    dump = open_dump(url, storage_options=options)
    records = dump.records()
    group = str(records.loc[records["pack_array"].notna(), "group"].iloc[0])
    stage_dir, _, task = group.rpartition("/")
    listed = s3_client.list_objects_v2(Bucket=bucket, Prefix=f"run1/{stage_dir}/pack_")["Contents"]
    packs = {
        o["Key"].removeprefix("run1/").removesuffix("/task_id/zarr.json")
        for o in listed
        if o["Key"].endswith("/task_id/zarr.json")
    }
    record = records.loc[records["group"] == group].iloc[0]
    pack, row = str(record["pack_array"]).rpartition("/")[0], int(record["pack_row"])  # where the records table says
    assert pack in packs
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        packed = xr.open_zarr(f"{url}/{pack}", storage_options=options).load()  # the physical data group
        logical = dump.dataset(invocation=int(record["invocation"]), stage=record["stage"], task=task).load()
        stitched = xr.open_dataset(url, engine="megadump", group=stage_dir, storage_options=options).load()
    assert int(packed["task_id"][row]) == int(records.loc[records["group"] == group, "task_id"].iloc[0])
    assert len(logical.data_vars) > 0 and len(stitched.data_vars) > 0
    for name, var in logical.data_vars.items():
        assert np.isfinite(var.values.astype(np.float64)).any(), name
        np.testing.assert_array_equal(var.values, packed[name].values[row])
        np.testing.assert_array_equal(var.values, dump.record_array(f"{group}/{name}").values)


def test_no_secret_in_objects_reprs_or_errors(bucket, options, s3_client):
    url = f"s3://{bucket}/secret-run"
    run_dump(url, "L0", storage_options=options)
    objects = all_objects(s3_client, bucket)
    assert objects
    for key, data in objects.items():
        assert SECRET.encode() not in data, key
        assert options["key"].encode() not in data, key
    backend = open_backend(url, options)
    assert isinstance(backend, ObjectStoreBackend) and backend.client_name == "obstore"
    assert SECRET not in repr(backend) and "***" in repr(backend)
    missing = ObjectStoreBackend(f"s3://no-such-bucket-{bucket}/x", options)
    with pytest.raises(ObjectStoreError) as info:
        missing.put("a/zarr.json", b"{}")
    assert "not retried" in str(info.value) and info.value.attempts == 1  # 404 NoSuchBucket: permanent
    assert SECRET not in str(info.value) and SECRET not in repr(info.value)


def test_claim_is_atomic_and_tells_a_retried_claim_from_a_taken_window(bucket, options):
    url = f"s3://{bucket}/claims"
    first, second = ObjectStoreBackend(url, options), ObjectStoreBackend(url, options)
    first.claim("rank_0/window_0000")
    with pytest.raises(FileExistsError, match="rank_0/window_0000"):
        second.claim("rank_0/window_0000")
    doc = json.loads(first.get("rank_0/window_0000/zarr.json"))
    assert doc["attributes"]["status"] == "writing"
    with WindowWriter(url, storage_options=options) as writer:
        with pytest.raises(FileExistsError, match=r"Tensor dump window already exists: s3://.*/rank_0/window_0000"):
            writer.begin(0, 0, {"level": "L0"})
        session = writer.begin(0, 1, {"level": "L0"})
        session.commit()
    assert window_status(url, 0, 1, storage_options=options) == "complete"


def test_backend_list_head_delete_roundtrip(bucket, options):
    backend = ObjectStoreBackend(f"s3://{bucket}/p/q", options, max_concurrency=4)
    backend.put_many([(f"k/{i}", bytes([i]) * (i + 1)) for i in range(20)])
    listing = backend.list("k/")
    assert sorted(listing) == sorted(f"k/{i}" for i in range(20))
    assert listing["k/3"].size == 4 and listing["k/3"].etag == __import__("hashlib").md5(b"\x03" * 4).hexdigest()
    assert backend.head("k/3") == listing["k/3"]
    assert backend.head("k/nope") is None and backend.get("k/nope") is None and not backend.exists("k/nope")
    backend.delete(["k/1", "k/2"])
    assert len(backend.list("k/")) == 18 and backend.exists("k/0")


def test_buffers_and_the_fsspec_fallback_client(bucket, options):
    # options obstore cannot express (here a boto client kwarg) fall back to s3fs, with the same retries
    odd = {
        "key": options["key"],
        "secret": options["secret"],
        "client_kwargs": {"endpoint_url": options["endpoint_url"], "use_ssl": False},
    }
    for client_options, name in ((options, "obstore"), (odd, "fsspec")):
        backend = ObjectStoreBackend(f"s3://{bucket}/{name}", client_options)
        assert backend.client_name == name and SECRET not in repr(backend)
        payload = np.arange(1000, dtype=np.float32)
        backend.put_many([("a/np", payload.view(np.uint8)), ("a/mv", memoryview(payload.tobytes())), ("a/b", b"xyz")])
        assert backend.get("a/np") == payload.tobytes() == backend.get("a/mv")
        listing = backend.list("a/")
        assert sorted(listing) == ["a/b", "a/mv", "a/np"] and listing["a/b"].size == 3
        assert listing["a/b"].etag == __import__("hashlib").md5(b"xyz").hexdigest()
        assert backend.head("a/missing") is None and backend.get("a/missing") is None
        backend.claim("rank_0/window_0000")
        with pytest.raises(FileExistsError):
            backend.claim("rank_0/window_0000")
        backend.put("m", b"1", attributes={"megadump-md5": "c4ca4238a0b923820dcc509a6f75849b"})
        assert backend.get_attributes("m")["megadump-md5"] == "c4ca4238a0b923820dcc509a6f75849b"
