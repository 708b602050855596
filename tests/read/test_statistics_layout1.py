"""A statistics table of layout 1 (a ``checksum`` column: a weighted word sum, which two swapped elements can
keep) still reads, with no digest: nothing is proven equal by it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from megadump_zarr import TensorDumpConfig, compare, open_dump, tensor_dump
from tests.dump._dump_helpers import MegaKernel, copy_rows_graph


def dump(out: Path) -> None:
    kernel = MegaKernel(copy_rows_graph(8, 4, 4), name="copy")
    with tensor_dump(TensorDumpConfig(out, level="L0", mode="statistics")) as dumper:
        kernel.launch([torch.arange(32.0).reshape(8, 4), torch.zeros(8, 4)])
        dumper.step()


def as_layout_1(root: Path) -> None:
    """Rewrite a dump's statistics tables as layout 1 wrote them: ``checksum`` for ``digest``, in every copy
    of every document (the array's own, the consolidated metadata of the groups above it)."""

    def rename(node: Any) -> Any:
        if isinstance(node, dict):
            attrs = node.get("attributes")
            if isinstance(attrs, dict) and attrs.get("statisticsLayout") == 2:
                attrs["statisticsLayout"] = 1
                attrs.pop("digestAlgorithm", None)
                attrs["variables"] = ["checksum" if v == "digest" else v for v in attrs.get("variables", [])]
            return {_renamed(key): rename(value) for key, value in node.items()}
        if isinstance(node, list):
            return [rename(v) for v in node]
        return node

    for directory in sorted(root.rglob("statistics/digest"), reverse=True):
        directory.rename(directory.with_name("checksum"))
    for document in root.rglob("zarr.json"):
        document.write_text(json.dumps(rename(json.loads(document.read_text()))))


def _renamed(key: str) -> str:
    return key[: -len("digest")] + "checksum" if key.endswith("statistics/digest") or key == "digest" else key


def test_a_layout_1_table_reads_without_digests(tmp_path):
    dump(tmp_path / "a")
    before = open_dump(tmp_path / "a").records()
    assert before["digest"].notna().all()
    as_layout_1(tmp_path / "a")
    after = open_dump(tmp_path / "a").records()
    assert len(after) == len(before) and after["digest"].isna().all()
    assert list(after["max"]) == list(before["max"])
    bitwise = compare(tmp_path / "a", tmp_path / "a", bitwise=True)
    assert set(bitwise["verdict"]) == {"error"}
    assert set(bitwise["note"]) == {
        "bitwise: statistics only in a and b; no digest in a and b: the bits cannot be proven equal"
    }
    plain = compare(tmp_path / "a", tmp_path / "a")
    assert set(plain["note"]) == {"summary: statistics only in a and b; statistics within tolerance"}


def test_a_table_of_an_unknown_layout_is_refused_naming_it(tmp_path):
    dump(tmp_path / "a")
    for document in (tmp_path / "a").rglob("zarr.json"):
        document.write_text(re.sub(r'"statisticsLayout":\s*2', '"statisticsLayout": 3', document.read_text()))
    with pytest.raises(
        ValueError,
        match=r"statistics table rank_0/window_0000/invocation_\w+/statistics has "
        r"statisticsLayout 3; this reader reads 1, 2",
    ):
        open_dump(tmp_path / "a").records()
