"""Invocation validation: every rejected description raises before anything of it is written."""

from __future__ import annotations

import os
from pathlib import Path
import re

import numpy as np
import pytest
import zarr

from megadump_zarr.layout.write_model import ArrayWrite, GroupWrite, InvocationWrite
from megadump_zarr.store.writer import WindowWriter

INV = "invocation_000001_forward"


@pytest.fixture
def session(tmp_path):
    session = WindowWriter(tmp_path).begin(0, 0, {"level": "L1"})
    yield session
    # whatever failed, nothing of the invocation reached the disk
    assert not Path(session.url, INV).exists()


def _inv(arrays, groups=()):
    return InvocationWrite(INV, {}, list(groups), list(arrays))


def test_dimension_length_clash_in_one_group(session):
    arrays = [
        ArrayWrite("stages/s/task_000001/a", np.zeros((3, 2)), ("token", "hidden")),
        ArrayWrite("stages/s/task_000001/b", np.zeros((4,)), ("token",)),
    ]
    message = f"dimension 'token' has lengths 3 and 4 in group '{INV}/stages/s/task_000001'"
    with pytest.raises(ValueError, match=re.escape(message)):
        session.write_invocation(_inv(arrays))


def test_dimension_lengths_may_differ_between_groups(tmp_path):
    session = WindowWriter(tmp_path).begin(0, 0, {})
    session.write_invocation(
        _inv(
            [
                ArrayWrite("g1/a", np.zeros(3), ("token",)),
                ArrayWrite("g2/a", np.zeros(4), ("token",)),
                ArrayWrite("a", np.zeros(5), ("token",)),
            ]
        )
    )
    session.commit()
    group = zarr.open_group(session.url, mode="r")
    assert group[f"{INV}/g2/a"].shape == (4,)


def test_coordinate_length_must_match_dimension(session):
    arrays = [ArrayWrite("a", np.zeros(3), ("token",), coords={"token": np.arange(4)})]
    with pytest.raises(ValueError, match=re.escape(f"dimension 'token' has lengths 3 and 4 in group '{INV}'")):
        session.write_invocation(_inv(arrays))


def test_coordinate_values_clash(session):
    arrays = [
        ArrayWrite("t/a", np.zeros(3), ("token",), coords={"token": np.arange(3)}),
        ArrayWrite("t/b", np.ones(3), ("token",), coords={"token": np.arange(3) + 1}),
    ]
    with pytest.raises(
        ValueError,
        match=re.escape(f"coordinate 'token' in group '{INV}/t' differs between arrays '{INV}/t/a' and '{INV}/t/b'"),
    ):
        session.write_invocation(_inv(arrays))


def test_equal_coordinates_are_written_once(tmp_path):
    session = WindowWriter(tmp_path).begin(0, 0, {})
    arrays = [
        ArrayWrite("t/a", np.zeros(3), ("token",), coords={"token": np.arange(3)}),
        ArrayWrite(
            "t/b", np.ones((3, 2)), ("token", "k"), coords={"token": np.arange(3), "k": np.array([0.5, np.nan])}
        ),
        ArrayWrite("t/c", np.ones(2), ("k",), coords={"k": np.array([0.5, np.nan])}),
    ]
    session.write_invocation(_inv(arrays))
    session.commit()
    assert sorted(os.listdir(Path(session.url, INV, "t"))) == ["a", "b", "c", "k", "token", "zarr.json"]


def test_coordinate_must_be_1d(session):
    with pytest.raises(ValueError, match="coordinate 'n' of array .* must be 1-D"):
        session.write_invocation(_inv([ArrayWrite("a", np.zeros(3), ("n",), coords={"n": np.zeros((3, 1))})]))


@pytest.mark.parametrize(
    ("arrays", "groups", "message"),
    [
        (
            [ArrayWrite("t/a", np.zeros(1), ("n",)), ArrayWrite("t/a", np.zeros(1), ("n",))],
            [],
            f"array '{INV}/t/a' would collide with array '{INV}/t/a'",
        ),
        (
            [ArrayWrite("t/a", np.zeros(1), ("n",))],
            [GroupWrite("t/a")],
            f"array '{INV}/t/a' would collide with group '{INV}/t/a'",
        ),
        (
            [ArrayWrite("t", np.zeros(1), ("n",)), ArrayWrite("t/a", np.zeros(1), ("n",))],
            [],
            f"array '{INV}/t/a' would collide with array '{INV}/t'",
        ),
        (
            [ArrayWrite("t", np.zeros(1), ("n",))],
            [GroupWrite("t/sub")],
            f"array '{INV}/t' would collide with group '{INV}/t'",
        ),
        (
            [
                ArrayWrite("g/token", np.zeros(3), ("k",)),
                ArrayWrite("g/x", np.zeros(3), ("token",), coords={"token": np.arange(3)}),
            ],
            [],
            f"coordinate '{INV}/g/token' would collide with array '{INV}/g/token'",
        ),
        (
            [ArrayWrite("x", np.zeros(3), ("sub",), coords={"sub": np.arange(3)})],
            [GroupWrite("sub")],
            f"coordinate '{INV}/sub' would collide with group '{INV}/sub'",
        ),
        (
            [],
            [GroupWrite("g", {"a": 1}), GroupWrite("g", {"a": 2})],
            f"group '{INV}/g' is declared twice and would collide with itself",
        ),
    ],
)
def test_path_collisions(session, arrays, groups, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        session.write_invocation(_inv(arrays, groups))


@pytest.mark.parametrize(
    ("path", "component"),
    [
        ("", ""),
        ("a//b", ""),
        ("a/", ""),
        ("./a", "."),
        ("a/../b", ".."),
        ("a\\b", "a\\b"),
        ("a\x00", "a\x00"),
        ("__reserved", "__reserved"),
        ("g/__x", "__x"),
        ("zarr.json", "zarr.json"),
    ],
)
def test_bad_path_components(session, path, component):
    with pytest.raises(ValueError, match=re.escape(f"array path {path!r} has an invalid component {component!r}")):
        session.write_invocation(_inv([ArrayWrite(path, np.zeros(1), ("n",))]))
    with pytest.raises(ValueError, match=re.escape(f"group path {path!r} has an invalid component {component!r}")):
        session.write_invocation(_inv([], [GroupWrite(path)]))


def test_bad_coordinate_and_invocation_names(session):
    with pytest.raises(ValueError, match=re.escape("coordinate path 'g/__n' has an invalid component '__n'")):
        session.write_invocation(_inv([ArrayWrite("g/a", np.zeros(1), ("__n",), coords={"__n": np.zeros(1)})]))
    with pytest.raises(ValueError, match=re.escape("invocation path '../x' has an invalid component '..'")):
        session.write_invocation(InvocationWrite("../x", {}, [], []))


def test_dims_must_match_axes(session):
    with pytest.raises(ValueError, match=re.escape(f"array '{INV}/a' has shape (2, 3) but dims ('n',)")):
        session.write_invocation(_inv([ArrayWrite("a", np.zeros((2, 3)), ("n",))]))
    with pytest.raises(ValueError, match="repeats a dimension name"):
        session.write_invocation(_inv([ArrayWrite("a", np.zeros((2, 2)), ("n", "n"))]))
    with pytest.raises(ValueError, match="one non-empty name per axis"):
        session.write_invocation(_inv([ArrayWrite("a", np.zeros(2), ("",))]))
