"""Store faults: a full disk during export, a read-only output root, a parent that cannot be created."""

from __future__ import annotations

import errno
import os
from pathlib import Path
import threading
import time
from typing import Any

import pytest

from tests.reliability._helpers import read_only_dir, spy_store_inputs, tmpfs, train_step  # noqa: I001

from benchmarks.reliability import combine_digests, verify_root
from megadump_zarr import TensorDumpConfig, schedule, tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from megadump_zarr.dump.exporter import ExportError
from megadump_zarr.read import open_dump
import megadump_zarr.store.backend as backend
from megadump_zarr.store.writer import window_status

L1_EXTRA = {"kernel_names": "moe_experts", "stages": ("expert_up", "unpermute")}


def _config(root: Path, level: str, **extra: Any) -> TensorDumpConfig:
    if level == "L1":
        extra = {**L1_EXTRA, **extra}
    return TensorDumpConfig(root, level=level, chunk_bytes=512, **extra)


class FailingPut:
    """LocalBackend.put that raises OSError(ENOSPC) from the ``fail_at``-th call after ``arm()``
    (once when ``transient``, else on every later call too)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, transient: bool) -> None:
        self.transient = transient
        self.calls = 0
        self.failures = 0
        self.fail_at: int | None = None
        self._lock = threading.Lock()
        self._put = backend.LocalBackend.put
        monkeypatch.setattr(backend.LocalBackend, "put", self)

    def arm(self, fail_at: int) -> None:
        with self._lock:
            self.calls, self.fail_at = 0, fail_at

    def __get__(self, instance: Any, owner: Any) -> Any:
        return lambda key, data, *, atomic=False: self(instance, key, data, atomic=atomic)

    def __call__(self, instance: Any, key: str, data: Any, *, atomic: bool = False) -> None:
        with self._lock:
            self.calls += 1
            fail = self.fail_at is not None and (
                self.calls == self.fail_at or (not self.transient and self.calls > self.fail_at)
            )
            if fail:
                self.failures += 1
        if fail:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._put(instance, key, data, atomic=atomic)


def _committed(digests: dict[str, dict[str, str]], root: Path, windows: list[int]) -> dict[str, str]:
    paths = [str(root / "rank_0" / f"window_{w:04d}") for w in windows]
    return {p: combine_digests(digests[p]) for p in paths}


# --------------------------------------------------------------------------- ENOSPC (injected)
@pytest.mark.timeout(60)
@pytest.mark.parametrize("level", ["L0", "L1"])
@pytest.mark.parametrize("transient", [False, True], ids=["disk-stays-full", "one-failure"])
@pytest.mark.parametrize("on_error", ["discard", "keep"])
def test_enospc_during_export_is_a_clean_oserror(tmp_path, monkeypatch, level, transient, on_error):
    root = tmp_path / "dump"
    digests = spy_store_inputs(monkeypatch)
    failing = FailingPut(monkeypatch, transient=transient)
    block = MoEBlock(DemoConfig(tokens=16, d_model=8))
    with tensor_dump(_config(root, level, on_error=on_error), schedule(wait=0, warmup=0, active=1)) as dumper:
        train_step(block)
        dumper.step()  # window 0: fine
        train_step(block)
        failing.arm(fail_at=4)  # window 1: the "writing" document, two more puts, then the disk is full
        started = time.perf_counter()
        with pytest.raises(OSError) as info:
            dumper.step()
        assert time.perf_counter() - started < 30
        dumper._invocations.clear()  # see test_dumper_recovers_after_a_failed_export: the dumper keeps them
    error = info.value
    assert type(error) is OSError and error.errno == errno.ENOSPC
    assert "No space left on device" in str(error)
    notes = getattr(error, "__notes__", [])
    window = f"{root}/rank_0/window_0001"
    if on_error == "discard":  # the default: nothing of the failed window stays (removing needs no space)
        assert window_status(root, 0, 1) is None and not (root / "rank_0" / "window_0001").exists()
        assert notes == [
            f"while exporting Tensor dump window {window}",
            f"{window} was discarded (on_error='discard'): nothing of it was kept",
        ]
        statuses = ["complete"]
    elif transient:  # the abort commit could write: the window is marked aborted
        assert window_status(root, 0, 1) == "aborted" and notes == [f"while exporting Tensor dump window {window}"]
        statuses = ["complete", "aborted"]
    else:  # the abort commit failed too: the window stays "writing" and the note says so
        assert window_status(root, 0, 1) == "writing"
        assert any("as aborted also failed" in note and "window_0001" in note for note in notes), notes
        statuses = ["complete", "writing"]
    result = verify_root(root, _committed(digests, root, [0]))  # window 0 is intact
    assert result.problems == [] and result.committed == 1 and result.complete == 1
    dump = open_dump(root)
    assert list(dump.windows()["status"]) == statuses
    assert set(dump.records()["window"]) == {0}


@pytest.mark.timeout(60)
def test_enospc_in_background_export_is_an_export_error_naming_the_window(tmp_path, monkeypatch):
    root = tmp_path / "dump"
    digests = spy_store_inputs(monkeypatch)
    failing = FailingPut(monkeypatch, transient=False)
    block = MoEBlock(DemoConfig(tokens=16, d_model=8))
    with pytest.raises(ExportError) as info:
        with tensor_dump(_config(root, "L0", async_export=True), schedule(wait=0, warmup=0, active=1)) as dumper:
            train_step(block)
            dumper.step()
            dumper.flush()  # window 0 committed
            failing.arm(fail_at=3)
            train_step(block)
            dumper.step()  # window 1 fails on the exporter thread
            dumper.flush()
    error = info.value
    assert isinstance(error, RuntimeError)
    assert "rank_0/window_0001" in str(error) and "No space left on device" in str(error)
    assert isinstance(error.__cause__, OSError) and error.__cause__.errno == errno.ENOSPC
    assert window_status(root, 0, 1) is None  # discarded (the default on_error)
    result = verify_root(root, _committed(digests, root, [0]))
    assert result.problems == [] and result.committed == 1


@pytest.mark.timeout(60)
def test_dumper_recovers_after_a_failed_export(tmp_path, monkeypatch):
    root = tmp_path / "dump"
    failing = FailingPut(monkeypatch, transient=True)
    block = MoEBlock(DemoConfig(tokens=16, d_model=8))
    with tensor_dump(_config(root, "L0"), schedule(wait=0, warmup=0, active=1)) as dumper:
        train_step(block)
        dumper.step()
        train_step(block)
        failing.arm(fail_at=4)
        with pytest.raises(OSError):
            dumper.step()  # the disk was full for a moment; the user logs it and trains on
        assert dumper.window_index == 2 and not dumper._invocations
        for _ in range(2):
            train_step(block)
            dumper.step()
    # on_error="discard" (the default): the failed window is gone, the later ones are whole
    assert [window_status(root, 0, w) for w in range(4)] == ["complete", None, "complete", "complete"]


@pytest.mark.timeout(60)
def test_sync_export_error_names_the_window(tmp_path, monkeypatch):
    root = tmp_path / "dump"
    failing = FailingPut(monkeypatch, transient=True)
    block = MoEBlock(DemoConfig(tokens=16, d_model=8))
    with tensor_dump(_config(root, "L0"), schedule(wait=0, warmup=0, active=1)) as dumper:
        train_step(block)
        failing.arm(fail_at=3)
        with pytest.raises(OSError) as info:
            dumper.step()
        dumper._invocations.clear()
    text = " ".join([str(info.value), *getattr(info.value, "__notes__", [])])
    assert "window_0000" in text


# --------------------------------------------------------------------------- a real full disk
@pytest.mark.timeout(120)
def test_real_full_tmpfs(tmp_path, monkeypatch):
    """A 1.6 MB tmpfs holds two windows of this size (about 620 KB each); the third hits ENOSPC."""
    with tmpfs(tmp_path / "small", "1600k") as mount:
        root = mount / "dump"
        digests = spy_store_inputs(monkeypatch)
        block = MoEBlock(DemoConfig(tokens=64, d_model=32))
        committed: list[int] = []
        error: OSError | None = None
        with tensor_dump(TensorDumpConfig(root, level="L0"), schedule(wait=0, warmup=0, active=1)) as dumper:
            for window in range(6):
                train_step(block)
                started = time.perf_counter()
                try:
                    dumper.step()
                except OSError as caught:
                    error = caught
                    assert time.perf_counter() - started < 60
                    dumper._invocations.clear()  # see test_dumper_recovers_after_a_failed_export
                    break
                committed.append(window)
        assert error is not None, "the tmpfs never filled up"
        assert error.errno == errno.ENOSPC, repr(error)
        assert len(committed) >= 1
        failed = len(committed)
        assert window_status(root, 0, failed) is None  # discarded (the default on_error)
        result = verify_root(root, _committed(digests, root, committed))
        assert result.problems == [] and result.committed == len(committed)
        statuses = list(open_dump(root).windows()["status"])
        assert statuses == ["complete"] * failed


# --------------------------------------------------------------------------- unwritable output roots
@pytest.fixture
def read_only_root(tmp_path):
    with read_only_dir(tmp_path / "ro") as directory:
        yield directory / "dump"


@pytest.fixture
def blocked_root(tmp_path):
    """A root whose parent cannot be created: a path component is a regular file."""
    (tmp_path / "file").write_text("not a directory")
    return tmp_path / "file" / "sub" / "dump"


def _unwritable(request: pytest.FixtureRequest, which: str) -> Path:
    return request.getfixturevalue(which)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("which", ["read_only_root", "blocked_root"])
@pytest.mark.parametrize("level", ["L0", "L1"])
def test_unwritable_root_is_refused_when_the_dump_is_entered(request, which, level):
    """Entering the dump probes the root: no launch runs, or is slowed, for captures it cannot keep."""
    root = _unwritable(request, which)
    dumper = tensor_dump(_config(root, level), schedule(wait=0, warmup=0, active=1))
    try:
        with pytest.raises(OSError) as info:
            dumper.__enter__()
    finally:
        if dumper._entered:
            dumper.__exit__(None, None, None)
    assert info.value.errno in (errno.EROFS, errno.EACCES, errno.ENOTDIR), repr(info.value)
    assert not dumper._entered and not root.exists()
    from megadump_zarr.diagnostics import active_session

    assert active_session() is None  # the session was never activated
