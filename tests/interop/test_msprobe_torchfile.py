"""``read_pt``: a torch.save file read without torch, the same bytes as ``torch.load``, hostile pickles refused."""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from megadump_zarr.read.msprobe.torchfile import read_pt

MARKER = Path("/tmp/megadump-torchfile-pwned")


@pytest.mark.parametrize(
    ("name", "tensor"),
    [
        ("float32", torch.arange(24, dtype=torch.float32).reshape(4, 6)),
        ("strided", torch.arange(24, dtype=torch.float32).reshape(4, 6)[:, 1:4]),
        ("offset", torch.arange(10, dtype=torch.int64)[3:7]),
        ("bfloat16", torch.linspace(-2, 2, 15).reshape(3, 5).to(torch.bfloat16)),
        ("parameter", torch.nn.Parameter(torch.full((2, 2), 1.5))),
        ("scalar", torch.tensor(3.5, dtype=torch.float64)),
        ("empty", torch.zeros(0, 3)),
        ("bool", torch.tensor([True, False, True])),
    ],
)
def test_same_values_dtype_and_shape_as_torch_load(tmp_path, name, tensor):
    path = tmp_path / f"{name}.pt"
    torch.save(tensor, path)
    array, dtype = read_pt(path)
    expected = torch.load(path, weights_only=True).detach()
    assert dtype == str(expected.dtype).removeprefix("torch.") and array.shape == tuple(expected.shape)
    flat = expected.contiguous().reshape(-1)
    assert np.asarray(array).tobytes() == (flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    assert not array.flags.writeable or array.size == 0


class _Evil:
    def __reduce__(self):
        return (os.system, (f"touch {MARKER}",))


def _archive_with(path: Path, payload: bytes) -> None:
    torch.save(torch.ones(2), path)
    with zipfile.ZipFile(path) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for name, data in members.items():
            archive.writestr(name, payload if name.endswith("/data.pkl") else data)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (pickle.dumps(_Evil(), protocol=2), "it names the global posix.system"),
        (pickle.dumps({"a": 1}, protocol=2), "it holds a dict, not a single tensor"),
        (b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\nq\x00.", "it holds a function"),
    ],
)
def test_hostile_archives_are_refused_without_running_code(tmp_path, payload, message):
    MARKER.unlink(missing_ok=True)
    path = tmp_path / "x.pt"
    _archive_with(path, payload)
    with pytest.raises(ValueError, match="refusing msprobe tensor file") as caught:
        read_pt(path)
    assert message in str(caught.value) and not MARKER.exists()


def test_a_storage_shorter_than_the_pickle_says_is_refused(tmp_path):
    path = tmp_path / "x.pt"
    torch.save(torch.ones(4), path)
    with zipfile.ZipFile(path) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for name, data in members.items():
            archive.writestr(name, data[:8] if "/data/" in name else data)
    with pytest.raises(ValueError, match="its storage holds 8 bytes, its pickle says 4 float32 elements"):
        read_pt(path)


def test_a_rewritten_file_is_parsed_again(tmp_path):
    path = tmp_path / "t.pt"
    torch.save(torch.arange(6, dtype=torch.float32), path)
    first, _ = read_pt(path)
    assert np.asarray(first).tolist() == [0, 1, 2, 3, 4, 5]
    again, _ = read_pt(path)  # the parse is reused: same answer
    assert np.asarray(again).tolist() == [0, 1, 2, 3, 4, 5]
    replacement = tmp_path / "u.pt"
    torch.save(torch.arange(10, dtype=torch.int64).reshape(2, 5), replacement)
    os.replace(replacement, path)  # a new file under the same name: parsed again, never the old layout
    array, dtype = read_pt(path)
    assert dtype == "int64" and array.shape == (2, 5) and np.asarray(array).tolist()[1] == [5, 6, 7, 8, 9]
