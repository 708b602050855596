"""``--help`` and the code say the same about exit status: a filter (or task selector) that matches nothing is
bad input, exit 2, never 1 (1 is a check that failed)."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from megadump_zarr.cli.main import EXIT_RULE, build_parser
from tests.cli._helpers import assert_input_error

_SELECTING = ("--stage", "--name", "--task", "--owner", "--core", "--kernel", "--invocation", "--window")


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def _selecting() -> list[str]:
    return sorted(n for n, p in _subparsers().items() if set(_SELECTING) & set(p._option_string_actions))


def test_the_rule_puts_nothing_matching_under_2() -> None:
    one, _, two = EXIT_RULE.partition("; 2 bad input")
    assert "matches nothing" in two and "matches nothing" not in one


@pytest.mark.parametrize("name", _selecting())
def test_every_selecting_command_says_exit_2_for_nothing_matching(name: str) -> None:
    text = " ".join(_subparsers()[name].format_help().split())
    said = any(
        phrase in text
        for phrase in (
            "matches nothing is bad input (exit 2)",  # the record filters (cli.common.add_filters)
            "names no task of the dump is bad input (exit 2)",  # replay
            "matches no window is bad input (exit 2)",  # export-hdf5
            "exactly one must remain (else the candidates are listed, exit 2)",  # decode-buffer
        )
    )
    assert said, f"megadump {name} --help does not say what a selection matching nothing exits with"
    assert "exits 1" not in text and "(exit 1)" not in text.replace("(exit 1: the task is the culprit)", "")


@pytest.mark.parametrize(
    "args",
    [
        ("ls", "{l1}", "--name", "no_such_tensor*"),
        ("stats", "{l1}", "--owner", "99"),
        ("compare", "{l1}", "{l1}", "--task", "999"),
        ("report", "{l1}", "{l1}", "-o", "{tmp}/r.html", "--name", "nope"),
        ("replay", "{l1}", "--stage", "expert_up", "--task", "999"),
        ("replay", "{l1}", "--stage", "expert_up", "--owner", "99"),
        ("export-hdf5", "{l1}", "{tmp}/x.h5", "--window", "9"),
    ],
)
def test_a_selection_matching_nothing_exits_2(cli: Any, demo: Any, tmp_path: Any, args: tuple[str, ...]) -> None:
    filled = [a.format(l1=demo.roots["L1"], tmp=tmp_path) for a in args]
    assert_input_error(cli(*filled, "--quiet"))
