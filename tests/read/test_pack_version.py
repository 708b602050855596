"""A pack whose group says another pack format (``megadumpPack`` not 1 to 4) is refused, never read as format 1.

The readers find packs by name; before the check a future pack format (or an edited attribute) was read
with this reader's rules, silently."""

from __future__ import annotations

import json
from pathlib import Path
import shutil

import pytest

from megadump_zarr import open_dump
from megadump_zarr.verify import verify_dump
from tests.read._repack import repack

DATA = Path(__file__).parent / "data" / "schema6" / "l1"
WINDOW = "rank_0/window_0000"


def _set_version(root: Path, pack: str, version: object) -> None:
    """Set the pack group's ``megadumpPack`` in its own document and in the window's consolidated copy."""
    own = root / WINDOW / pack / "zarr.json"
    doc = json.loads(own.read_text())
    doc["attributes"]["megadumpPack"] = version
    own.write_text(json.dumps(doc))
    window = root / WINDOW / "zarr.json"
    doc = json.loads(window.read_text())
    doc["consolidated_metadata"]["metadata"][pack]["attributes"]["megadumpPack"] = version
    window.write_text(json.dumps(doc))


@pytest.fixture
def packed(tmp_path) -> tuple[Path, str]:
    plain = Path(shutil.copytree(DATA, tmp_path / "plain"))
    packs = repack(plain, tmp_path / "packed")
    return tmp_path / "packed", packs[0]


@pytest.mark.parametrize("version", [5, None, "1"])
def test_an_unknown_pack_format_is_refused_naming_the_pack(packed, version):
    root, pack = packed
    assert len(open_dump(root).records()) == 18  # format 1 reads
    _set_version(root, pack, version)
    message = f"{WINDOW}/{pack}/zarr.json: attributes.megadumpPack {version!r} is not a pack format this reader knows [1, 2, 3, 4]"
    with pytest.raises(
        ValueError,
        match=f"malformed task-record pack: {message}".replace(".", r"\.")
        .replace("(", r"\(")
        .replace(")", r"\)")
        .replace("[", r"\["),
    ):
        open_dump(root).records()
    report = verify_dump(open_dump(root))
    assert not report.ok
    assert any(message in str(problem) for problem in report.problems), report.problems
