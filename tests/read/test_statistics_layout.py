"""A statistics table names its layout; a table of any layout but the one the writer stamps is refused,
naming the table (there is one layout: its ``digest`` column proves equal bits)."""

from __future__ import annotations

from pathlib import Path
import re

import pytest
import torch

from megadump_zarr import TensorDumpConfig, open_dump, tensor_dump
from tests.dump._dump_helpers import MegaKernel, copy_rows_graph


def dump(out: Path) -> None:
    kernel = MegaKernel(copy_rows_graph(8, 4, 4), name="copy")
    with tensor_dump(TensorDumpConfig(out, level="L0", mode="statistics")) as dumper:
        kernel.launch([torch.arange(32.0).reshape(8, 4), torch.zeros(8, 4)])
        dumper.step()


@pytest.mark.parametrize("layout", [1, 3])
def test_a_table_of_another_layout_is_refused_naming_it(tmp_path, layout):
    dump(tmp_path / "a")
    assert open_dump(tmp_path / "a").records()["digest"].notna().all()
    for document in (tmp_path / "a").rglob("zarr.json"):
        document.write_text(re.sub(r'"statisticsLayout":\s*2', f'"statisticsLayout": {layout}', document.read_text()))
    with pytest.raises(
        ValueError,
        match=rf"statistics table rank_0/window_0000/invocation_\w+/statistics has "
        rf"statisticsLayout {layout}; this reader reads 2",
    ):
        open_dump(tmp_path / "a").records()
