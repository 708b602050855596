"""Fixtures of the object-store tests: moto's S3 server on loopback (one per test worker), a fresh bucket
per test, fast retry delays, and small demo dumps written locally once per worker."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
import shutil
from typing import Any
import uuid

import pytest

pytest.importorskip("obstore")
pytest.importorskip("s3fs")
boto3 = pytest.importorskip("boto3")
from tests._moto import moto_s3  # noqa: E402  (after the importorskips above)

import torch  # noqa: E402

from megadump_zarr import TensorDumpConfig, tensor_dump  # noqa: E402
from megadump_zarr.demo.model import DemoConfig, MoEBlock  # noqa: E402
from megadump_zarr.diagnostics import active_session, deactivate_session, schedule  # noqa: E402
from megadump_zarr.store.object_backend import retry_policy  # noqa: E402

ACCESS_KEY = "AKIAMEGADUMPTEST0001"
SECRET = "sEcReT/megadump+never-shown-0123456789"  # must never appear in objects, reprs or errors


@pytest.fixture(scope="session")
def moto() -> Iterator[dict[str, Any]]:
    """moto's threaded S3 server on 127.0.0.1 (a free port)."""
    with moto_s3() as endpoint:
        host, port = endpoint.removeprefix("http://").rsplit(":", 1)
        yield {"host": host, "port": int(port), "endpoint": endpoint}


def s3_options(endpoint: str) -> dict[str, Any]:
    """s3fs-style storage options (also understood by the object backend and the read layer)."""
    return {"key": ACCESS_KEY, "secret": SECRET, "endpoint_url": endpoint}


@pytest.fixture
def s3_client(moto: dict[str, Any]) -> Any:
    """A boto3 client on moto."""
    return boto3.client(
        "s3",
        endpoint_url=moto["endpoint"],
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET,
        region_name="us-east-1",
    )


@pytest.fixture
def bucket(s3_client: Any) -> str:
    """A new, empty bucket."""
    name = f"dumps-{uuid.uuid4().hex[:12]}"
    s3_client.create_bucket(Bucket=name)
    return name


@pytest.fixture
def options(moto: dict[str, Any]) -> dict[str, Any]:
    """Storage options for moto."""
    return s3_options(moto["endpoint"])


@pytest.fixture(autouse=True)
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Tiny retry delays (the policy is the same otherwise); no stray AWS configuration."""
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    with retry_policy(attempts=8, base_delay=0.002, max_delay=0.05, timeout=20):
        yield
    session = active_session()
    if session is not None:
        deactivate_session(session)


def all_objects(client: Any, bucket: str, prefix: str = "") -> dict[str, bytes]:
    """Every object of ``bucket`` below ``prefix``: key -> bytes."""
    found = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            found[item["Key"]] = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
    return found


def local_files(root: Path) -> dict[str, bytes]:
    """Every non-hidden file below ``root``: relative key -> bytes."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    }


def train_step(block: MoEBlock) -> None:
    x = block.make_input().requires_grad_()
    out = block(x)
    out.float().pow(2).mean().backward()


L1_FILTERS = {
    "kernel_names": ("moe_experts", "moe_experts_backward"),
    "stages": ("expert_up", "expert_down", "expert_up_bwd"),
    "owner_ids": (0, 1),
}


def run_dump(
    output: str | Path,
    level: str,
    *,
    storage_options: dict[str, Any] | None = None,
    steps: int = 2,
    on_dump_ready: Callable[[Any], None] | None = None,
    every_step: bool = False,
    **config: Any,
) -> Any:
    """The demo block for ``steps`` training steps under an L0 or L1 dump (one window, or one per step)."""
    extra = dict(L1_FILTERS) if level == "L1" else {}
    extra.update(config)
    cfg = TensorDumpConfig(output, level=level, storage_options=storage_options, **extra)
    block = MoEBlock(DemoConfig(dtype=torch.float32))
    plan = schedule(wait=0, warmup=0, active=1) if every_step else None
    with tensor_dump(cfg, plan, on_dump_ready=on_dump_ready) as dumper:
        for _ in range(steps):
            train_step(block)
            dumper.step()
    return dumper


@pytest.fixture(scope="session")
def local_dumps(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Local L0 (two windows) and L1 (one window) demo dumps, written once per worker; copy before changing."""
    base = tmp_path_factory.mktemp("local-dumps")
    run_dump(base / "l0", "L0", every_step=True)
    run_dump(base / "l1", "L1")
    return {"L0": base / "l0", "L1": base / "l1"}


@pytest.fixture
def copy_dump(tmp_path: Path, local_dumps: dict[str, Path]) -> Callable[[str], Path]:
    """``copy_dump("L0")``: a private copy of a local demo dump."""

    def make(level: str) -> Path:
        target = tmp_path / f"copy-{level.lower()}-{uuid.uuid4().hex[:6]}"
        shutil.copytree(local_dumps[level], target)
        return target

    return make
