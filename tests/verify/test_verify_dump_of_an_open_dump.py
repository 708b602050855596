"""``verify_dump`` takes an open Dump as well as a root; a Dump has no ``verify`` method (the read layer ranks
below ``verify`` and does not reach up to it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from megadump_zarr import open_dump
from megadump_zarr.verify import verify_dump
from tests._layout import record_chunk


@pytest.fixture(scope="module")
def damaged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A demo dump whose first record's first chunk is gone (a committed window: a problem to report)."""
    from megadump_zarr.demo.run import run_demo

    root = run_demo(tmp_path_factory.mktemp("open_dump") / "run", steps=2).root / "l0"
    path = open_dump(root).records()["path"].iloc[0]
    span = record_chunk(root, path)
    Path(span.file).unlink()
    return root


def test_verify_dump_takes_an_open_dump_and_names_its_root(damaged: Path) -> None:
    dump = open_dump(damaged)
    report = verify_dump(dump)
    by_url = verify_dump(damaged)
    assert report.root == dump.root and not report.ok
    assert [(p.window, p.key, p.what) for p in report.problems] == [(p.window, p.key, p.what) for p in by_url.problems]


def test_an_open_dump_has_no_verify_method(damaged: Path) -> None:
    dump = open_dump(damaged)
    assert not hasattr(dump, "verify")
    assert verify_dump(dump, deep=True).deep
