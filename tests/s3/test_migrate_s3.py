"""``megadump migrate`` on an object store (moto): a format-9 dump rewritten in place as format 10, as locally."""

from __future__ import annotations

import json
from pathlib import Path
import shutil
from typing import Any

from megadump_zarr.cli.main import main
from megadump_zarr.migrate import migrate_dump
from tests.cli.test_migrate import FIXTURES, make_format9
from tests.s3.conftest import all_objects, local_files


def test_migrate_on_s3(bucket: str, options: dict[str, Any], s3_client: Any, tmp_path: Path) -> None:
    root = Path(shutil.copytree(FIXTURES / "packs", tmp_path / "dump"))
    make_format9(root)
    for key, data in local_files(root).items():
        s3_client.put_object(Bucket=bucket, Key=f"run/{key}", Body=data)
    url = f"s3://{bucket}/run"
    assert migrate_dump(url, options).migrated == 1
    stored = all_objects(s3_client, bucket, "run/")
    for key, data in local_files(FIXTURES / "packs").items():
        if key == "SHA256SUMS":
            continue
        got = stored[f"run/{key}"]
        if key.endswith(".json"):
            assert json.loads(got) == json.loads(data), key
        else:
            assert got == data, key  # exact: stored bytes
    assert migrate_dump(url, options).migrated == 0
    flags = [arg for key, value in options.items() for arg in ("-S", f"{key}={value}")]
    assert main(["verify", url, *flags]) == 0
