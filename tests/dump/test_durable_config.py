"""``TensorDumpConfig(durable=...)``: validated, and wired through ``tensor_dump`` into the window writer."""

from __future__ import annotations

import pytest
import torch

from megadump_zarr import TensorDumpConfig, schedule, tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from megadump_zarr.store import backend as backend_mod


@pytest.mark.parametrize(("value", "kind"), [(1, "int"), ("no", "str"), (None, "NoneType")])
def test_durable_must_be_a_bool(tmp_path, value, kind):
    with pytest.raises(TypeError, match=f"^durable must be a bool, got {kind}$"):
        TensorDumpConfig(tmp_path, durable=value)


def test_durable_is_the_default():
    assert TensorDumpConfig("x").durable is True


@pytest.mark.parametrize("durable", [True, False])
def test_each_committed_window_syncs_its_file_system_unless_not_durable(tmp_path, monkeypatch, durable):
    calls: list[int] = []
    real = backend_mod._syncfs

    def counting(fd, path):
        calls.append(fd)
        return real(fd, path)

    monkeypatch.setattr(backend_mod, "_syncfs", counting)
    block = MoEBlock(DemoConfig())
    config = TensorDumpConfig(tmp_path / "dump", level="L0", kernel_names="moe_router", durable=durable)
    with tensor_dump(config, schedule(wait=0, warmup=0, active=1, repeat=2)) as dumper:
        for _ in range(2):
            with torch.no_grad():
                block(block.make_input())
            dumper.step()
    windows = sorted((tmp_path / "dump" / "rank_0").glob("window_*"))
    assert len(windows) == 2
    assert len(calls) == (2 if durable else 0)
