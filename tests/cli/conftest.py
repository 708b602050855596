"""Fixtures of the ``megadump`` command-line tests: one tiny demo dump per worker, an in-process runner."""

from __future__ import annotations

from typing import Any

import pytest

from megadump_zarr.cli.main import main
from tests.cli._helpers import Result


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``run_demo`` once: ``root/l0`` (one L0 window) and ``root/l1`` (one L1 window)."""
    from megadump_zarr.demo.run import run_demo

    return run_demo(tmp_path_factory.mktemp("demo") / "run", steps=2)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """``cli(*args)`` runs ``main([...])`` with a 200-column console and returns a :class:`Result`."""
    monkeypatch.setenv("COLUMNS", "200")
    for name in ("FORCE_COLOR", "MEGADUMP_DEBUG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_COLOR", "1")

    def run(*args: Any) -> Result:
        capsys.readouterr()
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run
