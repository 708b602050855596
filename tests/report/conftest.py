"""Fixtures of the report tests: a pair of demo dumps that differ (bfloat16 under test, float32 reference)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.cli._helpers import cli_runner


@pytest.fixture(scope="session")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``(bf16 run, fp32 run)`` demo summaries: the L1 windows differ by rounding and by token routing."""
    from megadump_zarr.demo.run import run_demo

    base = tmp_path_factory.mktemp("report")
    return run_demo(base / "bf16", steps=2, dtype="bfloat16"), run_demo(base / "fp32", steps=2, dtype="float32")


@pytest.fixture(scope="session")
def fault_pair(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``(faulty L1 root, clean L1 root, fault)``: expert_down's task for expert 1 adds 0.5 to what it writes."""
    from tests._faults import dump_demo_step

    base = tmp_path_factory.mktemp("fault")
    fault = dump_demo_step(base / "faulty", "L1", fault={"stage": "expert_down", "owner": 1, "delta": 0.5})
    dump_demo_step(base / "clean", "L1")
    return base / "faulty", base / "clean", fault


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """``cli(*args)`` runs ``main([...])`` in-process at 120 columns and returns a ``Result``."""
    return cli_runner(capsys, monkeypatch, columns=120)


@pytest.fixture(scope="session")
def ownerless_pair(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``(a, b)`` L1 roots of a matmul + GELU kernel without owners; ``a``'s rows 24..31 of ``x`` differ."""
    from tests._mlp import dump_pair

    return dump_pair(tmp_path_factory.mktemp("ownerless"))
