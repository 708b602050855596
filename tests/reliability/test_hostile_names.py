"""Hostile stage, tensor, kernel and dimension names: nothing escapes the root, nothing collides or is
overwritten, original names survive in attributes, and the name → path mapping is deterministic."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
import warnings

import numpy as np
import pytest
import torch
import xarray as xr

from tests.reliability._helpers import assert_confined, tree_snapshot  # noqa: I001

from megadump_zarr import TensorDumpConfig, tensor_dump
from megadump_zarr.layout.names import safe_name
from megadump_zarr.read import open_dump
from megadump_zarr.runtime import Graph, MegaKernel, OperatorNode, SplitSpec, TensorSpec

ROWS, COLS, TILE = 6, 3, 3
HOSTILE = [
    "../escape",
    "../../../../../../tmp/pwned",
    "a/b",
    "a_b",
    "a:b",
    "a\\b",
    "nul\x00byte",
    "L" * 1000,
    "ünï/cødé 段",
    "..",
    ".",
    "zarr.json",
    "ZARR.JSON",
    ".zattrs",
    "__init",
    "~t",
    "/abs",
    "C:\\win",
    "\n\t ",
    "plain",
    "a_b~x",
]
"""Stage names (operators 0..n-2) and tensor names (tensors 0..n-1), in program order."""
HOSTILE_DIMS = [
    ("../row", "c/o\\l"),
    ("..", "."),
    ("zarr.json", "\x00"),
    ("row", "col"),
    ("ü", "段"),
    ("r" * 500, "col"),
]
KERNEL = "kern/../\x00ël\\..\\x"


def hostile_graph() -> Graph:
    """A chain: stage i reads tensor i and writes tensor i+1 = tensor i + (i + 1), split on rows."""
    specs = [
        TensorSpec(name, (ROWS, COLS), torch.float32, i, HOSTILE_DIMS[i % len(HOSTILE_DIMS)])
        for i, name in enumerate(HOSTILE)
    ]
    operators = []
    for i in range(len(HOSTILE) - 1):

        def fn(t: Any, i: int = i) -> None:
            t.params[i + 1][t.rows] = t.params[i][t.rows] + (i + 1)

        operators.append(
            OperatorNode(HOSTILE[i], "vector", (specs[i],), (specs[i + 1],), fn, SplitSpec(((0, 0),), (0,)), TILE)
        )
    return Graph(operators)


def expected_tensors() -> list[np.ndarray]:
    values = [np.arange(ROWS * COLS, dtype=np.float32).reshape(ROWS, COLS)]
    for i in range(len(HOSTILE) - 1):
        values.append(values[-1] + (i + 1))
    return values


def dump_hostile(root: Path, level: str) -> None:
    kernel = MegaKernel(hostile_graph(), name=KERNEL, num_workers=4)
    params = [torch.arange(ROWS * COLS, dtype=torch.float32).reshape(ROWS, COLS)]
    params += [torch.zeros(ROWS, COLS) for _ in HOSTILE[1:]]
    extra = {} if level == "L0" else {"stages": tuple(HOSTILE[:-1])}
    with tensor_dump(TensorDumpConfig(root, level=level, chunk_bytes=32, **extra)) as dumper:
        kernel.launch(params)
        dumper.step()


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    """Each level dumped twice into separate roots; ``outside`` lists anything created next to them."""
    base = tmp_path_factory.mktemp("hostile")
    before = tree_snapshot(base)
    roots = {(level, run): base / f"{level}_{run}" for level in ("L0", "L1") for run in (1, 2)}
    for (level, _), root in roots.items():
        dump_hostile(root, level)
    created = set(tree_snapshot(base)) - set(before)
    outside = [p for p in created if not any(p == r.name or p.startswith(r.name + os.sep) for r in roots.values())]
    return {"roots": roots, "outside": outside}


@pytest.mark.parametrize("level", ["L0", "L1"])
def test_nothing_escapes_the_root(dumps, level):
    assert dumps["outside"] == []
    assert not (Path("/tmp") / "pwned").exists()
    root = dumps["roots"][(level, 1)]
    assert assert_confined(root) > len(HOSTILE)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            assert name not in ("..", ".") and len(name.encode()) <= 255
            assert name.isascii(), name


def test_whole_dump_path_watched(tmp_path):
    """The same dumps with the test's own parent directory watched (entries added, changed or removed)."""
    watched = tmp_path.parent
    root = tmp_path / "root"
    before = tree_snapshot(watched, exclude=root)
    for level in ("L0", "L1"):
        dump_hostile(root / level, level)
    assert tree_snapshot(watched, exclude=root) == before
    assert assert_confined(root) > 0


def test_l0_each_name_has_its_own_array_with_its_values(dumps):
    root = dumps["roots"][("L0", 1)]
    dump = open_dump(root)
    records = dump.records()
    assert sorted(records["name"]) == sorted(HOSTILE)  # original names, NUL and 1,000 characters included
    assert records["path"].is_unique
    assert set(records["kernel"]) == {KERNEL}
    expected = dict(zip(HOSTILE, expected_tensors()))
    for row in records.itertuples():
        values = dump.record_array(row.path)
        assert values.attrs["name"] == row.name
        np.testing.assert_array_equal(values.values, expected[row.name])
    components = [p.rsplit("/", 1)[1] for p in records["path"]]
    assert all(c == safe_name(n) for c, n in zip(components, records["name"]))


def test_l1_each_stage_and_record_is_its_own_with_its_values(dumps):
    root = dumps["roots"][("L1", 1)]
    dump = open_dump(root)
    records = dump.records()
    assert records["path"].is_unique
    assert set(records["stage"]) == set(HOSTILE[:-1])  # one stage per operator, original names
    assert set(records["kernel"]) == {KERNEL}
    values = expected_tensors()
    tasks = ROWS // TILE
    for stage_index, stage in enumerate(HOSTILE[:-1]):
        mine = records[records["stage"] == stage]
        assert len(mine) == 2 * tasks, stage  # one input and one output record per row tile
        assert len({p.split("/")[4] for p in mine["path"]}) == 1  # one stage group
        for row in mine.itertuples():
            name = HOSTILE[stage_index] if row.io == "input" else HOSTILE[stage_index + 1]
            assert row.name == name
            array = dump.record_array(row.path)
            assert array.attrs["name"] == name
            first = array.attrs["sourceOffsetBytes"] // (COLS * 4)
            expected = values[stage_index if row.io == "input" else stage_index + 1][first : first + TILE]
            np.testing.assert_array_equal(array.values, expected)


@pytest.mark.parametrize("level", ["L0", "L1"])
def test_mapping_is_deterministic(dumps, level):
    first, second = (dumps["roots"][(level, run)] for run in (1, 2))
    paths = [sorted(open_dump(root).records()["path"]) for root in (first, second)]
    assert paths[0] == paths[1]
    files = [
        sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if ".plans" not in p.parts)
        for root in (first, second)
    ]
    assert files[0] == files[1]


@pytest.mark.parametrize("level", ["L0", "L1"])
def test_every_data_group_opens_with_plain_xarray(dumps, level):
    root = dumps["roots"][(level, 1)]
    records = open_dump(root).records()
    for group in sorted(set(records["group"])):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ds = xr.open_zarr(str(root / group)).load()
        for name, variable in ds.variables.items():
            for dim in variable.dims:
                assert "/" not in dim and "\\" not in dim and "\x00" not in dim and dim not in (".", "..")
        names = {v.attrs["name"] for v in ds.variables.values() if "name" in v.attrs}
        assert names <= set(HOSTILE)


def test_dimension_named_like_a_record_array(tmp_path):
    a = TensorSpec("x", (ROWS, COLS), torch.float32, 0, ("input_00_x", "col"))
    b = TensorSpec("y", (ROWS, COLS), torch.float32, 1, ("row", "col"))

    def fn(t: Any) -> None:
        t.params[1][t.rows] = t.params[0][t.rows] + 1

    kernel = MegaKernel(
        Graph([OperatorNode("s", "vector", (a,), (b,), fn, SplitSpec(((0, 0),), (0,)), TILE)]), name="k", num_workers=4
    )
    params = [torch.arange(ROWS * COLS, dtype=torch.float32).reshape(ROWS, COLS), torch.zeros(ROWS, COLS)]
    with tensor_dump(TensorDumpConfig(tmp_path / "dump", level="L1", stages="s")) as dumper:
        kernel.launch(params)
        dumper.step()
    records = open_dump(tmp_path / "dump").records()
    assert sorted(records["name"]) == ["x", "x", "y", "y"]


def test_names_differing_only_in_case_get_case_insensitively_distinct_paths(tmp_path):
    specs = [
        TensorSpec(name, (ROWS, COLS), torch.float32, i, ("row", "col")) for i, name in enumerate(("x", "Ab", "ab"))
    ]

    def fn(t: Any) -> None:
        t.params[1][t.rows] = t.params[0][t.rows] + 1
        t.params[2][t.rows] = t.params[0][t.rows] + 2

    kernel = MegaKernel(
        Graph([OperatorNode("s", "vector", specs[:1], specs[1:], fn, SplitSpec(((0, 0),), (0, 0)), TILE)]),
        name="k",
        num_workers=4,
    )
    params = [
        torch.arange(ROWS * COLS, dtype=torch.float32).reshape(ROWS, COLS),
        torch.zeros(ROWS, COLS),
        torch.zeros(ROWS, COLS),
    ]
    with tensor_dump(TensorDumpConfig(tmp_path / "dump", level="L0")) as dumper:
        kernel.launch(params)
        dumper.step()
    paths = list(open_dump(tmp_path / "dump").records()["path"])
    assert len({p.casefold() for p in paths}) == len(paths) == 3
