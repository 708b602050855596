"""verify names a missing chunk of a pack's ``task``/``owner_id``/``core_id`` array.

These arrays are not in the schema-6 view the chunk check walks; before the fix their missing chunk was
skipped as "reported by the chunk check" and verify said ok while ``xr.open_zarr(pack)`` read zeros."""

from __future__ import annotations

from pathlib import Path
import shutil

import pytest

from megadump_zarr import open_dump
from megadump_zarr.verify import verify_dump
from tests.read._repack import repack

DATA = Path(__file__).parents[1] / "read" / "data" / "schema6" / "l1"
WINDOW = "rank_0/window_0000"


@pytest.mark.parametrize("array", ["task", "owner_id", "core_id"])
def test_a_missing_row_id_chunk_is_a_verify_problem(tmp_path, array):
    plain = Path(shutil.copytree(DATA, tmp_path / "plain"))
    pack = repack(plain, tmp_path / "packed")[0]
    root = tmp_path / "packed"
    assert verify_dump(open_dump(root)).ok
    (root / WINDOW / pack / array / "c.0").unlink()
    report = verify_dump(open_dump(root))
    assert not report.ok
    assert [str(p) for p in report.problems] == [f"{WINDOW}/{pack}/{array}/c.0: chunk is missing"]
