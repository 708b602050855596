"""``megadump migrate ROOT``: a format-9 dump rewritten in place as format 10, metadata only.

A format-9 dump is made from the stored format-10 fixture (``tests/read/data/format10``) the way format 9 wrote it:
each checksummed array document also records its chunks' crc32c (``chunkCrc32c``), each pack record array its
shards' digests (``shardCrc32c``), in every copy (its own document, a pack group's, the window's, the root's),
with the window inventory's document digests and its own digest to match, and ``schemaVersion`` 9. Migrating it
gives back the fixture: every document equal, every chunk byte for byte.
"""

from __future__ import annotations

import json
from pathlib import Path
import shutil
from typing import Any

import pytest

from megadump_zarr import open_dump
from megadump_zarr.cli.main import main
from megadump_zarr.layout.inventory import (
    INVENTORY_DIGEST_ATTR,
    INVENTORY_FILE,
    encode_inventory,
    inventory_digest,
    metadata_digest,
    parse_inventory,
)
from megadump_zarr.migrate import MigrationError, migrate_dump
from megadump_zarr.migrate.format9 import CHUNK_DIGEST_ATTR, SHARD_DIGEST_ATTR, format9_shard_digest
from megadump_zarr.read.errors import FormatVersionError
from megadump_zarr.store.backend import LocalBackend
from megadump_zarr.verify import verify_dump
from tests._layout import tear

FIXTURES = Path(__file__).parents[1] / "read" / "data" / "format10"
WINDOW = "rank_0/window_0000"


def _digests(window: Path, path: str, node: dict[str, Any], listed: str) -> dict[str, str]:
    """The format-9 digest attributes of one array (``listed``: its chunk digests in the window inventory)."""
    codecs = node.get("codecs") or []
    if codecs and codecs[0].get("name") == "sharding_indexed":
        inner = codecs[0]["configuration"]["chunk_shape"]
        outer = node["chunk_grid"]["configuration"]["chunk_shape"]
        count = 1
        for o, i in zip(outer, inner):
            count *= o // i
        shards = sorted((window / path).glob("c.*"), key=lambda p: [int(n) for n in p.name[2:].split(".")])
        text = "".join(f"{format9_shard_digest(p.read_bytes(), count, p.name):08x}" for p in shards)
        return {SHARD_DIGEST_ATTR: text}
    if codecs and codecs[-1].get("name") == "crc32c" and node.get("attributes"):
        return {CHUNK_DIGEST_ATTR: listed}  # a checksummed chunk's inventory digest is its trailing crc32c
    return {}


def _walk(doc: dict[str, Any], base: str, visit: Any) -> None:
    """``visit(full path, node)`` for a document and every consolidated node in it (paths relative to the root)."""
    visit(base, doc)
    for sub, node in ((doc.get("consolidated_metadata") or {}).get("metadata") or {}).items():
        if isinstance(node, dict):
            _walk(node, f"{base}/{sub}" if base else sub, visit)


def make_format9(root: Path) -> None:
    """Turn a format-10 dump into what format 9 wrote (see the module docstring)."""
    windows: dict[str, dict[str, Any]] = {}
    added: dict[str, dict[str, str]] = {}
    for window in sorted(root.glob("rank_*/window_*")):
        key = window.relative_to(root).as_posix()
        doc = json.loads((window / "zarr.json").read_text())
        if doc["attributes"].get("status") not in ("complete", "aborted"):
            continue
        inventory = parse_inventory((window / INVENTORY_FILE).read_bytes()).arrays
        text = json.loads((window / INVENTORY_FILE).read_text())["arrays"]
        nodes = doc["consolidated_metadata"]["metadata"]
        for path, node in nodes.items():
            if node.get("node_type") == "array":
                extra = _digests(window, path, node, text[path][1])
                if extra:
                    added[f"{key}/{path}"] = extra
        entries = {}
        for path, entry in inventory.items():
            node = dict(nodes[path], attributes={**nodes[path]["attributes"], **added.get(f"{key}/{path}", {})})
            entries[path] = (metadata_digest(node), list(entry.chunks))
        data = encode_inventory(entries)
        (window / INVENTORY_FILE).write_bytes(data)
        windows[key] = {"schemaVersion": 9, INVENTORY_DIGEST_ATTR: inventory_digest(data)}

    def visit(path: str, node: dict[str, Any]) -> None:
        if path in added and node.get("node_type") == "array":
            node["attributes"].update(added[path])
        if path in windows:
            node["attributes"].update(windows[path])

    for file in sorted(root.rglob("zarr.json")):
        doc = json.loads(file.read_text())
        base = file.parent.relative_to(root).as_posix()
        _walk(doc, "" if base == "." else base, visit)
        file.write_text(json.dumps(doc))


def _same_as(root: Path, pristine: Path) -> None:
    """Every file of ``pristine`` is in ``root``: documents equal, anything else byte for byte."""
    for file in sorted(p for p in pristine.rglob("*") if p.is_file() and p.name != "SHA256SUMS"):
        rel = file.relative_to(pristine)
        if file.suffix == ".json":
            assert json.loads((root / rel).read_text()) == json.loads(file.read_text()), rel
        else:
            assert (root / rel).read_bytes() == file.read_bytes(), rel  # exact: stored bytes


@pytest.fixture(params=["tasks", "packs", "l0"])
def layout(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def format9(layout: str, tmp_path: Path) -> Path:
    root = Path(shutil.copytree(FIXTURES / layout, tmp_path / "dump"))
    make_format9(root)
    return root


def test_a_format9_dump_is_refused_with_the_hint_then_migrated(
    format9: Path, layout: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(FormatVersionError, match=r"format 9 .* megadump migrate ROOT"):
        open_dump(format9)
    digests = [p for p in format9.rglob("zarr.json") if CHUNK_DIGEST_ATTR in p.read_text()]
    assert digests  # the format-9 dump carries the copies
    assert main(["migrate", str(format9)]) == 0
    out = capsys.readouterr().out
    assert f"{WINDOW}: migrated to format 10" in out and "1 window(s) migrated" in out
    _same_as(format9, FIXTURES / layout)
    assert not any(attr in p.read_text() for p in format9.rglob("zarr.json") for attr in ("chunkCrc32c", "shardCrc32c"))
    assert main(["verify", str(format9)]) == 0
    assert len(open_dump(format9).records()) == len(open_dump(FIXTURES / layout).records())


def test_a_second_migrate_writes_nothing(format9: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert migrate_dump(format9).migrated == 1
    writes: list[str] = []
    put = LocalBackend.put
    monkeypatch.setattr(
        LocalBackend, "put", lambda self, key, data, **kw: (writes.append(key), put(self, key, data, **kw))
    )
    report = migrate_dump(format9)
    assert [w.outcome for w in report.windows] == ["current"] and report.migrated == 0 and writes == []


@pytest.mark.parametrize("layout", ["packs"], indirect=True)
def test_a_killed_migration_is_finished_by_running_it_again(
    format9: Path, layout: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed after each number of documents written in turn: the window reads as format 9 until its document is
    written (last), and a re-run finishes it."""
    put = LocalBackend.put
    total = 0

    def counting(self: LocalBackend, key: str, data: Any, **kw: Any) -> None:
        nonlocal total
        total += 1
        put(self, key, data, **kw)

    with monkeypatch.context() as patch:
        patch.setattr(LocalBackend, "put", counting)
        migrate_dump(Path(shutil.copytree(format9, tmp_path / "count")))
    assert total > 3  # array documents, pack groups, the inventory, the window, the root's and rank's index
    for kill in range(total):
        root = Path(shutil.copytree(format9, tmp_path / f"kill{kill}"))
        done = 0

        def dying(self: LocalBackend, key: str, data: Any, **kw: Any) -> None:
            nonlocal done
            if done == kill:
                raise RuntimeError("killed")
            done += 1
            put(self, key, data, **kw)

        with monkeypatch.context() as patch:
            patch.setattr(LocalBackend, "put", dying)
            with pytest.raises(RuntimeError, match="killed"):
                migrate_dump(root)
        window = json.loads((root / WINDOW / "zarr.json").read_text())["attributes"]
        assert window["schemaVersion"] in (9, 10)
        migrate_dump(root)
        _same_as(root, FIXTURES / layout)
        assert verify_dump(root).ok, kill


@pytest.mark.parametrize("layout", ["packs", "tasks"], indirect=True)
def test_damage_is_never_migrated(format9: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A chunk that is not the one the window inventory lists: refused naming the window, exit 2, nothing written."""
    chunk = next(p for p in sorted((format9 / WINDOW).rglob("c.*")) if p.stat().st_size > 8)
    raw = bytearray(chunk.read_bytes())
    raw[0] ^= 1
    chunk.write_bytes(bytes(raw))
    before = {p: p.read_bytes() for p in format9.rglob("*") if p.is_file()}
    assert main(["migrate", str(format9)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1
        and err[0].startswith(f"error: {WINDOW}: chunk ")
        and "not migrated, nothing was written" in err[0]
    ), err
    assert {p: p.read_bytes() for p in format9.rglob("*") if p.is_file()} == before


@pytest.mark.parametrize("layout", ["tasks"], indirect=True)
def test_a_digest_copy_that_disagrees_is_refused(format9: Path) -> None:
    """A format-9 ``chunkCrc32c`` that is not the inventory's digest (edited with the inventory to match)."""
    path = next(
        p
        for p in sorted((format9 / WINDOW).rglob("zarr.json"))
        if CHUNK_DIGEST_ATTR in json.loads(p.read_text()).get("attributes", {})
    )
    rel = path.parent.relative_to(format9 / WINDOW).as_posix()

    def edit(node: dict[str, Any]) -> None:
        node["attributes"][CHUNK_DIGEST_ATTR] = "0" * len(node["attributes"][CHUNK_DIGEST_ATTR])

    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    window = json.loads((format9 / WINDOW / "zarr.json").read_text())
    edit(window["consolidated_metadata"]["metadata"][rel])
    inventory = json.loads((format9 / WINDOW / INVENTORY_FILE).read_text())
    inventory["arrays"][rel][0] = metadata_digest(window["consolidated_metadata"]["metadata"][rel])
    data = json.dumps(inventory, separators=(",", ":")).encode()
    (format9 / WINDOW / INVENTORY_FILE).write_bytes(data)
    window["attributes"][INVENTORY_DIGEST_ATTR] = inventory_digest(data)
    (format9 / WINDOW / "zarr.json").write_text(json.dumps(window))
    with pytest.raises(MigrationError, match=rf"^{WINDOW}: .*attributes.chunkCrc32c does not match chunk"):
        migrate_dump(format9)


@pytest.mark.parametrize("layout", ["tasks"], indirect=True)
def test_a_torn_window_is_skipped_with_a_note(format9: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tear(format9, WINDOW)
    assert main(["migrate", str(format9)]) == 0
    out = capsys.readouterr().out
    assert f"{WINDOW}: skipped: not committed (status 'writing')" in out and "0 window(s) migrated" in out
