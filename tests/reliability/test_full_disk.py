"""A dump failure never stops or skips the user's kernel: with a full disk (ENOSPC from a real
``WindowWriter`` subclass) the kernel runs, its outputs equal a run without dumping, and the error is
raised at ``step()`` (or at exit), the same at L0 and L1, sync and async, for every ``on_error``."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
import torch

from megadump_zarr import TensorDumpConfig
from megadump_zarr.dump.dumper import TensorDumper
from megadump_zarr.store.writer import WindowWriter
from tests.dump._dump_helpers import MegaKernel, copy_rows_graph


class FullDiskWriter(WindowWriter):
    """A window writer on a file system with no space left: every write raises ENOSPC."""

    def put_sidecar(self, key: str, data: bytes) -> str:
        raise OSError(errno.ENOSPC, "No space left on device", key)

    def begin(self, rank, window_index, attrs):
        raise OSError(errno.ENOSPC, "No space left on device", f"rank_{rank}/window_{window_index:04d}")


def dumper(out: Path, **fields) -> TensorDumper:
    config = TensorDumpConfig(out, **fields)
    return TensorDumper(config, schedule=None, on_dump_ready=None, sink=FullDiskWriter(out))


def launch(kernel: MegaKernel) -> torch.Tensor:
    a = torch.arange(32, dtype=torch.float32).reshape(8, 4)
    b = torch.zeros_like(a)
    kernel.launch([a, b])
    return b


@pytest.mark.parametrize("level", ["L0", "L1"])
@pytest.mark.parametrize("async_export", [False, True])
@pytest.mark.parametrize("on_error", ["discard", "keep"])
def test_full_disk_never_stops_the_kernel(tmp_path, level, async_export, on_error):
    kernel = MegaKernel(copy_rows_graph(), name="copy")
    expected = launch(kernel)  # no dumping
    selection = {"stages": "copy"} if level == "L1" else {}
    with pytest.raises(OSError) as raised:
        with dumper(tmp_path / "out", level=level, async_export=async_export, on_error=on_error, **selection) as d:
            out = launch(kernel)  # the launch itself never raises
            assert torch.equal(out, expected)
            d.step()  # the dump's failure surfaces here
    assert raised.value.errno == errno.ENOSPC
    assert torch.equal(out, expected) and torch.equal(expected, torch.arange(32.0).reshape(8, 4) * 2)


def test_plan_failure_surfaces_at_exit_without_step(tmp_path):
    kernel = MegaKernel(copy_rows_graph(), name="copy")
    expected = launch(kernel)
    with pytest.raises(OSError) as raised:
        with dumper(tmp_path / "out", level="L1", stages="copy"):
            out = launch(kernel)
    assert raised.value.errno == errno.ENOSPC and torch.equal(out, expected)
    assert any(
        "while saving the L1 plan of" in note and "the kernel ran without it" in note for note in raised.value.__notes__
    )


def test_plan_failure_alone_keeps_the_window(tmp_path):
    """Only the plan store is full: the kernel runs, the window is committed complete, and step() does not
    raise for the plan: it warns, naming the window and that its commit stands."""

    class PlanStoreFull(WindowWriter):
        def put_sidecar(self, key: str, data: bytes) -> str:
            raise OSError(errno.ENOSPC, "No space left on device", key)

    from megadump_zarr import open_dump

    out_dir = tmp_path / "out"
    kernel = MegaKernel(copy_rows_graph(), name="copy")
    expected = launch(kernel)
    d = TensorDumper(
        TensorDumpConfig(out_dir, level="L1", stages="copy"),
        schedule=None,
        on_dump_ready=None,
        sink=PlanStoreFull(out_dir),
    )
    with d:
        out = launch(kernel)
        with pytest.warns(RuntimeWarning, match="saving an L1 plan failed") as caught:
            d.step()
    assert torch.equal(out, expected)
    (warning,) = [w for w in caught if "L1 plan" in str(w.message)]
    text = str(warning.message)
    assert "No space left on device" in text and "rank_0/window_0000" in text and "its commit stands" in text
    assert open_dump(out_dir).windows()["status"].tolist() == ["complete"]
    records = open_dump(out_dir).records()
    assert len(records) > 0 and not list(out_dir.glob(".plans_*"))
