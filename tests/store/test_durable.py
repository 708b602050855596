"""Durable commit: every byte of a local window is on disk before its status is written, then the status is synced."""

from __future__ import annotations

import os
from pathlib import Path
import sys

import numpy as np
import pytest

from megadump_zarr.layout.write_model import ArrayWrite, GroupWrite, InvocationWrite, WindowWrite
from megadump_zarr.store import backend as backend_mod
from megadump_zarr.store.writer import WindowWriter

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="resolves fds through /proc/self/fd")

INV = "invocation_000000_forward"


def _window() -> WindowWrite:
    rng = np.random.default_rng(0)
    groups = [GroupWrite("stages/s", {"stage": "s"}), GroupWrite("stages/s/task_000001", {"taskId": 1})]
    arrays = [
        ArrayWrite(
            "stages/s/task_000001/input_00_x",
            rng.standard_normal((8, 4)).astype(np.float32),
            ("row", "c"),
            {"name": "x"},
            coords={"row": np.arange(8)},
        ),
        ArrayWrite(
            "stages/s/task_000001/output_00_y",
            rng.standard_normal((64, 4)).astype(np.float32),
            ("row2", "c"),
            {"name": "y"},
        ),
    ]
    return WindowWrite(0, 0, {"level": "L1"}, [InvocationWrite(INV, {"invocationId": 0}, groups, arrays)])


class Recorder:
    """Records, in order, every file written, fsynced, renamed and every syncfs, through the backend module."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events: list[tuple[str, str]] = []
        real_write, real_fsync, real_replace, real_syncfs = (
            backend_mod._write_all,
            os.fsync,
            os.replace,
            backend_mod._syncfs,
        )

        def write_all(fd, data):
            self.events.append(("write", os.readlink(f"/proc/self/fd/{fd}")))
            return real_write(fd, data)

        def fsync(fd):
            self.events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
            return real_fsync(fd)

        def replace(src, dst):
            self.events.append(("rename", os.fspath(dst)))
            return real_replace(src, dst)

        def syncfs(fd, path):
            self.events.append(("syncfs", os.readlink(f"/proc/self/fd/{fd}")))
            return real_syncfs(fd, path)

        monkeypatch.setattr(backend_mod, "_write_all", write_all)
        monkeypatch.setattr(backend_mod.os, "fsync", fsync)
        monkeypatch.setattr(backend_mod.os, "replace", replace)
        monkeypatch.setattr(backend_mod, "_syncfs", syncfs)

    def index(self, kind: str, path: str) -> int:
        return self.events.index((kind, path))


def _tree(window: Path) -> tuple[list[str], list[str]]:
    files, dirs = [], [str(window)]
    for dirpath, dirnames, filenames in os.walk(window):
        dirs.extend(os.path.join(dirpath, d) for d in dirnames)
        files.extend(os.path.join(dirpath, f) for f in filenames)
    return files, dirs


def test_default_syncs_the_file_system_then_the_status_document_and_its_directory(tmp_path, monkeypatch):
    rec = Recorder(monkeypatch)
    root = tmp_path.resolve()
    window = Path(WindowWriter(root).write_window(_window()))
    status = str(window / "zarr.json")
    renames = [i for i, (kind, path) in enumerate(rec.events) if kind == "rename" and path == status]
    final_rename = renames[-1]  # the first rename is begin()'s "writing" document
    syncfs = rec.index("syncfs", str(window))
    written = [
        i
        for i, (kind, path) in enumerate(rec.events)
        if kind == "write" and path.startswith(str(window) + "/") and path != status and "/.zarr.json.tmp-" not in path
    ]
    files, _ = _tree(window)
    assert len(written) >= len(files) - 1  # every chunk and zarr.json below the window was written ...
    assert max(written) < syncfs  # ... before the one syncfs of the window's file system
    status_tmp = [path for kind, path in rec.events[syncfs:final_rename] if kind == "write"]
    assert len(status_tmp) == 1 and "/.zarr.json.tmp-" in status_tmp[0]  # then the status document, alone,
    assert ("fsync", status_tmp[0]) in rec.events[syncfs:final_rename]  # fsynced before its rename,
    assert rec.events[final_rename + 1 :] == [("fsync", str(window))]  # and the window directory after it
    assert [kind for kind, _ in rec.events].count("syncfs") == 1


def test_fsync_mode_syncs_every_file_and_directory_before_the_status_rename(tmp_path, monkeypatch):
    rec = Recorder(monkeypatch)
    root = tmp_path.resolve()
    window = Path(WindowWriter(root, durable="fsync").write_window(_window()))
    status = str(window / "zarr.json")
    final_rename = max(i for i, (kind, path) in enumerate(rec.events) if kind == "rename" and path == status)
    before = set(rec.events[:final_rename])
    files, dirs = _tree(window)
    for path in files:
        if path != status:
            assert ("fsync", path) in before or any(  # written through a temporary file, then renamed
                kind == "fsync" and p.startswith(os.path.dirname(path) + "/.") for kind, p in before
            ), path
    for path in [*dirs[1:], os.path.dirname(str(window)), str(root)]:
        assert ("fsync", path) in before, path
    assert ("fsync", str(window)) in rec.events[final_rename + 1 :]
    assert not any(kind == "syncfs" for kind, _ in rec.events)


def test_not_durable_syncs_nothing(tmp_path, monkeypatch):
    rec = Recorder(monkeypatch)
    window = Path(WindowWriter(tmp_path, durable=False).write_window(_window()))
    assert (window / "zarr.json").exists()
    assert not [event for event in rec.events if event[0] in ("fsync", "syncfs")]
    assert any(kind == "write" for kind, _ in rec.events)  # the recorder does see the writes


def test_syncfs_errors_name_the_path(tmp_path, monkeypatch):
    def failing(fd):
        return -1

    monkeypatch.setattr(backend_mod, "_syncfs_function", lambda: failing)
    with pytest.raises(OSError, match="syncfs failed"):
        WindowWriter(tmp_path).write_window(_window())


@pytest.mark.parametrize("bad", [1, "yes", None, "SYNCFS"])
def test_durable_must_be_a_bool_or_a_mode(tmp_path, bad):
    with pytest.raises(ValueError, match=f"durable must be True, False, 'syncfs' or 'fsync', got {bad!r}"):
        WindowWriter(tmp_path, durable=bad)


def test_no_syncfs_falls_back_to_fsync(tmp_path, monkeypatch):
    monkeypatch.setattr(backend_mod, "_syncfs_function", lambda: None)
    assert WindowWriter(tmp_path).backend.sync == "fsync"
    assert WindowWriter(tmp_path, durable=False).backend.sync is None
