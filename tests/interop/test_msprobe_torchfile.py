"""``read_pt``: a torch.save file read without torch, the same bytes as ``torch.load``, hostile pickles refused."""

from __future__ import annotations

import os
import pickle
import zipfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
import numpy as np
import pytest
import torch

from megadump_zarr.read.msprobe.torchfile import check_pt, read_pt

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
    assert np.asarray(array).tobytes() == (
        flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    )  # exact: stored bytes
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


# --------------------------------------------------------------------------- bounded: dense views only
class _StorageRef:
    def __init__(self, numel: int) -> None:
        self.numel = numel


class _View:
    def __init__(self, storage: _StorageRef, offset: int, size: tuple[int, ...], stride: tuple[int, ...]) -> None:
        self.args = (storage, offset, size, stride)

    def __reduce__(self):
        from collections import OrderedDict

        return (torch._utils._rebuild_tensor_v2, (*self.args, False, OrderedDict()))


class _TorchLikePickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, _StorageRef):
            return ("storage", torch.FloatStorage, "0", "cpu", obj.numel)
        return None


def _view_file(path: Path, numel: int, offset: int, size: tuple[int, ...], stride: tuple[int, ...]) -> Path:
    """A torch.save-shaped archive whose pickle declares any view of a float32 storage of ``numel`` elements
    (torch itself refuses to build the out-of-bounds ones)."""
    buffer = __import__("io").BytesIO()
    _TorchLikePickler(buffer, protocol=2).dump(_View(_StorageRef(numel), offset, size, stride))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("archive/data.pkl", buffer.getvalue())
        archive.writestr("archive/byteorder", b"little")
        archive.writestr("archive/data/0", np.arange(numel, dtype=np.float32).tobytes())
        archive.writestr("archive/version", b"3\n")
    return path


def _dense_oracle(numel: int, offset: int, size: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    """Brute force: every element has its own storage element, all inside the storage."""
    if offset > numel:
        return False
    if 0 in size:
        return True
    spots = [offset]
    for n, s in zip(size, stride):
        spots = [spot + i * s for spot in spots for i in range(n)]
    return len(set(spots)) == len(spots) and max(spots) < numel


def test_the_handmade_archive_reads_like_torch(tmp_path):
    path = _view_file(tmp_path / "v.pt", 24, 2, (3, 4), (6, 1))
    expected = torch.load(path, weights_only=True)
    array, dtype = read_pt(path)
    assert dtype == "float32" and np.array_equal(array, expected.numpy())  # exact: stored bytes


@pytest.mark.parametrize(
    ("tensor", "message"),
    [
        (torch.full((1,), 0.5).expand(2**36), "has stride 0 (an expanded tensor"),
        (torch.arange(8.0).expand(4, 8), "has stride 0"),
        (torch.as_strided(torch.arange(16.0), (3, 8), (1, 1)), "its strides overlap"),
        (torch.as_strided(torch.arange(16.0), (4, 4), (2, 1)), "its strides overlap"),
    ],
)
def test_views_their_bytes_cannot_hold_densely_are_refused_at_check(tmp_path, tensor, message):
    path = tmp_path / "x.pt"
    torch.save(tensor, path)
    assert path.stat().st_size < 4096
    for check in (check_pt, read_pt):
        with pytest.raises(ValueError, match="refusing msprobe tensor file") as caught:
            check(path)
        assert str(path) in str(caught.value) and message in str(caught.value)
        assert "cannot hold its tensor" in str(caught.value)


@pytest.mark.parametrize(
    ("numel", "offset", "size", "stride", "message"),
    [
        (4, 9, (0,), (1,), "storage offset 9 lies past the end"),
        (4, 5, (1,), (1,), "storage offset 5 lies past the end"),
        (4, 0, (8,), (1,), "past the end of its storage of 4 elements"),
        (4, 3, (2,), (1,), "past the end of its storage of 4 elements"),
        (1, 0, (2**40, 2**30), (2**30, 1), "past the end of its storage of 1 elements"),
    ],
)
def test_views_past_their_storage_are_refused(tmp_path, numel, offset, size, stride, message):
    path = _view_file(tmp_path / "x.pt", numel, offset, size, stride)
    with pytest.raises(ValueError, match="cannot hold its tensor") as caught:
        check_pt(path)
    assert message in str(caught.value)


_dims = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 9)), min_size=0, max_size=3)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dims=_dims, offset=st.integers(0, 30), numel=st.integers(0, 40))
def test_an_accepted_view_is_dense_and_inside_its_storage(tmp_path, dims, offset, numel):
    size, stride = tuple(n for n, _ in dims), tuple(s for _, s in dims)
    path = _view_file(tmp_path / "h.pt", numel, offset, size, stride)
    try:
        check_pt(path)
    except ValueError as error:
        assert "cannot hold its tensor" in str(error)
        accepted = False
    else:
        accepted = True
    if accepted:  # never a stride-0, overlapping or out-of-bounds view
        assert _dense_oracle(numel, offset, size, stride), (numel, offset, size, stride)
    elif 0 not in size and offset <= numel:
        spots_ok = _dense_oracle(numel, offset, size, stride)
        if spots_ok:  # refused although dense: only interleaved strides no slice of a tensor produces
            inner = sorted((s, n) for n, s in zip(size, stride) if n != 1)
            reach = [sum((n - 1) * s for s, n in inner[:k]) for k in range(len(inner))]
            assert any(s <= r for (s, _), r in zip(inner, reach)), (numel, offset, size, stride)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    data=st.data(),
)
def test_every_slice_or_transpose_of_a_tensor_is_accepted_and_reads_like_torch(tmp_path, shape, data):
    base = torch.arange(int(np.prod(shape)), dtype=torch.float32).reshape(shape)
    index = []
    for n in shape:
        start = data.draw(st.integers(0, n - 1))
        stop = data.draw(st.integers(start + 1, n))
        step = data.draw(st.integers(1, 2))
        index.append(slice(start, stop, step))
    view = base[tuple(index)]
    if data.draw(st.booleans()) and view.dim() > 1:
        view = view.transpose(0, -1)
    path = tmp_path / "s.pt"
    torch.save(view, path)
    array, _ = read_pt(path)
    assert np.array_equal(array, view.numpy())  # exact: stored bytes


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    stored=st.lists(st.integers(0, 6), min_size=1, max_size=3),
    declared=st.lists(st.integers(0, 2**40), min_size=1, max_size=3),
)
def test_a_npy_header_declaring_more_than_its_file_holds_is_refused(tmp_path, stored, declared):
    from megadump_zarr.read.msprobe.limits import check_npy_header

    path = tmp_path / "a.npy"
    np.save(path, np.zeros(stored, np.float32))
    header = np.lib.format.header_data_from_array_1_0(np.zeros(0, np.float32))
    header["shape"] = tuple(declared)
    with open(path, "rb") as handle:
        np.lib.format.read_magic(handle)
        np.lib.format.read_array_header_1_0(handle)
        data = handle.read()
    with open(path, "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, header)
        handle.write(data)
    if int(np.prod(declared, dtype=object)) * 4 > len(data):
        with pytest.raises(ValueError, match="its .npy header declares shape"):
            check_npy_header(path)
    else:
        check_npy_header(path)
