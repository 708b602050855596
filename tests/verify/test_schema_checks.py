"""Issue 23.4: ``verify --deep`` said ok for documents readers misread; each is now a problem naming the
document and field (megadump_zarr.verify.documents)."""

from __future__ import annotations

import json
from pathlib import Path
import shutil

import pytest

from megadump_zarr.verify import verify_dump
from megadump_zarr.layout.schema import FORMAT_VERSION

WINDOW = "rank_0/window_0000"
INVOCATION = "invocation_000000_forward"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from megadump_zarr.demo.run import run_demo

    return run_demo(tmp_path_factory.mktemp("schema") / "run", steps=1).root / "l1"


@pytest.fixture
def root(pristine: Path, tmp_path: Path) -> Path:
    shutil.copytree(pristine, tmp_path / "l1")
    return tmp_path / "l1"


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def _save(path: Path, doc: object) -> None:
    path.write_text(json.dumps(doc))


def _window(root: Path, edit) -> None:
    path = root / WINDOW / "zarr.json"
    doc = _load(path)
    edit(doc)
    _save(path, doc)


def _invocation(root: Path, edit) -> None:
    """Edit the invocation's own document and its consolidated entry in the window document alike."""
    own = root / WINDOW / INVOCATION / "zarr.json"
    doc = _load(own)
    edit(doc["attributes"])
    _save(own, doc)
    _window(root, lambda d: edit(d["consolidated_metadata"]["metadata"][INVOCATION]["attributes"]))


def _delete_invocation(root: Path) -> None:
    (root / WINDOW / INVOCATION / "zarr.json").unlink()
    _window(root, lambda d: d["consolidated_metadata"]["metadata"].pop(INVOCATION))


CASES = {
    "deleted invocation": (_delete_invocation, f"{WINDOW}/{INVOCATION}/zarr.json", f"group '{INVOCATION}' holding"),
    "node_type array": (
        lambda r: _window(r, lambda d: d.update(node_type="array")),
        f"{WINDOW}/zarr.json",
        "node_type 'array' is not 'group'",
    ),
    "zarr_format 2": (
        lambda r: _window(r, lambda d: d.update(zarr_format=2)),
        f"{WINDOW}/zarr.json",
        "zarr_format 2 is not 3",
    ),
    "level mismatch": (
        lambda r: _invocation(r, lambda a: a.update(level="L0")),
        f"{WINDOW}/{INVOCATION}/zarr.json",
        "attributes.level 'L0' disagrees with the window's 'L1'",
    ),
    "direction sideways": (
        lambda r: _invocation(r, lambda a: a.update(direction="sideways")),
        f"{WINDOW}/{INVOCATION}/zarr.json",
        "attributes.direction 'sideways' is not one of ['forward', 'backward']",
    ),
    "wrong taskCount": (
        lambda r: _invocation(r, lambda a: a.update(taskCount=a["taskCount"] + 1)),
        f"{WINDOW}/{INVOCATION}/zarr.json",
        "attributes.taskCount 5 disagrees with the 4 task records",
    ),
    "garbage rank document": (
        lambda r: (r / "rank_0" / "zarr.json").write_text("]]garbage"),
        "rank_0/zarr.json",
        "the rank document does not parse",
    ),
}


def test_the_pristine_dump_verifies(root: Path) -> None:
    report = verify_dump(root, deep=True)
    assert report.ok, report.problems


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_blind_spot_is_a_problem_naming_document_and_field(root: Path, case: str) -> None:
    edit, key, fragment = CASES[case]
    edit(root)
    report = verify_dump(root, deep=True)
    assert not report.ok
    matching = [p for p in report.problems if p.key == key and fragment in p.what]
    assert matching, [(p.key, p.what) for p in report.problems]


def test_the_format_is_one_constant() -> None:
    assert FORMAT_VERSION == 10


def test_another_format_is_refused(root: Path) -> None:
    from megadump_zarr.read.errors import FormatVersionError

    _window(root, lambda d: d["attributes"].update(schemaVersion=99))
    with pytest.raises(FormatVersionError, match="format 99 was written by a newer megadump_zarr"):
        verify_dump(root, deep=True)
