"""One exit-code rule for every ``megadump`` command: 0 ok, 1 a check failed, 2 bad input.

The commands are read from the parser, so a new subcommand is covered without editing this file.
"""

from __future__ import annotations

import argparse
from pathlib import Path
import shutil
from typing import Any

import pytest

from megadump_zarr.cli.main import EXIT_RULE, build_parser
from megadump_zarr.read import open_dump
from tests._layout import stored_record


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


COMMANDS = _subparsers()
WITH_PATH = sorted(n for n, p in COMMANDS.items() if any(not a.option_strings for a in p._actions))
WITH_STAGE = sorted(n for n, p in COMMANDS.items() if "--stage" in p._option_string_actions)


def _option_value(action: argparse.Action, tmp: Path, stage: str, name: str = "") -> str:
    """A well-formed value for a required option (the path checks under test come first)."""
    if action.dest == "stage":
        return stage
    if action.type is int:
        return "0"
    if action.choices:
        return str(next(iter(action.choices)))
    return str(tmp / f"new_{action.dest}.{'png' if name == 'plot' else 'html'}")


def _arguments(
    name: str, positionals: list[str], tmp: Path, *, stage: str = "expert_up", selector: str | None = None
) -> list[str]:
    """``name``, its required positionals (from ``positionals``, in order), an optional SELECTOR and required
    options."""
    parser = COMMANDS[name]
    args: list[str] = [name]
    values = iter(positionals)
    for action in parser._actions:
        if not action.option_strings and action.nargs is None:
            args.append(next(values, str(tmp / f"new_{action.dest}")))
        elif action.dest == "selector" and selector is not None:
            args.append(selector)
    for action in parser._actions:
        if action.option_strings and action.required:
            args += [action.option_strings[-1], _option_value(action, tmp, stage, name)]
    for group in parser._mutually_exclusive_groups:
        if group.required and not any(a.dest == "stage" for a in group._group_actions):
            first = group._group_actions[0]
            args += [first.option_strings[-1], _option_value(first, tmp, stage, name)]
    if "--stage" in parser._option_string_actions and "--stage" not in args:
        args += ["--stage", stage]
    return args


def _assert_one_error_line(result: Any, code: int) -> None:
    assert result.code == code, (result.code, result.out, result.err)
    lines = result.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.err
    assert "Traceback" not in result.err + result.out


def test_every_command_is_covered():
    assert {"ls", "show", "stats", "compare", "replay", "verify", "upload"} <= set(WITH_PATH)
    assert {"ls", "show", "stats", "compare", "replay", "report", "plot"} <= set(WITH_STAGE)


def test_help_states_the_rule(cli):
    result = cli("--help")
    assert result.code == 0
    text = " ".join(result.out.split())
    assert EXIT_RULE in text
    assert "0 ok; 1 a check failed" in text and "2 bad input" in text


@pytest.mark.parametrize("name", WITH_PATH)
def test_missing_path_is_bad_input(cli, tmp_path, name):
    missing = tmp_path / "no" / "such" / "dump"
    result = cli(*_arguments(name, [str(missing)] * 2, tmp_path), "--quiet")
    _assert_one_error_line(result, 2)
    assert "no/such/dump" in result.err or "no/such" in result.err, result.err


@pytest.mark.parametrize("name", WITH_STAGE)
def test_unknown_stage_is_bad_input(cli, demo, tmp_path, name):
    root = demo.roots["L1"]
    result = cli(*_arguments(name, [root, root], tmp_path, stage="no_such_stage", selector="ws"), "--quiet")
    _assert_one_error_line(result, 2)
    assert "no_such_stage" in result.err, result.err


@pytest.fixture(scope="module")
def differing(demo, tmp_path_factory) -> Path:
    """A copy of the demo's L1 dump with one stored expert_up output shifted by +2.0."""
    copy = tmp_path_factory.mktemp("differing") / "l1"
    shutil.copytree(demo.roots["L1"], copy)
    records = open_dump(copy).records()
    row = records[(records["stage"] == "expert_up") & (records["io"] == "output")].iloc[0]
    array, index = stored_record(copy, row["path"])
    array[index] = array[index] + 2.0
    return copy


def test_compare_of_differing_dumps_is_a_failed_check(cli, demo, differing):
    assert cli("compare", demo.roots["L1"], demo.roots["L1"], "--quiet").code == 0
    result = cli("compare", differing, demo.roots["L1"], "--quiet")
    assert result.code == 1, (result.out, result.err)
    assert "Traceback" not in result.err + result.out


def test_unknown_record_and_selector_are_bad_input(cli, demo):
    root = demo.roots["L1"]
    _assert_one_error_line(cli("show", root, "no_such_tensor"), 2)
    _assert_one_error_line(cli("ls", root, "--name", "no_such_tensor"), 2)
    _assert_one_error_line(cli("replay", root, "--stage", "expert_up", "--task", "999999"), 2)
