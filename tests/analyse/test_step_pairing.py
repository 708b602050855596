"""Records of two dumps pair by step (then kernel, direction, order in the step, path in the invocation), never
by the position of their windows; steps on one side only are named; ``pair=`` / ``--pair`` pairs steps explicitly."""

from __future__ import annotations

import pandas as pd
import pytest

from megadump_zarr import open_dump
from megadump_zarr.analyse import compare
from tests.analyse._steps import write_pair
from tests.cli._helpers import cli_runner


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    return write_pair(tmp_path_factory.mktemp("steps"))


def test_the_dumps_number_their_windows_alike(dumps):
    target, golden = (open_dump(d).records() for d in dumps)
    assert sorted(set(target["window"])) == sorted(set(golden["window"])) == [0, 1]
    assert sorted(set(target["step"])) == [1, 2] and sorted(set(golden["step"])) == [0, 1]


def test_the_lag_bug_fails_step_by_step(dumps):
    result = compare(*dumps)
    both = result[result["verdict"] != "missing"]
    # target step 1 holds golden step 0's data: compared with golden step 1 it fails, every record of it
    assert len(both) == 4 and set(both["step"]) == {1} and set(both["step_b"]) == {1}
    assert set(both["verdict"]) == {"fail"}
    assert all(p.startswith("rank_0/window_0001/") for p in both["path_b"])  # golden's second window
    assert all(p.startswith("rank_0/window_0000/") for p in both["path"])  # target's first


def test_steps_on_one_side_only_are_missing_and_named(dumps):
    result = compare(*dumps)
    only_a = result[(result["verdict"] == "missing") & (result["step"] == 2)]
    only_b = result[(result["verdict"] == "missing") & (result["step"] == 0)]
    assert len(only_a) == len(only_b) == 4
    assert all("step 2 of dump a: no step of dump b is paired with it" in n for n in only_a["note"])
    assert all("step 0 of dump b: no step of dump a is paired with it" in n for n in only_b["note"])
    pairing = result.attrs["pairing"]
    assert (pairing["pairs"], pairing["only_a"], pairing["only_b"]) == ([[1, 1]], [2], [0])
    assert "step 2 only in dump a; step 0 only in dump b" in pairing["line"]


def test_explicit_pairs_compare_other_steps(dumps):
    result = compare(*dumps, pair={1: 0, 2: 1})
    assert len(result) == 8 and set(result["verdict"]) == {"pass"}
    assert sorted(zip(result["step"], result["step_b"])) == [(1, 0)] * 4 + [(2, 1)] * 4
    assert "line" not in result.attrs["pairing"]
    one = compare(*dumps, pair=[(1, 0)])  # A's step 2 and B's step 1 are then unpaired
    assert one.attrs["pairing"]["only_a"] == [2] and one.attrs["pairing"]["only_b"] == [1]
    compared = one[one["verdict"] != "missing"]
    assert len(compared) == 4 and set(compared["step"]) == {1} and set(compared["verdict"]) == {"pass"}


def test_bitwise_pairs_by_step_too(dumps):
    result = compare(*dumps, bitwise=True)
    assert set(result[result["step"] == 1]["verdict"]) == {"fail"}
    assert set(compare(*dumps, bitwise=True, pair={1: 0, 2: 1})["verdict"]) == {"pass"}


@pytest.mark.parametrize(
    ("pair", "message"),
    [
        ({1: -1}, "pair: a step of B must be a step number (an integer >= 0), got -1"),
        ({True: 0}, "pair: a step of A must be a step number (an integer >= 0), got True"),
        ([(1, 0), (1, 2)], "pair: step 1 of A is paired twice (0 and 2)"),
        ([(1, 0), (2, 0)], "pair: step 0 of B is paired with two steps of A (1 and 2)"),
        ([(1, 0, 3)], "pair: each entry must be (step of A, step of B), got (1, 0, 3)"),
    ],
)
def test_bad_pairs_are_named(pair, message):
    from megadump_zarr.analyse.matching import check_pair

    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_pair(pair)


def _rows(steps, windows, paths):
    return pd.DataFrame(
        {
            "rank": 0,
            "window": windows,
            "invocation": list(range(len(paths))),
            "step": pd.array(steps, dtype="Int64"),
            "kernel": "k",
            "direction": "forward",
            "path": paths,
        }
    )


def test_a_window_without_a_step_pairs_by_its_index_and_says_so():
    from megadump_zarr.analyse.matching import match_by_identity

    path = "rank_0/window_{:04d}/invocation_{:06d}_forward/x"
    a = _rows([None, None], [0, 1], [path.format(0, 0), path.format(1, 1)])
    b = _rows([0, 1], [3, 4], [path.format(3, 7), path.format(4, 8)])
    matches, pairing = match_by_identity(a, b)
    assert [(m.path, m.path_b) for m in matches] == [
        (path.format(0, 0), path.format(3, 7)),
        (path.format(1, 1), path.format(4, 8)),
    ]
    assert all(
        "window" in m.notes[0] and "records no step: its window index stands in for it" in m.notes[0] for m in matches
    )
    assert pairing.window_steps == (("a", 0), ("a", 1))


def test_invocations_pair_by_order_within_the_step():
    from megadump_zarr.analyse.matching import match_by_identity

    path = "rank_0/window_0000/invocation_{:06d}_forward/x"
    a = _rows([5, 5], [0, 0], [path.format(3), path.format(4)])  # the step's first and second launch
    b = _rows([5, 5], [0, 0], [path.format(0), path.format(1)])
    matches, _ = match_by_identity(a, b)
    assert [(m.path, m.path_b) for m in matches] == [(path.format(3), path.format(0)), (path.format(4), path.format(1))]


def test_cli_names_unpaired_steps_and_pairs_on_request(dumps, capsys, monkeypatch):
    run = cli_runner(capsys, monkeypatch)
    target, golden = dumps
    plain = run("compare", target, golden)
    assert plain.code == 1
    assert "unpaired steps: step 2 only in dump a; step 0 only in dump b (steps paired: 1->1)" in plain.out
    assert "FAIL: 4 fail, 8 missing, 0 pass of 12 compared" in plain.out
    paired = run("compare", target, golden, "--pair", "1:0", "--pair", "2:1")
    assert paired.code == 0 and "PASS: all 8 records pass" in paired.out and "unpaired" not in paired.out
    half = run("compare", target, golden, "--pair", "1:0")
    assert half.code == 1 and "step 2 only in dump a; step 1 only in dump b" in half.out
    document = run("compare", target, golden, "--json").json()
    assert (document["pairing"]["only_a"], document["pairing"]["only_b"]) == ([2], [0])
    bad = run("compare", target, golden, "--pair", "1-0")
    assert bad.code == 2 and "A_STEP:B_STEP" in bad.err
    twice = run("compare", target, golden, "--pair", "1:0", "--pair", "2:0")
    assert twice.code == 2 and "error: pair: step 0 of B is paired with two steps of A (1 and 2)" in twice.err


def test_report_pairs_by_step(dumps, tmp_path, capsys, monkeypatch):
    from megadump_zarr.report import collect_comparison

    data = collect_comparison(*dumps)
    assert data.summary["verdict"] == "fail" and data.summary["counts"] == {"fail": 4, "missing": 8}
    assert any("step 2 only in dump a; step 0 only in dump b" in n for n in data.notes)
    assert collect_comparison(*dumps, pair={1: 0, 2: 1}).summary["verdict"] == "pass"
    run = cli_runner(capsys, monkeypatch)
    assert run("report", *dumps, "-o", tmp_path / "r.html").code == 1
    assert run("report", *dumps, "-o", tmp_path / "p.html", "--pair", "1:0", "--pair", "2:1").code == 0
