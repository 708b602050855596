"""A full disk leaves no temporary files: every failure path of the local backend's atomic writes
(``put(atomic=True)``, ``put_durable``) removes its ``.NAME.tmp-*`` file."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
import torch

from megadump_zarr import TensorDumpConfig, tensor_dump
from megadump_zarr.store import backend as backend_module
from tests.dump._dump_helpers import MegaKernel, copy_rows_graph


@pytest.fixture
def full_disk_for_temporaries(monkeypatch):
    """Writes into a temporary file fail with ENOSPC after part of the data, as on a full disk (the file
    was created, so a failed write used to leave it behind); other writes go through."""
    real = backend_module._write_all
    failed: list[str] = []

    def write_all(fd: int, data) -> None:
        name = os.readlink(f"/proc/self/fd/{fd}")
        if ".tmp-" in name:
            failed.append(name)
            os.write(fd, b"{")  # a partial document, then the disk is full
            raise OSError(errno.ENOSPC, "No space left on device", name)
        real(fd, data)

    monkeypatch.setattr(backend_module, "_write_all", write_all)
    return failed


def debris(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if ".tmp-" in p.name]


@pytest.mark.parametrize("level, durable", [("L0", False), ("L1", False), ("L0", True), ("L1", True)])
def test_full_disk_leaves_no_temporary_files(tmp_path, full_disk_for_temporaries, level, durable):
    kernel = MegaKernel(copy_rows_graph(), name="copy")
    out = tmp_path / "out"
    selection = {"stages": "copy"} if level == "L1" else {}
    with pytest.raises(OSError) as raised:
        with tensor_dump(TensorDumpConfig(out, level=level, durable=durable, **selection)) as dumper:
            a = torch.arange(32, dtype=torch.float32).reshape(8, 4)
            b = torch.zeros_like(a)
            kernel.launch([a, b])
            assert torch.equal(b, a * 2)  # the kernel ran
            dumper.step()
    assert raised.value.errno == errno.ENOSPC
    assert full_disk_for_temporaries  # the failure did hit a temporary file ...
    assert debris(tmp_path) == []  # ... and none remains


@pytest.mark.parametrize("durable", [None, "fsync"])
def test_backend_atomic_put_removes_its_temporary(tmp_path, full_disk_for_temporaries, durable):
    store = backend_module.LocalBackend(str(tmp_path), sync=durable)
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "zarr.json").write_bytes(b"old")
    with pytest.raises(OSError, match="No space left on device"):
        store.put("g/zarr.json", b'{"new": 1}', atomic=True)
    with pytest.raises(OSError, match="No space left on device"):
        store.put_durable("g/zarr.json", b'{"new": 1}')
    assert debris(tmp_path) == [] and (tmp_path / "g" / "zarr.json").read_bytes() == b"old"  # old content intact


def test_full_disk_during_convert_leaves_no_temporary_files(tmp_path, full_disk_for_temporaries):
    from megadump_zarr.interop import convert_legacy
    from tests.interop._legacy_format import demo_tensors, l0_invocations, write_rank_window

    legacy = tmp_path / "legacy"
    write_rank_window(legacy, "L0", 0, 0, l0_invocations(demo_tensors(torch.float32)))
    with pytest.raises(OSError) as raised:
        convert_legacy(legacy, tmp_path / "zarr")
    assert raised.value.errno == errno.ENOSPC or "No space left on device" in str(raised.value)
    assert full_disk_for_temporaries and debris(tmp_path / "zarr") == []
