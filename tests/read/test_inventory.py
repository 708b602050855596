"""The window inventory's one rule (``read.inventory``): the readers raise the first problem ``verify`` names, in the
same words, and :func:`inventory_problems` names every chunk, document and array that is not what the inventory
lists, and nothing else.
"""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings, strategies as st
import numpy as np
import pytest

from megadump_zarr import open_dump
from megadump_zarr.layout.inventory import (
    INVENTORY_DIGEST_ATTR,
    INVENTORY_FILE,
    InventoryEntry,
    inventory_digest,
    metadata_digest,
)
from megadump_zarr.read.errors import DumpIntegrityError
from megadump_zarr.read.inventory import InventoryProblem, inventory_problems, read_inventory
from megadump_zarr.store.writer import WindowWriter
from megadump_zarr.verify import verify_dump
from tests.read.conftest import HandRecord, hand_window

WINDOW = "rank_0/window_0000"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    records = [
        HandRecord("a", np.arange(8, dtype=np.float32).reshape(4, 2), 0),
        HandRecord("b", np.arange(8, 16, dtype=np.float32).reshape(4, 2), 0, index=1),
    ]
    with WindowWriter(tmp_path / "dump") as writer:
        writer.write_window(hand_window({1: records}))
    return tmp_path / "dump"


def _array_dirs(root: Path) -> dict[str, Path]:
    """Record name -> its array's directory."""
    found = {}
    for doc_path in (root / WINDOW).rglob("zarr.json"):
        doc = json.loads(doc_path.read_text())
        if doc.get("node_type") == "array" and (doc.get("attributes") or {}).get("name"):
            found[doc["attributes"]["name"]] = doc_path.parent
    return found


def _swap(root: Path, a: Path, b: Path) -> None:
    chunk_a, chunk_b = (next(p for p in d.iterdir() if p.name != "zarr.json") for d in (a, b))
    data_a, data_b = chunk_a.read_bytes(), chunk_b.read_bytes()
    chunk_a.write_bytes(data_b)
    chunk_b.write_bytes(data_a)


def _edit(root: Path, a: Path, b: Path) -> None:
    """Edit ``a``'s document in every copy (its own and the window's), as a careful forger would."""
    rel = a.relative_to(root / WINDOW).as_posix()
    own = json.loads((a / "zarr.json").read_text())
    own["attributes"]["note"] = "edited"
    (a / "zarr.json").write_text(json.dumps(own))
    window = json.loads((root / WINDOW / "zarr.json").read_text())
    window["consolidated_metadata"]["metadata"][rel]["attributes"]["note"] = "edited"
    (root / WINDOW / "zarr.json").write_text(json.dumps(window))


def _unlist(root: Path, a: Path, b: Path) -> None:
    """Remove ``a`` from the inventory, and record the inventory's new digest in the window document."""
    inventory = json.loads((root / WINDOW / INVENTORY_FILE).read_text())
    del inventory["arrays"][a.relative_to(root / WINDOW).as_posix()]
    data = json.dumps(inventory, separators=(",", ":")).encode()
    (root / WINDOW / INVENTORY_FILE).write_bytes(data)
    window = json.loads((root / WINDOW / "zarr.json").read_text())
    window["attributes"][INVENTORY_DIGEST_ATTR] = inventory_digest(data)
    (root / WINDOW / "zarr.json").write_text(json.dumps(window))


def _drop_inventory(root: Path, a: Path, b: Path) -> None:
    (root / WINDOW / INVENTORY_FILE).unlink()


def _same_words(message: str, problem: object) -> bool:
    """Whether a reader's message is ``verify``'s problem: its subject, key (and the dump), then the same words."""
    key, what = problem.key, problem.what  # type: ignore[attr-defined]
    head, found, tail = message.partition(f"{key} in ")
    rest = tail.split(" ", 1)[1] if found and " " in tail else ""  # after the dump's URL (no spaces in tmp_path)
    subject = what[: len(what) - len(rest)].strip()
    return bool(found and rest) and what.endswith(f" {rest}") and head.endswith(f"{subject} ")


@pytest.mark.parametrize("damage", [_swap, _edit, _unlist, _drop_inventory], ids=lambda f: f.__name__.strip("_"))
def test_readers_raise_the_problem_verify_names(root: Path, damage) -> None:
    arrays = _array_dirs(root)
    path = arrays["a"].relative_to(root).as_posix()
    assert verify_dump(root).ok and open_dump(root).record_array(path).values.sum() == 28
    damage(root, arrays["a"], arrays["b"])
    problems = verify_dump(root).problems
    with pytest.raises(DumpIntegrityError) as info:
        open_dump(root).record_array(path).values
    message = str(info.value)
    assert any(_same_words(message, p) for p in problems), (message, problems)


def test_read_inventory_names_what_is_wrong_with_the_file() -> None:
    key = f"{WINDOW}/{INVENTORY_FILE}"
    assert read_inventory(None, key)[1] == InventoryProblem(
        key,
        "the window inventory",
        "is missing: a committed window lists every array it holds and its chunks' digests there",
    )
    assert read_inventory(b"[1]", key)[1].what == "is not valid: is not a JSON object"
    good = b'{"inventoryVersion":1,"arrays":{"x":["' + b"0" * 32 + b'","0000000a"]}}'
    entries, problem = read_inventory(good, key, inventory_digest(good), check_recorded=True)
    assert problem is None and entries == {"x": InventoryEntry("0" * 32, (10,))}
    entries, problem = read_inventory(good, key, "f" * 64, check_recorded=True)
    assert entries and "the inventory was replaced or edited" in problem.what and "'ffff" in problem.what
    assert read_inventory(good, key, "f" * 64)[1] is None  # the readers do not hold it to the window document


def test_a_problem_names_a_key_a_subject_and_what() -> None:
    with pytest.raises(ValueError, match="InventoryProblem.subject '' is not a non-empty string"):
        InventoryProblem("k", "", "is wrong")
    problem = InventoryProblem("a/c/0", "chunk", "is wrong")
    assert problem.message(" in /d") == "chunk a/c/0 in /d is wrong" and problem.described == "chunk is wrong"


_DIGEST = st.integers(0, 2**32 - 1)


@settings(max_examples=200, deadline=None)
@given(
    listed=st.lists(st.one_of(st.none(), _DIGEST), max_size=6),
    reads=st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 8)), _DIGEST, st.booleans()), max_size=8),
    grid=st.one_of(st.none(), st.integers(0, 8)),
    edited=st.booleans(),
)
def test_inventory_problems_name_exactly_what_differs(listed, reads, grid, edited) -> None:
    doc = {"node_type": "array", "shape": [4], "attributes": {"name": "x"}}
    entry = InventoryEntry(metadata_digest(doc), tuple(listed))
    given_doc = {**doc, "attributes": {"name": "y"}} if edited else doc
    chunks = [(f"a/c/{n}", index, digest, trailing) for n, (index, digest, trailing) in enumerate(reads)]
    found = list(inventory_problems("a", entry, given_doc, grid, chunks))
    expected = ["a/zarr.json"] if edited else []
    expected += ["a/zarr.json"] if grid is not None and grid != len(listed) else []
    for key, index, digest, _ in chunks:
        if index is None or index >= len(listed) or listed[index] not in (None, digest):
            expected.append(key)
    assert [p.key for p in found] == expected
    for problem in found:
        if problem.subject != "chunk":
            continue
        index, digest, trailing = next((i, d, t) for k, i, d, t in chunks if k == problem.key)
        if index is None or index >= len(listed):
            assert f"({len(listed)} chunk(s) listed for its array)" in problem.what
        else:
            assert problem.what.startswith(
                f"has digest {digest:08x} but the window inventory records {listed[index]:08x}"
            )
            assert ("it is corrupt, or a chunk from elsewhere" in problem.what) is not trailing


def test_an_array_the_inventory_does_not_list_is_named_once() -> None:
    (problem,) = inventory_problems("w/a", None, {"node_type": "array"}, 3, [("w/a/c/0", 0, 1, True)])
    assert problem.key == "w/a" and problem.subject == "array" and "not in the window inventory" in problem.what
