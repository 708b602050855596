"""Every kind of array the writer writes is bound to its place, in both layouts: one mutation of a freshly written
dump per kind, each a ``verify`` problem (exit 1) naming the array and a reader error, never a value.

The mutations are what a checksum alone cannot see: a chunk (a pack's whole shard) moved from the other launch of
the same window (the next step's, valid everywhere: no document records a chunk's digest, only the window
inventory does), a document edited in every copy, and the bindings the window inventory cannot
give (a task id against its group's name, a row coordinate against ``sourceOffsetBytes``, a pack's task count
against its rows), the inventory rewritten to match where a forger could.
"""

from __future__ import annotations

from collections.abc import Callable
import json
from pathlib import Path
import shutil
from typing import Any

import pytest

from megadump_zarr import TensorDumpConfig, open_dump, tensor_dump
from megadump_zarr.cli.main import main
from megadump_zarr.demo.model import MoEBlock
from megadump_zarr.layout.inventory import INVENTORY_DIGEST_ATTR, INVENTORY_FILE, inventory_digest, metadata_digest
from megadump_zarr.read.errors import DumpIntegrityError

W0 = "rank_0/window_0000"
INV, INV1 = "invocation_000000_forward", "invocation_000001_forward"


def _dump(out: Path, level: str = "L1", **fields: Any) -> Path:
    block = MoEBlock()
    config = TensorDumpConfig(out, level=level, kernel_names="moe_experts", stages=["expert_up", "combine"], **fields)
    with tensor_dump(config) as dumper:
        for _ in range(2):  # two launches of one window: the second one's chunks are valid, not the first one's
            block(block.make_input())
            dumper.step()
    return out


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("bound")
    return {
        "tasks": _dump(base / "tasks", layout="tasks"),
        "packs": _dump(base / "packs", layout="packs"),
        "l0": _dump(base / "l0", level="L0"),
        "statistics": _dump(base / "statistics", mode="statistics"),
    }


def _copy(pristine: dict[str, Path], tmp_path: Path, kind: str) -> Path:
    return Path(shutil.copytree(pristine[kind], tmp_path / kind))


def edit_everywhere(window: Path, path: str, edit: Callable[[dict[str, Any]], None]) -> None:
    """Apply ``edit`` to the document of the node at ``path`` (below ``window``) in every copy of it."""
    for doc_path in window.rglob("zarr.json"):
        rel = doc_path.parent.relative_to(window).as_posix()
        doc = json.loads(doc_path.read_text())
        if rel == path:
            edit(doc)
        base = "" if rel == "." else rel + "/"
        for sub, entry in ((doc.get("consolidated_metadata") or {}).get("metadata") or {}).items():
            if base + sub == path:
                edit(entry)
        doc_path.write_text(json.dumps(doc))


def forge_inventory(window: Path, paths: list[str]) -> None:
    """Rewrite the window inventory as a self-consistent forger would: each array at ``paths`` listed with its
    present document's digest and its present chunks' digests, and the inventory's digest in the window document."""
    from megadump_zarr.layout.inventory import chunk_digest

    doc = json.loads((window / "zarr.json").read_text())
    nodes = doc["consolidated_metadata"]["metadata"]
    inventory = json.loads((window / INVENTORY_FILE).read_text())
    for path in paths:
        chunks = sorted(p for p in (window / path).iterdir() if p.name != "zarr.json")
        digests = "".join(f"{chunk_digest(p.read_bytes())[0]:08x}" for p in chunks)
        inventory["arrays"][path] = [metadata_digest(nodes[path]), digests]
    data = json.dumps(inventory, separators=(",", ":")).encode()
    (window / INVENTORY_FILE).write_bytes(data)
    doc["attributes"][INVENTORY_DIGEST_ATTR] = inventory_digest(data)
    (window / "zarr.json").write_text(json.dumps(doc))


def _move_chunk(root: Path, path: str) -> Path:
    """Replace every chunk of the array at ``path`` (below the window, in the first launch) with the second launch's;
    returns the chunk file moved."""
    source, target = root / W0 / path.replace(INV, INV1, 1), root / W0 / path
    moved = None
    for chunk in sorted(p for p in source.iterdir() if p.name != "zarr.json"):
        assert chunk.read_bytes() != (target / chunk.name).read_bytes()  # a different, valid chunk
        shutil.copyfile(chunk, target / chunk.name)
        moved = target / chunk.name
    assert moved is not None
    return moved


def _verify(root: Path, capsys: pytest.CaptureFixture[str], *names: str) -> str:
    """``megadump verify`` (and ``--deep``) exit 1, naming each of ``names``; returns the output."""
    out = ""
    for deep in ((), ("--deep",)):
        capsys.readouterr()
        code = main(["verify", str(root), *deep])
        out = capsys.readouterr().out
        assert code == 1, out
        for name in names:
            assert name in out, (name, out)
    return out


def _record(root: Path, **where: Any) -> str:
    records = open_dump(root).records()
    for column, value in where.items():
        records = records[records[column] == value]
    records = records[records["invocation"] == 0]
    return str(records["path"].iloc[0])


def test_a_fresh_dump_of_every_kind_verifies_with_no_note(pristine: dict[str, Path]) -> None:
    from megadump_zarr.verify import verify_dump

    for kind, root in pristine.items():
        report = verify_dump(root)
        assert report.ok, (kind, report.problems)
        assert all(w.notes == () for w in report.windows), kind  # every array bound: no "not bound" note


def test_task_record_chunk_from_another_window(
    pristine: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _copy(pristine, tmp_path, "tasks")
    path = _record(root, name="ws", stage="expert_up")
    array = path[len(W0) + 1 :]
    _move_chunk(root, array)
    _verify(root, capsys, path)
    with pytest.raises(DumpIntegrityError, match=path):
        open_dump(root).record_array(path).values


def test_l0_record_chunk_from_another_window(
    pristine: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _copy(pristine, tmp_path, "l0")
    path = _record(root, name="x")
    _move_chunk(root, path[len(W0) + 1 :])
    _verify(root, capsys, path)
    with pytest.raises(DumpIntegrityError, match=path):
        open_dump(root).record_array(path).values


def test_pack_record_shard_from_another_window(
    pristine: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _copy(pristine, tmp_path, "packs")
    records = open_dump(root).records()
    row = records[(records["invocation"] == 0) & records["pack_array"].notna()].iloc[0]
    array = str(row["pack_array"])
    _move_chunk(root, array[len(W0) + 1 :])
    _verify(root, capsys, array)
    with pytest.raises(DumpIntegrityError, match=array):
        open_dump(root).record_array(str(row["path"])).values


def test_row_coordinate_chunk_from_another_task(
    pristine: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's case: task 15's row coordinate replaced by task 13's (valid, other rows); the inventory names the
    chunk, and with the inventory forged to match, ``sourceOffsetBytes`` still does."""
    root = _copy(pristine, tmp_path, "tasks")
    group = f"{INV}/stages/combine"
    coordinate = f"{group}/task_000015/token"
    shutil.copyfile(root / W0 / group / "task_000013/token/c.0", root / W0 / coordinate / "c.0")
    _verify(root, capsys, f"{W0}/{coordinate}")
    with pytest.raises(DumpIntegrityError, match=coordinate):
        open_dump(root).tensor("x", stage="combine", invocation=0).values
    forge_inventory(root / W0, [coordinate])
    out = _verify(root, capsys, f"{W0}/{coordinate}")
    assert "starts at row 32 (sourceOffsetBytes)" in out or "(sourceOffsetBytes)" in out
    with pytest.raises(DumpIntegrityError, match=coordinate):
        open_dump(root).tensor("x", stage="combine", invocation=0).values


def test_row_coordinate_data_type_edited_in_every_copy(
    pristine: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _copy(pristine, tmp_path, "tasks")
    coordinate = f"{INV}/stages/combine/task_000015/token"
    edit_everywhere(root / W0, coordinate, lambda doc: doc.__setitem__("data_type", "float64"))
    _verify(root, capsys, f"{W0}/{coordinate}")
    with pytest.raises(DumpIntegrityError, match=coordinate):
        open_dump(root).tensor("x", stage="combine", invocation=0).values
    forge_inventory(root / W0, [coordinate])
    assert "not int64" in _verify(root, capsys, f"{W0}/{coordinate}")
    with pytest.raises(DumpIntegrityError, match=coordinate):
        open_dump(root).tensor("x", stage="combine", invocation=0).values


def test_task_id_edited_in_every_copy(
    pristine: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``task_000015`` whose taskId says 14 in its own document and the window's copy: no array changes, so the
    group's name is what binds it."""
    root = _copy(pristine, tmp_path, "tasks")
    group = f"{INV}/stages/combine/task_000015"
    edit_everywhere(root / W0, group, lambda doc: doc["attributes"].__setitem__("taskId", 14))
    assert "attributes.taskId 14 disagrees with its group's name 'task_000015'" in _verify(root, capsys, group)
    with pytest.raises(DumpIntegrityError, match="task_000015"):
        open_dump(root).records()
    capsys.readouterr()
    assert main(["ls", str(root), "--task", "14"]) == 1
    captured = capsys.readouterr()
    assert "task_000015" not in captured.out and "task_000015" in captured.err


def test_pack_task_count_disagrees_with_its_rows(
    pristine: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _copy(pristine, tmp_path, "packs")
    pack = next(p for p in (root / W0 / INV / "stages").glob("*/pack_*"))
    path = pack.relative_to(root / W0).as_posix()
    rows = json.loads((pack / "zarr.json").read_text())["attributes"]["taskCount"]
    edit_everywhere(root / W0, path, lambda doc: doc["attributes"].__setitem__("taskCount", rows + 3))
    assert f"does not hold the pack's {rows + 3} rows" in _verify(root, capsys, path)
    with pytest.raises(ValueError, match=f"does not hold the pack's {rows + 3} rows"):
        open_dump(root).records()


def test_statistics_table_from_another_window(
    pristine: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A statistics-mode dump's table replaced, chunk by chunk, by another run's (the golden's; here the next
    launch's): every column named by verify, and the records table refuses to read it."""
    root = _copy(pristine, tmp_path, "statistics")
    table = root / W0 / INV / "statistics"
    moved = []
    for column in sorted(p for p in table.iterdir() if p.is_dir()):
        source = root / W0 / INV1 / "statistics" / column.name
        for chunk in (p for p in source.iterdir() if p.name != "zarr.json"):
            if chunk.read_bytes() != (column / chunk.name).read_bytes():
                shutil.copyfile(chunk, column / chunk.name)
                moved.append(f"{W0}/{INV}/statistics/{column.name}/{chunk.name}")
    assert moved
    _verify(root, capsys, *moved)
    with pytest.raises(DumpIntegrityError, match="statistics"):
        open_dump(root).records()


def test_an_array_added_or_removed_behind_the_inventory(
    pristine: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _copy(pristine, tmp_path, "tasks")
    inventory = json.loads((root / W0 / INVENTORY_FILE).read_text())
    gone = next(p for p in inventory["arrays"] if p.endswith("/token"))
    inventory["arrays"].pop(gone)
    data = json.dumps(inventory, separators=(",", ":")).encode()
    (root / W0 / INVENTORY_FILE).write_bytes(data)
    out = _verify(root, capsys, f"{W0}/{gone}")
    assert "replaced or edited" in out and "not in the window inventory" in out
    edit_everywhere(
        root / W0, ".", lambda doc: doc["attributes"].__setitem__(INVENTORY_DIGEST_ATTR, inventory_digest(data))
    )
    assert "not in the window inventory" in _verify(root, capsys, f"{W0}/{gone}")
    (root / W0 / INVENTORY_FILE).unlink()
    assert "the window inventory is missing" in _verify(root, capsys, f"{W0}/{INVENTORY_FILE}")
    with pytest.raises(DumpIntegrityError, match="inventory"):
        open_dump(root).tensor("x", stage="combine", invocation=0).values
