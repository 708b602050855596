"""Compare on both cores: the threaded comparison of dump records gives the serial comparison's bits, and
the chunk fast path of the record's lazy array (megadump_zarr.read.lazy, megadump_zarr.read.chunks) reads exactly what
zarr reads, failures included."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pandas as pd
import pytest

from megadump_zarr.analyse import compare, lanes, pairs
from megadump_zarr.analyse.metrics import compute_metrics
from megadump_zarr.analyse.record_pairs import RecordPair, compare_records, record_source
from megadump_zarr.layout.write_model import ArrayWrite, InvocationWrite, WindowWrite
from megadump_zarr.read import open_dump
from megadump_zarr.read.errors import DumpIntegrityError
from megadump_zarr.read.lazy import RecordArray
from megadump_zarr.store.writer import WindowWriter

CHUNK_BYTES = 16 << 10  # small chunks: every record spans many chunks and many blocks
BLOCK_BYTES = 32 << 10  # float64 bytes of one block: 4 Ki elements


def _arrays(rng: np.random.Generator, perturbed: bool) -> dict[str, np.ndarray]:
    base = {
        "f32": rng.standard_normal((300, 64), dtype=np.float32),
        "f64": rng.standard_normal((257, 33)),
        "bf16": rng.standard_normal((700, 40)).astype(ml_dtypes.bfloat16),
        "i32": rng.integers(-1000, 1000, (400, 50), dtype=np.int32),
        "nan": rng.standard_normal((150, 64), dtype=np.float32),
        "row": rng.standard_normal(20000, dtype=np.float32),
        # magnitudes over 8 decades: how partial sums are grouped shows in their last bits
        "wide": rng.standard_normal((600, 64)) * 10.0 ** rng.uniform(-4, 4, (600, 64)),
    }
    base["nan"][7, 3] = np.nan
    if not perturbed:
        return base
    noisy = np.random.default_rng(1)
    out = {}
    for name, x in base.items():
        if x.dtype.kind == "i":
            y = x.copy()
            y[150, 7] += 1  # one mismatch late in the tensor
        else:
            scale = 1e-2 if x.dtype == ml_dtypes.bfloat16 else 1e-4  # bf16: beyond its rounding
            y = (x.astype(np.float64) * (1 + scale * noisy.standard_normal(x.shape))).astype(x.dtype)
        out[name] = y
    out["nan"][7, 3] = np.nan
    return out


def _write(root: Path, arrays: dict[str, np.ndarray], compressor: str) -> Path:
    writes = []
    for name, data in arrays.items():
        dims = tuple(f"{name}_{axis}" for axis in range(data.ndim))
        attrs = {
            "name": name,
            "role": "stage_output",
            "capturePhase": "after",
            "actualShape": list(data.shape),
            "declaredShape": list(data.shape),
            "producers": [],
            "consumers": [],
            "ports": [],
        }
        writes.append(ArrayWrite(name, data, dims, attrs))
    invocation = InvocationWrite(
        "invocation_000000_forward",
        {"invocationId": 0, "step": 0, "direction": "forward", "kernelName": "k", "level": "L0"},
        [],
        writes,
    )
    window = WindowWrite(0, 0, {"level": "L0", "windowIndex": 0, "invocations": [invocation.name]}, [invocation])
    with WindowWriter(root, chunk_bytes=CHUNK_BYTES, durable=False, compressor=compressor) as writer:
        writer.write_window(window)
    return root


@pytest.fixture(scope="module", params=["default", "zstd-1", "none"])
def dumps(request, tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp(f"parallel-{request.param}")
    rng = np.random.default_rng(0)
    a = _write(base / "a", _arrays(rng, False), request.param)
    b = _write(base / "b", _arrays(np.random.default_rng(0), True), request.param)
    return a, b


def _units(a, b) -> list[RecordPair]:
    dump_a, dump_b = open_dump(a), open_dump(b)
    paths = sorted(dump_a.records()["path"])
    return [RecordPair(dump_a, dump_b, p, {"name": p}, None, None, False, BLOCK_BYTES) for p in paths]


def _bits(value):
    """Floats as their bit patterns (NaN included), so equality means the same bits."""
    if isinstance(value, float):
        return ("float", np.float64(value).tobytes())
    return value


def test_threaded_rows_have_the_serial_bits_every_time(dumps):
    units = _units(*dumps)
    serial = compare_records(units, threads=1)
    assert [r["verdict"] for r in serial] == ["fail"] * 7
    assert {r["name"].rsplit("/", 1)[-1]: r["mismatches"] for r in serial}["i32"] == 1
    for _ in range(4):  # lanes take blocks in whatever order they race to: the sums must not notice
        threaded = compare_records(units, threads=4)
        assert [[_bits(v) for v in row.values()] for row in threaded] == [
            [_bits(v) for v in row.values()] for row in serial
        ]


def test_threaded_rows_match_compute_metrics_through_zarr(dumps):
    """The rows of compare_records (chunk fast path, 3 lanes) against compute_metrics of the same records
    read by zarr through dask (``record_array``): the same blocks, so the same bits."""
    a, b = dumps
    units = _units(a, b)
    rows = compare_records(units, threads=3)
    dump_a, dump_b = open_dump(a), open_dump(b)
    for unit, row in zip(units, rows):
        xa, xb = dump_a.record_array(unit.path).data, dump_b.record_array(unit.path).data
        plan = pairs.prepare_pair(unit.keys, xa, xb)
        m = compute_metrics(xa, xb, rtol=plan.rtol, atol=plan.atol, exact=plan.exact, block_bytes=BLOCK_BYTES)
        for column in (
            "cosine",
            "max_abs",
            "max_rel",
            "rmse",
            "euc_dist",
            "within_0_1pct",
            "max_rel_eps",
            "mismatches",
            "nan_a",
            "nan_b",
            "elements",
            "first_mismatch",
        ):
            assert _bits(row[column]) == _bits(getattr(m, column)), (unit.path, column, row[column], getattr(m, column))
        if row["verdict"] != "pass":
            assert row["worst_index"] == m.worst_index and _bits(row["worst_a"]) == _bits(m.worst_a)


def test_compare_frame_is_the_same_with_one_lane(dumps, monkeypatch):
    a, b = dumps
    threaded = compare(a, b)
    monkeypatch.setattr(lanes, "_THREADS", 1)
    serial = compare(a, b)
    pd.testing.assert_frame_equal(threaded, serial, check_exact=True)
    for column in ("cosine", "max_abs", "rmse", "euc_dist", "max_rel"):
        assert threaded[column].to_numpy().tobytes() == serial[column].to_numpy().tobytes(), column
    assert list(threaded["verdict"]) == ["fail"] * 7


# ---------------------------------------------------------------------------------------------------- fast path
def _record(root: Path, name: str):
    dump = open_dump(root)
    path = next(p for p in dump.records()["path"] if p.endswith(f"/{name}"))
    return dump, path


@pytest.mark.parametrize("name", ["f32", "f64", "bf16", "i32", "row"])
def test_fast_rows_are_zarrs_bytes(dumps, name):
    dump, path = _record(dumps[0], name)
    fast = record_source(dump, path, False)
    assert isinstance(fast, RecordArray) and fast.reader is not None
    whole = fast.read_by_source(...)
    n, step = fast.shape[0], fast.chunks[0]
    assert n > 3 * step  # several chunks, and an edge chunk (n is not a multiple of the chunk rows)
    cases = [
        slice(0, step),
        slice(step, 3 * step),
        slice(0, n),
        slice(2 * step, n),
        slice(5, step + 7),
        slice(n - 3, n),
        slice(1, 2),
    ]
    for rows in cases:
        got = fast[rows] if fast.ndim == 1 else fast[rows, :]
        assert got.dtype == whole.dtype and got.shape == whole[rows].shape
        assert got.tobytes() == whole[rows].tobytes(), rows
    assert fast.fast_reads == len(cases)
    assert (
        fast[::2].tobytes() == whole[::2].tobytes() and fast.fast_reads == len(cases) + 1
    )  # strided: the rows it spans
    sparse = slice(0, n, 2 * step)  # a stride past whole chunks: zarr reads only the chunks it needs
    assert fast[sparse].tobytes() == whole[sparse].tobytes() and fast.fast_reads == len(cases) + 1


def _chunk_file(root: Path, name: str, index: int) -> Path:
    array_dir = next(root.rglob(f"invocation_000000_forward/{name}"))
    files = sorted(p for p in array_dir.iterdir() if p.name.startswith("c"))
    return next(p for p in files if p.name.split(".")[1] == str(index) or p.name == f"c/{index}")


def _error(read) -> str:
    with pytest.raises(DumpIntegrityError) as info:
        read()
    return str(info.value)


def test_a_corrupt_or_missing_chunk_fails_as_through_zarr(tmp_path):
    rng = np.random.default_rng(3)
    root = _write(tmp_path / "d", {"x": rng.standard_normal((400, 64), dtype=np.float32)}, "default")
    dump, path = _record(root, "x")
    fast = record_source(dump, path, False)
    step = fast.chunks[0]
    corrupt = _chunk_file(root, "x", 1)
    raw = bytearray(corrupt.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    corrupt.write_bytes(bytes(raw))
    message = _error(lambda: fast[0 : 2 * step])
    assert "is corrupt: crc32c checksum mismatch" in message and corrupt.name in message
    assert message == _error(lambda: fast.read_by_source(slice(0, 2 * step)))
    missing = _chunk_file(root, "x", 2)
    missing.unlink()
    message = _error(lambda: fast[2 * step : 3 * step])
    assert "is missing: its window is committed" in message and missing.name in message
    assert fast.fast_reads == 0
    assert fast[0:step].tobytes() == fast.read_by_source(slice(0, step)).tobytes() and fast.fast_reads == 1


def test_compare_finds_a_corrupt_chunk_with_the_fast_path(tmp_path):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((400, 64), dtype=np.float32)
    a = _write(tmp_path / "a", {"x": x}, "default")
    b = _write(tmp_path / "b", {"x": x}, "default")
    corrupt = _chunk_file(b, "x", 3)
    raw = bytearray(corrupt.read_bytes())
    raw[10] ^= 0x01
    corrupt.write_bytes(bytes(raw))
    result = compare(a, b)
    assert list(result["verdict"]) == ["missing_data"]
    assert "crc32c checksum mismatch" in result["note"].iloc[0] and corrupt.name in result["note"].iloc[0]


def test_dask_reads_take_the_fast_path_with_zarrs_bytes(dumps):
    """``record_array`` (one dask task per chunk, asking ``x[0:r, 0:n]``) decodes in dask's threads."""
    dump, path = _record(dumps[0], "f32")
    lazy = dump.record_array(path)
    (source,) = {
        getattr(v, "value", v)
        for task in dict(lazy.data.__dask_graph__()).values()
        for v in getattr(task, "args", ())
        if isinstance(getattr(v, "value", v), RecordArray)
    }
    whole = source.read_by_source(...)
    assert lazy.values.tobytes() == whole.tobytes()
    assert source.fast_reads == -(-source.shape[0] // source.chunks[0])  # every chunk, none through zarr
    step, n = source.chunks[0], source.shape[1]
    assert source[0:step, 0:n].tobytes() == whole[0:step].tobytes()
    reads = source.fast_reads
    # part of an axis: the chunks of its rows, then cut
    assert source[0:step, 0 : n - 1].tobytes() == whole[0:step, 0 : n - 1].tobytes()
    assert source[0:step, 1:n].tobytes() == whole[0:step, 1:n].tobytes() and source.fast_reads == reads + 2
    assert source[3, 2:5].tobytes() == whole[3, 2:5].tobytes() and source.fast_reads == reads + 3


def test_fast_rows_pickle_for_dask_workers(dumps):
    import pickle

    dump, path = _record(dumps[0], "f64")
    fast = record_source(dump, path, False)
    copy = pickle.loads(pickle.dumps(fast))
    assert (
        isinstance(copy, RecordArray)
        and copy[0 : fast.chunks[0]].tobytes() == fast.read_by_source(slice(0, fast.chunks[0])).tobytes()
    )
    assert copy.fast_reads == 1


@pytest.mark.parametrize("name", ["f32", "bf16", "row"])
def test_read_many_fetches_both_sides_with_zarrs_bytes(dumps, name):
    from megadump_zarr.read.lazy import read_many

    (dump_a, path), (dump_b, _) = _record(dumps[0], name), _record(dumps[1], name)
    fast_a, fast_b = record_source(dump_a, path, False), record_source(dump_b, path, False)
    n, step = fast_a.shape[0], fast_a.chunks[0]
    whole_a, whole_b = fast_a.read_by_source(...), fast_b.read_by_source(...)
    for rows in (slice(0, step), slice(5, 2 * step + 3), slice(2 * step, n)):
        index = (rows,)
        got_a, got_b, plain = read_many([(fast_a, index), (fast_b, index), (whole_a, index)])
        assert got_a.tobytes() == whole_a[rows].tobytes() and got_b.tobytes() == whole_b[rows].tobytes(), rows
        assert got_a.dtype == whole_a.dtype and got_b.shape == whole_b[rows].shape
        assert plain.tobytes() == whole_a[rows].tobytes()  # not a RecordArray: read by indexing
    assert fast_a.fast_reads == fast_b.fast_reads == 3
    strided = read_many([(fast_a, (slice(0, n, 2),))])[0]  # the rows it spans, then cut
    assert strided.tobytes() == whole_a[::2].tobytes() and fast_a.fast_reads == 4


def test_read_many_falls_back_to_zarr_on_a_corrupt_chunk(tmp_path):
    from megadump_zarr.read.lazy import read_many

    rng = np.random.default_rng(3)
    root = _write(tmp_path / "a", {"f32": rng.standard_normal((300, 64), dtype=np.float32)}, "default")
    dump, path = _record(root, "f32")
    fast = record_source(dump, path, False)
    chunk = _chunk_file(root, "f32", 1)
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))
    message = _error(lambda: read_many([(fast, (slice(0, 3 * fast.chunks[0]),))]))
    assert "f32" in message  # zarr's integrity error names the record's chunk, as a plain read does
    assert fast.fast_reads == 0


def test_small_records_fetched_together_keep_their_own_errors(tmp_path, monkeypatch):
    """Small records' blocks are fetched many at a time (one round trip per batch); a corrupt chunk and a missing
    one among them fail only their own records, with their own keys, and every other record passes, in one lane
    and in four."""
    rng = np.random.default_rng(5)
    arrays = {f"r{k:02d}": rng.standard_normal((4, 16), dtype=np.float32) for k in range(40)}
    a = _write(tmp_path / "a", arrays, "default")
    b = _write(tmp_path / "b", arrays, "default")
    corrupt, missing = _chunk_file(b, "r07", 0), _chunk_file(b, "r23", 0)
    raw = bytearray(corrupt.read_bytes())
    raw[len(raw) // 2] ^= 0x10
    corrupt.write_bytes(bytes(raw))
    missing.unlink()
    fetched: list[int] = []
    batch = lanes.read_batch

    def counting(items):
        fetched.append(len(items))
        return batch(items)

    monkeypatch.setattr(lanes, "read_batch", counting)
    frames = []
    for threads in (1, 4):
        monkeypatch.setattr(lanes, "_THREADS", threads)
        frames.append(compare(a, b))
    pd.testing.assert_frame_equal(frames[0], frames[1], check_exact=True)
    result = frames[0].set_index("name")
    failed = result[result["verdict"] != "pass"]
    assert sorted(failed.index) == ["r07", "r23"] and set(failed["verdict"]) == {"missing_data"}
    assert "crc32c checksum mismatch" in failed.loc["r07", "note"] and corrupt.name in failed.loc["r07", "note"]
    assert "is missing" in failed.loc["r23", "note"] and "r23" in failed.loc["r23", "note"]
    assert len(result) == 40 and max(fetched) > 1  # blocks were fetched together
