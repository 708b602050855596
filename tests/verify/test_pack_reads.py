"""Issue 26: ``verify`` reads each pack shard once.

A pack's record shard used to be read whole for its digest and again, through the reader's
view, as one suffix read of its index plus one ranged read per inner chunk. Now the whole shard is read once and
both checks take their bytes from it (and a pack's row id chunks are read once, not once to see them present and
again to decode them). These tests count the reads of a store below the view, and check that
each damage the view names on a per-chunk read is named by verify with the same text (the view's own reads of a
fresh store are the reference).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
import re
import shutil
from typing import Any

import numpy as np
import pytest
from zarr.storage import LocalStore, WrapperStore

from megadump_zarr.layout.write_model import ArrayWrite, GroupWrite, InvocationWrite, WindowWrite
from megadump_zarr.read.errors import DumpIntegrityError
from megadump_zarr.read.integrity import verify_crc32c
from megadump_zarr.read.catalog import store_fetch, window_info
from megadump_zarr.read.location import get_bytes
from megadump_zarr.store import packs
from megadump_zarr.store.packs import decode_index, encode_index, index_nbytes
from megadump_zarr.store.writer import WindowWriter
from megadump_zarr.verify import verify_dump

from tests._tasks import task_attrs

WINDOW = "rank_0/window_0000"
PACK = f"{WINDOW}/invocation_000000_forward/stages/s/pack_0000"
RECORDS = ("input_00_w", "input_01_v")
TASKS = 6
ROWS = 2  # records per shard: 3 shards per record array
_SHARD = re.compile(r"/pack_\d+/(?:input|output)_\d+_[^/]*(?<!_offset)(?<!_stats)/c[.\d]+$")  # record shards


class Counting(WrapperStore):
    """Counts the reads (``get`` calls) and bytes read of each key; ``getsize`` as the wrapped store's when
    ``sized`` (the view then bounds index entries by the shard's size), else the base class's."""

    def __init__(self, store: Any) -> None:
        super().__init__(store)
        self.reads: Counter[str] = Counter()
        self.bytes: Counter[str] = Counter()

    def _with_store(self, store: Any) -> Counting:
        return type(self)(store)

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        value = await self._store.get(key, prototype, byte_range)
        self.reads[key] += 1
        self.bytes[key] += 0 if value is None else len(value)
        return value


class SizedCounting(Counting):
    async def getsize(self, key: str) -> int:
        return await self._store.getsize(key)


def _task(task_id: int) -> tuple[GroupWrite, list[ArrayWrite]]:
    path = f"stages/s/task_{task_id:06d}"
    attrs = task_attrs(task_id)
    arrays = [
        ArrayWrite(
            f"{path}/{name}",
            np.arange(6, dtype=np.float32).reshape(2, 3) * (1 + index) + task_id,
            ("row", "col"),
            {"name": name[9:], "io": "input", "index": index, "paramPosition": index, "capturePhase": "before"},
        )
        for index, name in enumerate(RECORDS)
    ]
    return GroupWrite(path, attrs, task=True), arrays


def _write(root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    with monkeypatch.context() as patch:
        patch.setattr(packs, "PACK_SHARD_BYTES", ROWS * 6 * 4)
        with WindowWriter(root, pack=True) as writer:
            tasks = [_task(i) for i in range(1, TASKS + 1)]
            invocation = InvocationWrite(
                "invocation_000000_forward",
                {"invocationId": 0, "level": "L1"},
                [GroupWrite("stages/s", {"stage": "s"})] + [g for g, _ in tasks],
                [a for _, arrays in tasks for a in arrays],
            )
            writer.write_window(WindowWrite(0, 0, {"level": "L1"}, [invocation]))
    return root


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with pytest.MonkeyPatch.context() as monkeypatch:
        return _write(tmp_path_factory.mktemp("pack-reads") / "dump", monkeypatch)


@pytest.fixture
def root(written: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(written, tmp_path / "dump"))


def _shards(root: Path) -> dict[str, int]:
    """Each record shard's key and stored size."""
    files = {p.relative_to(root).as_posix(): p.stat().st_size for p in root.rglob("c*") if p.is_file()}
    return {key: size for key, size in files.items() if _SHARD.search(key)}


@pytest.mark.parametrize("store_kind", [Counting, SizedCounting])
def test_verify_reads_each_shard_once(written: Path, store_kind: type[Counting]) -> None:
    shards = _shards(written)
    assert len(shards) == len(RECORDS) * TASKS // ROWS, shards
    store = store_kind(LocalStore(str(written), read_only=True))
    report = verify_dump(store)
    assert report.ok, report.problems
    assert report.windows[0].chunks >= TASKS * len(RECORDS)
    assert {key: store.reads[key] for key in shards} == dict.fromkeys(shards, 1)
    assert {key: store.bytes[key] for key in shards} == shards  # whole, once
    columns = [key for key in store.reads if re.search(r"/pack_\d+/[^/]+/c[.\d]+$", key) and not _SHARD.search(key)]
    assert len(columns) >= 4 and all(store.reads[key] == 1 for key in columns), (
        store.reads
    )  # the arrays along task: once too


def test_a_clean_pack_dump_from_the_dumper_reads_each_shard_once(tmp_path: Path) -> None:
    from tests._faults import dump_demo_step

    dump_demo_step(tmp_path / "l1", "L1", layout="packs")
    shards = _shards(tmp_path / "l1")
    assert shards
    store = SizedCounting(LocalStore(str(tmp_path / "l1"), read_only=True))
    report = verify_dump(store)
    assert report.ok, report.problems
    assert {key: (store.reads[key], store.bytes[key]) for key in shards} == {k: (1, n) for k, n in shards.items()}


def _edit_index(path: Path, edit: Any) -> None:
    raw = path.read_bytes()
    entries = decode_index(raw[-index_nbytes(ROWS) :], ROWS, "shard")
    edit(entries, len(raw))
    path.write_bytes(raw[: -index_nbytes(ROWS)] + encode_index(entries))


def _flip_index(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[-10] ^= 0x01
    path.write_bytes(bytes(raw))


def _flip_chunk(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    offset, nbytes = decode_index(bytes(raw[-index_nbytes(ROWS) :]), ROWS, "shard")[1]
    raw[offset + nbytes // 2] ^= 0xFF
    path.write_bytes(bytes(raw))


def _outside(entries: list[Any], size: int) -> None:
    entries[0] = (size + 100, entries[0][1])


def _overlapping_index(entries: list[Any], size: int) -> None:
    entries[1] = (entries[1][0], size)  # reaches into the index (past the data, inside the file)


def _absent(entries: list[Any], size: int) -> None:
    entries[1] = None


def _empty(entries: list[Any], size: int) -> None:
    entries[0] = (entries[0][0], 0)


DAMAGE = {
    "index checksum": _flip_index,
    "inner chunk crc32c": _flip_chunk,
    "entry past the end": lambda path: _edit_index(path, _outside),
    "entry into the index": lambda path: _edit_index(path, _overlapping_index),
    "absent entry": lambda path: _edit_index(path, _absent),
    "empty entry": lambda path: _edit_index(path, _empty),
    "truncated": lambda path: path.write_bytes(path.read_bytes()[:5]),
    "emptied": lambda path: path.write_bytes(b""),
}


def _view_says(root: Path, store_kind: type[Counting], key: str) -> str | None:
    """What the chunk check says of record chunk ``key`` read alone by a fresh reader (the reference): the
    readers' index check and ranged read of its row's inner chunk (``read.pack_rows``)."""
    store = store_kind(LocalStore(str(root), read_only=True))
    info = window_info(WINDOW, get_bytes(store, f"{WINDOW}/zarr.json"), fetch=store_fetch(store))
    record = info.packed(key[len(WINDOW) + 1 :].rpartition("/")[0])  # where its row is, from its pack's arrays
    try:
        raw = info.packs.read_row(store, record)
    except DumpIntegrityError as error:
        return str(error).removeprefix(f"chunk {key} is ").strip()
    if raw is None:
        return "chunk is missing"
    try:
        verify_crc32c(key, np.frombuffer(raw, dtype=np.uint8))
    except DumpIntegrityError as error:
        return str(error).removeprefix(f"chunk {key} is ").strip()
    return None


@pytest.mark.parametrize("store_kind", [Counting, SizedCounting], ids=["unsized", "sized"])
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damage_is_named_as_the_views_reads_name_it(root: Path, damage: str, store_kind: type[Counting]) -> None:
    """Each virtual chunk of a damaged shard is named with the text a read of it through the view raises, and the
    shard is still read once."""
    shard = f"{PACK}/input_01_v/c.1.0.0"  # tasks 3 and 4
    DAMAGE[damage](root / shard)
    chunks = [f"{WINDOW}/invocation_000000_forward/stages/s/task_{t:06d}/input_01_v/c.0.0" for t in (3, 4)]
    expected = [(key, what) for key in chunks if (what := _view_says(root, store_kind, key)) is not None]
    assert expected, "the damage is not one a read names"
    store = store_kind(LocalStore(str(root), read_only=True))
    problems = [(p.key, p.what) for p in verify_dump(store).problems]
    assert [p for p in problems if p[0] in chunks] == expected, problems
    assert all(p[0] in chunks or p[0] == shard for p in problems), problems  # and perhaps its digest
    assert {key: store.reads[key] for key in _shards(root)} == dict.fromkeys(_shards(root), 1)


def test_every_array_of_both_layouts_is_bound(tmp_path: Path) -> None:
    """The window inventory binds every stored array (coordinate arrays too), and a packed task's row coordinate is
    computed from its row's bounds (no chunk to misplace): no "not bound" note in either layout."""
    from tests._faults import dump_demo_step

    for layout in ("packs", "tasks"):
        root = tmp_path / layout
        dump_demo_step(root, "L1", layout=layout)
        report = verify_dump(root)
        assert report.ok, report.problems
        assert [n for w in report.windows for n in w.notes if "not bound" in n] == [], layout


def test_verify_reads_every_stored_file_once_in_both_layouts(tmp_path: Path) -> None:
    """Each document, inventory and chunk of a dump is read by ``verify`` exactly once (one read checks it against
    everything that binds it), in both layouts."""
    from tests._faults import dump_demo_step

    for layout in ("packs", "tasks"):
        root = tmp_path / layout
        dump_demo_step(root, "L1", layout=layout)
        files = {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}
        store = Counting(LocalStore(str(root), read_only=True))
        assert verify_dump(store).ok
        assert dict(store.reads) == dict.fromkeys(files, 1), layout
