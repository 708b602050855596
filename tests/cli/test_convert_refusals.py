"""``megadump convert`` refuses, before writing anything, indices readers cannot represent and a
destination window that a planted link leads out of the root."""

from __future__ import annotations

import json
import os

import torch

from tests.cli._helpers import assert_input_error


def _legacy(root, rank=0, window=0):
    from tests.interop._legacy_format import demo_tensors, l0_invocations, write_rank_window

    return write_rank_window(root, "L0", rank, window, l0_invocations(demo_tensors(torch.float32)))


def test_convert_refuses_a_window_index_readers_cannot_represent(cli, tmp_path):
    manifest = _legacy(tmp_path / "legacy", window=10**6)
    out = tmp_path / "zarr"
    assert_input_error(
        cli("convert", tmp_path / "legacy", out),
        "conversion refused",
        f"legacy manifest {manifest} 'windowIndex' must be in [0, 1000000) so that readers can represent it",
    )
    assert not (out / "rank_0").exists()


def test_convert_refuses_an_invocation_id_beyond_int64(cli, tmp_path):
    manifest = _legacy(tmp_path / "legacy")
    document = json.loads(manifest.read_text())
    document["invocations"][0]["invocationId"] = 2**70
    manifest.write_text(json.dumps(document))
    out = tmp_path / "zarr"
    assert_input_error(cli("convert", tmp_path / "legacy", out), "'invocationId' must be in [0, 9223372036854775808)")
    assert not (out / "rank_0").exists()


def test_convert_refuses_a_planted_rank_link(cli, tmp_path):
    _legacy(tmp_path / "legacy")
    out, elsewhere = tmp_path / "zarr", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    os.symlink(elsewhere, out / "rank_0")
    assert_input_error(cli("convert", tmp_path / "legacy", out), f"{out}/rank_0 is a link to {elsewhere}")
    assert list(elsewhere.iterdir()) == []


# ---------------------------------------------------------------------------------------------------- issue 23.2
def _msprobe(root, *, task="tensor", rank_dir="rank0", step_dir="step0", leaf=None, npy=None):
    """A hand-made msprobe dump: one call with one input tensor (``x.npy`` for the tensor task)."""
    directory = root / step_dir / rank_dir
    directory.mkdir(parents=True)
    leaf = {
        "type": "torch.Tensor",
        "dtype": "torch.float32",
        "shape": [3, 8],
        "Max": 1.0,
        "Min": 0.0,
        "Mean": 0.5,
        "Norm": 2.0,
        **(leaf or {}),
    }
    if task == "tensor":
        (directory / "dump_tensor_data").mkdir()
        leaf.setdefault("data_name", "x.npy")
        import numpy as np

        path = directory / "dump_tensor_data" / leaf["data_name"]
        if npy is None:
            np.save(path, np.zeros((3, 8), np.float32))
        else:
            path.write_bytes(npy)
    document = {
        "task": task,
        "level": "L1",
        "framework": "pytorch",
        "data": {"Functional.linear.0.forward": {"input_args": [leaf]}},
    }
    (directory / "dump.json").write_text(json.dumps(document))
    return directory / "dump.json"


def _refused(cli, source, out, *fragments):
    assert_input_error(cli("convert", source, out), "conversion refused", *fragments)
    assert not out.exists(), sorted(str(p) for p in out.rglob("*"))  # a refused input leaves no output


def test_convert_refuses_a_rank_directory_beyond_what_readers_represent(cli, tmp_path):
    _msprobe(tmp_path / "m", rank_dir="rank99999999999999999999")
    _refused(
        cli,
        tmp_path / "m",
        tmp_path / "zarr",
        "rank99999999999999999999 'rank' (its name) must be in "
        "[0, 1000000) so that readers can represent it, got 99999999999999999999",
    )


def test_convert_refuses_a_step_directory_beyond_int64(cli, tmp_path):
    _msprobe(tmp_path / "m", step_dir="step99999999999999999999")
    _refused(
        cli,
        tmp_path / "m",
        tmp_path / "zarr",
        "step99999999999999999999 'step' (its name) must be in [0, 9223372036854775808)",
    )


def test_convert_refuses_a_statistics_shape_int64_cannot_count(cli, tmp_path):
    source = _msprobe(tmp_path / "m", task="statistics", leaf={"shape": [2**62 - 1]})
    _refused(
        cli,
        tmp_path / "m",
        tmp_path / "zarr",
        f"msprobe {source.resolve()} at data.Functional.linear.0.forward"
        f".input_args[0].shape: shape [{2**62 - 1}] has {2**62 - 1} elements",
        "more than int64 can count",
    )


def test_convert_refuses_a_npy_header_declaring_more_than_the_file_holds(cli, tmp_path):
    import numpy as np

    header = {"descr": "<f4", "fortran_order": False, "shape": (2**35,)}
    with open(tmp_path / "big.npy", "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, header)
        handle.write(b"\0" * 64)
    payload = (tmp_path / "big.npy").read_bytes()
    assert len(payload) < 300
    _msprobe(tmp_path / "m", npy=payload)
    _refused(
        cli,
        tmp_path / "m",
        tmp_path / "zarr",
        "x.npy: its .npy header declares shape [34359738368] of "
        "float32 (137438953472 bytes) but the file holds only 64 bytes of data",
    )


def test_convert_refuses_a_declared_shape_bigger_than_its_file(cli, tmp_path):
    source = _msprobe(tmp_path / "m", leaf={"shape": [3000, 8]})
    _refused(
        cli,
        tmp_path / "m",
        tmp_path / "zarr",
        f"msprobe {source.resolve()} at data.Functional.linear.0."
        "forward.input_args[0].shape: shape [3000, 8] needs 96000 bytes but",
        "x.npy holds only 224 bytes",
    )


def test_convert_refuses_an_unsupported_dtype_naming_file_and_dtype(cli, tmp_path):
    source = _msprobe(tmp_path / "m", task="statistics", leaf={"dtype": "torch.complex64"})
    _refused(
        cli,
        tmp_path / "m",
        tmp_path / "zarr",
        f"msprobe {source.resolve()} at data.Functional.linear.0."
        "forward.input_args[0].dtype: unsupported dtype 'complex64'",
    )


def test_convert_refuses_an_unsupported_legacy_dtype(cli, tmp_path):
    manifest = _legacy(tmp_path / "legacy")
    document = json.loads(manifest.read_text())
    document["invocations"][0]["tensors"][0]["storedDtype"] = "complex64"
    manifest.write_text(json.dumps(document))
    _refused(
        cli,
        tmp_path / "legacy",
        tmp_path / "zarr",
        f"{manifest}",
        "invocations[0].tensors[0]",
        "storedDtype: unsupported dtype 'complex64'",
    )


def test_convert_refuses_a_legacy_rank_directory_beyond_what_readers_represent(cli, tmp_path):
    manifest = _legacy(tmp_path / "legacy", rank=10**6)
    _refused(cli, tmp_path / "legacy", tmp_path / "zarr", f"legacy manifest {manifest} 'rank' must be in [0, 1000000)")


def test_a_refused_legacy_pickle_leaves_no_output_beside_existing_windows(cli, tmp_path):
    import pickle

    _legacy(tmp_path / "first")
    out = tmp_path / "zarr"
    assert cli("convert", tmp_path / "first", out).code == 0
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    manifest = _legacy(tmp_path / "legacy", rank=1)
    document = json.loads(manifest.read_text())
    target = manifest.parent / document["invocations"][-1]["tensors"][0]["file"]
    target.write_bytes(pickle.dumps(os.system))  # the last tensor: the window was written up to it
    assert_input_error(cli("convert", tmp_path / "legacy", out), "conversion refused", str(target.resolve()))
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    assert cli("info", out).code == 0
