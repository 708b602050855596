"""The in-process ``megadump`` runner the verify CLI tests share (200 columns, no colour)."""

from __future__ import annotations

import pytest

from tests.cli._helpers import cli_runner


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    return cli_runner(capsys, monkeypatch, columns=200)
