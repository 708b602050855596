"""CLI habits: ``--version``, "did you mean" for a mistyped option, command or choice."""

from __future__ import annotations

import megadump_zarr


def test_version(cli):
    result = cli("--version")
    assert result.code == 0 and result.out == f"megadump {megadump_zarr.__version__}\n" and result.err == ""


def test_unknown_option_suggests_the_nearest(cli, tmp_path):
    result = cli("compare", tmp_path / "a", tmp_path / "b", "--rtoll", "1")
    assert result.code == 2
    assert result.err == "error: unrecognized argument --rtoll (did you mean --rtol?)\n"
    assert result.out == ""


def test_unknown_option_with_value_and_no_near_option(cli, tmp_path):
    near = cli("ls", tmp_path, "--stgae=expert_up")
    assert near.code == 2 and near.err == "error: unrecognized argument --stgae (did you mean --stage?)\n"
    far = cli("ls", tmp_path, "--zzzzzz")
    assert far.code == 2 and far.err == "error: unrecognized argument --zzzzzz (see 'megadump ls --help')\n"


def test_unknown_command_suggests_the_nearest(cli):
    result = cli("comapre")
    assert result.code == 2 and result.err == "error: unknown command 'comapre' (did you mean compare?)\n"
    far = cli("zzzzzzzz")
    assert far.code == 2 and far.err.startswith("error: unknown command 'zzzzzzzz' (choose from demo, info, ls, ")


def test_invalid_choice_suggests_the_nearest(cli, tmp_path):
    result = cli("ls", tmp_path, "--direction", "fowrard")
    assert result.code == 2
    assert result.err == "error: argument --direction: invalid choice 'fowrard' (did you mean forward?)\n"
