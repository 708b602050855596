"""``Dump.verify()`` is deprecated (issue 25: the read layer no longer imports ``verify``): it warns, points at
``verify_dump(dump)`` and still gives the same report for one release; ``verify_dump`` takes an open Dump."""

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

    root = run_demo(tmp_path_factory.mktemp("deprecated") / "run", steps=2).root / "l0"
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


def test_dump_verify_warns_and_still_works(damaged: Path) -> None:
    dump = open_dump(damaged)
    with pytest.warns(DeprecationWarning, match=r"Dump.verify\(\) is deprecated .*verify_dump\(dump, deep=\.\.\.\)"):
        report = dump.verify(deep=True)
    assert report.deep and report.to_dict() == verify_dump(dump, deep=True).to_dict()
