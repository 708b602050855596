"""The packs layout's writer: small L1 task records stored as task-record packs (see ``store/packs.py``).

The promises held here: a pack's documents are zarr-python's own; zarr-python, tensorstore and plain
``xr.open_zarr`` read every pack array bit-exactly, the per-task values as coordinates along ``task``;
statistics equal the accumulator's; and the task groups a pack's rows stand for, as the readers find them
(``read.pack_record.PackedTasks``), are, node for node and chunk byte for chunk byte, what the tasks layout's
writer (``WindowWriter(pack=False)``) stores for the same invocation.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
import warnings

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
import ml_dtypes
import numpy as np
import pytest
import zarr

from megadump_zarr.layout.write_model import ArrayWrite, GroupWrite, InvocationWrite, WindowWrite
from megadump_zarr.read.pack_record import PackedCoordinate, PackedRecord
from megadump_zarr.store.pack_writer import row_stats
from megadump_zarr.store.packs import (
    PACK_MAX_RECORD_BYTES,
    PACK_SHARD_BYTES,
    ShardSource,
    decode_index,
    index_nbytes,
)
from megadump_zarr.store.tensor_stats import SLICE_ELEMENTS, StatsAccumulator
from megadump_zarr.store.writer import WindowWriter
from tests._packs import packed_tasks, stored_columns, stored_rows

INV = "invocation_000000_forward"


def _task(stage: str, task_id: int, worker: int | None = None) -> str:
    return f"stages/{stage}/task_{task_id:06d}" + ("" if worker is None else f"_worker_{worker:03d}")


def _attrs(task_id: int, stage: str, owner: int | None = 3, core: int | None = 1, worker: int | None = None) -> dict:
    return {
        "taskId": task_id,
        "stageTaskIndex": task_id,
        "stage": stage,
        "owner": {"label": "expert", "id": owner},
        "coreType": "AIV",
        "coreId": core,
        "workerId": worker,
        "tensorCount": 2,
        "tileRows": None,
    }


def mixed_invocation(seed: int = 0) -> InvocationWrite:
    """Two stages: ``up`` has 5 packable tasks of one signature (one with a NaN/Inf record and coordinates of 40
    rows), 2 of another (bf16, bool, a raw int8 record), and one whose 2 MiB record is not packable; ``down`` has
    3 packable tasks whose owner/core are None."""
    rng = np.random.default_rng(seed)
    groups = [GroupWrite("stages/up", {"stage": "up"}), GroupWrite("stages/down", {"stage": "down"})]
    arrays = []
    for t in range(5):
        path = _task("up", t)
        groups.append(GroupWrite(path, _attrs(t, "up", owner=t % 2), task=True))
        x = (rng.standard_normal((40, 16)) * 3).astype(np.float32)
        if t == 2:
            x[0, 0], x[1, 1] = np.nan, -np.inf
        rows = np.arange(40 * t, 40 * t + 40, dtype=np.int64)
        arrays.append(
            ArrayWrite(
                f"{path}/input_00_x",
                x,
                ("token", "hidden"),
                {"name": "x", "io": "input", "index": 0, "note": "tile", "sourceOffsetBytes": 40 * 16 * 4 * t},
                {"token": rows},
            )
        )
        arrays.append(
            ArrayWrite(
                f"{path}/output_00_y",
                rng.integers(-9, 9, size=(40,), dtype=np.int64),
                ("token",),
                {"name": "y", "io": "output", "index": 0, "stats": "replaced"},
                {"token": rows},
            )
        )
    for t in (10, 11):
        path = _task("up", t, worker=t - 9)
        groups.append(GroupWrite(path, _attrs(t, "up", core=t - 9, worker=7), task=True))
        arrays.append(
            ArrayWrite(
                f"{path}/input_00_w",
                (rng.standard_normal((3, 64)) * 2).astype(ml_dtypes.bfloat16),
                ("row", "col"),
                {"name": "w"},
                {"row": np.arange(3 * t, 3 * t + 3, dtype=np.int64)},
            )
        )
        arrays.append(ArrayWrite(f"{path}/input_01_mask", rng.integers(0, 2, size=(7, 9)).astype(bool), ("a", "b"), {}))
        arrays.append(
            ArrayWrite(f"{path}/output_00_z", rng.integers(-100, 100, size=(5,), dtype=np.int8), ("k",), {"raw": 1})
        )
    big = _task("up", 20)
    groups.append(GroupWrite(big, _attrs(20, "up"), task=True))
    arrays.append(
        ArrayWrite(
            f"{big}/input_00_x",
            rng.standard_normal((2048, 256), dtype=np.float32),
            ("token", "hidden"),
            {"name": "x"},
            {"token": np.arange(2048, dtype=np.int64)},
        )
    )
    for t in range(30, 33):
        path = _task("down", t)
        groups.append(GroupWrite(path, _attrs(t, "down", owner=None, core=None), task=True))
        arrays.append(ArrayWrite(f"{path}/input_00_h", rng.standard_normal((4, 4)), ("r", "c"), {"name": "h"}))
    return InvocationWrite(INV, {"invocationId": 0}, groups, arrays)


def _write(root: Path, pack: bool, invocation: InvocationWrite | None = None, **options) -> Path:
    with WindowWriter(root, pack=pack, durable=False, **options) as writer:
        writer.write_window(WindowWrite(0, 0, {"level": "L1"}, [invocation or mixed_invocation()]))
    return root / "rank_0" / "window_0000"


def _documents(window: Path) -> dict[str, dict]:
    return {
        p.parent.relative_to(window).as_posix(): json.loads(p.read_bytes())
        for p in window.rglob("zarr.json")
        if p.parent != window
    }


@pytest.fixture(scope="module")
def windows(tmp_path_factory):
    base = tmp_path_factory.mktemp("packs")
    return _write(base / "packed", True), _write(base / "plain", False)


def test_layout_packs_packable_tasks_and_keeps_the_rest(windows):
    packed, _ = windows
    stage = packed / INV / "stages" / "up"
    assert sorted(p.name for p in stage.iterdir()) == ["pack_0000", "pack_0001", "task_000020", "zarr.json"]
    assert sorted(p.name for p in (packed / INV / "stages" / "down").iterdir()) == ["pack_0000", "zarr.json"]
    pack = stage / "pack_0000"
    arrays = [
        "core_id",
        "core_type",
        "input_00_x",
        "input_00_x_offset",
        "input_00_x_stats",
        "output_00_y",
        "output_00_y_stats",
        "owner_id",
        "stage_task_index",
        "statistic",
        "task_id",
        "tile_row_start",
        "tile_row_stop",
        "token_start",
        "token_stop",
        "worker_id",
    ]
    assert sorted(p.name for p in pack.iterdir()) == [*arrays, "zarr.json"]
    assert sorted(p.name for p in (pack / "input_00_x").iterdir()) == ["c.0.0.0", "zarr.json"]  # one shard
    group = json.loads((pack / "zarr.json").read_bytes())
    assert group["attributes"] == {
        "stage": "up",
        "taskCount": 5,
        "taskAttributes": {"stage": "up", "owner": {"label": "expert"}, "tensorCount": 2},
    }
    assert sorted(group["consolidated_metadata"]["metadata"]) == arrays
    tasks = stored_rows(packed, f"{INV}/stages/up/pack_0000")[0]
    assert tasks[2] == {
        "group": "task_000002",
        "attrs": _attrs(2, "up", owner=0),
        "coords": {"token": [80, 120]},
    }
    import zarr

    assert zarr.open_array(str(pack / "task_id"))[:].tolist() == [0, 1, 2, 3, 4]
    # each row's token bounds: the stitched tensor's rows [start, stop)
    assert zarr.open_array(str(pack / "token_start"))[:].tolist() == [0, 40, 80, 120, 160]
    assert zarr.open_array(str(pack / "token_stop"))[:].tolist() == [40, 80, 120, 160, 200]
    assert zarr.open_array(str(pack / "input_00_x_offset"))[:].tolist() == [2560 * t for t in range(5)]
    assert zarr.open_array(str(pack / "core_type"))[:].tolist() == ["AIV"] * 5
    assert zarr.open_array(str(pack / "worker_id"))[:].tolist() == [-1] * 5
    assert zarr.open_array(str(pack / "owner_id"))[:].tolist() == [0, 1, 0, 1, 0]
    assert zarr.open_array(str(stage / "pack_0001" / "task_id"))[:].tolist() == [10, 11]
    assert zarr.open_array(str(stage / "pack_0001" / "worker_id"))[:].tolist() == [7, 7]
    down = packed / INV / "stages" / "down" / "pack_0000"
    assert zarr.open_array(str(down / "owner_id"))[:].tolist() == [-1, -1, -1]
    assert zarr.open_array(str(down / "core_id"))[:].tolist() == [-1, -1, -1]
    window = json.loads((packed / "zarr.json").read_bytes())["consolidated_metadata"]["metadata"]
    assert f"{INV}/stages/up/pack_0000/input_00_x" in window and f"{INV}/stages/up/task_000020/input_00_x" in window
    assert not any("/task_00000" in key for key in window)  # the virtual task groups are not physical nodes


def _zarr_document(doc: dict) -> dict:
    """The document zarr-python writes for a pack record array with this one's parameters."""
    import zarr
    from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec

    (sharding,) = doc["codecs"]
    inner = sharding["configuration"]["codecs"]
    compressors = []
    for codec in inner:
        if codec["name"] == "blosc":
            compressors.append(BloscCodec(**codec["configuration"]))
        elif codec["name"] == "crc32c":
            compressors.append(Crc32cCodec())
    array = zarr.create_array(
        store={},
        shape=tuple(doc["shape"]),
        chunks=tuple(sharding["configuration"]["chunk_shape"]),
        shards=tuple(doc["chunk_grid"]["configuration"]["chunk_shape"]),
        dtype=doc["data_type"],
        serializer=BytesCodec(endian="little") if inner[0].get("configuration") else BytesCodec(endian=None),
        compressors=compressors or None,
        dimension_names=doc["dimension_names"],
        fill_value=doc["fill_value"],
        chunk_key_encoding={"name": "default", "separator": "."},
        attributes=doc["attributes"],
    )
    return json.loads(json.dumps(array.metadata.to_dict()))


def _pack_arrays(window: Path) -> dict[str, dict]:
    return {
        path: doc
        for path, doc in _documents(window).items()
        if "/pack_" in path and doc["node_type"] == "array" and doc["codecs"][0]["name"] == "sharding_indexed"
    }


@pytest.mark.parametrize("checksum", [True, False])
def test_pack_documents_equal_zarr_pythons(windows, tmp_path, checksum):
    window = windows[0] if checksum else _write(tmp_path / "nocrc", True, checksum=False)
    arrays = _pack_arrays(window)
    assert len(arrays) == 6
    kinds = set()
    for path, doc in arrays.items():
        inner = [c["name"] for c in doc["codecs"][0]["configuration"]["codecs"]]
        kinds.add(tuple(inner))
        assert doc == _zarr_document(doc), path
    crc = ["crc32c"] if checksum else []
    assert kinds == {("bytes", "blosc", *crc), ("bytes", *crc)}  # the raw rule holds inside packs too


def test_zarr_tensorstore_and_xarray_read_every_pack_array(windows):
    import tensorstore as ts
    import xarray as xr
    import zarr

    packed, plain = windows
    for path, doc in _pack_arrays(packed).items():
        pack, _, name = path.rpartition("/")
        tasks = stored_rows(packed, pack)[0]
        stage = pack.rpartition("/")[0]
        expected = np.stack([zarr.open_array(str(plain / stage / t["group"] / name))[...] for t in tasks])
        got = zarr.open_array(str(packed / path), mode="r")[...]
        assert got.dtype == expected.dtype and got.tobytes() == expected.tobytes(), path
        spec = {"driver": "zarr3", "kvstore": {"driver": "file", "path": str(packed / path)}}
        read = ts.open(spec).result().read().result()
        assert read.shape == expected.shape and read.tobytes() == expected.tobytes(), path
    for pack in sorted(p for p in packed.rglob("pack_*") if p.is_dir()):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            dataset = xr.open_zarr(str(pack))
        tasks = stored_rows(packed, pack.relative_to(packed).as_posix())[0]
        bounds = {f"{dim}_{end}" for dim in tasks[0]["coords"] for end in ("start", "stop")}
        per_task = {"task_id", "stage_task_index", "owner_id", "core_id", "worker_id", "core_type"}
        per_task |= {"tile_row_start", "tile_row_stop"} | bounds
        assert {name: dataset.coords[name].dims for name in dataset.coords if name != "statistic"} == {
            name: ("task",) for name in per_task
        }  # the per-task values are coordinates along task, no task index
        assert per_task.isdisjoint(dataset.data_vars)
        stage = pack.relative_to(packed).parent
        for dim in tasks[0]["coords"]:  # a row's bounds: the tasks layout's coordinate, value for value
            for row, entry in enumerate(tasks):
                stored = zarr.open_array(str(plain / stage / entry["group"] / dim))[...]
                start, stop = int(dataset[f"{dim}_start"][row]), int(dataset[f"{dim}_stop"][row])
                assert list(range(start, stop)) == stored.tolist()
        for name in dataset.data_vars:  # statistics along (task, statistic), the statistic coordinate naming them
            if name.endswith("_stats"):
                assert dataset[name].dims == ("task", "statistic")
                assert dataset["statistic"].values.tolist() == ["min", "max", "mean", "l2norm", "nanCount", "infCount"]


def test_records_attributes_and_stats_equal_the_tasks_writers(windows):
    packed, plain = windows
    docs = _documents(plain)
    for path, doc in _pack_arrays(packed).items():
        pack, _, name = path.rpartition("/")
        stage = pack.rpartition("/")[0]
        tasks, records = stored_rows(packed, pack)
        for entry, record in zip(tasks, records[name], strict=True):
            assert record == docs[f"{stage}/{entry['group']}/{name}"]["attributes"]
            assert json.dumps(record["stats"]) == json.dumps(
                docs[f"{stage}/{entry['group']}/{name}"]["attributes"]["stats"]
            )
    nan_row = stored_rows(packed, f"{INV}/stages/up/pack_0000")[1]["input_00_x"][2]
    assert (nan_row["stats"]["nanCount"], nan_row["stats"]["infCount"]) == (1, 1)
    y = stored_rows(packed, f"{INV}/stages/up/pack_0000")[1]["output_00_y"][0]
    assert list(y)[-1] == "stats" and isinstance(y["stats"]["min"], int)  # the writer's stats replace the given ones


def _shard_chunk(window: Path, source: ShardSource) -> bytes:
    shard = (window / source.shard).read_bytes()
    entry = decode_index(shard[-index_nbytes(source.count) :], source.count, source.shard)[source.slot]
    assert entry is not None
    return shard[entry[0] : entry[0] + entry[1]]


def test_packed_tasks_are_the_tasks_writers_view(windows):
    """Every task group a pack's rows stand for, as the readers find it (``PackedTasks``), is the tasks layout's: the
    same groups and members, the same attributes, each record's document as the tasks writer stores it and its
    pack row's inner chunk byte for byte the tasks layout's chunk, each row coordinate the stored values."""
    packed, plain = windows
    wanted = _documents(plain)
    tasks = packed_tasks(packed)
    view = {path for path in _documents(packed) if not any(part.startswith("pack_") for part in path.split("/"))}
    chunks = 0
    for group in tasks.groups():
        view.add(group)
        assert wanted[group]["node_type"] == "group", group
        assert tasks.task_attributes(group) == wanted[group]["attributes"], group
        for name in tasks.members(group):
            rel = f"{group}/{name}"
            view.add(rel)
            member, expected = tasks.find(rel), wanted[rel]
            doc = member.doc
            if isinstance(member, PackedCoordinate):  # computed by the readers, whatever the tasks writer's codecs
                assert doc == {k: expected[k] for k in doc}, rel
                stored = zarr.open_array(str(plain / rel), mode="r")[...].tolist()
                assert list(range(member.start, member.stop)) == stored, rel
                continue
            assert isinstance(member, PackedRecord), rel
            assert doc == {k: expected[k] for k in doc}, rel  # codecs, chunk grid, fill value, attributes included
            assert set(expected) - set(doc) <= {"zarr_format", "chunk_key_encoding", "storage_transformers"}, rel
            key = f"{rel}/c{'.0' * len(member.shape)}"
            assert _shard_chunk(packed, member.source()) == (plain / key).read_bytes(), key
            chunks += 1
    assert chunks == 5 * 2 + 2 * 3 + 3
    assert sorted(view) == sorted(wanted)


def test_torn_window_keeps_pack_arrays_readable(tmp_path, windows):
    writer = WindowWriter(tmp_path, durable=False, pack=True)
    session = writer.begin(0, 0, {"level": "L1"})
    session.write_invocation(mixed_invocation())
    writer.close()
    pack = tmp_path / "rank_0" / "window_0000" / INV / "stages" / "up" / "pack_0000"
    group = json.loads((pack / "zarr.json").read_bytes())  # its attributes; the commit adds its consolidated metadata
    assert "consolidated_metadata" not in group and group["attributes"]["taskCount"] == 5
    for name in ("task_id", "owner_id", "core_id", "input_00_x", "output_00_y", "input_00_x_stats"):
        assert (pack / name / "zarr.json").is_file()
    window = tmp_path / "rank_0" / "window_0000"
    rel = f"{INV}/{_task('up', 4)}/output_00_y"
    member = packed_tasks(window, [f"{INV}/stages/up/pack_0000"], strict=False).find(rel)
    assert isinstance(member, PackedRecord)
    row = zarr.open_array(str(window / member.array), mode="r")[member.row]
    expected = zarr.open_array(str(windows[1] / rel), mode="r")[...]
    assert row.tobytes() == expected.tobytes()  # exact: stored bytes


def test_pack_false_writes_task_groups(windows):
    _, plain = windows
    stage = plain / INV / "stages" / "up"
    assert sorted(p.name for p in stage.iterdir() if p.is_dir()) == [
        "task_000000",
        "task_000001",
        "task_000002",
        "task_000003",
        "task_000004",
        "task_000010_worker_001",
        "task_000011_worker_002",
        "task_000020",
    ]


def test_only_packable_tasks_are_packed(tmp_path):
    """A task whose record is over PACK_MAX_RECORD_BYTES, over the chunk size, empty, or whose coordinate is not a
    range stays a schema-6 group; a task group not flagged ``task`` too."""
    rng = np.random.default_rng(1)
    groups, arrays = [], []
    cases = {
        0: (rng.standard_normal((4, 4)).astype(np.float32), {"token": np.arange(4, dtype=np.int64)}),  # packable
        1: (np.zeros((PACK_MAX_RECORD_BYTES // 4 + 1,), np.float32), {}),  # over the pack limit
        2: (np.zeros((0, 4), np.float32), {}),  # empty
        3: (rng.standard_normal((4, 4)).astype(np.float32), {"token": np.array([0, 1, 3, 4], dtype=np.int64)}),
        4: (rng.standard_normal((4, 4)).astype(np.float32), {}),  # not flagged as a task
        5: (rng.standard_normal((4, 4)).astype(np.float32), {"token": np.arange(4, 8, dtype=np.int64)}),  # as 0
        6: (rng.standard_normal((5, 4)).astype(np.float32), {"token": np.arange(5, dtype=np.int64)}),  # unique shape
    }
    for t, (data, coords) in cases.items():
        groups.append(GroupWrite(_task("s", t), {"taskId": t}, task=t != 4))
        arrays.append(ArrayWrite(f"{_task('s', t)}/input_00_x", data, ("token", "hidden")[: data.ndim], {}, coords))
    window = _write(tmp_path / "a", True, InvocationWrite(INV, {}, groups, arrays))
    stage = window / INV / "stages" / "s"
    assert sorted(p.name for p in stage.iterdir() if p.is_dir()) == [
        "pack_0000",
        "task_000001",
        "task_000002",
        "task_000003",
        "task_000004",
        "task_000006",
    ]
    tasks = stored_rows(window, f"{INV}/stages/s/pack_0000")[0]
    assert [entry["group"] for entry in tasks] == ["task_000000", "task_000005"]
    pair = [0, 5]
    small = _write(
        tmp_path / "b",
        True,
        InvocationWrite(INV, {}, [groups[i] for i in pair], [arrays[i] for i in pair]),
        chunk_bytes=32,
    )
    assert sorted(p.name for p in (small / INV / "stages" / "s").iterdir() if p.is_dir()) == [
        "task_000000",
        "task_000005",
    ]


def test_a_pack_name_taken_by_a_declared_group_is_refused(tmp_path):
    groups = [GroupWrite(_task("s", t), {"taskId": t}, task=True) for t in (0, 1)]
    groups.append(GroupWrite("stages/s/pack_0000", {}))
    arrays = [ArrayWrite(f"{_task('s', t)}/input_00_x", np.ones(3, np.float32), ("k",), {}) for t in (0, 1)]
    with WindowWriter(tmp_path, durable=False, pack=True) as writer:
        session = writer.begin(0, 0, {})
        with pytest.raises(ValueError, match=r"group '.*stages/s/pack_0000' would collide with the task-record pack"):
            session.write_invocation(InvocationWrite(INV, {}, groups, arrays))
    assert not (tmp_path / "rank_0" / "window_0000" / INV).exists()  # refused before a byte was written


def test_many_tasks_split_into_shards_with_an_absent_tail(tmp_path):
    rows = 2 * PACK_SHARD_BYTES // 4096 + 5  # two full shards of 4 KiB records, then 5 rows
    groups = [GroupWrite(_task("s", t), {"taskId": t}, task=True) for t in range(rows)]
    data = np.arange(rows * 1024, dtype=np.float32).reshape(rows, 1024)
    arrays = [ArrayWrite(f"{_task('s', t)}/input_00_x", data[t], ("hidden",), {}) for t in range(rows)]
    window = _write(tmp_path, True, InvocationWrite(INV, {}, groups, arrays), stats=False)
    array = window / INV / "stages" / "s" / "pack_0000" / "input_00_x"
    assert sorted(p.name for p in array.iterdir()) == ["c.0.0", "c.1.0", "c.2.0", "zarr.json"]
    per_shard = PACK_SHARD_BYTES // 4096
    tail = (array / "c.2.0").read_bytes()
    entries = decode_index(tail[-index_nbytes(per_shard) :], per_shard, "c.2.0")
    assert all(e is not None for e in entries[:5]) and all(e is None for e in entries[5:])
    import zarr

    assert zarr.open_array(str(array))[...].tobytes() == data.tobytes()
    assert "stats" not in stored_rows(window, f"{INV}/stages/s/pack_0000")[1]["input_00_x"][0]
    assert "input_00_x_stats" not in stored_columns(window, f"{INV}/stages/s/pack_0000")


# --------------------------------------------------------------------------- vectorised statistics
def _accumulated(rows):
    return [StatsAccumulator(r.dtype).update(r).result() for r in rows]


@pytest.mark.parametrize(
    "dtype", ["float32", "float64", "float16", "bfloat16", "float8_e4m3fn", "int8", "int64", "uint64", "bool"]
)
@pytest.mark.parametrize("size", [1, 7, 2048, SLICE_ELEMENTS, SLICE_ELEMENTS + 3])
def test_row_stats_equal_the_accumulator_bit_for_bit(dtype, size):
    rng = np.random.default_rng(size)
    count = 6 if size > 4096 else 40
    if dtype == "bool":
        block = rng.integers(0, 2, size=(count, size)).astype(bool)
    elif dtype in ("int8", "int64", "uint64"):
        info = np.iinfo(dtype)
        block = rng.integers(info.min, info.max, size=(count, size), dtype=dtype, endpoint=True)
    else:
        scale = 50 if dtype.startswith("float8") else 1e3
        block = (rng.standard_normal((count, size)) * scale).astype(np.float64 if dtype == "float64" else np.float32)
        block = block.astype(getattr(ml_dtypes, dtype, None) or dtype)
        block[1] = -0.0  # a -0.0 sum: the accumulator starts from 0.0
        block[5] = 0.0
        block[5, ::2] = -0.0  # mixed zeros: the sign of min/max must come out as the accumulator's
        if size > 1:
            block[2, 0], block[3, -1] = np.nan, np.inf
        block[4] = np.inf
    rows = [np.ascontiguousarray(block[i].reshape(-1)) for i in range(count)]
    assert json.dumps(row_stats(rows)) == json.dumps(_accumulated(rows))


def test_fsspec_roots_get_the_same_pack_bytes(windows):
    """Non-local backends take each shard as one buffer: the stored bytes equal the local writer's."""
    import fsspec

    packed, _ = windows
    url = "memory://packs-writer-test"
    fs = fsspec.filesystem("memory")
    try:
        with WindowWriter(url, durable=False, pack=True) as writer:
            writer.write_window(WindowWrite(0, 0, {"level": "L1"}, [mixed_invocation()]))
        base = "/packs-writer-test/rank_0/window_0000/"
        remote = {path[len(base) :]: fs.cat_file(path) for path in fs.find(base)}
        local = {p.relative_to(packed).as_posix(): p.read_bytes() for p in packed.rglob("*") if p.is_file()}
        assert sorted(remote) == sorted(local)
        shards = [
            k
            for k in local
            if "/pack_" in k
            and "/c." in k
            and k.rpartition("/")[0].rpartition("/")[2].startswith(("input", "output"))
            and not k.rpartition("/")[0].endswith(("_stats", "_offset"))
        ]
        assert len(shards) == 6
        for key in local:
            if key != "zarr.json":  # the window document holds timestamps
                assert remote[key] == local[key], key
    finally:
        fs.rm("/packs-writer-test", recursive=True)


def test_a_failed_shard_aborts_the_window_and_keeps_what_was_written(tmp_path):
    writer = WindowWriter(tmp_path, durable=False, pack=True)
    real = writer.backend.put

    def put(key, data, **kwargs):
        if "/stages/up/pack_0000/input_00_x/c." in key:
            raise OSError(28, "No space left on device", key)
        return real(key, data, **kwargs)

    writer.backend.put = put
    with pytest.raises(OSError, match="No space left"):
        writer.write_window(WindowWrite(0, 0, {"level": "L1"}, [mixed_invocation()]))
    writer.close()
    window = tmp_path / "rank_0" / "window_0000"
    doc = json.loads((window / "zarr.json").read_bytes())
    assert doc["attributes"]["status"] == "aborted"
    listed = doc["consolidated_metadata"]["metadata"]
    pack = f"{INV}/stages/up/pack_0000"
    assert f"{pack}/task_id" in listed and f"{pack}/output_00_y" in listed and f"{pack}/input_00_x" not in listed
    assert not (window / pack / "input_00_x" / "zarr.json").exists()
    from megadump_zarr import open_dump

    records = open_dump(tmp_path).records(
        include_incomplete=True
    )  # the aborted window keeps the record arrays that were written
    virtual = {path.partition("/window_0000/")[2] for path in records["path"]}
    assert f"{INV}/{_task('up', 0)}/output_00_y" in virtual and f"{INV}/{_task('up', 0)}/input_00_x" not in virtual
    assert f"{pack}/input_00_x_stats" not in listed  # written with its record array's document


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    dtype=st.sampled_from(["float32", "float64", "float16", "int16", "uint8", "bool"]),
    rows=st.integers(1, 6),
    size=st.integers(1, 300),
)
def test_row_stats_equal_the_accumulator_on_any_values(data, dtype, rows, size):
    """Any values (NaN, Inf, subnormals, extremes, signed zeros) give the accumulator's statistics exactly."""
    block = data.draw(hnp.arrays(np.dtype(dtype), (rows, size)))
    parts = [np.ascontiguousarray(block[i]) for i in range(rows)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the accumulator may warn on float64 overflow
        expected = json.dumps(_accumulated(parts))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NaN/Inf rows never warn in the vectorised path
        assert json.dumps(row_stats(parts)) == expected


def test_packing_leaves_the_callers_attributes_untouched(tmp_path):
    invocation = mixed_invocation()
    before = copy.deepcopy([(g.path, g.attrs) for g in invocation.groups])
    window = _write(tmp_path / "dump", True, invocation)
    assert [(g.path, g.attrs) for g in invocation.groups] == before  # owner.id, taskId, ... still there
    pack = json.loads((window / INV / "stages" / "up" / "pack_0000" / "zarr.json").read_bytes())["attributes"]
    assert pack["taskAttributes"]["owner"] == {"label": "expert"}  # the per-task id lives in owner_id
    assert "taskId" not in pack["taskAttributes"] and pack["taskAttributes"]["stage"] == "up"
