"""A missing or damaged chunk of any of a pack's arrays along ``task`` is a verify problem and a reader error.

The readers build a pack's rows from these arrays (ids, row bounds, offsets, statistics): none may read as
fill values, none may be another array's chunk."""

from __future__ import annotations

from pathlib import Path
import shutil

import pytest

from megadump_zarr import open_dump
from megadump_zarr.read.errors import DumpIntegrityError
from megadump_zarr.verify import verify_dump

DATA = Path(__file__).parents[1] / "read" / "data" / "format10" / "packs"
WINDOW = "rank_0/window_0000"
PACK = "invocation_000000_forward/stages/combine/pack_0000"
COLUMNS = [
    ("task_id", "c.0"),
    ("owner_id", "c.0"),
    ("core_id", "c.0"),
    ("worker_id", "c.0"),
    ("stage_task_index", "c.0"),
    ("core_type", "c.0"),
    ("tile_row_start", "c.0"),
    ("token_stop", "c.0"),
    ("input_01_ws_offset", "c.0"),
    ("output_00_out_stats", "c.0.0"),
    ("statistic", "c.0"),
]


@pytest.fixture
def root(tmp_path) -> Path:
    return Path(shutil.copytree(DATA, tmp_path / "packs"))


def test_the_fixture_verifies(root):
    assert verify_dump(open_dump(root)).ok


@pytest.mark.parametrize(("array", "chunk"), COLUMNS)
def test_a_missing_chunk_is_named(root, array, chunk):
    (root / WINDOW / PACK / array / chunk).unlink()
    key = f"{WINDOW}/{PACK}/{array}/c"
    with pytest.raises(DumpIntegrityError, match="chunk is missing") as info:
        open_dump(root).records()
    assert info.value.key == key
    report = verify_dump(open_dump(root))
    assert not report.ok
    assert key in {p.key for p in report.problems}, report.problems


@pytest.mark.parametrize(("array", "chunk"), COLUMNS)
def test_a_flipped_byte_is_named(root, array, chunk):
    file = root / WINDOW / PACK / array / chunk
    raw = bytearray(file.read_bytes())
    raw[0] ^= 0x01
    file.write_bytes(bytes(raw))
    with pytest.raises(DumpIntegrityError, match="checksum mismatch") as info:
        open_dump(root).records()
    assert info.value.key == f"{WINDOW}/{PACK}/{array}/c"
    assert not verify_dump(open_dump(root)).ok
