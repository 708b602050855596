"""``megadump verify`` / ``verify_dump(dump)``: a whole dump passes; each kind of damage is named (window, key, what).

A real demo run (one L0 and one L1 window, two steps) is copied per test and damaged on disk.
"""

from __future__ import annotations

from collections.abc import Callable
import json
from pathlib import Path
import shutil
from typing import Any

import pytest

import zarr
from zarr.storage import LocalStore

from megadump_zarr import open_dump
from megadump_zarr.cli.main import main
from megadump_zarr.verify import verify_dump
from tests._layout import pack_of, record_chunk

WINDOW = "rank_0/window_0000"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from megadump_zarr.demo.run import run_demo

    return run_demo(tmp_path_factory.mktemp("verify") / "run", steps=2).root


@pytest.fixture
def run(pristine: Path, tmp_path: Path) -> Path:
    shutil.copytree(pristine, tmp_path / "run")
    return tmp_path / "run"


def _cli(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def _record(root: Path, name: str = "x") -> str:
    records = open_dump(root).records()
    return str(records[(records["name"] == name) & (records["stored_bytes"] > 0)]["path"].iloc[0])


def _logical(root: Path, path: str) -> zarr.Array:
    """The metadata of the record at ``path`` as readers describe it (its own document, or its row's in a pack):
    a zarr array of its document, for its chunk keys and codecs (never read)."""
    _, _, doc = open_dump(root)._record(path)
    return zarr.Array.from_dict(zarr.storage.StorePath(LocalStore(root, read_only=True), path), doc)


def _edit(root: Path, path: str, change: Callable[[dict[str, Any]], None]) -> None:
    """Apply ``change`` to a record's document everywhere it is stored: its own zarr.json and every
    consolidated copy above it (so the documents still agree with each other). A packed record's
    document is its row's entry of the pack array's ``attributes.records``: ``change`` sees it as
    ``{"attributes": entry}``."""
    found = None if (root / path / "zarr.json").is_file() else pack_of(root, path.rpartition("/")[0])
    if found is not None:
        pack, row = found
        path = f"{pack.relative_to(root).as_posix()}/{path.rpartition('/')[2]}"
        change_record = change

        def change(doc: dict[str, Any]) -> None:
            entry = {"attributes": doc["attributes"]["records"][row]}
            change_record(entry)
            doc["attributes"]["records"][row] = entry["attributes"]

    rel = path[len(WINDOW) + 1 :]
    own = root / path / "zarr.json"
    doc = json.loads(own.read_text())
    change(doc)
    own.write_text(json.dumps(doc))
    parts = rel.split("/")
    for depth in range(len(parts)):
        holder = root / WINDOW / "/".join(parts[:depth]) / "zarr.json"
        if not holder.exists():
            continue
        group = json.loads(holder.read_text())
        entries = (group.get("consolidated_metadata") or {}).get("metadata") or {}
        sub = "/".join(parts[depth:])
        if sub in entries:
            change(entries[sub])
            holder.write_text(json.dumps(group))


def test_whole_dump_passes(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for level in ("l0", "l1"):
        report = verify_dump(open_dump(run / level), deep=True)
        assert report.ok, [str(p) for p in report.problems]
        assert report.windows[0].checked and report.windows[0].arrays > 0
        assert report.windows[0].chunks == report.windows[0].arrays  # demo arrays are one chunk each
        code, out, _ = _cli(capsys, "verify", run / level, "--deep")
        assert (
            code == 0 and "rank_0/window_0000: ok" in out and out.strip().splitlines()[-1].startswith("ok: 1 window(s)")
        )
    code, out, _ = _cli(capsys, "verify", run / "l1", "--json")
    document = json.loads(out)
    assert code == 0 and document["ok"] is True and document["problems"] == 0
    assert document["windows"][0]["window"] == WINDOW and document["chunks"] > 0


def test_missing_chunk(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = run / "l0"
    path = _record(root)
    chunk = next(p for p in (root / path).iterdir() if p.name != "zarr.json")
    chunk.unlink()
    report = verify_dump(root)
    assert [(p.window, p.key, p.what) for p in report.problems] == [
        (WINDOW, f"{path}/{chunk.name}", "chunk is missing")
    ]
    code, out, _ = _cli(capsys, "verify", root)
    assert code == 1 and f"{path}/{chunk.name}: chunk is missing" in out
    code, out, _ = _cli(capsys, "verify", root, "--json")
    assert code == 1 and json.loads(out)["windows"][0]["problems"] == [
        {"key": f"{path}/{chunk.name}", "what": "chunk is missing"}
    ]


def test_flipped_byte_fails_its_checksum(run: Path) -> None:
    root = run / "l1"
    path = _record(root, "ws")
    logical = _logical(root, path)
    chunk = logical.metadata.encode_chunk_key((0,) * logical.ndim)
    span = record_chunk(root, path)  # the stored bytes: a chunk file, or an inner chunk of a pack's shard
    before = span.read()
    span.flip(0)
    assert span.read() != before and len(span.read()) == len(before)
    (problem,) = verify_dump(root).problems
    assert problem.key == f"{path}/{chunk}"
    codecs = [c.to_dict()["name"] for c in logical.metadata.codecs]
    assert ("crc32c checksum mismatch" if "crc32c" in codecs else "does not decode") in problem.what


def test_documents_disagree(run: Path) -> None:
    root = run / "l0"
    path = _record(root)
    own = root / path / "zarr.json"
    doc = json.loads(own.read_text())
    doc["attributes"]["note"] = "edited behind the window's back"
    own.write_text(json.dumps(doc))
    (problem,) = verify_dump(root).problems
    assert problem.key == f"{path}/zarr.json"
    assert problem.what == "differs from the window's consolidated metadata in attributes"


def test_attributes_against_the_array(run: Path) -> None:
    root = run / "l1"
    path = _record(root, "ws")

    def change(doc: dict[str, Any]) -> None:
        doc["attributes"]["storedBytes"] += 4

    _edit(root, path, change)
    problems = verify_dump(root).problems
    assert [p.key for p in problems] == [f"{path}/zarr.json"] * 2
    assert problems[0].what.startswith("attributes.storedBytes ")
    assert "disagrees with shape" in problems[0].what
    assert "the window inventory records" in problems[1].what  # edited in every copy: not its writer's document


def test_deep_recomputes_statistics(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = run / "l0"
    path = _record(root)

    def change(doc: dict[str, Any]) -> None:
        doc["attributes"]["stats"]["max"] = 1234.5

    _edit(root, path, change)
    (edited,) = verify_dump(root).problems  # the documents agree; the inventory tells the edit
    assert edited.key == f"{path}/zarr.json" and "the document was edited (in every copy)" in edited.what
    problem = verify_dump(root, deep=True).problems[-1]  # the data tell what is wrong with it
    assert problem.key == f"{path}/zarr.json"
    assert problem.what.startswith("attributes.stats.max is 1234.5 but the data give ")
    assert _cli(capsys, "verify", root, "--deep")[0] == 1


def test_manifest_and_window_document(run: Path) -> None:
    root = run / "l0"
    window_doc = root / WINDOW / "zarr.json"
    doc = json.loads(window_doc.read_text())
    doc["attributes"]["invocations"] = doc["attributes"]["invocations"][:-1] + ["invocation_000099_forward"]
    window_doc.write_text(json.dumps(doc))
    whats = sorted(p.what for p in verify_dump(root).problems)
    assert any("lists invocation_000099_forward, which the window does not hold" in w for w in whats)
    assert any("is not listed in attributes.invocations" in w for w in whats)
    window_doc.write_text("{not json")
    (problem,) = verify_dump(root).problems
    assert problem.key == f"{WINDOW}/zarr.json" and "does not parse" in problem.what


def test_torn_window_is_listed_not_checked(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = run / "l0"
    (root / WINDOW / "zarr.json").unlink()
    report = verify_dump(root)
    assert report.ok and [(w.window, w.status, w.checked) for w in report.windows] == [(WINDOW, "writing", False)]
    code, out, _ = _cli(capsys, "verify", root)
    assert code == 0 and "not committed: not checked" in out


def test_partial_launches_are_reported(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = run / "l1"
    path = _record(root, "ws")

    def flag(doc: dict[str, Any]) -> None:
        doc["attributes"]["partial"] = True

    _edit(root, path, flag)
    _reinventory(root, path)  # as its writer would have listed it: only the partial flag is checked here
    (problem,) = verify_dump(root).problems  # flagged record, but the window lists no partial launch
    assert problem.key == f"{path}/zarr.json"
    assert "1 record(s) are flagged partial outside the window's partialLaunches" in problem.what
    window_doc = root / WINDOW / "zarr.json"
    doc = json.loads(window_doc.read_text())
    doc["attributes"]["partialLaunches"] = ["invocation_000099_forward"]
    window_doc.write_text(json.dumps(doc))
    assert any(
        "names 'invocation_000099_forward', which is not a listed invocation" in p.what
        for p in verify_dump(root).problems
    )
    doc["attributes"]["partialLaunches"] = [path.split("/")[2]]
    window_doc.write_text(json.dumps(doc))
    report = verify_dump(root)
    assert report.ok and report.windows[0].partial_records == 1 and len(report.windows[0].partial_launches) == 1
    code, out, _ = _cli(capsys, "verify", root)
    assert code == 0 and "holds 1 salvaged partial launch(es) (1 partial record(s))" in out
    assert json.loads(_cli(capsys, "verify", root, "--json")[1])["partial_windows"] == [WINDOW]


def _reinventory(root: Path, path: str) -> None:
    """Record the edited document of the array at ``path`` in its window's inventory, as a self-consistent forger
    (or its own writer) would, and the inventory's digest in the window document."""
    from megadump_zarr.layout.inventory import INVENTORY_DIGEST_ATTR, INVENTORY_FILE, inventory_digest, metadata_digest

    window = root / WINDOW
    doc = json.loads((window / "zarr.json").read_text())
    below = path[len(WINDOW) + 1 :]
    inventory = json.loads((window / INVENTORY_FILE).read_text())
    inventory["arrays"][below][0] = metadata_digest(doc["consolidated_metadata"]["metadata"][below])
    data = json.dumps(inventory, separators=(",", ":")).encode()
    (window / INVENTORY_FILE).write_bytes(data)
    doc["attributes"][INVENTORY_DIGEST_ATTR] = inventory_digest(data)
    (window / "zarr.json").write_text(json.dumps(doc))


def test_not_a_dump_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _cli(capsys, "verify", tmp_path / "nowhere")
    assert code == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1


def test_windows_run_on_a_dask_cluster(run: Path) -> None:
    """With a distributed Client active, windows are verified as dask tasks (map_ordered): same report."""
    distributed = pytest.importorskip("distributed")
    root = run / "l0"
    shutil.copytree(root / "rank_0", root / "rank_1")
    window_doc = root / "rank_1" / "window_0000" / "zarr.json"
    doc = json.loads(window_doc.read_text())
    doc["attributes"]["rank"] = 1
    for path, entry in doc["consolidated_metadata"]["metadata"].items():  # the invocations say rank 1 too
        if "/" not in path and "rank" in entry.get("attributes", {}):
            entry["attributes"]["rank"] = 1
            own = window_doc.parent / path / "zarr.json"
            own_doc = json.loads(own.read_text())
            own_doc["attributes"]["rank"] = 1
            own.write_text(json.dumps(own_doc))
    window_doc.write_text(json.dumps(doc))
    local = verify_dump(root)
    chunk = next(p for p in sorted((root / "rank_1" / "window_0000").rglob("c*")) if p.is_file())
    chunk.unlink()
    with (
        distributed.LocalCluster(n_workers=2, processes=False, dashboard_address=None) as cluster,
        distributed.Client(cluster),
    ):
        remote = verify_dump(root)
    assert local.ok and [w.window for w in remote.windows] == ["rank_0/window_0000", "rank_1/window_0000"]
    assert remote.windows[0].ok and [p.what for p in remote.windows[1].problems] == ["chunk is missing"]
    assert remote.windows[0].chunks == local.windows[0].chunks


def test_a_real_kept_failed_launch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """on_error="keep": the dumper marks the salvaged launch; verify reports it and finds nothing wrong."""
    from megadump_zarr import DiagnosticAction, TensorDumpConfig, tensor_dump
    from megadump_zarr.demo.model import DemoConfig, MoEBlock

    block = MoEBlock(DemoConfig())
    down = block.expert_kernel.graph.operators[1]
    original = down.tile_fn

    def hang(tile: Any) -> None:
        if tile.owner_id == 2:
            down.tile_fn = original
            raise RuntimeError("simulated hang")
        original(tile)

    down.tile_fn = hang
    config = TensorDumpConfig(
        tmp_path, level="L1", kernel_names="moe_experts", stages=("expert_up", "expert_down"), on_error="keep"
    )
    with tensor_dump(config, schedule=lambda step: DiagnosticAction.RECORD) as dumper:
        with pytest.raises(RuntimeError, match="simulated hang"):
            block(block.make_input())
        block(block.make_input())
        dumper.step()
    report = verify_dump(tmp_path, deep=True)
    assert report.ok, [str(p) for p in report.problems]
    (check,) = report.windows
    assert check.partial_launches == ("invocation_000000_forward",) and check.partial_records > 0
    code, out, _ = _cli(capsys, "verify", tmp_path)
    assert code == 0 and "holds 1 salvaged partial launch(es)" in out
