"""Task-record packs read where they are stored: each packed record is row ``r`` of its pack's array
(``read.pack_rows``).

The stored fixture of one demo step in both layouts (``tests/read/data/format10/tasks`` and ``.../packs``, written
by today's writer) is read in both: every reader must read the packed dump like the tasks one (records, values,
tensors, datasets, compare, verify), name each damage of a shard, and refuse each hostile edit of a pack's
arrays along ``task``.
"""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path
import shutil
import warnings

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr
from zarr.storage import LocalStore

from megadump_zarr import compare, open_dump
from megadump_zarr.read.errors import DumpIntegrityError
from megadump_zarr.read.location import get_bytes
from megadump_zarr.store.packs import decode_index, encode_index, index_nbytes
from megadump_zarr.verify import verify_dump
from tests._layout import tear
from tests._packs import edit_document, stored_columns, write_column

DATA = Path(__file__).parent / "data" / "format10"
WINDOW = "rank_0/window_0000"
STAGES = f"{WINDOW}/invocation_000000_forward/stages"
PACK = "invocation_000000_forward/stages/combine/pack_0000"  # combine's tasks 13-16, one shard per record
PACKED = ("task_000013", "task_000014", "task_000015", "task_000016")
SHARD = "c.0.0.0"


def _same(records: pd.DataFrame) -> pd.DataFrame:
    """A records table without the columns that say where a record's bytes are (a pack's array and row, the group and variable that open it):
    they are the layout's, not the record's (``tests/read/test_pack_columns.py`` checks them)."""
    return records.drop(columns=["pack_array", "pack_row", "zarr_group", "variable"])


@pytest.fixture(scope="module")
def roots(tmp_path_factory) -> tuple[Path, Path, list[str]]:
    """(tasks layout root, packs layout root, pack paths relative to the window): copies of the fixture."""
    base = tmp_path_factory.mktemp("packs")
    plain = Path(shutil.copytree(DATA / "tasks", base / "plain"))
    packed = Path(shutil.copytree(DATA / "packs", base / "packed"))
    return plain, packed, [PACK]


@pytest.fixture
def packed_copy(roots, tmp_path) -> Path:
    return Path(shutil.copytree(roots[1], tmp_path / "packed"))


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def _strip_codecs(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k != "codecs"}


def test_the_packed_copy_is_packed(roots):
    plain, packed, packs = roots
    files = _files(packed)
    assert sorted({f.rpartition("/pack_")[0] for f in files if "/pack_" in f}) == [f"{STAGES}/combine"]
    assert [f for f in files if "/combine/task_" in f and f.endswith("zarr.json")][0].startswith(
        f"{STAGES}/combine/task_000017/"
    )  # the clipped last tile keeps its task group
    assert f"{STAGES}/combine/pack_0000/output_00_out/{SHARD}" in files
    assert stored_columns(packed / WINDOW, PACK)["task_id"].tolist() == [13, 14, 15, 16]


def test_records_values_and_tensors_equal_the_tasks_layouts(roots):
    plain, packed, _ = roots
    a, b = open_dump(plain), open_dump(packed)
    pd.testing.assert_frame_equal(_same(a.records()), _same(b.records()))  # exact: stored bytes
    for path in a.records()["path"]:
        np.testing.assert_array_equal(a.record_array(path).values, b.record_array(path).values)  # exact: stored bytes
    for name in sorted(set(a.records()["name"])):
        for stage in sorted(set(a.records()[a.records()["name"] == name]["stage"])):
            np.testing.assert_array_equal(
                a.tensor(name, stage=stage).values, b.tensor(name, stage=stage).values
            )  # exact: stored bytes
    result = compare(plain, packed)
    assert (
        len(result) == 18 and set(result["verdict"]) == {"pass"} and (result["max_abs"] == 0).all()
    )  # exact: stored bytes
    assert verify_dump(b).ok and verify_dump(b, deep=True).ok


def test_data_groups_open_with_xarray_without_warnings(roots):
    plain, packed, _ = roots
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        want = xr.open_zarr(
            plain / STAGES / "combine/task_000015", consolidated=True, chunks=None, create_default_indexes=False
        )
        ds = open_dump(packed).dataset(stage="combine", task=15)  # the task's rows of its pack
        want = want.load()
        xr.testing.assert_identical(ds.load(), want)  # exact: stored bytes
        tree = open_dump(packed).tree()
        xr.testing.assert_identical(
            tree[f"{STAGES}/combine/task_000015"].to_dataset().load(), want
        )  # exact: stored bytes
    assert set(tree[f"{STAGES}/combine"].children) == {
        "task_000013",
        "task_000014",
        "task_000015",
        "task_000016",
        "task_000017",
    }
    xr.testing.assert_identical(
        open_dump(packed).dataset(task=15).load(), open_dump(plain).dataset(task=15).load()
    )  # exact: stored bytes


def test_flipped_byte_in_an_inner_chunk_refuses_the_shard_and_verify_names_the_task(packed_copy):
    """A flipped byte in one row's inner chunk: that row is refused (its own crc32c, or its shard's inventory
    digest), every other row of the shard is refused naming the shard (readers check a shard whole against the
    window inventory), and verify names the damaged row's chunk by its own crc32c."""
    shard = packed_copy / STAGES / f"combine/pack_0000/output_00_out/{SHARD}"
    raw = bytearray(shard.read_bytes())
    index = decode_index(bytes(raw[-index_nbytes(4) :]), 4, "shard")
    offset, nbytes = index[3]  # task 16
    raw[offset + nbytes // 2] ^= 0xFF
    shard.write_bytes(bytes(raw))
    dump = open_dump(packed_copy)
    shard_key = f"{STAGES}/combine/pack_0000/output_00_out/{SHARD}"
    key = f"{STAGES}/combine/task_000016/output_00_out/c.0.0"
    with pytest.raises(DumpIntegrityError, match="is corrupt: crc32c checksum mismatch|has digest") as info:
        dump.record_array(f"{STAGES}/combine/task_000016/output_00_out").values
    assert info.value.key in (key, shard_key)
    with pytest.raises(DumpIntegrityError, match=f"chunk {shard_key} in .* has digest") as info:
        dump.record_array(f"{STAGES}/combine/task_000015/output_00_out").values  # its shard is not the one written
    assert info.value.key == shard_key
    report = verify_dump(dump)
    assert any(
        p.key == key and p.what.startswith("corrupt: crc32c checksum mismatch (stored 0x") for p in report.problems
    )


def test_corrupt_index_names_the_shard(packed_copy):
    shard = packed_copy / STAGES / f"combine/pack_0000/input_01_ws/{SHARD}"
    raw = bytearray(shard.read_bytes())
    raw[-10] ^= 0x01
    shard.write_bytes(bytes(raw))
    dump = open_dump(packed_copy)
    key = f"{STAGES}/combine/task_000013/input_01_ws/c.0.0"
    rel = f"{STAGES}/combine/pack_0000/input_01_ws/c.0.0.0"
    with pytest.raises(
        DumpIntegrityError,
        match=f"^shard {rel} of chunk {key} is corrupt: shard index checksum "
        r"mismatch \(stored 0x[0-9a-f]{8}, computed 0x[0-9a-f]{8}\)$",
    ) as info:
        dump.record_array(f"{STAGES}/combine/task_000013/input_01_ws").values
    assert info.value.key == key
    # verify lists every chunk of the shard (tasks 13 to 16) instead of stopping at the first
    problems = verify_dump(dump).problems
    assert [p.key for p in problems] == [key.replace("task_000013", task) for task in PACKED]
    assert all(p.what.startswith(f"shard {rel} of chunk ") for p in problems)


def test_index_entry_outside_the_shard(packed_copy):
    shard = packed_copy / STAGES / f"combine/pack_0000/input_01_ws/{SHARD}"
    raw = shard.read_bytes()
    entries = decode_index(raw[-index_nbytes(4) :], 4, "shard")
    entries[0] = (len(raw) + 100, entries[0][1])
    shard.write_bytes(raw[: -index_nbytes(4)] + encode_index(entries))
    key = f"{STAGES}/combine/task_000013/input_01_ws/c.0.0"
    with pytest.raises(
        DumpIntegrityError, match=f"chunk {key} is corrupt: shard .*c.0.0.0 index entry 0 .* lies outside"
    ):
        open_dump(packed_copy).record_array(f"{STAGES}/combine/task_000013/input_01_ws").values


def test_absent_index_entry_of_a_committed_window(packed_copy):
    shard = packed_copy / STAGES / f"combine/pack_0000/input_01_ws/{SHARD}"
    raw = shard.read_bytes()
    entries = decode_index(raw[-index_nbytes(4) :], 4, "shard")
    entries[1] = None
    shard.write_bytes(raw[: -index_nbytes(4)] + encode_index(entries))
    key = f"{STAGES}/combine/task_000014/input_01_ws/c.0.0"
    with pytest.raises(DumpIntegrityError, match=f"chunk {key} is missing: its window is committed, but shard "):
        open_dump(packed_copy).record_array(f"{STAGES}/combine/task_000014/input_01_ws").values


def test_deleted_shard_is_a_missing_chunk(packed_copy):
    (packed_copy / STAGES / f"combine/pack_0000/output_00_out/{SHARD}").unlink()
    dump = open_dump(packed_copy)
    key = f"{STAGES}/combine/task_000015/output_00_out/c.0.0"
    with pytest.raises(DumpIntegrityError, match=f"chunk {key} in .* is missing: its window is committed"):
        dump.record_array(f"{STAGES}/combine/task_000015/output_00_out").values
    problems = verify_dump(dump).problems
    assert {p.key for p in problems} == {key.replace("task_000015", task) for task in PACKED}
    assert all(p.what == "chunk is missing" for p in problems)


def test_plain_zarr_through_the_dumps_store_refuses_a_missing_shard(packed_copy):
    """The dump's integrity checks know a committed window's pack arrays too: zarr reading a pack through
    ``dump.store`` (as its sharding codec does under a row read) refuses a deleted shard, never zeros."""
    shard = f"{STAGES}/combine/pack_0000/output_00_out/{SHARD}"  # tasks 13 to 16
    (packed_copy / shard).unlink()
    dump = open_dump(packed_copy)
    dump.records()
    pack = zarr.open_array(dump.store, path=f"{STAGES}/combine/pack_0000/output_00_out", mode="r")
    with pytest.raises(DumpIntegrityError, match=f"chunk {re.escape(shard)} in .* is missing: its window is committed"):
        pack[2]


def test_torn_packed_window_reads_like_a_torn_tasks_window(roots, tmp_path):
    plain, packed, _ = roots
    torn_plain = Path(shutil.copytree(plain, tmp_path / "plain"))
    torn_packed = Path(shutil.copytree(packed, tmp_path / "packed"))
    tear(torn_plain)
    tear(torn_packed)
    a, b = open_dump(torn_plain), open_dump(torn_packed)
    assert list(b.windows()["status"]) == ["writing"]
    assert b.records().empty
    ra, rb = a.records(include_incomplete=True), b.records(include_incomplete=True)
    columns = ["path", "name", "stage", "task_id", "shape", "dtype", "io", "min", "max", "status"]
    pd.testing.assert_frame_equal(ra[columns], rb[columns])  # exact: stored bytes
    # the pack keeps the task attributes that a torn tasks-layout window has no document for
    assert rb["owner_label"].eq("expert").tolist() == [g.rpartition("/")[2] in PACKED for g in rb["group"]]
    for path in ra["path"]:
        np.testing.assert_array_equal(a.record_array(path).values, b.record_array(path).values)  # exact: stored bytes
    np.testing.assert_array_equal(
        a.tensor("out", window=0).values, b.tensor("out", window=0).values
    )  # exact: stored bytes
    assert get_bytes(b.store, f"{WINDOW}/zarr.json") == (torn_packed / WINDOW / "zarr.json").read_bytes()
    # committing it (the writer's last step) is seen by the same reader
    shutil.rmtree(torn_packed)
    shutil.copytree(packed, torn_packed)
    assert list(b.windows()["status"]) == ["complete"]
    pd.testing.assert_frame_equal(_same(b.records()), _same(open_dump(plain).records()))  # exact: stored bytes


def test_pickled_rows_read_the_same(roots):
    _, packed, _ = roots
    dump = open_dump(packed)
    path = f"{STAGES}/combine/task_000014/output_00_out"
    want = dump.record_array(path).values
    clone = pickle.loads(pickle.dumps(dump.store))
    assert clone == dump.store
    np.testing.assert_array_equal(open_dump(clone).record_array(path).values, want)  # exact: stored bytes
    info, rel, doc = dump._record(path)
    row = pickle.loads(pickle.dumps(dump._array(info, rel, doc)))  # (pack array, row), its caches left behind
    assert (row.array_key, row.row) == (f"{STAGES}/combine/pack_0000/output_00_out", 1)  # task 14: row 1
    np.testing.assert_array_equal(row[...], want)  # exact: stored bytes
    # what a distributed worker receives: the dask graph, with the store inside
    cloudpickle = pytest.importorskip("cloudpickle")
    lazy = open_dump(packed).record_array(path).data
    np.testing.assert_array_equal(cloudpickle.loads(cloudpickle.dumps(lazy)).compute(), want)  # exact: stored bytes


def test_a_record_costs_one_ranged_read_after_its_shard_is_checked(roots, counting_store):
    _, packed, _ = roots
    counter = counting_store(LocalStore(packed, read_only=True))
    dump = open_dump(counter)
    shard = f"{STAGES}/combine/pack_0000/output_00_out/{SHARD}"  # tasks 13 to 16
    dump.records()
    counter.reads.clear()
    dump.record_array(f"{STAGES}/combine/task_000015/output_00_out").values
    # the index (suffix), the inner chunk (range), then once per process the window inventory and the whole shard
    # (checked against the inventory's digest)
    assert counter.reads == [shard, shard, f"{WINDOW}/inventory.json", shard]
    counter.reads.clear()
    dump.record_array(f"{STAGES}/combine/task_000016/output_00_out").values
    assert counter.reads == [shard]  # the index and the shard's check are cached
    counter.reads.clear()
    dump.record_array(f"{STAGES}/combine/task_000015/token").values
    assert counter.reads == []  # row coordinates are computed from the task's attributes
    info, rel, doc = dump._record(f"{STAGES}/combine/task_000016/output_00_out")
    row = dump._array(info, rel, doc)  # the pack row itself (truncated views, verify --deep, export-hdf5 read it)
    counter.reads.clear()
    assert row[2:5, 3].shape == (3,) and row[...].shape == (8, 16)
    assert counter.reads == [shard, shard]  # one ranged read of the inner chunk per read, the index cached


def test_s3_packed_window_reads(roots):
    from tests._moto import KEY, SECRET, moto_s3

    plain, packed, _ = roots
    boto3 = pytest.importorskip("boto3")
    with moto_s3("packs") as endpoint:
        client = boto3.client(
            "s3", endpoint_url=endpoint, aws_access_key_id=KEY, aws_secret_access_key=SECRET, region_name="us-east-1"
        )
        for key in _files(packed):
            client.put_object(Bucket="packs", Key=f"dump/{key}", Body=(packed / key).read_bytes())
        options = {"endpoint_url": endpoint, "key": KEY, "secret": SECRET}
        dump = open_dump("s3://packs/dump", storage_options=options)
        pd.testing.assert_frame_equal(_same(dump.records()), _same(open_dump(plain).records()))  # exact: stored bytes
        path = f"{STAGES}/combine/task_000016/input_01_ws"
        np.testing.assert_array_equal(
            dump.record_array(path).values, open_dump(plain).record_array(path).values
        )  # exact: stored bytes
        assert verify_dump(dump).ok


# --------------------------------------------------------------------------- the writer's packs
def assert_same_dump(plain: Path, packed: Path) -> int:
    """Both layouts of one run read the same: records, record arrays (dims, attributes, values), every task
    group's dataset; the packed one verifies. Returns the task groups compared."""
    a, b = open_dump(plain), open_dump(packed)
    pd.testing.assert_frame_equal(_same(a.records()), _same(b.records()))  # exact: one run, two layouts
    for path in a.records()["path"]:
        left, right = a.record_array(path), b.record_array(path)
        assert left.dims == right.dims and left.attrs == right.attrs, path
        np.testing.assert_array_equal(left.values, right.values)  # exact: one run, two layouts
    assert verify_dump(b, deep=True).ok
    assert any("/pack_" in f for f in _files(packed))
    groups = a.records().dropna(subset=["task_id"]).drop_duplicates("group")
    for row in groups.itertuples():
        select = {"invocation": int(row.invocation), "stage": row.stage, "task": row.group.rpartition("/")[2]}
        left, right = a.dataset(**select).load(), b.dataset(**select).load()
        assert dict(left.sizes) == dict(right.sizes) and set(left.coords) == set(right.coords), row.group
        for name, variable in left.variables.items():  # bytes: bfloat16 has no NaN-aware equality in xarray
            other = right.variables[name]
            assert variable.dims == other.dims and variable.dtype == other.dtype, (row.group, name)
            assert variable.values.tobytes() == other.values.tobytes(), (row.group, name)  # exact: one run
            assert variable.attrs == other.attrs, (row.group, name)
        assert left.attrs == right.attrs, row.group
    return len(groups)


@pytest.fixture(scope="module")
def demo_pair(tmp_path_factory) -> tuple[Path, Path]:
    """One demo step (the read tests' L1 selection) dumped with packs and, into another root, without."""
    from megadump_zarr import TensorDumpConfig
    from megadump_zarr.demo.model import DemoConfig
    from tests.read.conftest import L1_STAGES, L1_TENSORS, run_step

    base = tmp_path_factory.mktemp("pair")
    for name, layout in (("packed", "packs"), ("plain", "tasks")):
        config = TensorDumpConfig(
            base / name,
            level="L1",
            kernel_names=("moe_experts", "moe_dispatch"),
            stages=L1_STAGES,
            tensor_names=L1_TENSORS,
            layout=layout,
        )
        run_step(base / name, config, DemoConfig())
    return base / "plain", base / "packed"


def test_the_writers_packs_read_as_its_tasks_layout(demo_pair):
    plain, packed = demo_pair
    assert assert_same_dump(plain, packed) > 8


def test_bench_window_of_several_shards_reads_as_its_tasks_layout(tmp_path, monkeypatch):
    """The export benchmark's window (bf16 tiles, 2 KiB records), shards of 8 records."""
    import torch

    from benchmarks.export import make_workload, ours

    monkeypatch.setattr("megadump_zarr.store.packs.PACK_SHARD_BYTES", 8 * 2048)
    buffer, plans = make_workload(96, 2048, torch.bfloat16)
    ours(buffer, plans, tmp_path / "plain", pack=False, durable=False)
    ours(buffer, plans, tmp_path / "packed", pack=True, durable=False)
    shards = [f for f in _files(tmp_path / "packed") if "/pack_" in f and "/c." in f and "/task/" not in f]
    assert len(shards) >= 12, shards
    assert assert_same_dump(tmp_path / "plain", tmp_path / "packed") == 48


def test_the_writers_torn_packed_window_reads_like_its_torn_tasks_one(tmp_path):
    """The writer killed after its invocations, before the commit: the same records and values."""
    import torch

    from benchmarks.export import make_workload
    from megadump_zarr.dump.snapshots import payload_snapshot
    from megadump_zarr.dump.window import DumpInvocation, build_window
    from megadump_zarr.l1 import read_l1_buffer
    from megadump_zarr.store.writer import WindowWriter

    buffer, plans = make_workload(64, 1024, torch.float32)
    decoded = read_l1_buffer(buffer)
    invocation = DumpInvocation(0, 0, "bench", "forward", 0, "cpu", "L1", execution_mode="event_driven")
    invocation.l1_snapshots = [payload_snapshot(p, r.payload) for p, r in zip(plans, decoded.records)]
    window = build_window("L1", 0, 0, [invocation])
    for name, pack in (("plain", False), ("packed", True)):
        with WindowWriter(tmp_path / name, pack=pack, durable=False) as writer:
            session = writer.begin(window.rank, window.window_index, window.attrs)
            for part in window.invocations:
                session.write_invocation(part)  # killed here: no commit
    assert any("/pack_0000/" in f for f in _files(tmp_path / "packed"))
    a, b = open_dump(tmp_path / "plain"), open_dump(tmp_path / "packed")
    assert list(b.windows()["status"]) == ["writing"] and b.records().empty
    ra, rb = a.records(include_incomplete=True), b.records(include_incomplete=True)
    assert len(rb) == 64
    columns = ["path", "name", "stage", "task_id", "shape", "dtype", "io", "min", "max", "mean", "status"]
    pd.testing.assert_frame_equal(ra[columns], rb[columns])  # exact: one run, two layouts
    for path in ra["path"]:
        np.testing.assert_array_equal(
            a.record_array(path).values, b.record_array(path).values
        )  # exact: one run, two layouts


def _refused(root: Path, key: str, why: str) -> None:
    """Reading the records raises naming ``key`` and ``why``; verify names them too."""
    message = f"malformed task-record pack: {key}: {why}"
    with pytest.raises(DumpIntegrityError, match=f"^{re.escape(message)}$") as info:
        open_dump(root).records()
    assert info.value.key == key
    report = verify_dump(open_dump(root))
    assert (key, message) in [(p.key, p.what) for p in report.problems], report.problems


def test_a_task_count_that_is_not_the_packs_rows_is_refused(packed_copy):
    """``taskCount: 7`` on a 4-row pack, in every copy of the pack group's document."""
    edit_document(packed_copy / WINDOW, PACK, "", lambda node: node["attributes"].update(taskCount=7))
    _refused(packed_copy, f"{WINDOW}/{PACK}/task_id/zarr.json", "shape [4] does not hold the pack's 7 rows")


@pytest.mark.parametrize(
    ("column", "values", "key", "why"),
    [
        (
            "token_stop",
            [8, 10**12, 24, 32],
            "token_start",
            "row 1 holds token [8, 1000000000000), 999999999992 rows; its record input_01_ws holds 8",
        ),
        (
            "token_start",
            [0, 9, 16, 24],
            "token_start",
            "row 1 holds token [9, 16), 7 rows; its record input_01_ws holds 8",
        ),
        ("token_stop", [8, 16, 24, 20], "token_start", "row 3 holds [24, 20), not row bounds"),
        (
            "input_01_ws_offset",
            [0, 512, 1024, 1024],
            "token_start",
            "row 3 holds token [24, 32) but its record input_01_ws starts at row 16 (input_01_ws_offset)",
        ),
        ("task_id", [13, 14, 15], "task_id/zarr.json", "shape [3] does not hold the pack's 4 rows"),
        ("task_id", [13, 14, 15, 14], "task_id", "task group 'task_000014' appears twice"),
        ("task_id", [13, 14, 15, -5], "task_id", "row 3 holds -5, not an id (>= 0) or -1 (none)"),
    ],
)
def test_consistently_edited_row_values_are_refused(packed_copy, column, values, key, why):
    """A pack's arrays along ``task`` edited consistently (valid crc32c, shape in every copy of the document, and
    the window inventory's digests): row bounds against their records' length (a hostile ``[8, 10**12]`` never reaches a reader
    that would allocate it) and against ``sourceOffsetBytes``, ids that name no task group or one twice, a row
    count that is not the pack's."""
    if column == "token_start" and values[0] == 0:  # a shifted start: its stop too, so only the length differs
        write_column(packed_copy / WINDOW, PACK, "token_stop", [8, 16, 24, 32])
    write_column(packed_copy / WINDOW, PACK, column, values)
    _refused(packed_copy, f"{WINDOW}/{PACK}/{key}", why)


def test_a_column_chunk_from_another_array_is_refused(packed_copy):
    """``owner_id``'s chunk replaced by ``core_id``'s (same shape, valid crc32c): the window inventory names it."""
    pack = packed_copy / WINDOW / PACK
    (pack / "owner_id" / "c.0").write_bytes((pack / "core_id" / "c.0").read_bytes())
    key = f"{WINDOW}/{PACK}/owner_id/c"
    with pytest.raises(DumpIntegrityError, match="a chunk written for another array") as info:
        open_dump(packed_copy).records()
    assert info.value.key == key
    assert any(p.key == key or p.key.startswith(f"{WINDOW}/{PACK}/owner_id") for p in verify_dump(packed_copy).problems)


class _ListingCounter(zarr.storage.WrapperStore):
    """Records the prefixes listed below it."""

    def __init__(self, store) -> None:
        super().__init__(store)
        self.listed: list[str] = []

    def list_prefix(self, prefix: str):
        self.listed.append(prefix)
        return self._store.list_prefix(prefix)


@pytest.mark.parametrize("fixture", ["tasks", "indented", "packed"])
def test_committed_windows_are_never_listed(fixture, roots, tmp_path):
    """A committed window is known from its document alone, compact or indented (as zarr-python writes
    documents), packed or not: reading records and values lists nothing below it."""
    root = roots[1] if fixture == "packed" else roots[0]
    if fixture == "indented":
        root = Path(shutil.copytree(roots[0], tmp_path / "indented"))
        doc = root / WINDOW / "zarr.json"
        doc.write_text(json.dumps(json.loads(doc.read_bytes()), indent=2))
    counter = _ListingCounter(LocalStore(root, read_only=True))
    dump = open_dump(counter)
    for path in dump.records()["path"]:
        dump.record_array(path).values
    assert len(dump.records()) > 0 and counter.listed == []


def test_any_flipped_bit_of_a_shard_is_refused_never_read(roots, tmp_path_factory):
    """A single bit flipped anywhere in a shard (inner chunks or index): every record of the shard either
    reads its true values or raises DumpIntegrityError naming its chunk; at least the damaged one raises."""
    from hypothesis import HealthCheck, given, settings, strategies as st

    plain, packed, _ = roots
    root = Path(shutil.copytree(packed, tmp_path_factory.mktemp("flip") / "packed"))
    shard = root / STAGES / f"combine/pack_0000/output_00_out/{SHARD}"  # tasks 13 to 16
    pristine = shard.read_bytes()
    paths = [f"{STAGES}/combine/{task}/output_00_out" for task in PACKED]
    want = {p: open_dump(plain).record_array(p).values for p in paths}

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.integers(0, len(pristine) * 8 - 1))
    def flip(bit: int) -> None:
        raw = bytearray(pristine)
        raw[bit // 8] ^= 1 << (bit % 8)
        shard.write_bytes(bytes(raw))
        try:
            dump = open_dump(root)
            refused = 0
            for path in paths:
                try:
                    np.testing.assert_array_equal(dump.record_array(path).values, want[path])  # exact: stored bytes
                except DumpIntegrityError as error:
                    # the shard is checked whole (window inventory), or the row's own chunk by its crc32c
                    shard_key = f"{STAGES}/combine/pack_0000/output_00_out/{SHARD}"
                    assert error.key in (f"{path}/c.0.0", shard_key) and error.key in str(error)
                    refused += 1
            assert refused >= 1
        finally:
            shard.write_bytes(pristine)

    flip()


def test_verify_names_a_stored_pack_document_that_disagrees_with_the_window(packed_copy):
    """Readers see the window document's copy; plain zarr reads the pack's own documents: verify compares them."""
    rel = f"{STAGES}/combine/pack_0000/output_00_out/zarr.json"
    doc = json.loads((packed_copy / rel).read_bytes())
    doc["attributes"]["recordAttributes"]["note"] = "edited behind the window's back"
    (packed_copy / rel).write_text(json.dumps(doc))
    dump = open_dump(packed_copy)
    assert dump.records().equals(open_dump(packed_copy).records())  # readers are served the window's copy
    problems = [(p.key, p.what) for p in verify_dump(dump).problems]
    assert problems == [(rel, "differs from the window's consolidated metadata in attributes")]


def test_any_selection_of_a_pack_row_equals_the_stored_record(roots):
    """A packed record read as its pack row (``RowArray``, zarr's sharding codec under it) answers any basic
    selection (ints, negative ints, slices with positive steps, an Ellipsis) exactly as the same record stored as its
    own array does; so does its lazy ``record_array`` (the fast path's whole-chunk read, then dask's slicing)."""
    from hypothesis import HealthCheck, given, settings, strategies as st

    plain, packed, _ = roots
    a, b = open_dump(plain), open_dump(packed)
    paths = [p for p in b.records().dropna(subset=["pack_array"])["path"]]
    assert len(paths) >= 8

    def axis(n: int) -> st.SearchStrategy:
        index = st.integers(-n, n - 1)
        bound = st.none() | st.integers(-n - 2, n + 2)
        step = st.none() | st.integers(1, 3)  # zarr refuses negative steps, either layout
        return index | st.builds(slice, bound, bound, step)

    @st.composite
    def selections(draw):
        path = draw(st.sampled_from(paths))
        shape = a.record_array(path).shape
        picked = tuple(draw(axis(n)) for n in shape[: draw(st.integers(0, len(shape)))])
        return path, (picked + (Ellipsis,)) if draw(st.booleans()) else picked

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(selections())
    def check(choice):
        path, selection = choice
        info, rel, doc = b._record(path)
        row = b._array(info, rel, doc)
        want = zarr.open_array(str(plain / path), mode="r")[selection]
        np.testing.assert_array_equal(row[selection], want)  # exact: stored bytes
        np.testing.assert_array_equal(b.record_array(path).data[selection].compute(), want)  # exact: stored bytes

    check()
