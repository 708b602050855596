"""TensorDumpConfig: every seed validation (types and messages), normalisation, our storage fields, selection."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from megadump_zarr import TensorDumpConfig
from megadump_zarr.codecs import DEFAULT_COMPRESSOR, parse_compressor

ROLES = ("external_input", "final_output", "stage_output")


def make(tmp_path: Path, **kw):
    return TensorDumpConfig(tmp_path, **kw)


# --------------------------------------------------------------------------- seed validations
@pytest.mark.parametrize("value, name", [(5, "int"), (None, "NoneType"), (b"/tmp/x", "bytes"), (["/tmp"], "list")])
def test_output_dir_type(value, name):
    with pytest.raises(TypeError, match=re.escape(f"output_dir must be str or Path, got {name}")):
        TensorDumpConfig(value)


@pytest.mark.parametrize("level", ["L2", "l2", "", "L 1", 1, None])
def test_unsupported_level(tmp_path, level):
    with pytest.raises(ValueError, match=re.escape(f"unsupported Tensor dump level {level!r}; expected 'L0' or 'L1'")):
        make(tmp_path, level=level)


def test_output_dir_checked_before_level():
    with pytest.raises(TypeError, match=re.escape("output_dir must be str or Path, got int")):
        TensorDumpConfig(3, level="L9")


L1_NEEDS = "L1 Tensor dump requires at least one stage, task, owner, or Tensor filter"


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"core_types": "AIV"},
        {"core_ids": 0},
        {"io": "input"},
        {"ranks": 0},
        {"kernel_names": "k"},
        {"directions": "forward"},
    ],
)
def test_l1_without_task_filter(tmp_path, extra):
    with pytest.raises(ValueError, match=re.escape(L1_NEEDS)):
        make(tmp_path, level="L1", **extra)


@pytest.mark.parametrize(
    "extra", [{"stages": "s"}, {"task_ids": 0}, {"stage_task_indices": 0}, {"owner_ids": 0}, {"tensor_names": "x"}]
)
def test_l1_with_one_task_filter(tmp_path, extra):
    config = make(tmp_path, level="L1", **extra)
    assert config.level == "L1"


def test_l0_needs_no_filter(tmp_path):
    assert make(tmp_path).level == "L0"


ID_FIELDS = ("ranks", "task_ids", "stage_task_indices", "owner_ids", "core_ids")


@pytest.mark.parametrize("field", ID_FIELDS)
@pytest.mark.parametrize(
    "value, bad",
    [
        (True, True),
        (False, False),
        ([1, True], True),
        ((0, -1), -1),
        (-3, -3),
        ([0, "1"], "1"),
        ([1.0], 1.0),
        ([None], None),
    ],
)
def test_id_filters_reject(tmp_path, field, value, bad):
    kw = {field: value}
    if field in ("ranks", "core_ids"):
        kw["stages"] = "s"  # irrelevant at L0, but keep the call uniform
    with pytest.raises(ValueError, match=re.escape(f"{field} entries must be non-negative integers, got {bad!r}")):
        make(tmp_path, **kw)


@pytest.mark.parametrize("field", ID_FIELDS)
@pytest.mark.parametrize("empty", [(), [], set(), frozenset()])
def test_id_filters_empty(tmp_path, field, empty):
    with pytest.raises(ValueError, match=re.escape(f"{field} must not be empty")):
        make(tmp_path, **{field: empty})


STRING_FIELDS = ("tensor_names", "kernel_names", "stages", "roles", "directions", "core_types", "io")


@pytest.mark.parametrize("field", STRING_FIELDS)
@pytest.mark.parametrize("empty", [(), [], set()])
def test_string_filters_empty(tmp_path, field, empty):
    with pytest.raises(ValueError, match=re.escape(f"{field} must not be empty")):
        make(tmp_path, **{field: empty})


@pytest.mark.parametrize(
    "field, ok",
    [
        ("tensor_names", "x"),
        ("kernel_names", "k"),
        ("stages", "s"),
        ("roles", "final_output"),
        ("directions", "forward"),
        ("core_types", "AIC"),
        ("io", "input"),
    ],
)
@pytest.mark.parametrize("bad", [1, "", None, b"x", ("nested",)])
def test_string_filters_non_string_entries(tmp_path, field, ok, bad):
    with pytest.raises(TypeError, match=re.escape(f"{field} entries must be non-empty strings, got {bad!r}")):
        make(tmp_path, **{field: [ok, bad]})


@pytest.mark.parametrize(
    "field, bad, allowed",
    [
        ("roles", "input", ["external_input", "final_output", "stage_output"]),
        ("roles", "External_Input", ["external_input", "final_output", "stage_output"]),
        ("directions", "sideways", ["backward", "forward"]),
        ("directions", "Forward", ["backward", "forward"]),
        ("io", "inout", ["input", "output"]),
        ("io", "inputs", ["input", "output"]),
        ("core_types", "MIX", ["AIC", "AIV"]),
        ("core_types", "aic", ["AIC", "AIV"]),
    ],
)
def test_closed_vocabularies(tmp_path, field, bad, allowed):
    with pytest.raises(ValueError, match=re.escape(f"unsupported {field} entry {bad!r}; expected one of {allowed}")):
        make(tmp_path, **{field: bad})
    with pytest.raises(ValueError, match=re.escape(f"unsupported {field} entry {bad!r}; expected one of {allowed}")):
        make(tmp_path, **{field: (allowed[0], bad)})


@pytest.mark.parametrize("value", ["512", 1.5, None, True, False, [1]])
def test_device_memory_budget_type(tmp_path, value):
    with pytest.raises(TypeError, match=re.escape("device_memory_budget_mb must be a positive integer")):
        make(tmp_path, device_memory_budget_mb=value)


@pytest.mark.parametrize("value", [0, -1, -512])
def test_device_memory_budget_value(tmp_path, value):
    with pytest.raises(ValueError, match=re.escape("device_memory_budget_mb must be positive")):
        make(tmp_path, device_memory_budget_mb=value)


@pytest.mark.parametrize("value", ["1", 1.0, True, False, [4]])
def test_max_bytes_type(tmp_path, value):
    with pytest.raises(TypeError, match=re.escape("max_bytes_per_tensor must be a positive integer or None")):
        make(tmp_path, max_bytes_per_tensor=value)


@pytest.mark.parametrize("value", [0, -1])
def test_max_bytes_value(tmp_path, value):
    with pytest.raises(ValueError, match=re.escape("max_bytes_per_tensor must be positive")):
        make(tmp_path, max_bytes_per_tensor=value)


def test_budget_and_max_bytes_accept_positive_ints(tmp_path):
    config = make(tmp_path, level="L1", stages="s", device_memory_budget_mb=1, max_bytes_per_tensor=1)
    assert (config.device_memory_budget_mb, config.max_bytes_per_tensor) == (1, 1)
    assert make(tmp_path).device_memory_budget_mb == 512
    assert make(tmp_path).max_bytes_per_tensor is None


@pytest.mark.parametrize("level", ["L0", "l0"])
def test_l0_refuses_max_bytes_per_tensor(tmp_path, level):
    # L0 copies whole kernel-boundary tensors to the host: a cap it would not apply is refused when built
    with pytest.raises(ValueError, match=re.escape("max_bytes_per_tensor=65536 caps L1 task records; level='L0'")):
        make(tmp_path, level=level, max_bytes_per_tensor=65536)


# --------------------------------------------------------------------------- normalisation
def test_scalars_become_tuples(tmp_path):
    config = make(
        tmp_path,
        level="L1",
        tensor_names="x",
        kernel_names="k",
        stages="s",
        task_ids=3,
        stage_task_indices=0,
        owner_ids=2,
        core_types="AIV",
        core_ids=1,
        io="output",
        ranks=0,
        roles="final_output",
        directions="backward",
    )
    assert config.tensor_names == ("x",)
    assert config.kernel_names == ("k",)
    assert config.stages == ("s",)
    assert config.task_ids == (3,)
    assert config.stage_task_indices == (0,)
    assert config.owner_ids == (2,)
    assert config.core_types == ("AIV",)
    assert config.core_ids == (1,)
    assert config.io == ("output",)
    assert config.ranks == (0,)
    assert config.roles == ("final_output",)
    assert config.directions == ("backward",)


def test_collections_keep_order_and_become_tuples(tmp_path):
    config = make(tmp_path, tensor_names=["b", "a"], ranks=[2, 0], task_ids=range(3), io=["output", "input"])
    assert config.tensor_names == ("b", "a")
    assert config.ranks == (2, 0)
    assert config.task_ids == (0, 1, 2)
    assert config.io == ("output", "input")


def test_defaults(tmp_path):
    config = make(tmp_path)
    assert config.level == "L0"
    assert config.roles == ROLES
    assert config.directions == ("backward", "forward")
    assert config.io == ("input", "output")
    for name in (
        "tensor_names",
        "kernel_names",
        "ranks",
        "stages",
        "task_ids",
        "stage_task_indices",
        "owner_ids",
        "core_types",
        "core_ids",
        "storage_options",
    ):
        assert getattr(config, name) is None, name
    assert config.compressor == "default"
    assert config.chunk_bytes == 4 << 20
    assert config.on_error == "discard"
    assert config.stats is True
    assert config.async_export is False


@pytest.mark.parametrize("level, expected", [("l1", "L1"), ("L1", "L1"), ("l0", "L0"), ("L0", "L0")])
def test_level_case_insensitive(tmp_path, level, expected):
    kw = {"stages": "s"} if expected == "L1" else {}
    assert make(tmp_path, level=level, **kw).level == expected


def test_output_dir_path_expanded(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    config = TensorDumpConfig(Path("~") / "dumps")
    assert config.output_dir == tmp_path / "dumps"
    assert isinstance(config.output_dir, Path)
    config = TensorDumpConfig("~/more")
    assert config.output_dir == tmp_path / "more"
    assert not config.is_remote


def test_output_dir_relative_string_is_path():
    config = TensorDumpConfig("rel/dir")
    assert config.output_dir == Path("rel/dir")
    assert isinstance(config.output_dir, Path)


@pytest.mark.parametrize(
    "url, expected",
    [
        ("s3://bucket/x/", "s3://bucket/x"),
        ("s3://bucket/x", "s3://bucket/x"),
        ("s3://bucket/x///", "s3://bucket/x"),
        ("memory://d/", "memory://d"),
        ("gs://b/p/q/", "gs://b/p/q"),
    ],
)
def test_output_dir_url_kept(url, expected):
    config = TensorDumpConfig(url)
    assert config.output_dir == expected
    assert isinstance(config.output_dir, str)
    assert config.is_remote


def test_output_dir_file_url_is_path(monkeypatch, tmp_path):
    config = TensorDumpConfig("file:///tmp/x")
    assert config.output_dir == Path("/tmp/x")
    assert isinstance(config.output_dir, Path)
    assert not config.is_remote
    monkeypatch.setenv("HOME", str(tmp_path))
    assert TensorDumpConfig("file://~/y").output_dir == tmp_path / "y"


def test_frozen(tmp_path):
    config = make(tmp_path)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.level = "L1"  # type: ignore[misc]


# --------------------------------------------------------------------------- our storage fields
@pytest.mark.parametrize(
    "name",
    [
        "default",
        "DEFAULT",
        "none",
        None,
        "zstd",
        "zstd-1",
        "zstd-22",
        "ZSTD-3",
        " zstd-3 ",
        "blosc-lz4",
        "blosc-lz4-1",
        "blosc-zstd-9-bitshuffle",
        "blosc-zlib-5-noshuffle",
        "blosc-blosclz",
        "blosc-lz4hc-3-shuffle",
    ],
)
def test_compressor_valid(tmp_path, name):
    config = make(tmp_path, compressor=name)
    assert config.compressor == name
    parse_compressor(name)  # the store interprets the same value


def test_default_compressor_is_blosc_lz4_bitshuffle():
    assert DEFAULT_COMPRESSOR == "blosc-lz4-bitshuffle"
    spec = parse_compressor("default")
    assert (spec.kind, spec.cname, spec.level, spec.shuffle) == ("blosc", "lz4", 5, "bitshuffle")
    assert spec.name == "blosc-lz4-5-bitshuffle"


CNAMES = "['lz4', 'lz4hc', 'zstd', 'zlib', 'blosclz']"


@pytest.mark.parametrize(
    "name, exc, message",
    [
        (
            "gzip",
            ValueError,
            "unsupported compressor 'gzip'; expected 'default', 'none', 'zstd[-LEVEL]' or "
            f"'blosc-CNAME[-LEVEL][-SHUFFLE]' with CNAME in {CNAMES}",
        ),
        ("", ValueError, "unsupported compressor ''; expected"),
        ("zstd-", ValueError, "unsupported compressor 'zstd-'; expected"),
        ("zstd-0", ValueError, "compressor 'zstd-0': zstd level must be 1..22, got 0"),
        ("zstd-23", ValueError, "compressor 'zstd-23': zstd level must be 1..22, got 23"),
        ("blosc-foo", ValueError, f"compressor 'blosc-foo': blosc codec must be one of {CNAMES}, got 'foo'"),
        ("blosc-lz4-0", ValueError, "compressor 'blosc-lz4-0': blosc level must be 1..9, got 0"),
        ("blosc-lz4-10", ValueError, "compressor 'blosc-lz4-10': blosc level must be 1..9, got 10"),
        (
            "blosc-lz4-5-bad",
            ValueError,
            "compressor 'blosc-lz4-5-bad': blosc shuffle must be one of ['shuffle', 'bitshuffle', 'noshuffle'], got 'bad'",
        ),
        (3, TypeError, "compressor must be a string such as 'zstd-1' or 'none', got int"),
        (True, TypeError, "compressor must be a string such as 'zstd-1' or 'none', got bool"),
    ],
)
def test_compressor_invalid(tmp_path, name, exc, message):
    with pytest.raises(exc, match=re.escape(message)):
        make(tmp_path, compressor=name)


@pytest.mark.parametrize("value", [1, 64, 4 << 20])
def test_chunk_bytes_valid(tmp_path, value):
    assert make(tmp_path, chunk_bytes=value).chunk_bytes == value


@pytest.mark.parametrize(
    "value, exc, message",
    [
        (0, ValueError, "chunk_bytes must be positive"),
        (-1, ValueError, "chunk_bytes must be positive"),
        ("1", TypeError, "chunk_bytes must be a positive integer"),
        (1.5, TypeError, "chunk_bytes must be a positive integer"),
        (True, TypeError, "chunk_bytes must be a positive integer"),
        (None, TypeError, "chunk_bytes must be a positive integer"),
    ],
)
def test_chunk_bytes_invalid(tmp_path, value, exc, message):
    with pytest.raises(exc, match=re.escape(message)):
        make(tmp_path, chunk_bytes=value)


@pytest.mark.parametrize("value", ["discard", "keep"])
def test_on_error_valid(tmp_path, value):
    assert make(tmp_path, on_error=value).on_error == value


@pytest.mark.parametrize("value", ["ignore", "Keep", "", None, 1])
def test_on_error_invalid(tmp_path, value):
    with pytest.raises(
        ValueError, match=re.escape(f"unsupported on_error {value!r}; expected one of ['discard', 'keep']")
    ):
        make(tmp_path, on_error=value)


@pytest.mark.parametrize("field", ["stats", "async_export"])
@pytest.mark.parametrize("value, tname", [(1, "int"), (0, "int"), ("yes", "str"), (None, "NoneType")])
def test_bool_fields(tmp_path, field, value, tname):
    with pytest.raises(TypeError, match=re.escape(f"{field} must be a bool, got {tname}")):
        make(tmp_path, **{field: value})
    assert getattr(make(tmp_path, **{field: True}), field) is True
    assert getattr(make(tmp_path, **{field: False}), field) is False


def test_storage_options_mapping_copied(tmp_path):
    options = {"endpoint_url": "http://127.0.0.1:1", "anon": True}
    config = TensorDumpConfig("s3://bucket/p", storage_options=options)
    assert config.storage_options == options
    assert isinstance(config.storage_options, dict)
    options["anon"] = False  # the config keeps its own copy
    assert config.storage_options["anon"] is True
    from types import MappingProxyType

    assert make(tmp_path, storage_options=MappingProxyType({"a": 1})).storage_options == {"a": 1}


@pytest.mark.parametrize("value, tname", [([("a", 1)], "list"), ("a=1", "str"), (1, "int")])
def test_storage_options_invalid(tmp_path, value, tname):
    with pytest.raises(TypeError, match=re.escape(f"storage_options must be a mapping or None, got {tname}")):
        make(tmp_path, storage_options=value)


@pytest.mark.parametrize(
    "value, exc, message",
    [
        (0, ValueError, "host_memory_budget_mb must be positive"),
        ("1", TypeError, "host_memory_budget_mb must be a positive integer"),
        (True, TypeError, "host_memory_budget_mb must be a positive integer"),
    ],
)
def test_host_memory_budget(tmp_path, value, exc, message):
    with pytest.raises(exc, match=re.escape(message)):
        make(tmp_path, host_memory_budget_mb=value)


# --------------------------------------------------------------------------- selection predicates
def test_selects_invocation_defaults(tmp_path):
    config = make(tmp_path)
    assert config.selects_invocation("forward", 0, "k")
    assert config.selects_invocation("backward", 7, None)
    assert not config.selects_invocation("sideways", 0, "k")


def test_selects_invocation_filters(tmp_path):
    config = make(tmp_path, kernel_names=("a", "b"), directions="backward", ranks=(1, 3))
    assert config.selects_invocation("backward", 1, "a")
    assert config.selects_invocation("backward", 3, "b")
    assert not config.selects_invocation("forward", 1, "a")
    assert not config.selects_invocation("backward", 2, "a")
    assert not config.selects_invocation("backward", 1, "c")
    assert not config.selects_invocation("backward", 1)  # kernel name required once kernel_names is set
    assert make(tmp_path, ranks=0).selects_invocation("forward", 0)
    assert not make(tmp_path, ranks=0).selects_invocation("forward", 1)


def test_selects_tensor(tmp_path):
    config = make(tmp_path)
    for role in ROLES:
        assert config.selects_tensor("anything", role)
    assert not config.selects_tensor("x", "weird_role")
    config = make(tmp_path, tensor_names=("x", "h"), roles=("external_input", "final_output"))
    assert config.selects_tensor("x", "external_input")
    assert config.selects_tensor("h", "final_output")
    assert not config.selects_tensor("h", "stage_output")
    assert not config.selects_tensor("y", "external_input")
    config = make(tmp_path, roles="stage_output")
    assert config.selects_tensor("ws", "stage_output")
    assert not config.selects_tensor("x", "external_input")
