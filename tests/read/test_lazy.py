"""A record's lazy array (``read.lazy.RecordArray``): any basic selection of a real written record gives zarr's own
read of it, reads only the chunks behind the selected rows, and refuses a swapped chunk naming it."""

from __future__ import annotations

import math
from pathlib import Path
import pickle
import shutil

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
import numpy as np
import pytest
import zarr
from zarr.storage import LocalStore

from megadump_zarr import open_dump
from megadump_zarr.layout.write_model import ArrayWrite, InvocationWrite, WindowWrite
from megadump_zarr.read.errors import DumpIntegrityError
from megadump_zarr.read.lazy import FlatPrefix, RecordArray
from megadump_zarr.store.writer import WindowWriter

FIXTURES = Path(__file__).parent / "data" / "format10"
CHUNK_BYTES = 1 << 10  # small chunks: every record spans many


def _write(root: Path, arrays: dict[str, np.ndarray], compressor: str = "default") -> Path:
    writes = []
    for name, data in arrays.items():
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
        writes.append(ArrayWrite(name, data, tuple(f"{name}_{a}" for a in range(data.ndim)), attrs))
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


def _arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "m": rng.standard_normal((97, 12), dtype=np.float32),  # 21 rows a chunk, an edge chunk
        "v": rng.integers(-(2**40), 2**40, 300, dtype=np.int64),
        "c": rng.standard_normal((9, 4, 5)),
    }


@pytest.fixture(scope="module", params=["default", "none"])
def written(request, tmp_path_factory) -> Path:
    return _write(tmp_path_factory.mktemp(f"lazy-{request.param}") / "d", _arrays(), request.param)


def _lazy(root: str | Path, name: str, store=None) -> tuple[RecordArray, zarr.Array]:
    """The record's lazy array (read through the dump's integrity checks) and zarr's own array of it."""
    dump = open_dump(store if store is not None else root)
    path = next(p for p in dump.records()["path"] if p.endswith(f"/{name}"))
    info, rel, doc = dump._record(path)
    return RecordArray(dump._array(info, rel, doc), path, dump.root), zarr.open_array(str(Path(root) / path), mode="r")


@st.composite
def selections(draw, shape: tuple[int, ...]):
    """A basic selection: an integer (negative too) or a slice (any bounds, positive steps) per axis, sometimes
    fewer axes or an ``...``."""
    index: list = []
    for n in shape:
        if draw(st.booleans()) and n:
            index.append(draw(st.integers(-n, n - 1)))
        else:
            start = draw(st.none() | st.integers(-n - 2, n + 2))
            stop = draw(st.none() | st.integers(-n - 2, n + 2))
            index.append(slice(start, stop, draw(st.sampled_from([None, 1, 2, 3, 7, 25]))))
    cut = draw(st.integers(0, len(index)))
    if draw(st.booleans()):
        return (*index[:cut], Ellipsis)
    return tuple(index[:cut]) if cut else Ellipsis


@pytest.mark.parametrize("name", ["m", "v", "c"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_selection_is_zarrs_read(written, name, data):
    lazy, plain = _lazy(written, name)
    whole = plain[...]
    selection = data.draw(selections(lazy.shape))
    got = np.asarray(lazy[selection])
    expected = whole[selection]
    assert got.dtype == expected.dtype and got.shape == np.shape(expected)
    np.testing.assert_array_equal(got, expected)  # exact: stored bytes


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.tuples(st.integers(0, 96), st.integers(1, 97)).filter(lambda r: r[0] < r[1]))
def test_a_row_range_reads_exactly_its_chunks(written, counting_store, rows):
    start, stop = rows
    store = counting_store(LocalStore(written, read_only=True))
    lazy, plain = _lazy(written, "m", store)
    lazy[0:1]  # the window inventory, read once
    store.reads.clear()
    np.testing.assert_array_equal(lazy[start:stop, 3], plain[start:stop, 3])  # exact: stored bytes
    step = plain.chunks[0]
    expected = {
        f"{lazy.key}/{plain.metadata.encode_chunk_key((i, 0))}" for i in range(start // step, (stop - 1) // step + 1)
    }
    assert sorted(store.chunk_reads()) == sorted(expected)  # each chunk once, none other


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_a_packed_record_is_zarrs_read_of_its_pack_row(data):
    root = FIXTURES / "packs"
    dump = open_dump(root)
    records = dump.records()
    row = records[records["pack_row"] >= 0].iloc[data.draw(st.integers(0, int((records["pack_row"] >= 0).sum()) - 1))]
    info, rel, doc = dump._record(row["path"])
    lazy = RecordArray(dump._array(info, rel, doc), row["path"], dump.root)
    assert lazy.reader is not None  # one ranged read of its inner chunk
    whole = zarr.open_array(str(root / row["pack_array"]), mode="r")[int(row["pack_row"])]
    selection = data.draw(selections(lazy.shape))
    np.testing.assert_array_equal(np.asarray(lazy[selection]), whole[selection])  # exact: stored bytes


def test_a_swapped_chunk_is_refused_naming_it(written, tmp_path):
    root = shutil.copytree(written, tmp_path / "d")
    lazy, plain = _lazy(root, "m")
    array_dir = root / lazy.key
    first, second = (array_dir / plain.metadata.encode_chunk_key((i, 0)) for i in (1, 2))
    a, b = first.read_bytes(), second.read_bytes()
    first.write_bytes(b)  # each still a well-formed chunk (its checksum holds), in the other's place
    second.write_bytes(a)
    lazy, _ = _lazy(root, "m")
    step = plain.chunks[0]
    np.testing.assert_array_equal(lazy[0:step], plain[0:step])  # exact: stored bytes
    for selection in ((slice(step, step + 1), 2), (slice(0, 2 * step),), (2 * step + 1,)):
        with pytest.raises(DumpIntegrityError) as info:
            lazy[selection]
        named = info.value.key
        assert named in (f"{lazy.key}/{first.name}", f"{lazy.key}/{second.name}")
        assert named in str(info.value)


def test_it_pickles_without_its_lock_and_reads_the_same(written):
    lazy, plain = _lazy(written, "m")
    copy = pickle.loads(pickle.dumps(lazy))
    np.testing.assert_array_equal(copy[5:40, 1:3], plain[5:40, 1:3])  # exact: stored bytes
    assert copy.fast_reads == 1


def test_a_truncated_record_is_its_stored_prefix_then_nan(truncated_dump):
    dump = open_dump(truncated_dump.root)
    records = dump.records()
    row = records[records["truncated"]].iloc[0]
    info, rel, doc = dump._record(row["path"])
    attrs = doc["attributes"]
    lazy = RecordArray(dump._array(info, rel, doc), row["path"], dump.root, attrs["actualShape"])
    stored = zarr.open_array(str(Path(truncated_dump.root) / row["path"]), mode="r")[...]
    logical = np.full(math.prod(attrs["actualShape"]), np.nan, dtype=lazy.dtype)
    logical[: stored.size] = stored
    logical = logical.reshape(attrs["actualShape"])
    assert lazy.shape == logical.shape and lazy.dtype == logical.dtype
    n = lazy.shape[0]
    for selection in (Ellipsis, (slice(0, 3),), (n - 1,), (slice(1, n, 3), slice(2, 5)), (slice(n - 4, None),)):
        np.testing.assert_array_equal(lazy[selection], logical[selection])  # exact: stored bytes
    prefix = FlatPrefix(lazy, stored.size)
    np.testing.assert_array_equal(prefix[3 : stored.size], stored[3:])  # exact: stored bytes


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_stitched_selection_reads_and_checks_only_its_rows(data):
    from megadump_zarr.read.lazy import basic_index, lazy_of
    from megadump_zarr.read.stitch import Piece, stitch

    rows, cols = data.draw(st.integers(2, 30)), data.draw(st.integers(1, 3))
    base = np.arange(rows * cols, dtype=np.float64).reshape(rows, cols) * 1.5
    spans = []
    for _ in range(data.draw(st.integers(1, 4))):
        start = data.draw(st.integers(0, rows - 1))
        spans.append((start, data.draw(st.integers(start + 1, rows))))
    bad = data.draw(st.integers(0, len(spans) - 1))  # this piece's copy of its first row differs
    pieces = []
    for i, (a, b) in enumerate(spans):
        copy = base[a:b].copy()
        if i == bad:
            copy[0, 0] = -1.0
        pieces.append(Piece(path=f"p{i}", data=copy, rows=np.arange(a, b), dims=("r", "c"), task_id=i))
    out = stitch(pieces, name="t")
    lazy = lazy_of(out.data)
    global_rows = out["r"].values
    selection = data.draw(selections(lazy.shape))
    picked = np.atleast_1d(np.arange(lazy.shape[0])[basic_index(selection, lazy.shape)[0]])
    touched = global_rows[picked.min() : picked.max() + 1] if picked.size else global_rows[:0]  # the rows it spans
    row = spans[bad][0]
    if sum(a <= row < b for a, b in spans) > 1:  # another record holds the row: reading it fails, naming both
        if row in touched:
            with pytest.raises(ValueError, match=f"hold different values for global rows {row}"):
                lazy[selection]
            return
    else:
        base[row, 0] = -1.0  # its only copy
    np.testing.assert_array_equal(lazy[selection], base[global_rows][selection])  # exact: stored bytes
