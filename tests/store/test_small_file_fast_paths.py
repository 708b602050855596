"""The tasks path's per-file fast paths give the same bytes as the general ones."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from megadump_zarr.store import backend as backend_mod
from megadump_zarr.store.metadata import dumps, stats_bytes


@pytest.mark.parametrize(
    "stats",
    [
        {"min": -1.7364730834960938, "max": 1e300, "mean": None, "l2norm": 5e-324, "nanCount": 0, "infCount": 3},
        {"min": -0.0, "max": math.inf, "mean": -math.inf, "l2norm": math.nan, "nanCount": 2**70, "infCount": -1},
        {"min": True, "max": np.float32(1.1), "mean": np.int64(3), "l2norm": 0.1, "nanCount": 0, "infCount": 0},
        {"odd name": 1, 'quote"': 2.5},
    ],
)
def test_stats_bytes_are_what_dumps_writes(stats):
    assert stats_bytes(stats) == dumps(stats)


@pytest.mark.parametrize("data", [b"0123456789" * 50, (b"abcdefgh" * 40, np.arange(64, dtype=np.uint8), b"crc!")])
def test_short_writes_are_finished(tmp_path, monkeypatch, data):
    """A write the file system takes only in part (a filling disk) is finished by further writes."""
    real_write = os.write

    def short_write(fd, buffer):
        view = memoryview(buffer).cast("B")
        return real_write(fd, view[: max(1, view.nbytes // 3)])

    def short_writev(fd, buffers):
        first = memoryview(buffers[0]).cast("B")
        return real_write(fd, first[: max(1, first.nbytes // 2)])

    monkeypatch.setattr(backend_mod.os, "write", short_write)
    monkeypatch.setattr(backend_mod.os, "writev", short_writev)
    store = backend_mod.LocalBackend(str(tmp_path))
    store.put_many([("a/b/file", data), ("a/empty", b"")])
    expected = data if isinstance(data, bytes) else b"".join(memoryview(p).cast("B").tobytes() for p in data)
    assert (tmp_path / "a" / "b" / "file").read_bytes() == expected
    assert (tmp_path / "a" / "empty").read_bytes() == b""


def test_put_many_calls_a_replaced_put_for_every_item(tmp_path, monkeypatch):
    seen = []
    real = backend_mod.LocalBackend.put

    def spy(self, key, data, *, atomic=False):
        seen.append(key)
        real(self, key, data, atomic=atomic)

    monkeypatch.setattr(backend_mod.LocalBackend, "put", spy)
    backend_mod.LocalBackend(str(tmp_path)).put_many([("x/1", b"1"), ("x/2", b"22")])
    assert seen == ["x/1", "x/2"]
    assert (tmp_path / "x" / "2").read_bytes() == b"22"
