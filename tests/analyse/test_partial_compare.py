"""A truncated pair is compared on the elements both sides stored and says so: ``pass_partial`` (never ``pass``)
with a note of how much was compared, ``fail`` on a difference inside the prefix; ``accept_partial=True`` passes."""

from __future__ import annotations

import pytest

from megadump_zarr.analyse import compare
from tests._truncated import ROWS, STORED_ROWS, TILE, write


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    base = tmp_path_factory.mktemp("partial")
    return {name: write(base / name, None if name == "same" else name) for name in ("same", "beyond", "inside")}


NOTE = f"compared {STORED_ROWS} of {TILE} rows ({STORED_ROWS * 512} of {TILE * 512} elements)"


def test_a_difference_beyond_the_prefix_is_not_a_pass(dumps):
    result = compare(dumps["beyond"], dumps["same"])
    assert len(result) == 8 and set(result["verdict"]) == {"pass_partial"}
    assert all(n.startswith(NOTE) and "max_bytes_per_tensor" in n for n in result["note"])
    assert set(result["shape_a"]) == {(TILE, 512)} and set(result["elements"]) == {STORED_ROWS * 512}


def test_a_difference_inside_the_prefix_fails_at_its_logical_index(dumps):
    result = compare(dumps["inside"], dumps["same"])
    first = result[(result["task_id"] == 0)]
    assert set(first["verdict"]) == {"fail"} and set(first["worst_index"]) == {(0, 0)}
    assert set(result[result["task_id"] != 0]["verdict"]) == {"pass_partial"}


def test_accept_partial_passes_and_keeps_the_note(dumps):
    result = compare(dumps["beyond"], dumps["same"], accept_partial=True)
    assert set(result["verdict"]) == {"pass"}
    assert all(n.startswith(f"partial comparison accepted; {NOTE}") for n in result["note"])


def test_a_whole_record_against_a_truncated_one_is_partial(dumps, tmp_path):
    whole = write(tmp_path / "whole", cap=None)
    result = compare(dumps["same"], whole)
    assert set(result["verdict"]) == {"pass_partial"} and all(n.startswith(NOTE) for n in result["note"])
    assert ROWS == 4 * TILE


def test_prefix_statistics_are_not_compared_with_whole_ones(dumps, tmp_path):
    statistics = write(tmp_path / "stats", cap=None, mode="statistics")
    result = compare(dumps["same"], statistics)
    assert set(result["verdict"]) == {"error"}
    assert all("statistics cover its stored prefix only" in n for n in result["note"])
