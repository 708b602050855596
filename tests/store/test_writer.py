"""Window writer: round trips through zarr and xarray, claim/commit protocol, status, fsspec roots."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
import os
from pathlib import Path
import uuid
import warnings

import google_crc32c
import ml_dtypes
import numpy as np
import pytest
import xarray as xr
import zarr

from megadump_zarr.layout.write_model import ArrayWrite, InvocationWrite, WindowWrite
from megadump_zarr.store import backend as backend_mod
from megadump_zarr.store.chunking import CHUNK_KEY_SEPARATOR
from megadump_zarr.store.tensor_stats import compute_stats
from megadump_zarr.store.writer import WindowWriter, window_status
from tests._moto import KEY, SECRET, moto_s3

INV = "invocation_000001_forward"
SEP = CHUNK_KEY_SEPARATOR


def _chunk_key(*index: int) -> str:
    """The "default" encoding's key of the chunk at ``index`` ("c", then each index after the separator)."""
    return SEP.join(["c", *map(str, index)])


def _chunk_files(array_dir: str | os.PathLike[str]) -> list[str]:
    """The stored chunk keys of an array: every file below its directory but zarr.json, as "/"-joined paths."""
    root = Path(array_dir)
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and p.name != "zarr.json")


def _zarr_registered(name: str) -> bool:
    try:
        import megadump_zarr.store.dtypes  # noqa: F401  (registers the ml_dtypes data types)
        from zarr.dtype import data_type_registry

        data_type_registry.match_json(name, zarr_format=3)
        return True
    except Exception:
        return False


DTYPES = [
    np.float32,
    np.float16,
    np.float64,
    np.int64,
    np.int8,
    np.uint8,
    np.uint32,
    np.bool_,
    pytest.param(ml_dtypes.bfloat16, marks=pytest.mark.skipif(not _zarr_registered("bfloat16"), reason="dtypes.py")),
    pytest.param(
        ml_dtypes.float8_e4m3fn, marks=pytest.mark.skipif(not _zarr_registered("float8_e4m3fn"), reason="dtypes.py")
    ),
    pytest.param(
        ml_dtypes.float8_e5m2, marks=pytest.mark.skipif(not _zarr_registered("float8_e5m2"), reason="dtypes.py")
    ),
]


def _sample(dtype, shape, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), size=shape).astype(dtype)
    return (rng.standard_normal(shape) * 4).astype(dtype)


def _window(arrays, groups=(), attrs=None, index=0, rank=0) -> WindowWrite:
    inv = InvocationWrite(INV, attrs or {"step": 0}, list(groups), list(arrays))
    return WindowWrite(rank, index, {"level": "L0"}, [inv])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("compressor", ["none", "default"])
def test_round_trip_dtypes_through_zarr_and_xarray(tmp_path, dtype, compressor):
    data = _sample(dtype, (7, 5))
    vector = _sample(dtype, (40,), seed=1)
    # chunk_bytes forces several chunks and a padded edge chunk on both arrays
    writer = WindowWriter(tmp_path, compressor=compressor, chunk_bytes=3 * 5 * data.itemsize)
    url = writer.write_window(
        _window(
            [
                ArrayWrite("a", data, ("row", "col"), {"role": "input", "nested": {"k": [1, 2]}}),
                ArrayWrite("v", vector, ("n",), {"role": "output"}, coords={"n": np.arange(100, 140)}),
            ]
        )
    )
    assert url == os.path.join(tmp_path, "rank_0", "window_0000")
    group = zarr.open_group(url, mode="r")
    stored = group[f"{INV}/a"]
    assert stored.dtype == data.dtype
    assert stored.chunks == (3, 5)
    assert stored[...].tobytes() == data.tobytes()
    assert group[f"{INV}/v"][...].tobytes() == vector.tobytes()
    assert group[f"{INV}/v"].chunks == (15,)
    # every chunk is written, edge chunks at full size
    assert _chunk_files(Path(url, INV, "a")) == [_chunk_key(0, 0), _chunk_key(1, 0), _chunk_key(2, 0)]
    ds = xr.open_zarr(os.path.join(url, INV))
    assert ds["a"].dims == ("row", "col")
    assert ds["a"].values.tobytes() == data.tobytes()
    assert ds["v"].dims == ("n",)
    assert ds["v"].values.tobytes() == vector.tobytes()
    np.testing.assert_array_equal(ds["n"].values, np.arange(100, 140))
    assert ds["a"].attrs["role"] == "input"
    assert ds["a"].attrs["nested"] == {"k": [1, 2]}
    _assert_stats_close(ds["a"].attrs["stats"], compute_stats(data))
    assert ds.attrs == {"step": 0}


def _assert_stats_close(got, expected):
    """Chunked accumulation may differ from a one-pass sum in the last bits of mean/l2norm."""
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        if key in ("mean", "l2norm") and value is not None:
            assert got[key] == pytest.approx(value, rel=1e-12), key
        else:
            assert got[key] == value, key


def _crc(data: bytes) -> bytes:
    """The 4 bytes zarr's crc32c codec appends to ``data``."""
    return int(google_crc32c.value(data)).to_bytes(4, "little")


@pytest.mark.parametrize(
    "compressor",
    [
        "none",
        "zstd",
        "zstd-3",
        "blosc-lz4",
        "blosc-lz4hc-9-bitshuffle",
        "blosc-zstd-3-noshuffle",
        "blosc-zlib-1",
        "blosc-blosclz-5-shuffle",
    ],
)
def test_every_compressor_reads_back(tmp_path, helpers, compressor):
    data = _sample(np.float32, (50, 9))
    flags = _sample(np.bool_, (33,))
    url = WindowWriter(tmp_path, compressor=compressor, chunk_bytes=16 * 9 * 4).write_window(
        _window([ArrayWrite("a", data, ("r", "c")), ArrayWrite("f", flags, ("n",))])
    )
    group = zarr.open_group(url, mode="r")
    np.testing.assert_array_equal(group[f"{INV}/a"][...], data)
    np.testing.assert_array_equal(group[f"{INV}/f"][...], flags)
    codecs = helpers.read_json(Path(url, INV, "a", "zarr.json"))["codecs"]
    assert codecs[0] == {"name": "bytes", "configuration": {"endian": "little"}}
    assert codecs[-1] == {"name": "crc32c"}  # every chunk carries a checksum, last in the chain
    if compressor == "none":
        assert len(codecs) == 2
        first, last = data[:16].tobytes(), data[48:].tobytes() + bytes(14 * 9 * 4)  # the last chunk is padded
        assert Path(url, INV, "a", _chunk_key(0, 0)).read_bytes() == first + _crc(first)
        assert Path(url, INV, "a", _chunk_key(3, 0)).read_bytes() == last + _crc(last)
    else:
        assert codecs[1]["name"] == compressor.split("-")[0]


def test_layout_attributes_and_status(tmp_path, helpers):
    writer = WindowWriter(tmp_path)
    session = writer.begin(3, 12, {"schemaVersion": 1, "level": "L1", "rank": 3})
    window = Path(tmp_path, "rank_3", "window_0012")
    assert session.url == str(window)
    assert window_status(tmp_path, 3, 12) == "writing"
    doc = helpers.read_json(window / "zarr.json")
    assert doc["node_type"] == "group" and doc["zarr_format"] == 3
    assert doc["attributes"]["status"] == "writing"
    assert "createdAt" in doc["attributes"] and "committedAt" not in doc["attributes"]
    assert helpers.read_json(Path(tmp_path, "zarr.json")) == {
        "attributes": {"megadump_zarr": {"layoutVersion": 1}},
        "zarr_format": 3,
        "node_type": "group",
    }
    assert helpers.read_json(Path(tmp_path, "rank_3", "zarr.json")) == {
        "attributes": {},
        "zarr_format": 3,
        "node_type": "group",
    }
    session.write_invocation(helpers.l1_invocation())
    assert window_status(tmp_path, 3, 12) == "writing"
    assert session.commit() == str(window)
    assert window_status(tmp_path, 3, 12) == "complete"
    attrs = helpers.read_json(window / "zarr.json")["attributes"]
    assert attrs["schemaVersion"] == 10 and attrs["rank"] == 3 and attrs["status"] == "complete"
    assert attrs["createdAt"].endswith("Z") and attrs["committedAt"] >= attrs["createdAt"]
    task = helpers.read_json(window / INV / "stages/expert_up/task_000003/zarr.json")
    assert task["attributes"] == {"taskId": 3, "coreType": "AIC", "coreId": 1}
    # implicit parent "stages" is an empty group
    assert helpers.read_json(window / INV / "stages/zarr.json")["attributes"] == {}
    assert helpers.read_json(window / INV / "zarr.json")["attributes"]["direction"] == "forward"
    assert window_status(tmp_path, 3, 13) is None
    assert window_status(tmp_path / "nowhere", 0, 0) is None
    with pytest.raises(RuntimeError, match="already committed"):
        session.commit()
    with pytest.raises(RuntimeError, match="already committed"):
        session.write_invocation(helpers.l1_invocation("invocation_000002_forward"))


def test_root_and_rank_groups_are_not_rewritten(tmp_path):
    with WindowWriter(tmp_path) as writer:
        writer.write_window(_window([]))
    root_doc = Path(tmp_path, "zarr.json")
    before = root_doc.stat().st_mtime_ns, root_doc.read_bytes()
    os.utime(root_doc, ns=(1, 1))
    for window in (_window([], index=1), _window([], rank=1)):
        with WindowWriter(tmp_path) as writer:  # closing ends the session: its marker goes
            writer.write_window(window)
    assert root_doc.stat().st_mtime_ns == 1 and root_doc.read_bytes() == before[1]
    assert sorted(p.name for p in Path(tmp_path).iterdir()) == ["rank_0", "rank_1", "zarr.json"]


def test_existing_window_raises_and_touches_nothing(tmp_path, helpers):
    writer = WindowWriter(tmp_path)
    url = writer.write_window(helpers.l1_window())
    before = helpers.tree_hashes(tmp_path)
    with pytest.raises(FileExistsError, match="^Tensor dump window already exists: .*window_0000$") as info:
        writer.begin(0, 0, {"level": "L1"})
    assert str(info.value) == f"Tensor dump window already exists: {url}"
    with pytest.raises(FileExistsError, match="Tensor dump window already exists"):
        WindowWriter(tmp_path, compressor="none").write_window(helpers.l1_window())
    assert helpers.tree_hashes(tmp_path) == before
    assert window_status(tmp_path, 0, 0) == "complete"


def test_claim_is_exclusive_between_concurrent_writers(tmp_path):
    def attempt(_):
        try:
            WindowWriter(tmp_path).begin(0, 5, {})
            return "won"
        except FileExistsError:
            return "lost"

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(attempt, range(16)))
    assert results.count("won") == 1 and results.count("lost") == 15


def test_aborted_commit_keeps_data(tmp_path, helpers):
    session = WindowWriter(tmp_path).begin(0, 1, {"level": "L1"})
    session.write_invocation(helpers.l1_invocation())
    session.commit("aborted")
    assert window_status(tmp_path, 0, 1) == "aborted"
    ds = xr.open_zarr(Path(session.url, INV, "stages/expert_up/task_000003"))
    assert ds["input_00_x"].shape == (6, 8)


def test_write_window_failure_commits_aborted(tmp_path, helpers):
    good = helpers.l1_invocation()
    bad = InvocationWrite(
        "invocation_000002_forward",
        {},
        [],
        [ArrayWrite("a", np.zeros(3), ("x",)), ArrayWrite("b", np.zeros(4), ("x",))],
    )
    with pytest.raises(ValueError, match="dimension 'x' has lengths 3 and 4"):
        WindowWriter(tmp_path).write_window(WindowWrite(0, 0, {}, [good, bad]))
    assert window_status(tmp_path, 0, 0) == "aborted"
    window = Path(tmp_path, "rank_0", "window_0000")
    assert not (window / "invocation_000002_forward").exists()  # validation precedes writing
    group = zarr.open_group(window, mode="r")
    assert list(group.group_keys()) == [INV]


def test_commit_status_is_validated(tmp_path):
    session = WindowWriter(tmp_path).begin(0, 0, {})
    with pytest.raises(ValueError, match="status must be one of"):
        session.commit("done")
    with pytest.raises(ValueError, match="status must be one of"):
        WindowWriter(tmp_path).write_window(_window([], index=1), status="writing")


def test_invocation_names_cannot_repeat(tmp_path, helpers):
    session = WindowWriter(tmp_path).begin(0, 0, {})
    session.write_invocation(helpers.l1_invocation())
    with pytest.raises(ValueError, match="would collide with invocation"):
        session.write_invocation(helpers.l1_invocation())


def test_every_data_group_opens_with_xarray_without_warnings(tmp_path, helpers):
    window = WindowWrite(
        0, 0, {"level": "L1"}, [helpers.l1_invocation(), helpers.l1_invocation("invocation_000002_backward", seed=1)]
    )
    url = WindowWriter(tmp_path).write_window(window)
    groups = [os.path.relpath(d, url) for d, _, files in os.walk(url) if "zarr.json" in files]
    groups = [g for g in groups if helpers.read_json(Path(url, g, "zarr.json"))["node_type"] == "group"]
    assert len(groups) == 1 + 2 * 7  # window + (invocation, stages, 2 stages, 3 tasks) per invocation
    data_groups = [
        g
        for g in groups
        if any(
            helpers.read_json(Path(url, g, name, "zarr.json"))["node_type"] == "array"
            for name in os.listdir(Path(url, g))
            if Path(url, g, name, "zarr.json").exists()
        )
    ]
    assert len(data_groups) == 2 * 4  # the invocation (it holds "x") and its 3 task groups
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for rel in [".", *data_groups]:
            ds = xr.open_zarr(os.path.join(url, rel))
            ds.load()
        for rel in set(groups) - set(data_groups) - {"."}:  # stages, a stage: plain groups zarr lists
            assert "consolidated_metadata" not in helpers.read_json(Path(url, rel, "zarr.json"))
            assert len(list(zarr.open_group(os.path.join(url, rel), mode="r", use_consolidated=False).members()))
        task = xr.open_zarr(os.path.join(url, INV, "stages/expert_up/task_000003"))
    inv = helpers.l1_invocation()
    by_path = {a.path: a for a in inv.arrays}
    x = by_path["stages/expert_up/task_000003/input_00_x"]
    y = by_path["stages/expert_up/task_000003/output_00_y"]
    np.testing.assert_array_equal(task["input_00_x"].values, x.data)
    np.testing.assert_array_equal(task["output_00_y"].values, y.data)
    assert task["output_00_y"].dtype == np.float16
    assert task["output_00_y"].dims == ("row", "hidden")
    np.testing.assert_array_equal(task["row"].values, np.arange(12, 18))
    assert task.attrs == {"taskId": 3, "coreType": "AIC", "coreId": 1}
    assert task["input_00_x"].attrs["capturePhase"] == "before"
    # the coordinate is written once per group, as a sibling array with dims (dim,)
    assert sorted(os.listdir(Path(url, INV, "stages/expert_up/task_000003"))) == [
        "input_00_x",
        "output_00_y",
        "row",
        "zarr.json",
    ]


def test_zero_size_and_scalar_arrays(tmp_path, helpers):
    empty = np.zeros((0, 3), dtype=np.float32)
    scalar = np.array(2.5, dtype=np.float64)
    url = WindowWriter(tmp_path).write_window(
        _window([ArrayWrite("empty", empty, ("n", "k")), ArrayWrite("s", scalar, ())])
    )
    base = Path(url, INV)
    assert helpers.read_json(base / "empty/zarr.json")["chunk_grid"]["configuration"]["chunk_shape"] == [1, 3]
    assert sorted(os.listdir(base / "empty")) == ["zarr.json"]  # no chunks
    assert helpers.read_json(base / "s/zarr.json")["chunk_grid"]["configuration"]["chunk_shape"] == []
    assert (base / "s" / "c").read_bytes() != b""  # 0-d chunk key is "c", always written
    group = zarr.open_group(url, mode="r")
    assert group[f"{INV}/empty"].shape == (0, 3)
    assert group[f"{INV}/s"][()] == 2.5
    ds = xr.open_zarr(base)
    assert ds["empty"].shape == (0, 3) and float(ds["s"]) == 2.5
    stats = helpers.read_json(base / "empty/zarr.json")["attributes"]["stats"]
    assert stats == {"min": None, "max": None, "mean": None, "l2norm": None, "nanCount": 0, "infCount": 0}


def test_all_zero_chunks_are_written(tmp_path):
    url = WindowWriter(tmp_path, chunk_bytes=16).write_window(
        _window([ArrayWrite("z", np.zeros(10, np.int32), ("n",))])
    )
    assert _chunk_files(Path(url, INV, "z")) == [_chunk_key(0), _chunk_key(1), _chunk_key(2)]
    assert all(Path(url, INV, "z", key).stat().st_size > 0 for key in _chunk_files(Path(url, INV, "z")))
    np.testing.assert_array_equal(zarr.open_array(Path(url, INV, "z"), mode="r")[...], np.zeros(10, np.int32))


def test_non_contiguous_and_big_endian_inputs(tmp_path):
    base = np.arange(60, dtype=np.float32).reshape(6, 10)
    strided = base[:, ::2]
    big = np.arange(8, dtype=">i4")
    url = WindowWriter(tmp_path, chunk_bytes=40).write_window(
        _window([ArrayWrite("s", strided, ("r", "c")), ArrayWrite("b", big, ("n",))])
    )
    group = zarr.open_group(url, mode="r")
    np.testing.assert_array_equal(group[f"{INV}/s"][...], strided)
    assert group[f"{INV}/b"].dtype == np.dtype("int32")
    np.testing.assert_array_equal(group[f"{INV}/b"][...], np.arange(8))


def test_chunks_are_passed_without_copies(tmp_path, monkeypatch):
    data = np.arange(4096, dtype=np.float32).reshape(64, 64)
    seen = []
    real_put = backend_mod.LocalBackend.put

    def spy(self, key, payload, *, atomic=False):
        if f"/a/c{SEP}" in key:  # a chunk of "a" (its keys are "c", the separator, then the chunk index)
            seen.append(payload)
        return real_put(self, key, payload, atomic=atomic)

    monkeypatch.setattr(backend_mod.LocalBackend, "put", spy)
    WindowWriter(tmp_path, compressor="none", chunk_bytes=16 * 64 * 4).write_window(
        _window([ArrayWrite("a", data, ("r", "c"))])
    )
    assert len(seen) == 4
    # each chunk goes out as (a view of the data, its 4-byte CRC-32C), written with one writev
    assert all(np.shares_memory(chunk, data) and len(crc) == 4 for chunk, crc in seen)


def test_large_array_many_chunks_stats_match(tmp_path, helpers):
    data = _sample(np.float32, (1000, 33))
    data[5, 3] = np.nan
    data[900, 0] = -np.inf
    url = WindowWriter(tmp_path, chunk_bytes=4096, max_workers=4).write_window(
        _window([ArrayWrite("a", data, ("r", "c"))])
    )
    doc = helpers.read_json(Path(url, INV, "a", "zarr.json"))
    assert doc["chunk_grid"]["configuration"]["chunk_shape"] == [31, 33]
    assert _chunk_files(Path(url, INV, "a")) == sorted(_chunk_key(i, 0) for i in range(33))
    expected = compute_stats(data)
    got = doc["attributes"]["stats"]
    assert got["nanCount"] == 1 and got["infCount"] == 1
    assert got["min"] == expected["min"] and got["max"] == expected["max"]
    assert got["mean"] == pytest.approx(expected["mean"], rel=1e-12)
    assert got["l2norm"] == pytest.approx(expected["l2norm"], rel=1e-12)
    np.testing.assert_array_equal(zarr.open_array(Path(url, INV, "a"), mode="r")[...], data)


def test_stats_can_be_disabled_and_caller_stats_attr_is_replaced(tmp_path, helpers):
    arr = ArrayWrite("a", np.ones(3, np.float32), ("n",), {"stats": "caller", "k": 1})
    url = WindowWriter(tmp_path, stats=False).write_window(_window([arr]))
    assert helpers.read_json(Path(url, INV, "a", "zarr.json"))["attributes"] == {"stats": "caller", "k": 1}
    url = WindowWriter(tmp_path, stats=True).write_window(_window([arr], index=1))
    attrs = helpers.read_json(Path(url, INV, "a", "zarr.json"))["attributes"]
    assert attrs["k"] == 1 and attrs["stats"]["mean"] == 1.0


def test_fsspec_memory_root(memory_url, helpers):
    import fsspec

    writer = WindowWriter(memory_url, compressor="blosc-lz4")
    url = writer.write_window(helpers.l1_window(rank=2, window_index=7))
    assert url == f"{memory_url}/rank_2/window_0007"
    assert window_status(memory_url, 2, 7) == "complete"
    assert window_status(memory_url, 2, 8) is None
    store = zarr.storage.FsspecStore.from_url(url, read_only=True)
    group = zarr.open_group(store=store, mode="r")
    assert group.attrs["status"] == "complete"
    inv = helpers.l1_invocation()
    for item in inv.arrays:
        np.testing.assert_array_equal(group[f"{INV}/{item.path}"][...], item.data)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = xr.open_zarr(f"{url}/{INV}/stages/expert_up/task_000003")
    assert ds["output_00_y"].dims == ("row", "hidden")
    fs = fsspec.filesystem("memory")
    root_doc = fs.cat_file(memory_url.replace("memory://", "/") + "/zarr.json")
    assert b"layoutVersion" in root_doc
    with pytest.raises(FileExistsError, match=f"Tensor dump window already exists: {url}"):
        writer.begin(2, 7, {})


def test_file_url_uses_local_backend(tmp_path):
    writer = WindowWriter(f"file://{tmp_path}")
    assert isinstance(writer.backend, backend_mod.LocalBackend)
    url = writer.write_window(_window([ArrayWrite("a", np.arange(3), ("n",))]))
    assert url == os.path.join(tmp_path, "rank_0", "window_0000")
    assert window_status(f"file://{tmp_path}", 0, 0) == "complete"


def test_bad_rank_and_window_index(tmp_path):
    writer = WindowWriter(tmp_path)
    with pytest.raises(ValueError, match="rank must be a non-negative integer"):
        writer.begin(-1, 0, {})
    with pytest.raises(ValueError, match="window_index must be a non-negative integer"):
        writer.begin(0, "1", {})
    assert not any(Path(tmp_path).iterdir())


def test_unsupported_dtype_and_attrs(tmp_path):
    writer = WindowWriter(tmp_path)
    session = writer.begin(0, 0, {})
    with pytest.raises(TypeError, match="array 'invocation_000001_forward/c'.*unsupported dtype complex128"):
        session.write_invocation(InvocationWrite(INV, {}, [], [ArrayWrite("c", np.zeros(2, complex), ("n",))]))
    with pytest.raises(TypeError, match="attributes of array 'invocation_000001_forward/a' are not JSON"):
        session.write_invocation(InvocationWrite(INV, {}, [], [ArrayWrite("a", np.zeros(2), ("n",), {"o": object()})]))
    with pytest.raises(TypeError):
        writer.begin(0, 1, {"bad": object()})
    assert not Path(tmp_path, "rank_0", "window_0001").exists()
    session.write_invocation(
        InvocationWrite(INV, {"n": np.int64(3)}, [], [ArrayWrite("a", np.zeros(2), ("n",), {"v": np.float32(1.5)})])
    )
    session.commit()
    assert zarr.open_group(session.url, mode="r")[f"{INV}/a"].attrs["v"] == 1.5


def test_s3_root_through_moto(helpers):
    pytest.importorskip("s3fs")
    bucket = f"writer-{uuid.uuid4().hex[:12]}"  # moto's state is per process: keep clear of other tests
    with moto_s3(bucket) as endpoint:
        options = {"endpoint_url": endpoint, "key": KEY, "secret": SECRET}
        with WindowWriter(f"s3://{bucket}/run", storage_options=options, chunk_bytes=64) as writer:
            url = writer.write_window(helpers.l1_window(rank=1, window_index=2))
            assert url == f"s3://{bucket}/run/rank_1/window_0002"
            with pytest.raises(FileExistsError, match=f"Tensor dump window already exists: {url}"):
                writer.begin(1, 2, {})
        assert window_status(f"s3://{bucket}/run", 1, 2, storage_options=options) == "complete"
        assert window_status(f"s3://{bucket}/run", 1, 3, storage_options=options) is None
        store = zarr.storage.FsspecStore.from_url(url, storage_options=options, read_only=True)
        group = zarr.open_group(store=store, mode="r")
        for item in helpers.l1_invocation().arrays:
            np.testing.assert_array_equal(group[f"{INV}/{item.path}"][...], item.data)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ds = xr.open_zarr(f"{url}/{INV}/stages/expert_up/task_000003", storage_options=options)
        np.testing.assert_array_equal(ds["row"].values, np.arange(12, 18))
