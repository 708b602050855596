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
    assert_input_error(cli("convert", tmp_path / "legacy", out), "conversion refused",
                       f"legacy manifest {manifest} 'windowIndex' must be in [0, 1000000) so that readers can represent it")
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
