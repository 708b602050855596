"""zarr.json documents: exact content, parity with zarr-python's own output, consolidated metadata."""

from __future__ import annotations

import json
import os
from pathlib import Path
import shutil
import warnings

import google_crc32c
import ml_dtypes
import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, Crc32cCodec, ZstdCodec
from zarr.errors import ZarrUserWarning

from megadump_zarr.codecs import parse_compressor
from megadump_zarr.layout.write_model import ArrayWrite, InvocationWrite, WindowWrite
from megadump_zarr.store import metadata
from megadump_zarr.store.chunking import CHUNK_KEY_SEPARATOR
from megadump_zarr.store.writer import WindowWriter

INV = "invocation_000001_forward"


def _write_one(root, data, dims, compressor="zstd-1", chunk_bytes=4 << 20, attrs=None) -> Path:
    inv = InvocationWrite(INV, {}, [], [ArrayWrite("a", data, dims, attrs or {})])
    url = WindowWriter(root, compressor=compressor, chunk_bytes=chunk_bytes, stats=False).write_window(
        WindowWrite(0, 0, {}, [inv])
    )
    return Path(url, INV, "a")


def test_exact_array_document(tmp_path):
    data = np.zeros((10, 4), dtype=np.float32)
    path = _write_one(tmp_path, data, ("row", "col"), chunk_bytes=64, attrs={"paramPosition": 2})
    assert json.loads((path / "zarr.json").read_bytes()) == {
        "shape": [10, 4],
        "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 4]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": CHUNK_KEY_SEPARATOR}},
        "fill_value": 0.0,
        "codecs": [
            {"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "zstd", "configuration": {"level": 1, "checksum": False}},
            {"name": "crc32c"},
        ],
        "attributes": {"paramPosition": 2},
        "dimension_names": ["row", "col"],
        "zarr_format": 3,
        "node_type": "array",
        "storage_transformers": [],
    }
    # key order follows zarr's ArrayV3Metadata.to_dict
    assert list(json.loads((path / "zarr.json").read_bytes())) == [
        "shape",
        "data_type",
        "chunk_grid",
        "chunk_key_encoding",
        "fill_value",
        "codecs",
        "attributes",
        "dimension_names",
        "zarr_format",
        "node_type",
        "storage_transformers",
    ]


def _zarr_reference(root, data, chunks, compressor, dims):
    spec = parse_compressor(compressor)
    if spec.kind == "none":
        compressors = [Crc32cCodec()]
    elif spec.kind == "zstd":
        compressors = [ZstdCodec(level=spec.level, checksum=False), Crc32cCodec()]
    else:
        compressors = [
            BloscCodec(
                typesize=data.dtype.itemsize, cname=spec.cname, clevel=spec.level, shuffle=spec.shuffle, blocksize=0
            ),
            Crc32cCodec(),
        ]
    array = zarr.create_array(
        str(root),
        shape=data.shape,
        chunks=chunks,
        dtype=data.dtype,
        compressors=compressors,
        dimension_names=list(dims),
        fill_value=0,
        attributes={"k": "v"},
        chunk_key_encoding={"name": "default", "separator": CHUNK_KEY_SEPARATOR},  # the writer's encoding
        write_data=True,
    )
    if data.size:
        array[...] = data
    return json.loads(Path(root, "zarr.json").read_bytes())


def _bf16_registered() -> bool:
    try:
        import megadump_zarr.store.dtypes  # noqa: F401
        from zarr.dtype import data_type_registry

        data_type_registry.match_json("bfloat16", zarr_format=3)
        return True
    except Exception:
        return False


CASES = [
    (np.float32, (10, 4), "zstd-1"),
    (np.float32, (10, 4), "none"),
    (np.bool_, (9,), "zstd-3"),
    (np.bool_, (9,), "blosc-lz4-5-bitshuffle"),
    (np.int64, (5, 2, 3), "blosc-zstd-3-shuffle"),
    (np.uint8, (7,), "none"),
    (np.float64, (), "none"),
    (np.float16, (0, 3), "zstd-1"),
    pytest.param(
        ml_dtypes.bfloat16, (6, 8), "zstd-1", marks=pytest.mark.skipif(not _bf16_registered(), reason="dtypes.py")
    ),
    pytest.param(
        ml_dtypes.bfloat16, (6, 8), "blosc-lz4", marks=pytest.mark.skipif(not _bf16_registered(), reason="dtypes.py")
    ),
]


@pytest.mark.parametrize(("dtype", "shape", "compressor"), CASES)
def test_documents_match_zarr_create_array(tmp_path, dtype, shape, compressor):
    data = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape).astype(dtype)
    ours_path = _write_one(
        tmp_path / "ours", data, tuple(f"d{i}" for i in range(data.ndim)), compressor, 48, {"k": "v"}
    )
    ours = json.loads((ours_path / "zarr.json").read_bytes())
    chunks = tuple(ours["chunk_grid"]["configuration"]["chunk_shape"])
    one_small_chunk = data.nbytes < 256 and (not data.shape or data.shape[0] <= chunks[0])
    expected = "none" if one_small_chunk else compressor  # one chunk under 256 bytes is stored raw
    reference = _zarr_reference(tmp_path / "ref", data, chunks, expected, tuple(f"d{i}" for i in range(data.ndim)))
    assert ours == reference
    assert list(ours) == list(reference)
    assert ours["chunk_key_encoding"] == {"name": "default", "configuration": {"separator": CHUNK_KEY_SEPARATOR}}
    # and the chunk files decode identically through zarr
    np.testing.assert_array_equal(zarr.open_array(ours_path, mode="r")[...], data)


@pytest.mark.parametrize(("rows", "chunk_bytes", "codec"), [(31, 4096, None), (32, 4096, "blosc"), (31, 64, "blosc")])
def test_one_chunk_under_256_bytes_is_stored_raw(tmp_path, rows, chunk_bytes, codec):
    data = np.arange(rows * 2, dtype=np.float32).reshape(rows, 2)  # 248 or 256 bytes
    path = _write_one(tmp_path, data, ("r", "c"), "default", chunk_bytes=chunk_bytes)
    names = [c["name"] for c in json.loads((path / "zarr.json").read_bytes())["codecs"]]
    assert names == ["bytes", codec, "crc32c"] if codec else names == ["bytes", "crc32c"]
    np.testing.assert_array_equal(zarr.open_array(path, mode="r")[...], data)
    if codec is None:
        assert (path / "c.0.0").read_bytes()[:-4] == data.tobytes()


def test_chunk_bytes_match_zarr_for_uncompressed_and_padded_edges(tmp_path):
    data = np.arange(30, dtype=np.int16).reshape(10, 3)
    ours = _write_one(tmp_path / "ours", data, ("r", "c"), "none", chunk_bytes=4 * 3 * 2)
    ref = tmp_path / "ref"
    _zarr_reference(ref, data, (4, 3), "none", ("r", "c"))
    keys = [CHUNK_KEY_SEPARATOR.join(("c", str(i), "0")) for i in range(3)]  # the last one is the padded edge chunk
    assert _chunk_files(ours) == _chunk_files(ref) == sorted(keys)  # same file names as zarr's
    for key in keys:
        assert (ours / key).read_bytes() == (ref / key).read_bytes(), key
    padded = data[8:].tobytes() + bytes(2 * 3 * 2)
    assert (ours / keys[2]).read_bytes() == padded + np.uint32(google_crc32c.value(padded)).astype("<u4").tobytes()


def _chunk_files(array_dir: Path) -> list[str]:
    """The stored chunk keys of an array: every file below its directory but zarr.json, as "/"-joined paths."""
    files = (p for p in array_dir.rglob("*") if p.is_file() and p.name != "zarr.json")
    return sorted(p.relative_to(array_dir).as_posix() for p in files)


def _window_with_nested_groups(root) -> Path:
    rng = np.random.default_rng(3)
    inv = InvocationWrite(
        INV,
        {"step": 1},
        [],
        [
            ArrayWrite("stages/A/task_000002/output_00_y", rng.standard_normal((4, 2)).astype(np.float32), ("r", "c")),
            ArrayWrite("stages/A/task_000002/input_00_x", rng.standard_normal(4).astype(np.float32), ("r",)),
            ArrayWrite("stages/b/task_000010/output_00_y", np.arange(3), ("n",), coords={"n": np.arange(3) * 10}),
            ArrayWrite("Z", np.ones((2, 2), bool), ("p", "q")),
        ],
    )
    url = WindowWriter(root).write_window(WindowWrite(0, 0, {"level": "L1"}, [inv]))
    return Path(url)


@pytest.mark.parametrize("group", ["", INV, f"{INV}/stages/A/task_000002"])
def test_consolidated_metadata_matches_zarr_consolidate(tmp_path, group):
    window = _window_with_nested_groups(tmp_path / "ours")
    ours = json.loads((window / group / "zarr.json").read_bytes())
    copy = tmp_path / "copy"
    shutil.copytree(window, copy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ZarrUserWarning)  # "consolidated metadata is not part of the v3 spec"
        zarr.consolidate_metadata(str(copy / group))
    theirs = json.loads((copy / group / "zarr.json").read_bytes())
    assert ours == theirs
    assert list(ours["consolidated_metadata"]["metadata"]) == list(theirs["consolidated_metadata"]["metadata"])


def test_consolidated_entries_equal_children_documents(tmp_path):
    window = _window_with_nested_groups(tmp_path)
    doc = json.loads((window / "zarr.json").read_bytes())
    assert doc["attributes"]["status"] == "complete"
    meta = doc["consolidated_metadata"]
    assert meta["kind"] == "inline" and meta["must_understand"] is False
    entries = meta["metadata"]
    on_disk = {
        os.path.relpath(d, window): json.loads(Path(d, "zarr.json").read_bytes())
        for d, _, files in os.walk(window)
        if "zarr.json" in files and Path(d) != window
    }
    assert set(entries) == set(on_disk)
    assert f"{INV}/stages/b/task_000010/n" in entries  # the coordinate array
    for path, child in on_disk.items():
        if child["node_type"] == "array":
            assert entries[path] == child
        else:  # groups appear with an empty nested consolidated block, as zarr flattens them
            assert entries[path] == {
                **child,
                "consolidated_metadata": {"kind": "inline", "must_understand": False, "metadata": {}},
            }
            holds_arrays = any(p.rpartition("/")[0] == path and e["node_type"] == "array" for p, e in entries.items())
            if holds_arrays:  # a data group: its own consolidated metadata lists everything below it
                nested = child["consolidated_metadata"]["metadata"]
                below = {p[len(path) + 1 :] for p in entries if p.startswith(path + "/")}
                assert set(nested) == below
            else:  # a group in between (stages, a stage): a plain group document
                assert child == {"attributes": child["attributes"], "zarr_format": 3, "node_type": "group"}
    # readers get everything from the one document
    group = zarr.open_group(window, mode="r", use_consolidated=True)
    assert group.metadata.consolidated_metadata is not None
    assert group[f"{INV}/stages/A/task_000002/output_00_y"].shape == (4, 2)


def test_root_and_rank_groups_carry_no_consolidated_metadata(tmp_path):
    window = _window_with_nested_groups(tmp_path)
    for doc in (window.parent.parent / "zarr.json", window.parent / "zarr.json"):
        assert "consolidated_metadata" not in json.loads(doc.read_bytes())


def test_metadata_helpers():
    spec = parse_compressor("blosc-lz4hc-9-noshuffle")
    assert metadata.codecs_for(np.dtype(np.uint8), spec) == [
        {"name": "bytes"},
        {
            "name": "blosc",
            "configuration": {"typesize": 1, "cname": "lz4hc", "clevel": 9, "shuffle": "noshuffle", "blocksize": 0},
        },
        {"name": "crc32c"},
    ]
    assert metadata.codecs_for(np.dtype(np.uint8), spec, checksum=False)[-1]["name"] == "blosc"
    assert metadata.fill_value_for(np.dtype(bool)) is False
    assert metadata.fill_value_for(np.dtype(np.int32)) == 0 and isinstance(
        metadata.fill_value_for(np.dtype(np.int32)), int
    )
    assert metadata.fill_value_for(np.dtype(ml_dtypes.float8_e4m3fn)) == 0.0
    assert metadata.data_type_name(np.dtype(">f8")) == "float64"
    with pytest.raises(TypeError, match="unsupported dtype"):
        metadata.data_type_name(np.dtype("U3"))
    encoded = metadata.array_document_bytes(
        (3,), np.dtype("f4"), (3,), spec, metadata.dumps({"a": float("nan")}), ("n",)
    )
    doc = json.loads(encoded)
    assert list(doc) == [
        "shape",
        "data_type",
        "chunk_grid",
        "chunk_key_encoding",
        "fill_value",
        "codecs",
        "attributes",
        "dimension_names",
        "zarr_format",
        "node_type",
        "storage_transformers",
    ]
    assert doc["shape"] == [3] and doc["data_type"] == "float32" and doc["dimension_names"] == ["n"]
    assert doc["fill_value"] == 0.0 and str(doc["attributes"]["a"]) == "nan"
    assert sorted(["b/a", "B", "a", "c/d/e", "A/z"], key=metadata.consolidated_sort_key) == [
        "a",
        "B",
        "A/z",
        "b/a",
        "c/d/e",
    ]
