"""Bounded reads: a truncated record costs its stored bytes, not its logical size; crafted shapes are refused.

The issue's two cases, on real windows written by the store's writer: a 200000×4 float32 record truncated
to 16 stored bytes (compared against itself: it took 117 s when its view had one dask block per row),
and a crafted ``actualShape [2**40, 16]`` (``show`` ran for minutes at 2.4 GB).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from megadump_zarr import open_dump
from megadump_zarr.analyse.compare import compare
from megadump_zarr.cli.main import main
from megadump_zarr.read.truncated import MAX_LOGICAL_BYTES
from megadump_zarr.store.writer import WindowWriter


@pytest.fixture
def tiny_prefix(hand, tmp_path: Path) -> Path:
    record = hand.Record("big", np.arange(4, dtype=np.float32), 0, logical_shape=(200000, 4), declared_rows=200000)
    with WindowWriter(tmp_path / "dump") as writer:
        writer.write_window(hand.window({1: [record]}))
    return tmp_path / "dump"


def test_truncated_view_has_blocks_for_its_stored_bytes(tiny_prefix: Path) -> None:
    dump = open_dump(tiny_prefix)
    path = dump.records()["path"].iloc[0]
    view = dump.record_array(path)
    assert view.shape == (200000, 4)
    # one block for the captured row, the NaN rest in blocks of 2**22 elements: 2 blocks, not 200000
    assert view.data.numblocks == (2, 1)
    values = view.values
    np.testing.assert_array_equal(values[0], [0, 1, 2, 3])
    assert np.isnan(values[1:]).all()


def test_truncated_record_compared_with_itself(tiny_prefix: Path) -> None:
    result = compare(open_dump(tiny_prefix), open_dump(tiny_prefix))
    # the 4 stored elements are compared, the 799996 never stored are not: a partial pass that says so
    assert list(result["verdict"]) == ["pass_partial"] and list(result["elements"]) == [4]
    assert result["note"].iloc[0].startswith("compared 1 of 200000 rows (4 of 800000 elements)")


def _craft(root: Path, shape: list[int]) -> None:
    document = root / "rank_0" / "window_0000" / "zarr.json"
    doc = json.loads(document.read_text())
    for entry in doc["consolidated_metadata"]["metadata"].values():
        if (entry.get("attributes") or {}).get("name") == "big":
            entry["attributes"]["actualShape"] = shape
    document.write_text(json.dumps(doc))


def test_crafted_logical_shape_is_refused(tiny_prefix: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _craft(tiny_prefix, [2**40, 16])
    dump = open_dump(tiny_prefix)
    path = dump.records()["path"].iloc[0]
    with pytest.raises(
        ValueError, match=r"attributes.actualShape \[1099511627776, 16\] describes 70368744177664 bytes"
    ):
        dump.record_array(path)
    capsys.readouterr()
    assert main(["show", str(tiny_prefix), "big"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "actualShape" in err and len(err.strip().splitlines()) == 1
    assert 16 * 4 * 2**40 > MAX_LOGICAL_BYTES


@pytest.mark.parametrize("shape", [[2**62, 16], [2**40, 2**40], [-1, 4], [1.5, 4]])
def test_shapes_beyond_int64_or_not_integers(tiny_prefix: Path, shape: list) -> None:
    _craft(tiny_prefix, shape)
    with pytest.raises(ValueError, match="attributes.actualShape"):
        open_dump(tiny_prefix).records()
