"""Tests for megadump_zarr.store.dtypes: bfloat16/float8 Zarr v3 data types."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.codecs import BytesCodec
from zarr.dtype import DataTypeValidationError, data_type_registry, parse_dtype

from megadump_zarr.store.dtypes import BFloat16, Float8E4M3FN, Float8E5M2

ZDTYPES = [BFloat16, Float8E4M3FN, Float8E5M2]

# (raw bits, the float value those bits must mean) per type; NaN entries carry payloads/signs.
SPECIAL_BITS: dict[type, list[tuple[int, float]]] = {
    BFloat16: [
        (0x0000, 0.0),
        (0x8000, -0.0),
        (0x3F80, 1.0),
        (0xBFC0, -1.5),
        (0x7F7F, 3.3895313892515355e38),  # max finite
        (0xFF7F, -3.3895313892515355e38),
        (0x0080, 2.0**-126),  # smallest normal
        (0x0001, 2.0**-133),  # smallest subnormal
        (0x807F, -(127 * 2.0**-133)),  # largest negative subnormal
        (0x7F80, math.inf),
        (0xFF80, -math.inf),
        (0x7FC0, math.nan),  # canonical quiet NaN
        (0xFFC1, math.nan),  # negative NaN with payload
        (0x7F81, math.nan),  # signalling NaN
    ],
    Float8E4M3FN: [
        (0x00, 0.0),
        (0x80, -0.0),
        (0x38, 1.0),
        (0x7E, 448.0),  # max finite
        (0xFE, -448.0),
        (0x08, 2.0**-6),  # smallest normal
        (0x01, 2.0**-9),  # smallest subnormal
        (0x87, -(7 * 2.0**-9)),
        (0x7F, math.nan),  # the only NaN encodings; no Inf
        (0xFF, math.nan),
    ],
    Float8E5M2: [
        (0x00, 0.0),
        (0x80, -0.0),
        (0x3C, 1.0),
        (0x7B, 57344.0),  # max finite
        (0xFB, -57344.0),
        (0x04, 2.0**-14),  # smallest normal
        (0x01, 2.0**-16),  # smallest subnormal
        (0x83, -(3 * 2.0**-16)),
        (0x7C, math.inf),
        (0xFC, -math.inf),
        (0x7E, math.nan),  # canonical quiet NaN
        (0x7D, math.nan),  # signalling NaN
        (0xFF, math.nan),
    ],
}


def from_bits(cls: type, bits: list[int]) -> np.ndarray:
    """Return an array of ``cls``'s numpy dtype holding exactly ``bits``."""
    dtype = np.dtype(cls.scalar_type)
    return np.array(bits, dtype=f"u{dtype.itemsize}").view(dtype)


def as_bits(values: Any) -> list[int]:
    """Return the raw bits of every element of a bfloat16/float8 array or scalar."""
    arr = np.asarray(values)
    return arr.reshape(-1).view(f"u{arr.dtype.itemsize}").tolist()


def special_values(cls: type) -> np.ndarray:
    """Return the special values of ``cls`` (NaN, Inf, subnormals, -0.0, ...)."""
    return from_bits(cls, [bits for bits, _ in SPECIAL_BITS[cls]])


def read_json(path: Path) -> dict[str, Any]:
    """Read a JSON document from disk."""
    return json.loads(path.read_text())


@pytest.mark.parametrize("cls", ZDTYPES)
def test_special_value_table_means_what_it_says(cls: type) -> None:
    with np.errstate(invalid="ignore"):  # signalling NaNs set the invalid flag on conversion
        decoded = special_values(cls).astype(np.float64).tolist()
    for (bits, expected), got in zip(SPECIAL_BITS[cls], decoded, strict=True):
        if math.isnan(expected):
            assert math.isnan(got), hex(bits)
        else:
            assert got == expected and math.copysign(1, got) == math.copysign(1, expected), hex(bits)


# zarr compares each chunk with the fill value before writing it; for the signalling
# NaNs in the data numpy flags that comparison as "invalid value encountered in equal".
@pytest.mark.filterwarnings("ignore:invalid value encountered in equal:RuntimeWarning")
@pytest.mark.parametrize("cls", ZDTYPES)
def test_array_round_trip_is_bit_exact(cls: type, tmp_path: Path) -> None:
    values = special_values(cls)
    data = np.concatenate([values, values[::-1], values[:3]]).reshape(-1, 1).repeat(3, axis=1)
    path = tmp_path / "a.zarr"
    arr = zarr.create_array(path, shape=data.shape, chunks=(4, 2), dtype=cls.scalar_type)
    arr[:] = data

    reopened = zarr.open_array(path, mode="r")
    back = reopened[:]

    assert reopened.metadata.data_type == cls()
    assert back.dtype == np.dtype(cls.scalar_type)
    assert back.view(np.uint8).tobytes() == data.view(np.uint8).tobytes()


@pytest.mark.parametrize(
    ("cls", "fill_value", "fill_json", "codec"),
    [
        (BFloat16, 0.0, 0.0, {"name": "bytes", "configuration": {"endian": "little"}}),
        (BFloat16, math.nan, "NaN", {"name": "bytes", "configuration": {"endian": "little"}}),
        (BFloat16, -math.inf, "-Infinity", {"name": "bytes", "configuration": {"endian": "little"}}),
        (Float8E4M3FN, math.nan, "NaN", {"name": "bytes"}),
        (Float8E4M3FN, -448.0, -448.0, {"name": "bytes"}),
        (Float8E5M2, math.inf, "Infinity", {"name": "bytes"}),
        (Float8E5M2, -0.0, -0.0, {"name": "bytes"}),
    ],
)
def test_zarr_json_metadata(
    cls: type, fill_value: float, fill_json: Any, codec: dict[str, Any], tmp_path: Path
) -> None:
    path = tmp_path / "a.zarr"
    arr = zarr.create_array(
        path, shape=(6,), chunks=(4,), dtype=cls.scalar_type, fill_value=fill_value, compressors=None
    )
    arr[:2] = from_bits(cls, [0x01, 0x02])

    meta = read_json(path / "zarr.json")
    assert meta["data_type"] == cls._zarr_v3_name
    assert meta["fill_value"] == fill_json
    if isinstance(fill_json, float):
        assert math.copysign(1, meta["fill_value"]) == math.copysign(1, fill_json)
    assert meta["codecs"] == [codec]

    reopened = zarr.open_array(path, mode="r")
    expected_fill = cls.scalar_type(fill_value)
    assert as_bits(reopened.metadata.fill_value) == as_bits(expected_fill)
    assert as_bits(reopened[:]) == [0x01, 0x02, *as_bits(np.full(4, expected_fill))]
    assert not (path / "c" / "1").exists()  # never assigned, so not stored: it reads as fill


@pytest.mark.parametrize(
    ("cls", "bits", "expected_json"),
    [
        (BFloat16, 0x0000, 0.0),
        (BFloat16, 0x8000, -0.0),
        (BFloat16, 0x3F80, 1.0),
        (BFloat16, 0x0001, 2.0**-133),
        (BFloat16, 0x7FC0, "NaN"),
        (BFloat16, 0x7F80, "Infinity"),
        (BFloat16, 0xFF80, "-Infinity"),
        (BFloat16, 0xFFC0, "0xffc0"),  # NaN that is not the canonical one: raw bits
        (BFloat16, 0x7F81, "0x7f81"),
        (Float8E4M3FN, 0x00, 0.0),
        (Float8E4M3FN, 0x80, -0.0),
        (Float8E4M3FN, 0x7E, 448.0),
        (Float8E4M3FN, 0x7F, "NaN"),
        (Float8E4M3FN, 0xFF, "0xff"),
        (Float8E5M2, 0x00, 0.0),
        (Float8E5M2, 0x01, 2.0**-16),
        (Float8E5M2, 0x7E, "NaN"),  # zarr-extensions: "NaN" means 0x7e
        (Float8E5M2, 0x7C, "Infinity"),
        (Float8E5M2, 0xFC, "-Infinity"),
        (Float8E5M2, 0x7D, "0x7d"),
    ],
)
def test_fill_value_json_encoding(cls: type, bits: int, expected_json: Any) -> None:
    zdtype = cls()
    value = from_bits(cls, [bits])[0]

    encoded = zdtype.to_json_scalar(value, zarr_format=3)

    assert type(encoded) is type(expected_json)
    if isinstance(expected_json, float):
        assert encoded == expected_json and math.copysign(1, encoded) == math.copysign(1, expected_json)
    else:
        assert encoded == expected_json
    json.dumps(encoded, allow_nan=False)  # strict JSON: no bare NaN/Infinity tokens
    assert as_bits(zdtype.from_json_scalar(encoded, zarr_format=3)) == [bits]


@pytest.mark.parametrize("cls", ZDTYPES)
def test_fill_value_json_round_trips_every_bit_pattern(cls: type) -> None:
    zdtype = cls()
    every = from_bits(cls, list(range(256**zdtype.item_size)))

    decoded = [zdtype.from_json_scalar(zdtype.to_json_scalar(v, zarr_format=3), zarr_format=3) for v in every]

    assert as_bits(np.array(decoded, dtype=every.dtype)) == as_bits(every)


@pytest.mark.parametrize(
    ("cls", "hex_json", "expected"),
    [
        (BFloat16, "0x3f80", 1.0),  # read as IEEE float16 bits this would be 1.875
        (BFloat16, "0xc020", -2.5),
        (Float8E4M3FN, "0x38", 1.0),
        (Float8E5M2, "0x3c", 1.0),
        (Float8E5M2, "0x7c", math.inf),
    ],
)
def test_hex_fill_value_uses_the_types_own_bit_layout(
    cls: type, hex_json: str, expected: float, tmp_path: Path
) -> None:
    assert float(cls().from_json_scalar(hex_json, zarr_format=3)) == expected

    path = tmp_path / "a.zarr"
    zarr.create_array(path, shape=(3,), chunks=(3,), dtype=cls.scalar_type)
    meta = read_json(path / "zarr.json")
    meta["fill_value"] = hex_json  # as another Zarr implementation might write it
    (path / "zarr.json").write_text(json.dumps(meta))

    assert zarr.open_array(path, mode="r")[:].astype(np.float64).tolist() == [expected] * 3


@pytest.mark.parametrize(
    ("cls", "bad_json", "error"),
    [
        (BFloat16, "0x3f", ValueError),
        (BFloat16, "0x3f800000", ValueError),
        (Float8E5M2, "0x3c00", ValueError),
        (BFloat16, "0x3_f8", ValueError),  # int(..., 16) would accept the underscore
        (BFloat16, "0x-3f8", ValueError),
        (Float8E4M3FN, "Infinity", ValueError),
        (BFloat16, "one", TypeError),
        (BFloat16, [1.0], TypeError),
    ],
)
def test_invalid_fill_value_json_is_rejected(cls: type, bad_json: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        cls().from_json_scalar(bad_json, zarr_format=3)


@pytest.mark.parametrize("fill_value", [math.inf, -math.inf, 1000.0])
def test_float8_e4m3fn_refuses_fill_values_it_would_turn_into_nan(fill_value: float) -> None:
    with pytest.raises(ValueError, match="not representable in float8_e4m3fn"):
        zarr.create_array(zarr.storage.MemoryStore(), shape=(2,), dtype=ml_dtypes.float8_e4m3fn, fill_value=fill_value)


@pytest.mark.parametrize("cls", ZDTYPES)
def test_data_type_json_and_native_dtype_resolution(cls: type) -> None:
    name = cls._zarr_v3_name

    assert cls().to_json(zarr_format=3) == name
    assert cls.from_json(cls().to_json(zarr_format=3), zarr_format=3) == cls()
    assert data_type_registry.get(name) is cls
    assert parse_dtype(name, zarr_format=3) == cls()
    assert parse_dtype(np.dtype(cls.scalar_type), zarr_format=3) == cls()
    assert cls().to_native_dtype() == np.dtype(cls.scalar_type)
    assert cls().item_size == np.dtype(cls.scalar_type).itemsize
    with pytest.raises(DataTypeValidationError):
        cls.from_json("float16", zarr_format=3)


@pytest.mark.parametrize("cls", ZDTYPES)
def test_zarr_format_2_is_refused(cls: type) -> None:
    message = re.escape(f"{cls._zarr_v3_name} is only supported in Zarr format 3, not zarr_format=2.")

    with pytest.raises(ValueError, match=message):
        cls().to_json(zarr_format=2)
    with pytest.raises(ValueError, match=message):
        zarr.create_array(zarr.storage.MemoryStore(), shape=(2,), dtype=cls.scalar_type, zarr_format=2)
    with pytest.raises(DataTypeValidationError):
        cls.from_json({"name": np.dtype(cls.scalar_type).str, "object_codec_id": None}, zarr_format=2)


def test_bfloat16_big_endian_storage(tmp_path: Path) -> None:
    data = from_bits(BFloat16, [0x3F80, 0xC020, 0x7F80, 0xFFC1, 0x0001])
    path = tmp_path / "a.zarr"
    arr = zarr.create_array(
        path, shape=(5,), chunks=(5,), dtype=ml_dtypes.bfloat16, serializer=BytesCodec(endian="big"), compressors=None
    )
    arr[:] = data

    assert (path / "c" / "0").read_bytes() == bytes.fromhex("3f80 c020 7f80 ffc1 0001")
    assert read_json(path / "zarr.json")["codecs"] == [{"name": "bytes", "configuration": {"endian": "big"}}]
    back = zarr.open_array(path, mode="r")[:]
    assert back.dtype == np.dtype(ml_dtypes.bfloat16)
    assert as_bits(back) == as_bits(data)


@pytest.mark.parametrize("cls", [Float8E4M3FN, Float8E5M2])
@pytest.mark.parametrize("bytes_codec", [{"name": "bytes"}, {"name": "bytes", "configuration": {"endian": "big"}}])
def test_float8_opens_with_or_without_endian(cls: type, bytes_codec: dict[str, Any], tmp_path: Path) -> None:
    data = special_values(cls)
    path = tmp_path / "a.zarr"
    zarr.create_array(path, shape=data.shape, chunks=(4,), dtype=cls.scalar_type, compressors=None)[:] = data
    meta = read_json(path / "zarr.json")
    meta["codecs"] = [bytes_codec]
    (path / "zarr.json").write_text(json.dumps(meta))

    assert as_bits(zarr.open_array(path, mode="r")[:]) == as_bits(data)


@pytest.mark.parametrize(
    ("cls", "fill_bits", "chunk_bits"),
    [
        (BFloat16, 0x0000, 0x8000),  # -0.0 == 0.0
        (Float8E4M3FN, 0x00, 0x80),
        (Float8E5M2, 0x7E, 0x7D),  # NaN == NaN (zarr compares float-kind dtypes with equal_nan)
    ],
)
def test_zarr_drops_chunks_equal_but_not_identical_to_the_fill_value(
    cls: type, fill_bits: int, chunk_bits: int
) -> None:
    """Documents zarr 3.1 behaviour, not ours.

    With the default ``write_empty_chunks=False`` zarr skips a chunk whose values all
    compare equal to the fill value, so it reads back as the fill value's bits. For
    numpy kind-"V" dtypes (bfloat16, float8_e4m3fn under ml_dtypes 0.6) -0.0 equals a
    0.0 fill; for kind-"f" float8_e5m2 any NaN equals a NaN fill. Other fills and
    ``write_empty_chunks=True`` are bit-exact.
    """
    fill = from_bits(cls, [fill_bits])[0]
    data = from_bits(cls, [chunk_bits] * 4)
    default = zarr.create_array(
        zarr.storage.MemoryStore(), shape=(4,), chunks=(4,), dtype=cls.scalar_type, fill_value=fill
    )
    exact = zarr.create_array(
        zarr.storage.MemoryStore(),
        shape=(4,),
        chunks=(4,),
        dtype=cls.scalar_type,
        fill_value=fill,
        config={"write_empty_chunks": True},
    )
    default[:] = data
    exact[:] = data

    assert as_bits(default[:]) == [fill_bits] * 4
    assert as_bits(exact[:]) == [chunk_bits] * 4


@settings(max_examples=150, deadline=None)
@given(data=st.data(), cls=st.sampled_from(ZDTYPES))
def test_arbitrary_bit_patterns_round_trip_bit_exact(data: st.DataObject, cls: type) -> None:
    """Every bit pattern survives zarr, NaN payloads and signs included.

    ``write_empty_chunks=True`` because zarr otherwise drops chunks that merely compare
    equal to the fill value (see the test above).
    """
    itemsize = np.dtype(cls.scalar_type).itemsize
    count = data.draw(st.integers(min_value=1, max_value=40), label="count")
    raw = data.draw(st.binary(min_size=count * itemsize, max_size=count * itemsize), label="raw")
    fill_bits = data.draw(st.integers(min_value=0, max_value=256**itemsize - 1), label="fill_bits")
    values = np.frombuffer(raw, dtype=np.uint8).view(cls.scalar_type)
    fill = from_bits(cls, [fill_bits])[0]
    arr = zarr.create_array(
        zarr.storage.MemoryStore(),
        shape=(count,),
        chunks=(7,),
        dtype=cls.scalar_type,
        fill_value=fill,
        config={"write_empty_chunks": True},
    )

    arr[:] = values

    assert arr[:].view(np.uint8).tobytes() == raw
    assert as_bits(arr.metadata.fill_value) == [fill_bits]


FRESH_INTERPRETER_SCRIPT = """
import json, sys
import numpy as np
import xarray as xr
import zarr
from zarr.dtype import data_type_registry

assert "megadump_zarr" not in sys.modules, "importing zarr/xarray must not import megadump_zarr"
discovered = sorted(e.name for e in data_type_registry._lazy_load_list)
loader = sys.argv[2]
if loader == "zarr_lazy_load":
    data_type_registry._lazy_load()
elif loader == "entry_points":
    from importlib.metadata import entry_points
    for ep in entry_points(group="zarr.data_type"):
        ep.load()
root = sys.argv[1]
ds = xr.open_zarr(root, consolidated=False)  # first: a group read is what loads zarr.buffer entry points
arr = zarr.open_array(root + "/x", mode="r")
print(json.dumps({
    "discovered": discovered,
    "zarr_dtype": str(arr.dtype),
    "zarr_bits": arr[:].view(np.uint16).tolist(),
    "xarray_dtype": str(ds["x"].dtype),
    "xarray_scalar_type": ds["x"].dtype.type.__module__ + "." + ds["x"].dtype.type.__name__,
    "xarray_dims": list(ds["x"].dims),
    "xarray_bits": ds["x"].values.view(np.uint16).tolist(),
    "xarray_values": [repr(float(v)) for v in ds["x"].values],
    "loaded": sorted(m for m in sys.modules if m.startswith("megadump_zarr")),
    "torch_loaded": "torch" in sys.modules,
}))
"""


@pytest.fixture
def bfloat16_group(tmp_path: Path) -> tuple[Path, np.ndarray]:
    """A Zarr v3 group with a 1-D bfloat16 array ``x`` (dimension ``i``), and its data."""
    data = from_bits(BFloat16, [0x0000, 0x8000, 0x3FC0, 0xC020, 0x7F80, 0xFF80, 0x7FC0, 0x0001, 0x7F7F])
    root = tmp_path / "group.zarr"
    group = zarr.open_group(root, mode="w")
    group.create_array("x", shape=data.shape, chunks=(4,), dtype=ml_dtypes.bfloat16, dimension_names=["i"])[:] = data
    return root, data


def run_fresh_interpreter(root: Path, loader: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run FRESH_INTERPRETER_SCRIPT in a new ``python -W error`` process."""
    return subprocess.run(
        [sys.executable, "-W", "error", "-c", textwrap.dedent(FRESH_INTERPRETER_SCRIPT), str(root), loader],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("loader", ["none", "zarr_lazy_load", "entry_points"])
def test_fresh_interpreter_reads_bfloat16_with_xarray(
    loader: str, bfloat16_group: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    """A process that never imports megadump_zarr reads bfloat16 with plain zarr/xarray ("none"),
    and still does when the reader loads the data-type entry points itself (zarr's private
    ``_lazy_load`` or ``importlib.metadata``), as newer zarr releases will."""
    root, data = bfloat16_group

    result = run_fresh_interpreter(root, loader, tmp_path)

    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    out = json.loads(result.stdout)
    assert out["discovered"] == ["bfloat16", "float8_e4m3fn", "float8_e5m2"]
    assert out["zarr_dtype"] == "bfloat16"
    assert out["zarr_bits"] == as_bits(data)
    assert out["xarray_dtype"] == "bfloat16"
    assert out["xarray_scalar_type"] == "ml_dtypes.bfloat16"
    assert out["xarray_dims"] == ["i"]
    assert out["xarray_bits"] == as_bits(data)
    assert out["xarray_values"] == [
        "0.0",
        "-0.0",
        "1.5",
        "-2.5",
        "inf",
        "-inf",
        "nan",
        "9.183549615799121e-41",
        "3.3895313892515355e+38",
    ]


def test_plain_reader_loads_only_the_light_store_modules(
    bfloat16_group: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    """zarr 3.1 never loads ``zarr.data_type`` entry points; our ``zarr.buffer`` entry point
    (store/zarr_plugin.py) registers the types instead. It must stay light: no torch, no dumper."""
    root, _ = bfloat16_group

    result = run_fresh_interpreter(root, "none", tmp_path)

    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["loaded"] == [
        "megadump_zarr",
        "megadump_zarr._version",
        "megadump_zarr.store",
        "megadump_zarr.store.dtypes",
        "megadump_zarr.store.zarr_plugin",
    ]
    assert out["torch_loaded"] is False
