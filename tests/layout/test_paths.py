"""The path grammar (layout.paths): each builder's output is parsed back by its regex, bad parts are refused."""

from __future__ import annotations

import numpy as np
import pytest

from megadump_zarr.layout import paths


def test_builders_write_the_layout_readers_parse() -> None:
    assert paths.window_path(3, 7) == "rank_3/window_0007"
    assert paths.window_path(np.int64(12), 12345) == "rank_12/window_12345"
    assert paths.invocation_name(42, "backward") == "invocation_000042_backward"
    assert paths.task_dir(5) == "task_000005"
    assert paths.task_dir(5, 2) == "task_000005_worker_002"
    assert paths.WINDOW_PATH.match(paths.window_path(3, 7)).groups() == ("3", "0007")
    assert paths.RANK_DIR.match(paths.rank_dir(3)).group(1) == "3"
    assert paths.WINDOW_DIR.match(paths.window_dir(7)).group(1) == "0007"
    assert paths.INVOCATION_DIR.match(paths.invocation_name(42, "forward")).groups() == ("000042", "forward")
    assert paths.TASK_DIR.match(paths.task_dir(5, 2)).groups() == ("000005", "002")
    assert paths.TASK_DIR.match(paths.task_dir(5)).groups() == ("000005", None)
    assert paths.PACK_DIR.match("pack_000001").group(1) == "000001"


@pytest.mark.parametrize("name", ["rank_", "rank_1/", "xrank_1", "rank_-1", "rank_1a"])
def test_rank_regex_refuses_near_misses(name: str) -> None:
    assert paths.RANK_DIR.match(name) is None


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: paths.rank_dir(-1), "rank must be >= 0, got -1"),
        (lambda: paths.window_dir(True), "window index must be an integer, got True"),
        (lambda: paths.window_path(0, 1.0), "window index must be an integer, got 1.0"),
        (lambda: paths.task_dir(1, "2"), "worker must be an integer, got '2'"),
        (lambda: paths.invocation_name(1, "a/b"), "direction must be non-empty text without '/', got 'a/b'"),
        (lambda: paths.invocation_name(1, ""), "direction must be non-empty text"),
    ],
)
def test_builders_refuse_bad_parts(call, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call()


def test_window_key_splits_a_key_below_a_window() -> None:
    match = paths.WINDOW_KEY.match("rank_3/window_0007/invocation_000042_forward/task_000005/input_0")
    assert match.groups() == ("rank_3/window_0007", "invocation_000042_forward/task_000005/input_0")


@pytest.mark.parametrize(
    "key",
    [
        "rank_3/window_0007",
        "rank_3/window_0007/",
        "rank_3/window_0007/x\n",
        "rank_٣/window_0007/x",
        "a/rank_3/window_0007/x",
    ],
)
def test_window_key_refuses_near_misses(key: str) -> None:
    assert paths.WINDOW_KEY.match(key) is None
