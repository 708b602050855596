"""convert_legacy: schema-version-4 ``torch.save`` dumps into the Zarr layout, bit-exactly and safely."""

from __future__ import annotations

import json
import os
from pathlib import Path
import pickle
from typing import Any
import warnings

import numpy as np
import pytest
import torch
import xarray as xr
import zarr

from megadump_zarr.tensor_arrays import tensor_to_numpy
from megadump_zarr.layout.write_model import FORMAT_VERSION
from megadump_zarr.layout.names import safe_name
from megadump_zarr.interop import convert_legacy
from megadump_zarr.store.writer import window_status
from tests.interop._legacy_format import demo_tensors, l0_invocations, l1_invocations, write_rank_window

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def read_json(path: Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def open_group_ds(path: Path) -> xr.Dataset:
    """``xr.open_zarr`` on a data group, failing on any warning (e.g. missing consolidated metadata)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return xr.open_zarr(str(path))


def assert_bits(stored: np.ndarray, tensor: torch.Tensor) -> None:
    expected = tensor_to_numpy(tensor.detach().contiguous())
    assert stored.dtype == expected.dtype, (stored.dtype, expected.dtype)
    assert stored.shape == expected.shape
    assert stored.tobytes() == expected.tobytes()


@pytest.fixture(params=sorted(DTYPES))
def dtype(request: pytest.FixtureRequest) -> torch.dtype:
    return DTYPES[request.param]


@pytest.fixture
def legacy(tmp_path: Path, dtype: torch.dtype) -> dict[str, Any]:
    """An L1 window (rank 0) and an L0 window (rank 1, window 2) in the legacy layout."""
    tensors = demo_tensors(dtype)
    root = tmp_path / "legacy"
    l1 = l1_invocations(tensors)
    l0 = l0_invocations(tensors)
    return {
        "root": root,
        "tensors": tensors,
        "l1": l1,
        "l0": l0,
        "l1_manifest": write_rank_window(root, "L1", 0, 0, l1),
        "l0_manifest": write_rank_window(root, "L0", 1, 2, l0),
    }


# --------------------------------------------------------------------------- round trips
def test_l1_round_trip(tmp_path: Path, legacy: dict[str, Any]) -> None:
    out = tmp_path / "zarr"
    urls = convert_legacy(legacy["root"], out)
    assert urls == [str(out / "rank_0" / "window_0000"), str(out / "rank_1" / "window_0002")]
    window = out / "rank_0" / "window_0000"
    manifest = read_json(legacy["l1_manifest"])
    attrs = zarr.open_group(str(window), mode="r").attrs.asdict()
    assert attrs["status"] == "complete"
    assert (
        attrs["schemaVersion"] == FORMAT_VERSION == 10 and attrs["stageViewStorage"] == "array_per_task_record"
    )  # task groups (the default layout)
    assert attrs["convertedFrom"]["schemaVersion"] == 4
    assert attrs["convertedFrom"]["path"] == str(legacy["l1_manifest"].parent.resolve())
    assert attrs["convertedFrom"]["stageViewStorage"] == "per_task_files"
    assert (attrs["level"], attrs["rank"], attrs["windowIndex"]) == ("L1", 0, 0)
    assert attrs["tensorSerialization"] == "zarr-v3"
    assert attrs["capturePhaseSemantics"] == "task_boundary"
    assert attrs["stageViewStorage"] == "array_per_task_record"
    assert attrs["invocations"] == ["invocation_000000_forward", "invocation_000001_backward"]
    assert window_status(out, 0, 0) == "complete"

    checked = 0
    for inv_meta, invocation in zip(manifest["invocations"], legacy["l1"]):
        inv_dir = window / f"invocation_{inv_meta['invocationId']:06d}_{inv_meta['direction']}"
        inv_attrs = zarr.open_group(str(inv_dir), mode="r").attrs.asdict()
        for key in ("invocationId", "step", "direction", "kernelName", "device", "deviceBufferBytes", "taskCount"):
            assert inv_attrs[key] == inv_meta[key], key
        assert inv_attrs["level"] == "L1" and inv_attrs["rank"] == 0 and inv_attrs["launchFailed"] is False
        assert inv_attrs["recordCount"] == sum(len(t["tensors"]) for t in inv_meta["tasks"])
        tasks = {t.task_id: t for t in invocation.tasks}
        for task_meta in inv_meta["tasks"]:
            task = tasks[task_meta["taskId"]]
            legacy_dir = Path(task_meta["metadataFile"]).parent.name
            group = inv_dir / "stages" / safe_name(task_meta["stage"]) / legacy_dir
            ds = open_group_ds(group)
            expected_task = {k: v for k, v in task_meta.items() if k not in ("tensors", "metadataFile")}
            expected_task["workerId"] = task.core_id if "_worker_" in legacy_dir else None
            assert ds.attrs == expected_task
            stage_attrs = zarr.open_group(str(group.parent), mode="r").attrs.asdict()
            assert stage_attrs == {"stage": task_meta["stage"]}
            assert len(ds.data_vars) == len(task.records)
            for record, tensor_meta in zip(task.records, task_meta["tensors"]):
                name = f"{record.io}_{record.index:02d}_{safe_name(record.name)}"
                variable = ds[name]
                assert_bits(variable.values, record.tensor)
                assert_bits(zarr.open_array(str(group / name), mode="r")[...], record.tensor)
                expected = {k: v for k, v in tensor_meta.items() if k != "file"}
                expected["legacyFile"] = tensor_meta["file"]
                got = dict(variable.attrs)
                assert set(got.pop("stats")) >= {"min", "max", "mean"}
                assert got == expected
                if record.truncated:
                    assert variable.dims == (f"{record.io}_{record.index:02d}_element",)
                else:
                    assert variable.dims == tuple(f"{name}_dim_{i}" for i in range(record.tensor.dim()))
                checked += 1
    assert checked == sum(len(t.records) for inv in legacy["l1"] for t in inv.tasks)


def test_l0_round_trip_hard_links_loaded_once(
    tmp_path: Path, legacy: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = read_json(legacy["l0_manifest"])
    window_dir = legacy["l0_manifest"].parent
    h = next(t for t in manifest["invocations"][0]["tensors"] if t["name"] == "h")
    assert len(h["ports"]) == 2
    primary, link = (window_dir / p["file"] for p in h["ports"])
    assert os.path.samefile(primary, link) and os.stat(primary).st_nlink == 2  # the seed's hard links

    loaded: list[str] = []
    real_load = torch.load

    def spy(path: Any, *args: Any, **kwargs: Any) -> Any:
        assert kwargs.get("weights_only") is True and kwargs.get("map_location") == "cpu"
        loaded.append(str(path))
        return real_load(path, *args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    out = tmp_path / "zarr"
    convert_legacy(legacy["root"], out)
    logical = sum(len(inv["tensors"]) for inv in manifest["invocations"])
    l1_records = sum(
        len(task["tensors"]) for inv in read_json(legacy["l1_manifest"])["invocations"] for task in inv["tasks"]
    )
    assert len(loaded) == logical + l1_records  # one load per logical tensor, never per port
    assert len(set(loaded)) == len(loaded)

    window = out / "rank_1" / "window_0002"
    attrs = zarr.open_group(str(window), mode="r").attrs.asdict()
    assert (attrs["level"], attrs["rank"], attrs["windowIndex"], attrs["status"]) == ("L0", 1, 2, "complete")
    assert attrs["stageViewStorage"] == "array_per_tensor_with_ports"
    assert attrs["convertedFrom"]["stageViewStorage"] == "primary_file_with_hard_links"
    for inv_meta, invocation in zip(manifest["invocations"], legacy["l0"]):
        group = window / f"invocation_{inv_meta['invocationId']:06d}_{inv_meta['direction']}"
        ds = open_group_ds(group)
        inv_attrs = dict(ds.attrs)
        assert inv_attrs["tensorCount"] == len(invocation.tensors)
        assert inv_attrs["kernelName"] == inv_meta["kernelName"] and inv_attrs["level"] == "L0"
        assert len(ds.data_vars) == len(invocation.tensors)
        for tensor, meta in zip(invocation.tensors, inv_meta["tensors"]):
            name = safe_name(tensor.name)
            variable = ds[name]
            assert_bits(variable.values, tensor.tensor)
            assert variable.dims == tuple(f"{name}_dim_{i}" for i in range(tensor.tensor.dim()))
            got = dict(variable.attrs)
            got.pop("stats")
            expected = {k: v for k, v in meta.items() if k != "file"}
            expected["legacyFile"] = meta["file"]
            expected["ports"] = [{("legacyFile" if k == "file" else k): v for k, v in p.items()} for p in meta["ports"]]
            assert got == expected
            assert variable.attrs["originalDtype"] == str(tensor.tensor.dtype).removeprefix("torch.")


def test_converted_dump_reads_with_open_dump(tmp_path: Path, legacy: dict[str, Any]) -> None:
    from megadump_zarr import open_dump

    out = tmp_path / "zarr"
    convert_legacy(legacy["root"], out)
    records = open_dump(str(out)).records()
    manifest = read_json(legacy["l1_manifest"])
    l1_count = sum(len(task["tensors"]) for inv in manifest["invocations"] for task in inv["tasks"])
    l0_count = sum(len(inv["tensors"]) for inv in read_json(legacy["l0_manifest"])["invocations"])
    assert len(records) == l1_count + l0_count
    worker_rows = records[records["stage"] == "gather stage"]
    assert set(worker_rows["worker"]) == {2}
    assert set(records[records["level"] == "L0"]["name"]) == {
        "x",
        "norm_weight",
        "h",
        "w_router",
        "logits",
        "expert counts",
    }


def test_progress_bar(tmp_path: Path, legacy: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    urls = convert_legacy(legacy["root"], tmp_path / "zarr", progress=True, compressor="none")
    assert len(urls) == 2
    l1 = sum(len(task["tensors"]) for inv in read_json(legacy["l1_manifest"])["invocations"] for task in inv["tasks"])
    l0 = sum(len(inv["tensors"]) for inv in read_json(legacy["l0_manifest"])["invocations"])
    out = capsys.readouterr().out
    assert f"{l1 + l0}/{l1 + l0}" in out  # one tick per tensor


def test_existing_destination_window_is_refused_before_writing(tmp_path: Path, legacy: dict[str, Any]) -> None:
    out = tmp_path / "zarr"
    convert_legacy(legacy["root"], out)
    before = sorted(p for p in out.rglob("*"))
    with pytest.raises(FileExistsError, match="already exists"):
        convert_legacy(legacy["root"], out)
    assert sorted(p for p in out.rglob("*")) == before


# --------------------------------------------------------------------------- untrusted input
class _Evil:
    """Unpickling this would create a marker file (run arbitrary code)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def _first_l1_file(legacy: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
    manifest = read_json(legacy["l1_manifest"])
    meta = manifest["invocations"][0]["tasks"][0]["tensors"][0]
    return legacy["l1_manifest"].parent / meta["file"], manifest


@pytest.mark.parametrize("how", ["torch.save", "pickle.dump"])
def test_malicious_pickle_is_refused_without_running_it(tmp_path: Path, legacy: dict[str, Any], how: str) -> None:
    target, _ = _first_l1_file(legacy)
    marker = tmp_path / "PWNED_marker"
    if how == "torch.save":
        torch.save(_Evil(marker), target)
    else:
        with open(target, "wb") as handle:
            pickle.dump(_Evil(marker), handle)
    out = tmp_path / "zarr"
    with pytest.raises(ValueError) as info:
        convert_legacy(legacy["root"], out)
    message = str(info.value)
    assert str(target.resolve()) in message
    assert "not a plain tensor" in message or "cannot load" in message
    assert info.value.__cause__ is None and info.value.__suppress_context__  # no deep traceback chained
    assert not marker.exists()
    assert window_status(out, 0, 0) is None and not out.exists()  # a refused input leaves no output


def test_non_tensor_payload_is_refused(tmp_path: Path, legacy: dict[str, Any]) -> None:
    target, _ = _first_l1_file(legacy)
    torch.save({"a": torch.zeros(3)}, target)  # weights_only accepts it, but it is not one tensor
    with pytest.raises(ValueError, match=r"holds a dict, not a single torch\.Tensor") as info:
        convert_legacy(legacy["root"], tmp_path / "zarr")
    assert str(target.resolve()) in str(info.value)


def test_corrupt_file_is_a_value_error(tmp_path: Path, legacy: dict[str, Any]) -> None:
    target, _ = _first_l1_file(legacy)
    target.write_bytes(b"not a torch file at all")
    with pytest.raises(ValueError, match="legacy tensor file") as info:
        convert_legacy(legacy["root"], tmp_path / "zarr")
    assert str(target.resolve()) in str(info.value)


def test_metadata_mismatch_is_refused(tmp_path: Path, legacy: dict[str, Any]) -> None:
    target, _ = _first_l1_file(legacy)
    torch.save(torch.zeros(3, 3, dtype=torch.int32), target)
    with pytest.raises(ValueError, match="storedDtype|shape"):
        convert_legacy(legacy["root"], tmp_path / "zarr")


def _rewrite(manifest_path: Path, edit: Any) -> None:
    manifest = read_json(manifest_path)
    edit(manifest)
    manifest_path.write_text(json.dumps(manifest), encoding="utf-8")


@pytest.mark.parametrize("bad", ["../../etc/passwd", "/etc/passwd", "stages/../../../etc/passwd"])
@pytest.mark.parametrize("level", ["L1", "L0"])
def test_file_outside_the_window_is_refused(tmp_path: Path, legacy: dict[str, Any], bad: str, level: str) -> None:
    manifest_path = legacy["l1_manifest"] if level == "L1" else legacy["l0_manifest"]

    def edit(manifest: dict[str, Any]) -> None:
        if level == "L1":
            manifest["invocations"][0]["tasks"][1]["tensors"][0]["file"] = bad
        else:
            manifest["invocations"][0]["tensors"][2]["file"] = bad

    _rewrite(manifest_path, edit)
    out = tmp_path / "zarr"
    with pytest.raises(ValueError, match="refusing legacy tensor file") as info:
        convert_legacy(legacy["root"], out)
    assert repr(bad) in str(info.value)
    assert not out.exists() or not any(out.rglob("zarr.json"))  # validated before anything is written


def test_symlink_escaping_the_window_is_refused(tmp_path: Path, legacy: dict[str, Any]) -> None:
    outside = tmp_path / "outside.pt"
    torch.save(torch.zeros(2), outside)
    target, _ = _first_l1_file(legacy)
    target.unlink()
    target.symlink_to(outside)
    with pytest.raises(ValueError, match="outside the window directory") as info:
        convert_legacy(legacy["root"], tmp_path / "zarr")
    assert target.name in str(info.value)


def test_symlink_inside_the_window_is_followed(tmp_path: Path, legacy: dict[str, Any]) -> None:
    target, manifest = _first_l1_file(legacy)
    copy = target.with_name("copy.pt")
    target.rename(copy)
    target.symlink_to(copy.name)
    urls = convert_legacy(legacy["root"], tmp_path / "zarr")
    assert len(urls) == 2


@pytest.mark.parametrize(
    ("edit", "pattern"),
    [
        (lambda m: m.update(schemaVersion=3), r"unsupported schemaVersion 3"),
        (lambda m: m.pop("schemaVersion"), r"missing required key 'schemaVersion'"),
        (lambda m: m.pop("rank"), r"missing required key 'rank'"),
        (lambda m: m.update(level="L2"), r"'level' must be one of"),
        (lambda m: m.update(windowIndex=-1), r"'windowIndex' must be >= 0"),
        (lambda m: m.update(windowIndex=5), r"rank 0 window 5 but it lies in rank_0/window_0000"),
        (lambda m: m.update(tensorSerialization="pickle"), r"unsupported tensorSerialization"),
        (lambda m: m["invocations"][0].pop("direction"), r"invocations\[0\]: missing required key 'direction'"),
        (lambda m: m["invocations"][0].update(direction="sideways"), r"'direction' must be one of"),
        (
            lambda m: m["invocations"][1]["tasks"][0].pop("coreId"),
            r"invocations\[1\]\.tasks\[0\]: missing required key 'coreId'",
        ),
        (
            lambda m: m["invocations"][0]["tasks"][0]["tensors"][1].pop("storedDtype"),
            r"invocations\[0\]\.tasks\[0\]\.tensors\[1\]: missing required key 'storedDtype'",
        ),
        (
            lambda m: m["invocations"][0]["tasks"][0]["tensors"][1].update(storedShape="4"),
            r"'storedShape' must be a list",
        ),
        (lambda m: m["invocations"][0]["tasks"][0]["tensors"][1].update(index=True), r"'index' must be an integer"),
        (
            lambda m: m["invocations"][0]["tasks"][0]["tensors"][0].update(file=None),
            r"'file' must be a non-empty relative path",
        ),
    ],
)
def test_invalid_manifest_names_file_and_key(tmp_path: Path, legacy: dict[str, Any], edit: Any, pattern: str) -> None:
    _rewrite(legacy["l1_manifest"], edit)
    out = tmp_path / "zarr"
    with pytest.raises(ValueError, match=pattern) as info:
        convert_legacy(legacy["root"], out)
    assert str(legacy["l1_manifest"]) in str(info.value)
    assert not out.exists() or not any(out.rglob("zarr.json"))


def test_invalid_json_and_missing_tree(tmp_path: Path, legacy: dict[str, Any]) -> None:
    legacy["l0_manifest"].write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="is not valid JSON") as info:
        convert_legacy(legacy["root"], tmp_path / "zarr")
    assert str(legacy["l0_manifest"]) in str(info.value)
    with pytest.raises(FileNotFoundError):
        convert_legacy(tmp_path / "nope", tmp_path / "zarr")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no legacy windows"):
        convert_legacy(tmp_path / "empty", tmp_path / "zarr")


def test_task_metadata_read_from_task_json_when_manifest_lists_no_tensors(
    tmp_path: Path, legacy: dict[str, Any]
) -> None:
    def edit(manifest: dict[str, Any]) -> None:
        for task in manifest["invocations"][0]["tasks"]:
            task.pop("tensors")

    _rewrite(legacy["l1_manifest"], edit)
    out = tmp_path / "zarr"
    convert_legacy(legacy["root"], out)
    task = legacy["l1"][0].tasks[0]
    group = out / "rank_0" / "window_0000" / "invocation_000000_forward" / "stages" / "expert_up" / "task_000000"
    ds = open_group_ds(group)
    assert_bits(ds["input_00_x"].values, task.records[0].tensor)
    assert ds.attrs["taskId"] == 0


def test_task_json_outside_the_window_is_refused(tmp_path: Path, legacy: dict[str, Any]) -> None:
    def edit(manifest: dict[str, Any]) -> None:
        task = manifest["invocations"][0]["tasks"][0]
        task.pop("tensors")
        task["metadataFile"] = "../../../../etc/passwd"

    _rewrite(legacy["l1_manifest"], edit)
    with pytest.raises(ValueError, match="refusing legacy tensor file '../../../../etc/passwd'"):
        convert_legacy(legacy["root"], tmp_path / "zarr")


def test_round_trip_values_every_dtype(tmp_path: Path) -> None:
    """Every dtype the store holds survives torch.save → convert bit-exactly (NaN payloads, -0.0, inf)."""
    from tests.interop._legacy_format import Invocation, L0Tensor

    special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 1e-3, -2.5, 448.0])
    tensors = [
        L0Tensor(
            f"t_{name}",
            i,
            "external_input",
            special.to(dt) if dt.is_floating_point else torch.arange(-3, 5).to(dt),
            [("s", "input", i)],
        )
        for i, (name, dt) in enumerate(
            [
                ("f32", torch.float32),
                ("f64", torch.float64),
                ("f16", torch.float16),
                ("bf16", torch.bfloat16),
                ("e4m3", torch.float8_e4m3fn),
                ("e5m2", torch.float8_e5m2),
                ("i8", torch.int8),
                ("i16", torch.int16),
                ("i32", torch.int32),
                ("i64", torch.int64),
                ("u8", torch.uint8),
                ("bool", torch.bool),
            ]
        )
    ]
    write_rank_window(tmp_path / "legacy", "L0", 0, 0, [Invocation(0, 0, "forward", "k", "L0", tensors=tensors)])
    convert_legacy(tmp_path / "legacy", tmp_path / "zarr")
    group = tmp_path / "zarr" / "rank_0" / "window_0000" / "invocation_000000_forward"
    for tensor in tensors:
        assert_bits(zarr.open_array(str(group / tensor.name), mode="r")[...], tensor.tensor)


def test_window_directory_linked_from_outside_is_refused(tmp_path: Path, legacy: dict[str, Any]) -> None:
    elsewhere = tmp_path / "elsewhere" / "window_0000"
    elsewhere.parent.mkdir()
    legacy["l1_manifest"].parent.rename(elsewhere)
    (legacy["root"] / "rank_0" / "window_0000").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(ValueError, match="refusing legacy window .*outside"):
        convert_legacy(legacy["root"], tmp_path / "zarr")
