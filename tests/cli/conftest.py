"""Fixtures of the ``megadump`` command-line tests: one tiny demo dump per worker, an in-process runner."""

from __future__ import annotations

from typing import Any

import pytest

from tests.cli._helpers import cli_runner


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``run_demo`` once: ``root/l0`` (one L0 window) and ``root/l1`` (one L1 window)."""
    from megadump_zarr.demo.run import run_demo

    return run_demo(tmp_path_factory.mktemp("demo") / "run", steps=2)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """``cli(*args)`` runs ``main([...])`` with a 200-column console and returns a :class:`Result`."""
    return cli_runner(capsys, monkeypatch, columns=200)
