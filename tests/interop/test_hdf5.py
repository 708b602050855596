"""export_hdf5: one window → HDF5/netCDF4 that xarray's h5netcdf engine opens like xr.open_zarr."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
import subprocess
import sys
import textwrap
from typing import Any
import warnings

import h5py
import ml_dtypes
import numpy as np
import pytest
import torch
import xarray as xr
import zarr
from zarr.storage import LocalStore, StorePath

from megadump_zarr import TensorDumpConfig, tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from megadump_zarr.layout.write_model import ArrayWrite, GroupWrite, InvocationWrite, WindowWrite
from megadump_zarr.interop import decode_hdf5_attrs, export_hdf5
from megadump_zarr.interop import hdf5 as hdf5_module
from megadump_zarr.store.writer import WindowWriter

WIDENED = {"float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"}
EXPORT_ADDED = {"storedDtypeHdf5", "zarrDataType", "dtype"}


def _step(block: MoEBlock) -> None:
    x = block.make_input().requires_grad_()
    block(x).float().pow(2).mean().backward()


@pytest.fixture(scope="module", params=["float32", "bfloat16"])
def demo_windows(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An L0 window (every tensor of the four kernels) and an L1 window (expert stages) of the demo block."""
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[request.param]
    root = tmp_path_factory.mktemp(f"demo_{request.param}")
    block = MoEBlock(DemoConfig(dtype=dtype))
    with tensor_dump(TensorDumpConfig(root / "l0", level="L0")) as dumper:
        _step(block)
        dumper.step()
    l1 = TensorDumpConfig(
        root / "l1",
        level="L1",
        kernel_names=("moe_experts", "moe_experts_backward", "moe_dispatch"),
        stages=("expert_up", "expert_down", "expert_up_bwd", "gather"),
        owner_ids=None,
    )
    with tensor_dump(l1) as dumper:
        _step(block)
        dumper.step()
    windows = {"L0": root / "l0" / "rank_0" / "window_0000", "L1": root / "l1" / "rank_0" / "window_0000"}
    for window in windows.values():
        assert zarr.open_group(str(window), mode="r").attrs["status"] == "complete"
    return windows


NETCDF4_READER = textwrap.dedent("""
    import hashlib, json, sys
    import netCDF4
    out = {}
    with netCDF4.Dataset(sys.argv[1], "r") as root:
        def walk(group, path):
            for key in group.ncattrs():
                group.getncattr(key)
            for name, var in group.variables.items():
                var.set_auto_maskandscale(False)
                values = var[...]
                attrs = {key: var.getncattr(key) for key in var.ncattrs()}
                out[f"{path}{name}"] = [values.dtype.str, list(values.shape),
                                        hashlib.sha256(values.tobytes()).hexdigest(), sorted(attrs)]
            for name, child in group.groups.items():
                walk(child, f"{path}{name}/")
        walk(root, "")
    print(json.dumps(out))
""")


def assert_netcdf4_reads(h5_path: Path) -> int:
    """netCDF4-python (netCDF-C) opens the file in a child process (a crash fails here, not pytest) and
    reads every variable of every group with the bytes, dtype, shape and attribute names h5py sees."""
    result = subprocess.run(
        [sys.executable, "-c", NETCDF4_READER, str(h5_path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, f"netCDF4 failed on {h5_path} (exit {result.returncode}): {result.stderr[-2000:]}"
    theirs = json.loads(result.stdout)
    ours: dict[str, Any] = {}

    def visit(name: str, obj: Any) -> None:
        name_attr = obj.attrs.get("NAME", b"") if isinstance(obj, h5py.Dataset) else b""
        if isinstance(name_attr, bytes) and name_attr.startswith(
            b"This is a netCDF dimension but not a netCDF variable"
        ):
            return  # a bare dimension scale: netCDF shows it as a dimension, not a variable
        if isinstance(obj, h5py.Dataset):
            values = obj[()]
            values = np.asarray(values)
            attrs = sorted(k for k in obj.attrs if k not in hdf5_module._NETCDF_INTERNAL)
            ours[name] = [values.dtype.str, list(values.shape), hashlib.sha256(values.tobytes()).hexdigest(), attrs]

    with h5py.File(h5_path, "r") as f:
        f.visititems(visit)
    assert theirs == ours
    return len(ours)


def _view(window: Path) -> LocalStore:
    """The window as plain zarr reads it (the demo's default layout: a group per task)."""
    return LocalStore(window, read_only=True)


def data_groups(window: Path) -> list[str]:
    """Paths (relative to the window) of groups that hold arrays."""
    group = zarr.open_group(_view(window), mode="r")
    return sorted(
        {path.rpartition("/")[0] for path, node in group.members(max_depth=None) if isinstance(node, zarr.Array)}
    )


def assert_same_dataset(h5: xr.Dataset, zr: xr.Dataset, where: str) -> None:
    assert set(h5.variables) == set(zr.variables), where
    assert dict(h5.sizes) == dict(zr.sizes), where
    assert set(h5.coords) == set(zr.coords), where
    assert decode_hdf5_attrs(h5.attrs) == dict(zr.attrs), where
    for name, expected in zr.variables.items():
        got = h5.variables[name]
        label = f"{where}/{name}"
        assert got.dims == expected.dims, label
        want = np.asarray(expected.values)
        have = np.asarray(got.values)
        if want.dtype.name in WIDENED:
            assert have.dtype == np.float32, label
            assert got.attrs["storedDtypeHdf5"] == "float32" and got.attrs["zarrDataType"] == want.dtype.name
            want = want.astype(np.float32)
        else:
            assert have.dtype == want.dtype, label
        assert have.shape == want.shape, label
        assert np.array_equal(have, want, equal_nan=want.dtype.kind == "f"), label
        if want.dtype.kind == "f":  # bit-exact, including signed zeros and NaN payloads
            assert have.tobytes() == want.tobytes(), label
        decoded = decode_hdf5_attrs(got.attrs)
        assert decoded == dict(expected.attrs), label
    for name in zr.coords:
        assert np.array_equal(h5[name].values, zr[name].values), f"{where}: coordinate {name}"


@pytest.mark.parametrize("level", ["L0", "L1"])
def test_demo_window_opens_like_zarr(demo_windows: dict[str, Path], level: str, tmp_path: Path) -> None:
    window = demo_windows[level]
    h5_path = export_hdf5(str(window), tmp_path / "w.h5")
    assert h5_path == tmp_path / "w.h5"
    groups = data_groups(window)
    assert groups, "the demo window must hold data groups"
    if level == "L1":
        assert all("/stages/" in g and "/task_" in g for g in groups)
    compared = 0
    for group in groups:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            zr = xr.open_zarr(StorePath(_view(window), group))
        with xr.open_dataset(h5_path, engine="h5netcdf", group=group) as h5:
            assert_same_dataset(h5, zr, group)
        compared += len(zr.data_vars)
    assert compared > 5
    assert assert_netcdf4_reads(h5_path) >= compared


@pytest.mark.parametrize("level", ["L0", "L1"])
def test_hierarchy_and_attributes_are_mirrored(demo_windows: dict[str, Path], level: str, tmp_path: Path) -> None:
    window = demo_windows[level]
    h5_path = export_hdf5(window, tmp_path / "w.h5", compression="lzf")
    zgroup = zarr.open_group(_view(window), mode="r")
    zarr_nodes = {path: node for path, node in zgroup.members(max_depth=None)}
    with h5py.File(h5_path, "r") as f:
        root = decode_hdf5_attrs(f.attrs, keep_export_attrs=True)
        export = root.pop("hdf5Export")
        assert export["source"] == str(window) and export["producer"].startswith("megadump_zarr")
        assert root == zgroup.attrs.asdict()
        h5_groups: set[str] = set()
        f.visititems(lambda name, obj: h5_groups.add(name) if isinstance(obj, h5py.Group) else None)
        assert h5_groups == {p for p, n in zarr_nodes.items() if isinstance(n, zarr.Group)}
        for path, node in zarr_nodes.items():
            obj = f[path]
            if isinstance(node, zarr.Group):
                assert decode_hdf5_attrs(obj.attrs) == node.attrs.asdict(), path
            else:
                assert isinstance(obj, h5py.Dataset), path
                assert obj.shape == node.shape, path
                if obj.ndim and obj.size:
                    assert obj.compression == "lzf" and obj.chunks is not None, path
                if "name" in node.attrs:  # data arrays (not coordinates)
                    assert decode_hdf5_attrs(obj.attrs) == node.attrs.asdict(), path
                    encoded = json.loads(obj.attrs["_json_attrs"])
                    assert "stats" in encoded and "actualShape" in encoded
                    assert json.loads(obj.attrs["stats"]) == node.attrs["stats"]


def _write_window(
    root: Path,
    *,
    status: str = "complete",
    chunk_bytes: int = 4 << 20,
    rank: int = 0,
    arrays: list[ArrayWrite] | None = None,
    attrs: dict[str, Any] | None = None,
) -> Path:
    arrays = (
        arrays
        if arrays is not None
        else [ArrayWrite("x", np.arange(12, dtype=np.float32).reshape(3, 4), ("a", "b"), {"name": "x"})]
    )
    window = WindowWrite(
        rank,
        0,
        {"schemaVersion": 5, "level": "L0", "windowIndex": 0, "rank": rank, **(attrs or {})},
        [InvocationWrite("invocation_000000_forward", {"invocationId": 0}, [], arrays)],
    )
    with WindowWriter(root, chunk_bytes=chunk_bytes) as writer:
        return Path(writer.write_window(window, status=status))


def test_special_types_and_bounded_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """float8/bf16 widen exactly, bool round-trips via xarray's dtype convention, scalars and empty
    arrays survive, and a multi-chunk array copied in tiny blocks is identical."""
    rng = np.random.default_rng(0)
    big = rng.standard_normal((257, 33)).astype(np.float32)
    big[0, 0], big[0, 1] = -0.0, np.nan
    e4m3 = np.array([0.0, -0.0, 448.0, -448.0, np.nan, 0.001953125, 1.5], dtype=ml_dtypes.float8_e4m3fn)
    e5m2 = np.array([0.0, -0.0, 57344.0, np.inf, -np.inf, np.nan, 1.5e-5], dtype=ml_dtypes.float8_e5m2)
    bf16 = rng.standard_normal((5, 7)).astype(ml_dtypes.bfloat16)
    # float16 (netCDF-C crashed on HDF5 half floats): signed zero, subnormals, Inf, NaN with payloads
    f16 = np.array(
        [0x0000, 0x8000, 0x0001, 0x03FF, 0x7BFF, 0x7C00, 0xFC00, 0x7E01, 0xFE00, 0x3C00], dtype=np.uint16
    ).view(np.float16)
    arrays = [
        ArrayWrite("big", big, ("row", "col"), {"name": "big", "note": "x" * 100_000}),  # attribute > 64 KiB
        ArrayWrite("row", np.arange(257, dtype=np.int64), ("row",)),  # coordinate
        ArrayWrite("e4m3", e4m3, ("e4",), {"name": "e4m3", "originalDtype": "float8_e4m3fn"}),
        ArrayWrite("e5m2", e5m2, ("e5",), {"name": "e5m2", "originalDtype": "float8_e5m2"}),
        ArrayWrite("bf16", bf16, ("p", "q"), {"name": "bf16", "truncated": False, "none": None, "big_int": 1 << 70}),
        ArrayWrite("flags", np.array([True, False, True]), ("f",), {"name": "flags"}),
        ArrayWrite("scalar", np.array(3.5, dtype=np.float64), (), {"name": "scalar"}),
        ArrayWrite("empty", np.zeros((0, 4), dtype=np.int32), ("z", "b4"), {"name": "empty", "shape": []}),
        ArrayWrite("u16", np.arange(6, dtype=np.uint16), ("u",), {"name": "u16"}),
        ArrayWrite("f16", f16, ("h",), {"name": "f16", "originalDtype": "float16"}),
        ArrayWrite("nul", np.arange(3, dtype=np.int32), ("n",), {"name": "nul\x00byte", "note": "a\x00b"}),
    ]
    window = _write_window(tmp_path / "dump", chunk_bytes=1024, arrays=arrays)
    assert zarr.open_array(str(window / "invocation_000000_forward" / "big"), mode="r").nchunks > 10
    copied: list[tuple[slice, ...]] = []
    real_blocks = hdf5_module._blocks

    def spy(*args: Any) -> Any:
        for region in real_blocks(*args):
            copied.append(region)
            yield region

    monkeypatch.setattr(hdf5_module, "_BLOCK_BYTES", 3000)
    monkeypatch.setattr(hdf5_module, "_blocks", spy)
    h5_path = export_hdf5(window, tmp_path / "special.h5", progress=True)
    big_blocks = [region for region in copied if len(region) == 2 and region[1].stop == 33]
    assert sum((r[0].stop - r[0].start) for r in big_blocks) == 257 and len(big_blocks) >= 12
    for region in big_blocks:  # float32: at most 3000 bytes per block
        assert (region[0].stop - region[0].start) * 33 * 4 <= 3000

    group = "invocation_000000_forward"
    zr = xr.open_zarr(str(window / group))
    with xr.open_dataset(h5_path, engine="h5netcdf", group=group) as h5:
        assert_same_dataset(h5, zr, group)
        assert h5["flags"].dtype == bool and h5["flags"].values.tolist() == [True, False, True]
        assert h5["e4m3"].dtype == np.float32
        assert h5["scalar"].values == 3.5 and h5["empty"].shape == (0, 4)
        assert h5["bf16"].attrs["zarrDataType"] == "bfloat16"
        assert decode_hdf5_attrs(h5["bf16"].attrs)["big_int"] == 1 << 70
        assert h5["f16"].dtype == np.float32 and h5["f16"].attrs["zarrDataType"] == "float16"
        assert h5["f16"].values.astype(np.float16).tobytes() == f16.tobytes()  # the stored bits, back exactly
        assert decode_hdf5_attrs(h5["nul"].attrs)["name"] == "nul\x00byte"
        assert decode_hdf5_attrs(h5["nul"].attrs)["note"] == "a\x00b"
    with h5py.File(h5_path, "r") as f:
        assert f[f"{group}/flags"].dtype == np.int8
        assert f[f"{group}/big"].compression == "gzip" and f[f"{group}/big"].shuffle
        assert f[f"{group}/f16"].dtype == np.float32
    assert assert_netcdf4_reads(h5_path) == len(arrays)


@pytest.mark.parametrize("status", ["aborted", "writing"])
def test_incomplete_window_is_refused(tmp_path: Path, status: str) -> None:
    if status == "writing":
        with WindowWriter(tmp_path / "dump") as writer:
            session = writer.begin(0, 0, {"schemaVersion": 5, "level": "L0", "windowIndex": 0, "rank": 0})
            session.write_invocation(
                InvocationWrite(
                    "invocation_000000_forward",
                    {"invocationId": 0},
                    [GroupWrite("g", {})],
                    [ArrayWrite("g/x", np.ones(4, np.float32), ("n",), {"name": "x"})],
                )
            )
        window = Path(session.url)
    else:
        window = _write_window(tmp_path / "dump", status=status)
    target = tmp_path / "w.h5"
    with pytest.raises(ValueError, match=f"status '{status}', not 'complete'.*allow_incomplete=True"):
        export_hdf5(window, target)
    assert not target.exists()
    export_hdf5(window, target, allow_incomplete=True)
    with h5py.File(target, "r") as f:
        assert f.attrs["status"] == status


def test_refusals(tmp_path: Path) -> None:
    window = _write_window(tmp_path / "dump")
    target = tmp_path / "w.h5"
    export_hdf5(window, target)
    with pytest.raises(FileExistsError, match="already exists"):
        export_hdf5(window, target)
    export_hdf5(window, target, overwrite=True, compression=None)
    with h5py.File(target, "r") as f:
        assert f["invocation_000000_forward/x"].compression is None
    with pytest.raises(ValueError, match="not a megadump_zarr window group"):
        export_hdf5(tmp_path / "dump", tmp_path / "root.h5")
    with pytest.raises(ValueError, match="not a megadump_zarr window group"):
        export_hdf5(window / "invocation_000000_forward", tmp_path / "inv.h5")
    with pytest.raises(ValueError, match="compression must be one of"):
        export_hdf5(window, tmp_path / "c.h5", compression="zstd")
    assert not (tmp_path / "c.h5").exists() and not (tmp_path / "root.h5").exists()
    assert not list(tmp_path.glob(".*partial*"))


def test_failed_export_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    window = _write_window(tmp_path / "dump")

    def boom(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("disk full")

    monkeypatch.setattr(hdf5_module, "_copy_array", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        export_hdf5(window, tmp_path / "w.h5")
    assert list(tmp_path.glob("*.h5")) == [] and not list(tmp_path.glob(".*partial*"))


def test_converted_legacy_window_exports(tmp_path: Path) -> None:
    """convert_legacy → export_hdf5: a legacy bf16 L1 window ends up in HDF5 with float32 values."""
    from megadump_zarr.interop import convert_legacy
    from tests.interop._legacy_format import demo_tensors, l1_invocations, write_rank_window

    write_rank_window(tmp_path / "legacy", "L1", 0, 0, l1_invocations(demo_tensors(torch.bfloat16)))
    (window,) = convert_legacy(tmp_path / "legacy", tmp_path / "zarr")
    h5_path = export_hdf5(window, tmp_path / "w.h5")
    for group in data_groups(Path(window)):
        zr = xr.open_zarr(str(Path(window) / group))
        with xr.open_dataset(h5_path, engine="h5netcdf", group=group) as h5:
            assert_same_dataset(h5, zr, group)


@pytest.mark.parametrize("level", ["L0", "L1"])
def test_hostile_names_export_and_netcdf4_reads_them(tmp_path: Path, level: str) -> None:
    """Names the dumper accepts (NUL, '/', '..', Unicode, 1,000 characters) export, and read back exactly."""
    from tests.reliability.test_hostile_names import HOSTILE, dump_hostile

    dump_hostile(tmp_path / "dump", level)
    window = tmp_path / "dump" / "rank_0" / "window_0000"
    h5_path = export_hdf5(window, tmp_path / "hostile.h5")
    names = set()
    for group in data_groups(window):
        zr = xr.open_zarr(str(window / group))
        with xr.open_dataset(h5_path, engine="h5netcdf", group=group) as h5:
            assert_same_dataset(h5, zr, group)
            names |= {decode_hdf5_attrs(v.attrs).get("name") for v in h5.data_vars.values()}
    assert "nul\x00byte" in names and set(HOSTILE[1:]) <= names | set(HOSTILE[:1])
    assert assert_netcdf4_reads(h5_path) >= len(HOSTILE)


NETCDF4_TABLE_READER = textwrap.dedent("""
    import json, sys
    import netCDF4
    with netCDF4.Dataset(sys.argv[1], "r") as root:
        group = root[sys.argv[2]]
        out = {}
        for name, var in group.variables.items():
            var.set_auto_maskandscale(False)
            out[name] = [str(v) if isinstance(v, str) else float(v) for v in var[...].tolist()]
    print(json.dumps(out))
""")


@pytest.mark.parametrize("mode", ["statistics", "nonfinite"])
def test_statistics_first_windows_export_with_their_tables(tmp_path, mode):
    # the statistics table's text coordinates (Zarr v3 "string") were refused: "data type StringDType()
    # cannot be exported to HDF5", so no window of a statistics/nonfinite/diff dump could be exported
    block = MoEBlock(DemoConfig())
    block.w_up[2, 0, 0] = float("nan")
    config = TensorDumpConfig(tmp_path / "d", level="L1", kernel_names="moe_experts", stages=("expert_up",), mode=mode)
    with tensor_dump(config) as dumper:
        block(block.make_input())
        dumper.step()
    window = tmp_path / "d" / "rank_0" / "window_0000"
    h5_path = export_hdf5(window, tmp_path / "w.h5")
    group = "invocation_000000_forward/statistics"
    table = xr.open_zarr(window / group)
    exported = xr.open_dataset(h5_path, engine="h5netcdf", group=group)
    assert set(exported.variables) == set(table.variables) and exported.sizes["record"] == table.sizes["record"] > 0
    for name in table.variables:
        ours, theirs = table[name].values, exported[name].values
        if ours.dtype.kind in "TUO":
            assert [str(v) for v in theirs] == [str(v) for v in ours], name
        else:
            np.testing.assert_array_equal(theirs.astype(ours.dtype), ours, err_msg=name)
    result = subprocess.run(
        [sys.executable, "-c", NETCDF4_TABLE_READER, str(h5_path), group],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    read = json.loads(result.stdout)
    assert (
        read["name"] == [str(v) for v in table["name"].values]
        and read["stage"] == ["expert_up"] * table.sizes["record"]
    )
    assert read["max"] == pytest.approx(table["max"].values.tolist(), nan_ok=True)
    if mode == "nonfinite":  # the kept payloads are exported next to the table
        with h5py.File(h5_path, "r") as f:
            assert "invocation_000000_forward/stages/expert_up" in f


def _edit_everywhere(window: Path, array: str, edit) -> None:
    """Apply ``edit`` to ``array``'s zarr.json and to every consolidated copy of it above it."""
    target = window / array
    doc = json.loads((target / "zarr.json").read_text())
    edit(doc)
    (target / "zarr.json").write_text(json.dumps(doc))
    parent = target
    while parent != window:
        parent = parent.parent
        document = json.loads((parent / "zarr.json").read_text())
        entries = (document.get("consolidated_metadata") or {}).get("metadata") or {}
        key = str(target.relative_to(parent))
        if key in entries:
            edit(entries[key])
            (parent / "zarr.json").write_text(json.dumps(document))


def test_a_zero_chunk_shape_is_refused_naming_the_document(tmp_path: Path) -> None:
    """Issue 23.3: chunk shape [0, 0] was a ZeroDivisionError; it names the array document and field."""
    window = _write_window(tmp_path / "dump")
    _edit_everywhere(
        window, "invocation_000000_forward/x", lambda d: d["chunk_grid"]["configuration"].update(chunk_shape=[0, 0])
    )
    target = tmp_path / "w.h5"
    with pytest.raises(
        ValueError,
        match=r"invocation_000000_forward/x/zarr.json: chunk_grid chunk_shape \[0, 0\] "
        r"is not 2 positive integers",
    ):
        export_hdf5(window, target)
    assert not target.exists()
    result = subprocess.run(
        [sys.executable, "-m", "megadump_zarr.cli.main", "export-hdf5", str(window), str(target)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "chunk_shape [0, 0]" in errors[0] and "Traceback" not in result.stderr


def test_a_packed_window_exports_a_group_per_task(tmp_path: Path) -> None:
    """``layout="packs"``: each pack row is exported as its task's group, read from its row: the same groups,
    variables, values and attributes as the tasks layout of the same step (the pack arrays themselves are not
    exported)."""
    from tests._faults import dump_demo_step

    window = Path("rank_0") / "window_0000"
    dump_demo_step(tmp_path / "tasks", "L1")
    dump_demo_step(tmp_path / "packs", "L1", layout="packs")
    assert list((tmp_path / "packs" / window).rglob("pack_0000")), "the demo's combine tiles are packed"
    files = [export_hdf5(tmp_path / name / window, tmp_path / f"{name}.h5") for name in ("tasks", "packs")]

    def contents(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
        groups: dict[str, Any] = {}
        arrays: dict[str, Any] = {}
        with h5py.File(path, "r") as f:

            def visit(name: str, obj: Any) -> None:
                attrs = decode_hdf5_attrs(obj.attrs)
                if isinstance(obj, h5py.Group):
                    groups[name] = attrs
                else:
                    arrays[name] = (obj.dtype, obj.shape, obj[...].tobytes(), attrs)

            f.visititems(visit)
        return groups, arrays

    (tasks_groups, tasks_arrays), (packs_groups, packs_arrays) = map(contents, files)
    assert not any("pack_" in name for name in packs_groups)
    assert sum("/task_" in name for name in packs_groups) >= 4
    assert packs_groups == tasks_groups
    assert packs_arrays.keys() == tasks_arrays.keys()
    for name, (dtype, shape, data, attrs) in tasks_arrays.items():
        assert packs_arrays[name][:2] == (dtype, shape), name
        assert packs_arrays[name][2] == data, name  # exact: one deterministic step, two layouts
        assert packs_arrays[name][3] == attrs, name
