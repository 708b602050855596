"""No code runs on read: reading a dump never unpickles (not even a hostile dump that asks for a pickle
codec), and ``convert_legacy`` refuses a planted malicious pickle without running it."""

from __future__ import annotations

import _pickle
from collections.abc import Iterator
from contextlib import contextmanager
import json
import os
from pathlib import Path
import pickle
import shutil
from typing import Any
import warnings

import numpy as np
import pandas as pd
import pytest
import torch
import xarray as xr

from tests.reliability._helpers import train_step  # noqa: I001

from megadump_zarr import TensorDumpConfig, schedule, tensor_dump
from megadump_zarr.cli.main import main as cli_main
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from megadump_zarr.interop import convert_legacy
from megadump_zarr.read import open_dump
from megadump_zarr.store.writer import window_status
from tests.interop._legacy_format import demo_tensors, l0_invocations, l1_invocations, write_rank_window


class Evil:
    """Unpickling this creates ``marker`` (arbitrary code execution)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


@contextmanager
def no_unpickling(monkeypatch: pytest.MonkeyPatch, *, torch_load: bool = True) -> Iterator[list[str]]:
    """Every unpickling entry point (stdlib, C accelerator, torch, numpy, pandas) refuses, and logs, any bytes
    that this process did not just produce itself with ``pickle.dumps``/``cloudpickle.dumps``.

    (dask's tokenizer round-trips in-memory objects through ``dumps``/``loads`` to hash them; those bytes never
    come from a file. Everything else — and in particular any byte read from a dump — is refused.)
    """
    calls: list[str] = []
    produced: set[bytes] = set()

    def recording(dumps: Any) -> Any:
        def recorded(*args: Any, **kwargs: Any) -> Any:
            out = dumps(*args, **kwargs)
            produced.add(bytes(out))
            return out

        return recorded

    def guarded(name: str, loads: Any) -> Any:
        def refused(data: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(data, (bytes, bytearray, memoryview)) and bytes(data) in produced:
                return loads(data, *args, **kwargs)
            calls.append(name)
            raise AssertionError(f"{name} was called on bytes this process did not pickle, while reading a dump")

        return refused

    def refuse(name: str) -> Any:
        def refused(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            raise AssertionError(f"{name} was called while reading a dump")

        return refused

    class RefusingUnpickler(pickle.Unpickler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            calls.append("Unpickler")
            raise AssertionError("pickle.Unpickler was instantiated while reading a dump")

    import cloudpickle

    with monkeypatch.context() as patch:
        for module in (pickle, _pickle):
            patch.setattr(module, "dumps", recording(module.dumps))
            patch.setattr(module, "loads", guarded(f"{module.__name__}.loads", module.loads))
            patch.setattr(module, "load", refuse(f"{module.__name__}.load"))
        patch.setattr(pickle, "_loads", refuse("pickle._loads"))
        patch.setattr(pickle, "_load", refuse("pickle._load"))
        patch.setattr(cloudpickle, "dumps", recording(cloudpickle.dumps))
        patch.setattr(cloudpickle, "loads", guarded("cloudpickle.loads", cloudpickle.loads))
        patch.setattr(pickle, "Unpickler", RefusingUnpickler)
        patch.setattr(pickle, "_Unpickler", RefusingUnpickler)
        patch.setattr(_pickle, "Unpickler", RefusingUnpickler)
        patch.setattr(np, "load", refuse("numpy.load"))
        patch.setattr(pd, "read_pickle", refuse("pandas.read_pickle"))
        if torch_load:
            patch.setattr(torch, "load", refuse("torch.load"))
            patch.setattr(torch.serialization, "load", refuse("torch.serialization.load"))
        yield calls


@pytest.fixture(scope="module")
def dump_root(tmp_path_factory) -> Path:
    """L0 and L1 windows of the demo block (L1 with truncated records), one per level root."""
    base = tmp_path_factory.mktemp("readable")
    block = MoEBlock(DemoConfig(tokens=16, d_model=8))
    with tensor_dump(TensorDumpConfig(base / "l0", level="L0"), schedule(wait=0, warmup=0, active=1)) as dumper:
        train_step(block)
        dumper.step()
    config = TensorDumpConfig(
        base / "l1",
        level="L1",
        kernel_names=("moe_experts", "moe_experts_backward"),
        stages=("expert_up", "unpermute", "expert_up_bwd"),
        max_bytes_per_tensor=192,
    )
    with tensor_dump(config, schedule(wait=0, warmup=0, active=1)) as dumper:
        train_step(block)
        dumper.step()
    return base


def _read_everything(root: Path) -> int:
    """Every read path a user has: catalogue, records, xarray views, tensors, CLI. Returns values read."""
    dump = open_dump(root)
    repr(dump)
    dump.windows()
    records = dump.records()
    dump.records(include_incomplete=True)
    count = 0
    for path in records["path"]:
        count += np.asarray(dump.record_array(path).values).size
    for group in sorted(set(records["group"])):  # a stored group, or a packed task group through the dump's view
        stored = (root / group / "zarr.json").is_file()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            opened = xr.open_zarr(str(root / group)) if stored else xr.open_zarr(dump.store, group=group)
            count += len(opened.load().variables)
    packs = sorted(root.glob("rank_*/window_*/*/stages/*/pack_*"))  # layout="packs"'s physical data groups
    tasks = sorted(root.glob("rank_*/window_*/*/stages/*/task_*"))  # the default layout's task groups
    assert packs or tasks or records.iloc[0]["level"] == "L0"
    for pack in packs:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            count += len(xr.open_zarr(str(pack)).load().variables)
    dump.tree().load()
    first = records.iloc[0]
    if first["level"] == "L0":
        count += dump.tensor("x", kernel="moe_router").values.size
        count += dump.dataset(invocation=int(first["invocation"])).load().sizes.get("token", 0)
    else:
        count += dump.tensor("ws", stage="expert_up", io="output").values.size
        count += (
            dump.dataset(stage=first["stage"], task=int(first["task_id"]), invocation=int(first["invocation"]))
            .load()
            .sizes.get("slot", 0)
        )
    window = root / records.iloc[0]["path"].split("/invocation")[0]
    xr.open_datatree(str(window), engine="zarr").load()
    for argv in (["info", str(root)], ["ls", str(root)], ["stats", str(root)]):
        assert cli_main(argv) == 0
    return count


def test_the_guard_catches_unpickling(tmp_path, monkeypatch):
    marker = tmp_path / "PWNED"
    from_a_file = pickle.dumps(Evil(marker))
    saved = tmp_path / "t.pt"
    torch.save(torch.zeros(2), saved)

    def unpickler() -> None:
        with open(saved, "rb") as handle:
            pickle.Unpickler(handle)

    with no_unpickling(monkeypatch) as calls:
        for attempt in (
            lambda: pickle.loads(from_a_file),
            lambda: _pickle.loads(from_a_file),
            unpickler,
            lambda: torch.load(saved, weights_only=True),
        ):
            with pytest.raises(AssertionError):
                attempt()
        assert pickle.loads(pickle.dumps([1, 2])) == [1, 2]  # bytes this process just produced are allowed
    assert calls == ["pickle.loads", "_pickle.loads", "Unpickler", "torch.load"]
    assert not marker.exists()


@pytest.mark.parametrize("level", ["l0", "l1"])
def test_reading_never_unpickles(dump_root, monkeypatch, capsys, level):
    with no_unpickling(monkeypatch) as calls:
        assert _read_everything(dump_root / level) > 0
    assert calls == []
    capsys.readouterr()


def _plant_pickle_codec_arrays(root: Path, marker: Path) -> list[str]:
    """Add two arrays to a committed window — one asks for ``numcodecs.pickle`` (v3), one for a ``pickle``
    compressor (v2 metadata) — each with a malicious pickle in every chunk key a reader might ask for."""
    window = root / "rank_0" / "window_0000"
    doc = json.loads((window / "zarr.json").read_text())
    nodes = doc["consolidated_metadata"]["metadata"]
    invocation = next(k for k, v in nodes.items() if v.get("node_type") == "group" and "/" not in k)
    template = next(
        v
        for k, v in nodes.items()
        if k.startswith(invocation + "/") and v.get("node_type") == "array" and "name" in v.get("attributes", {})
    )
    v3 = json.loads(json.dumps(template))
    v3["codecs"] = [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "numcodecs.pickle"}]
    v3["attributes"]["name"] = "evil_v3"
    v2 = {
        "zarr_format": 2,
        "node_type": "array",
        "shape": template["shape"],
        "chunks": template["shape"],
        "dtype": "<f4",
        "compressor": {"id": "pickle"},
        "filters": None,
        "fill_value": 0.0,
        "order": "C",
        "dimension_separator": "/",
        "attributes": {**template["attributes"], "name": "evil_v2"},
    }
    payload = pickle.dumps(Evil(marker))
    group_doc_path = window / invocation / "zarr.json"
    group_doc = json.loads(group_doc_path.read_text())
    for name, array_doc in (("evil_v3", v3), ("evil_v2", v2)):
        nodes[f"{invocation}/{name}"] = array_doc
        group_doc["consolidated_metadata"]["metadata"][name] = array_doc
        directory = window / invocation / name
        directory.mkdir()
        (directory / "zarr.json").write_text(json.dumps(array_doc))
        (directory / ".zarray").write_text(
            json.dumps({k: v for k, v in array_doc.items() if k not in ("node_type", "attributes")})
        )
        zeros = "/".join("0" * len(template["shape"]))
        for chunk in (f"c/{zeros}", zeros, ".".join("0" * len(template["shape"]))):
            (directory / chunk).parent.mkdir(parents=True, exist_ok=True)
            (directory / chunk).write_bytes(payload)
    (window / "zarr.json").write_text(json.dumps(doc))
    group_doc_path.write_text(json.dumps(group_doc))
    return [f"rank_0/window_0000/{invocation}/evil_v3", f"rank_0/window_0000/{invocation}/evil_v2"]


def test_hostile_dump_asking_for_a_pickle_codec_is_refused(dump_root, tmp_path, monkeypatch):
    root = tmp_path / "hostile"
    shutil.copytree(dump_root / "l0", root)
    marker = tmp_path / "PWNED"
    paths = _plant_pickle_codec_arrays(root, marker)
    with no_unpickling(monkeypatch) as calls:
        dump = open_dump(root)
        records = dump.records()  # metadata only: the planted arrays are listed like any other
        assert set(paths) <= set(records["path"])
        for path in paths:
            with pytest.raises(ValueError) as info:  # zarr refuses the codec before reading a chunk
                dump.record_array(path).values
            assert "pickle" in str(info.value)
        group = root / paths[0].rsplit("/", 1)[0]
        with pytest.raises(ValueError):
            xr.open_zarr(str(group)).load()
    assert calls == []
    assert not marker.exists()


# --------------------------------------------------------------------------- convert_legacy
@pytest.fixture
def legacy(tmp_path) -> dict[str, Any]:
    tensors = demo_tensors(torch.float32)
    root = tmp_path / "legacy"
    manifest = write_rank_window(root, "L1", 0, 0, l1_invocations(tensors))
    write_rank_window(root, "L0", 1, 2, l0_invocations(tensors))
    return {"root": root, "manifest": manifest, "tensors": tensors}


def _first_tensor_file(legacy: dict[str, Any]) -> Path:
    manifest = json.loads(legacy["manifest"].read_text())
    meta = manifest["invocations"][0]["tasks"][0]["tensors"][0]
    return legacy["manifest"].parent / meta["file"]


def _plant(target: Path, how: str, marker: Path, legacy: dict[str, Any]) -> None:
    if how == "torch.save":
        torch.save(Evil(marker), target)
    elif how == "pickle-protocol-2":
        target.write_bytes(pickle.dumps(Evil(marker), protocol=2))
    elif how == "pickle-protocol-0":
        target.write_bytes(pickle.dumps(Evil(marker), protocol=0))
    elif how == "nested-in-dict":
        torch.save({"tensor": legacy["tensors"]["x"][:10], "extra": Evil(marker)}, target)
    elif how == "legacy-torch-format":
        torch.save(Evil(marker), target, _use_new_zipfile_serialization=False)


@pytest.mark.parametrize(
    "how", ["torch.save", "pickle-protocol-2", "pickle-protocol-0", "nested-in-dict", "legacy-torch-format"]
)
def test_convert_legacy_refuses_a_malicious_pickle(tmp_path, legacy, how):
    target = _first_tensor_file(legacy)
    marker = tmp_path / "PWNED"
    _plant(target, how, marker, legacy)
    out = tmp_path / "zarr"
    with pytest.raises(ValueError) as info:
        convert_legacy(legacy["root"], out)
    assert str(target.resolve()) in str(info.value)
    assert not marker.exists()
    assert window_status(out, 0, 0) != "complete"


def test_convert_legacy_uses_only_the_restricted_unpickler(tmp_path, legacy, monkeypatch):
    """A valid legacy dump converts with the stdlib unpickler disabled: only torch's weights_only loader runs."""
    with no_unpickling(monkeypatch, torch_load=False) as calls:
        urls = convert_legacy(legacy["root"], tmp_path / "zarr")
    assert calls == [] and len(urls) == 2
    assert [window_status(tmp_path / "zarr", r, w) for r, w in ((0, 0), (1, 2))] == ["complete", "complete"]
