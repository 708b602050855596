"""Helpers of the reliability tests (imported as ``tests.reliability._helpers``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
import os
from pathlib import Path
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:  # `python -m pytest` puts the repository root on sys.path; a bare `pytest` may not
    sys.path.insert(0, _ROOT)


def tree_snapshot(directory: str | os.PathLike[str], exclude: str | os.PathLike[str] | None = None) -> dict[str, tuple]:
    """Every entry below ``directory`` (except the ``exclude`` subtree): relative path -> (kind, size, mtime_ns).

    Args:
        directory: Where to look.
        exclude: A subtree left out (the dump root).
    """
    directory = os.path.abspath(directory)
    skip = os.path.abspath(exclude) if exclude is not None else None
    entries: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(directory):
        if skip is not None:
            dirnames[:] = [d for d in dirnames if os.path.join(dirpath, d) != skip]
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            info = os.lstat(full)
            kind = "link" if os.path.islink(full) else ("dir" if os.path.isdir(full) else "file")
            entries[os.path.relpath(full, directory)] = (
                kind,
                info.st_size if kind == "file" else 0,
                info.st_mtime_ns if kind == "file" else 0,
            )
    return entries


def assert_confined(root: str | os.PathLike[str]) -> int:
    """Every entry below ``root`` is a plain file or directory whose real path lies inside ``root``.

    Args:
        root: The dump root.

    Returns:
        How many entries were checked.
    """
    root = os.path.realpath(root)
    count = 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            assert not os.path.islink(full), f"symbolic link in the dump: {full}"
            real = os.path.realpath(full)
            assert real.startswith(root + os.sep), f"{full} resolves outside the root: {real}"
            assert "\x00" not in name and "\\" not in name, f"unsafe file name {name!r}"
            count += 1
    return count


def can_mount() -> bool:
    """Whether this process may mount file systems (root with CAP_SYS_ADMIN, e.g. in a privileged container)."""
    return hasattr(os, "geteuid") and os.geteuid() == 0 and sys.platform.startswith("linux")


def _run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(command), capture_output=True, text=True, timeout=30)


@contextmanager
def tmpfs(directory: Path, size: str) -> Iterator[Path]:
    """Mount a tmpfs of ``size`` at ``directory`` (skip the test when mounting is not allowed).

    Args:
        directory: Mount point (created).
        size: tmpfs size option, e.g. ``"1m"``.
    """
    directory.mkdir(parents=True, exist_ok=True)
    if not can_mount():
        pytest.skip("mounting a tmpfs needs root on Linux")
    done = _run("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(directory))
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield directory
    finally:
        _run("umount", "-l", str(directory))


@contextmanager
def read_only_dir(directory: Path) -> Iterator[Path]:
    """``directory`` made read-only for this process: chmod 0o555, and when that does not stop writes
    (root bypasses permissions) a read-only bind mount of it onto itself; skip if neither works.

    Args:
        directory: An existing directory.
    """
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o555)
    mounted = False
    try:
        if _writable(directory):
            if not can_mount():
                pytest.skip("running as a user that bypasses permissions and cannot mount")
            done = _run("mount", "--bind", str(directory), str(directory))
            if done.returncode:
                pytest.skip(f"cannot bind-mount here: {done.stderr.strip()}")
            mounted = True
            done = _run("mount", "-o", "remount,ro,bind", str(directory))
            if done.returncode or _writable(directory):
                pytest.skip(f"cannot make a read-only bind mount here: {done.stderr.strip()}")
        yield directory
    finally:
        if mounted:
            _run("umount", "-l", str(directory))
        os.chmod(directory, 0o755)


def _writable(directory: Path) -> bool:
    probe = directory / ".probe"
    try:
        probe.write_bytes(b"x")
    except OSError:
        return False
    probe.unlink()
    return True


def spy_store_inputs(monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, str]]:
    """Record the digest of every data array handed to the store, per window path (``{url: {rel: sha256}}``).

    Args:
        monkeypatch: The test's monkeypatch fixture.
    """
    from benchmarks.reliability import array_digest
    from megadump_zarr.store.writer import WindowSession

    digests: dict[str, dict[str, str]] = {}
    original = WindowSession.write_invocation

    def spy(self: Any, invocation: Any) -> None:
        mine = digests.setdefault(self.url, {})
        for array in invocation.arrays:
            mine[f"{invocation.name}/{array.path}"] = array_digest(array.data)
        original(self, invocation)

    monkeypatch.setattr(WindowSession, "write_invocation", spy)
    return digests


def train_step(block: Any) -> None:
    """One forward and backward step of the demo block."""
    x = block.make_input().requires_grad_()
    block(x).float().pow(2).mean().backward()


def as_array(values: Any) -> np.ndarray:
    """``values`` as a numpy array (torch tensors detached to the host)."""
    if hasattr(values, "detach"):
        return values.detach().cpu().numpy()
    return np.asarray(values)
