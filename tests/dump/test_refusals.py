"""What the dumper refuses before it writes: a second session (no directory created), a rank or
window path that a planted link leads out of the root, indices readers cannot represent."""

from __future__ import annotations

import os
import re

import pytest

from megadump_zarr import DiagnosticAction, TensorDumpConfig, tensor_dump
from megadump_zarr.demo.model import DemoConfig, MoEBlock
from megadump_zarr.diagnostics import active_session
from megadump_zarr.layout.limits import check_index, check_inside_root


def _block() -> MoEBlock:
    return MoEBlock(DemoConfig(tokens=16, d_model=8))


def test_a_refused_second_dumper_creates_no_directory(tmp_path):
    with tensor_dump(TensorDumpConfig(tmp_path / "first", kernel_names="moe_router")):
        with pytest.raises(RuntimeError, match="a diagnostic session is already active"):
            with tensor_dump(TensorDumpConfig(tmp_path / "second", kernel_names="moe_router")):
                pass  # pragma: no cover
    assert not (tmp_path / "second").exists()
    assert active_session() is None


def test_a_planted_rank_link_is_refused_and_nothing_is_written_through_it(tmp_path):
    root, elsewhere = tmp_path / "dump", tmp_path / "elsewhere"
    root.mkdir()
    elsewhere.mkdir()
    os.symlink(elsewhere, root / "rank_0")
    block = _block()
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"refusing to write {root}/rank_0/window_0000: {root}/rank_0 is a link to {elsewhere}, outside the dump root"
        ),
    ):
        with tensor_dump(TensorDumpConfig(root, kernel_names="moe_router")):
            block(block.make_input())
    assert list(elsewhere.iterdir()) == []


def test_a_planted_window_link_is_refused_and_later_windows_still_export(tmp_path):
    root, elsewhere = tmp_path / "dump", tmp_path / "elsewhere"
    (root / "rank_0").mkdir(parents=True)
    elsewhere.mkdir()
    os.symlink(elsewhere, root / "rank_0" / "window_0000")
    block = _block()
    errors = []
    with tensor_dump(
        TensorDumpConfig(root, kernel_names="moe_router"), schedule=lambda step: DiagnosticAction.RECORD_AND_SAVE
    ) as dumper:
        for _ in range(2):
            block(block.make_input())
            try:
                dumper.step()
            except ValueError as error:
                errors.append(str(error))
    assert len(errors) == 1 and "rank_0/window_0000 is a link to" in errors[0]
    assert list(elsewhere.iterdir()) == []
    assert (root / "rank_0" / "window_0001" / "zarr.json").is_file()


def test_a_link_inside_the_root_is_allowed(tmp_path):
    root = tmp_path / "dump"
    (root / "ranks" / "r0").mkdir(parents=True)
    os.symlink(root / "ranks" / "r0", root / "rank_0")
    check_inside_root(root, "rank_0/window_0000")  # resolves inside: fine


def test_the_dumper_refuses_a_window_index_readers_cannot_represent(tmp_path):
    block = _block()
    with pytest.raises(
        ValueError,
        match=re.escape("window index must be in [0, 1000000) so that readers can represent it, got 1000000"),
    ):
        with tensor_dump(TensorDumpConfig(tmp_path, kernel_names="moe_router")) as dumper:
            dumper._window_index = 10**6  # noqa: SLF001 - a million windows later
            block(block.make_input())
    assert not (tmp_path / "rank_0").exists()


@pytest.mark.parametrize(
    "value, message",
    [
        (1.5, "must be an integer, got 1.5"),
        (1.0, "must be an integer, got 1.0"),
        (True, "must be an integer, got True"),
        ("3", "must be an integer, got '3'"),
        (-1, "must be in [0, 1000000)"),
        (10**20, "must be in [0, 1000000)"),
    ],
)
def test_check_index_refuses(value, message):
    with pytest.raises(ValueError, match=re.escape(f"window index {message}")):
        check_index(value, "window index")
