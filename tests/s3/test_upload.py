"""``megadump_zarr.transfer``: upload a local dump, resume, skip uncommitted windows, delete local copies,
``UploadOnReady`` during a dump, and ``megadump upload``."""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from megadump_zarr.cli.main import main
from megadump_zarr.layout.write_model import ArrayWrite, InvocationWrite, WindowWrite
from megadump_zarr.read import open_dump
from megadump_zarr.store.root_index import plain_document
from megadump_zarr.store.writer import WindowWriter
from megadump_zarr.transfer import UploadError, UploadOnReady, upload
from tests.s3.conftest import SECRET, all_objects, local_files, run_dump


def remote_files(client, bucket, prefix):
    return {k[len(prefix) :]: v for k, v in all_objects(client, bucket, prefix).items()}


def test_upload_verify_resume_and_read_back(bucket, options, local_dumps, copy_dump, s3_client):
    root = copy_dump("L0")
    url = f"s3://{bucket}/run1"
    report = upload(root, url, storage_options=options, threads=8)
    files = local_files(root)
    assert report.ok and report.windows == ["rank_0/window_0000", "rank_0/window_0001"]
    assert report.uploaded_objects == len(files) and report.present_objects == 0
    shared = ("zarr.json", "rank_0/zarr.json")  # sent plain, then indexed from what is remote
    assert report.uploaded_bytes == sum(len(v) for k, v in files.items() if k not in shared) + sum(
        len(plain_document(files[k])) for k in shared
    )
    assert report.verified_objects == len(files)
    assert remote_files(s3_client, bucket, "run1/") == files
    remote, local = open_dump(url, storage_options=options), open_dump(root)
    pd.testing.assert_frame_equal(remote.records(), local.records())
    for path in remote.records()["path"][:6]:
        np.testing.assert_array_equal(remote.record_array(path).values, local.record_array(path).values)
    group = remote.records()["group"].iloc[0]
    with xr.open_zarr(f"{url}/{group}", storage_options=options) as ds:
        assert len(ds.data_vars) > 0

    again = upload(root, url, storage_options=options)  # resume: nothing to send
    assert again.uploaded_objects == 0 and again.present_objects == len(files) and again.ok

    # a partial upload (window document and some objects missing remotely) resumes with just those
    lost = sorted(k for k in files if k.startswith("rank_0/window_0001/"))[:3] + ["rank_0/window_0001/zarr.json"]
    s3_client.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": f"run1/{k}"} for k in lost]})
    s3_client.put_object(Bucket=bucket, Key=f"run1/{lost[0]}", Body=b"stale")  # same key, wrong content
    resumed = upload(root, url, storage_options=options)
    # the lost objects, and the root and rank documents (plain while a window is added, then indexed again)
    assert resumed.uploaded_objects == len(lost) + 2 and resumed.ok
    assert remote_files(s3_client, bucket, "run1/") == files


def test_window_document_goes_last(bucket, options, copy_dump, monkeypatch):
    from megadump_zarr.store.object_backend import ObjectStoreBackend

    order = []
    original = ObjectStoreBackend.put

    def spy(self, key, data, **kwargs):
        original(self, key, data, **kwargs)
        order.append(key)

    monkeypatch.setattr(ObjectStoreBackend, "put", spy)
    root = copy_dump("L1")
    upload(root, f"s3://{bucket}/order", storage_options=options, threads=4)
    document = "rank_0/window_0000/zarr.json"
    # plain root and rank first, the window's objects, its document last, then the index rebuilt (rank, root)
    assert set(order[:2]) == {"zarr.json", "rank_0/zarr.json"}
    assert order[-3:] == [document, "rank_0/zarr.json", "zarr.json"] and order.count(document) == 1


def test_writing_window_skipped_and_delete_local(bucket, options, copy_dump, s3_client):
    root = copy_dump("L0")
    torn = root / "rank_0" / "window_0007"
    shutil.copytree(root / "rank_0" / "window_0001", torn)
    doc = json.loads((torn / "zarr.json").read_text())
    doc["attributes"]["status"] = "writing"
    (torn / "zarr.json").write_text(json.dumps(doc))
    (root / ".plans").mkdir()
    (root / ".plans" / "x.json").write_text("{}")
    expected = {k: v for k, v in local_files(root).items() if not k.startswith("rank_0/window_0007/")}
    report = upload(root, f"s3://{bucket}/del", storage_options=options, delete_local=True)
    assert report.ok and "rank_0/window_0007" in report.skipped and "writing" in report.skipped["rank_0/window_0007"]
    assert remote_files(s3_client, bucket, "del/") == expected  # nothing of the torn window, no hidden files
    assert not (root / "rank_0" / "window_0000").exists() and not (root / "rank_0" / "window_0001").exists()
    assert torn.is_dir() and (root / "zarr.json").is_file()
    assert len(report.deleted_local) == 2
    remote = open_dump(f"s3://{bucket}/del", storage_options=options)
    assert list(remote.windows()["status"]) == ["complete", "complete"]


def test_conflicting_remote_window_is_not_touched(bucket, options, copy_dump, s3_client):
    root = copy_dump("L1")
    s3_client.put_object(Bucket=bucket, Key="c/rank_0/window_0000/zarr.json", Body=b'{"other": true}')
    with pytest.raises(UploadError, match="conflict") as info:
        upload(root, f"s3://{bucket}/c", storage_options=options)
    assert list(info.value.report.failed) == ["rank_0/window_0000"]
    # checked before the first write: the root and rank documents were not written either
    assert remote_files(s3_client, bucket, "c/") == {"rank_0/window_0000/zarr.json": b'{"other": true}'}


def _cli_flags(options):
    return [
        "-S",
        f"endpoint_url={options['endpoint_url']}",
        "-S",
        f"key={options['key']}",
        "-S",
        f"secret={options['secret']}",
    ]


def test_uploading_another_dump_over_a_dump_changes_no_remote_byte(bucket, options, copy_dump, s3_client, capsys):
    url = f"s3://{bucket}/b"
    there, other = copy_dump("L0"), copy_dump("L1")  # both hold rank_0/window_0000, with different contents
    upload(there, url, storage_options=options)
    before = remote_files(s3_client, bucket, "b/")
    assert b"consolidated_metadata" in before["zarr.json"]
    with pytest.raises(UploadError, match="conflict") as info:
        upload(other, url, storage_options=options)
    assert remote_files(s3_client, bucket, "b/") == before  # every key and every byte
    assert info.value.report.uploaded_objects == 0 and info.value.report.windows == []
    assert "rank_0/window_0000" in info.value.report.failed

    code = main(["upload", str(other), url, *_cli_flags(options), "--quiet"])
    out, err = capsys.readouterr()
    assert code == 1 and "conflict" in err and "nothing was written" in err + out
    assert remote_files(s3_client, bucket, "b/") == before
    # plain xarray of the remote root still shows the dump that is there, whole
    tree = xr.open_datatree(url, engine="zarr", storage_options=options)
    assert {node.path for node in tree.subtree if node.path.count("/") == 2} == {
        "/rank_0/window_0000",
        "/rank_0/window_0001",
    }


def test_a_remote_root_with_other_attributes_is_a_conflict(bucket, options, copy_dump, s3_client):
    root = copy_dump("L0")
    foreign = {"zarr_format": 3, "node_type": "group", "attributes": {"other_tool": {"v": 1}}}
    s3_client.put_object(Bucket=bucket, Key="f/zarr.json", Body=json.dumps(foreign).encode())
    before = remote_files(s3_client, bucket, "f/")
    with pytest.raises(UploadError, match="conflict: the remote zarr.json differs") as info:
        upload(root, f"s3://{bucket}/f", storage_options=options)
    assert remote_files(s3_client, bucket, "f/") == before
    assert set(info.value.report.skipped) == {"rank_0/window_0000", "rank_0/window_0001"}


def test_a_later_upload_of_another_rank_reindexes_the_remote_root(bucket, options, copy_dump, s3_client, tmp_path):
    url = f"s3://{bucket}/j"
    upload(copy_dump("L0"), url, storage_options=options)
    rank1 = tmp_path / "rank1"
    with WindowWriter(rank1) as writer:
        data = np.arange(6, dtype=np.float32).reshape(2, 3)
        inv = InvocationWrite(
            "invocation_000000_forward",
            {"invocationId": 0, "step": 0, "direction": "forward", "kernelName": "k", "level": "L0", "rank": 1},
            [],
            [ArrayWrite("x", data, ("row", "col"), {"name": "x"})],
        )
        writer.write_window(WindowWrite(1, 0, {"schemaVersion": 5, "level": "L0", "windowIndex": 0, "rank": 1}, [inv]))
        writer.index_root()  # the local root's index lists rank 1 only
    upload(rank1, url, storage_options=options)
    listed = json.loads(remote_files(s3_client, bucket, "j/")["zarr.json"])["consolidated_metadata"]["metadata"]
    assert {k for k in listed if k.count("/") == 1} == {
        "rank_0/window_0000",
        "rank_0/window_0001",
        "rank_1/window_0000",
    }


def test_multipart_files_verify_by_multipart_etag(bucket, options, tmp_path, s3_client):
    root = tmp_path / "big"
    data = np.random.default_rng(0).standard_normal(12 << 18).astype(np.float32)  # 12 MiB, one chunk
    window = WindowWrite(
        0,
        0,
        {"level": "L0"},
        [InvocationWrite("invocation_000000_forward", {"step": 0}, [], [ArrayWrite("x", data, ("n",))])],
    )
    with WindowWriter(root, compressor="none", chunk_bytes=16 << 20) as writer:
        writer.write_window(window)
    chunk = root / "rank_0/window_0000/invocation_000000_forward/x/c.0"
    assert chunk.stat().st_size == (12 << 20) + 4  # the payload and its crc32c
    url = f"s3://{bucket}/mp"
    report = upload(root, url, storage_options=options, multipart_threshold=6 << 20, part_bytes=5 << 20)
    assert report.ok
    etag = s3_client.head_object(Bucket=bucket, Key="mp/rank_0/window_0000/invocation_000000_forward/x/c.0")["ETag"]
    raw = chunk.read_bytes()
    parts = [hashlib.md5(raw[i : i + (5 << 20)]).digest() for i in range(0, len(raw), 5 << 20)]
    assert etag.strip('"') == f"{hashlib.md5(b''.join(parts)).hexdigest()}-3"
    assert (
        upload(root, url, storage_options=options, multipart_threshold=6 << 20, part_bytes=5 << 20).uploaded_objects
        == 0
    )
    with xr.open_zarr(f"{url}/rank_0/window_0000/invocation_000000_forward", storage_options=options) as ds:
        np.testing.assert_array_equal(ds["x"].values, data)


def test_upload_on_ready_during_a_dump(bucket, options, tmp_path):
    root = tmp_path / "live"
    url = f"s3://{bucket}/live"
    with UploadOnReady(url, storage_options=options, delete_local=True) as uploader:
        assert SECRET not in repr(uploader)
        run_dump(root, "L0", steps=3, every_step=True, on_dump_ready=uploader)
    reports = uploader.reports
    assert [w for r in reports for w in r.windows] == [f"rank_0/window_{i:04d}" for i in range(3)]
    assert not list((root / "rank_0").glob("window_*"))  # every local window removed once verified
    remote = open_dump(url, storage_options=options)
    assert list(remote.windows()["status"]) == ["complete"] * 3
    assert len(remote.records()) > 0


def test_upload_on_ready_surfaces_failures(bucket, options, tmp_path):
    uploader = UploadOnReady(f"s3://no-such-bucket-{bucket}/x", storage_options=options)
    run_dump(tmp_path / "keep", "L0", steps=1, on_dump_ready=uploader)
    with pytest.raises(UploadError, match="no-such-bucket") as info:
        uploader.close()
    assert SECRET not in str(info.value)
    assert (tmp_path / "keep" / "rank_0" / "window_0000").is_dir()


def test_cli_upload(bucket, options, copy_dump, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("NO_COLOR", "1")
    root = copy_dump("L1")
    flags = [
        "-S",
        f"endpoint_url={options['endpoint_url']}",
        "-S",
        f"key={options['key']}",
        "-S",
        f"secret={options['secret']}",
    ]
    code = main(["upload", str(root), f"s3://{bucket}/cli", *flags, "--workers", "4"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "1 window(s) verified" in out and SECRET not in out + err
    assert "upload" in err  # the progress bar went to stderr
    code = main(["upload", str(root), f"s3://{bucket}/cli", *flags, "--json"])
    out, err = capsys.readouterr()
    assert code == 0 and json.loads(out)["uploaded_objects"] == 0 and json.loads(out)["ok"]
    code = main(["upload", str(root), f"s3://{bucket}/cli", *flags, "--delete-local", "--quiet"])
    capsys.readouterr()
    assert code == 0 and not (root / "rank_0" / "window_0000").exists()
    # usage / input errors (a missing bucket too): 2
    assert main(["upload", str(tmp_path), f"s3://{bucket}/cli", *flags]) == 2
    assert "not a megadump_zarr dump root" in capsys.readouterr().err
    assert main(["upload", str(root), str(tmp_path / "x"), *flags]) == 2
    capsys.readouterr()
    assert main(["upload", str(root), f"s3://{bucket}/cli", "--workers", "0"]) == 2
    capsys.readouterr()
    other = copy_dump("L0")
    code = main(["upload", str(other), f"s3://no-such-bucket-{bucket}/x", *flags, "--quiet"])
    out, err = capsys.readouterr()
    assert (
        code == 2
        and err.startswith(f"error: cannot upload to s3://no-such-bucket-{bucket}/x: bucket ")
        and SECRET not in out + err
    )
