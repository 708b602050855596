"""The fixture checks can fail: an ulp passes, a real difference, an integer off by one or a changed byte fails."""

from __future__ import annotations

from pathlib import Path
import shutil

import numpy as np
import pytest

from tests.read._fixture_checks import assert_stored_bytes_unchanged, assert_values_close, write_sums


def test_an_ulp_of_float32_passes_a_real_difference_fails():
    a = np.linspace(-3, 3, 148, dtype=np.float32)
    assert_values_close(a, np.nextafter(a, np.float32(np.inf)), "logits")
    with pytest.raises(AssertionError, match="logits"):
        assert_values_close(a, a + np.float32(1e-4), "logits")
    with pytest.raises(AssertionError):
        assert_values_close(a, a.astype(np.float64), "logits")  # dtype differs


def test_integers_are_exact():
    ids = np.arange(10, dtype=np.int64)
    assert_values_close(ids, ids.copy(), "ids")
    with pytest.raises(AssertionError, match="ids"):
        assert_values_close(ids, ids + np.eye(1, 10, 3, dtype=np.int64)[0], "ids")


def test_a_changed_missing_or_extra_stored_file_fails(tmp_path):
    root = Path(shutil.copytree(Path(__file__).parent / "data" / "format10", tmp_path / "f10"))
    levels = ("l0", "tasks", "packs")
    assert assert_stored_bytes_unchanged(root, levels) == len((root / "SHA256SUMS").read_text().splitlines())
    chunk = next(p for p in sorted((root / "tasks").rglob("c*")) if p.is_file() and p.name != "zarr.json")
    raw = bytearray(chunk.read_bytes())
    raw[-1] ^= 1
    chunk.write_bytes(bytes(raw))
    with pytest.raises(AssertionError, match="changed"):
        assert_stored_bytes_unchanged(root, levels)
    chunk.unlink()
    with pytest.raises(AssertionError):
        assert_stored_bytes_unchanged(root, levels)
    write_sums(root, levels)
    (root / "l0" / "extra").write_bytes(b"x")
    with pytest.raises(AssertionError, match="extra"):
        assert_stored_bytes_unchanged(root, levels)
