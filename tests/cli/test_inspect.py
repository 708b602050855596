"""``megadump`` help, info, ls, show and stats on a tiny demo dump, and bad input."""

from __future__ import annotations

from pathlib import Path
import re

import numpy as np
import pytest

from megadump_zarr.cli.main import build_parser
from megadump_zarr.read import open_dump
from tests.cli._helpers import assert_input_error

COMMANDS = (
    "demo",
    "info",
    "ls",
    "show",
    "stats",
    "compare",
    "plot",
    "replay",
    "decode-buffer",
    "convert",
    "export-hdf5",
)


# --------------------------------------------------------------------------- help and registry
def test_top_level_help_lists_every_command(cli):
    result = cli("--help")
    assert result.code == 0
    for command in COMMANDS:
        assert command in result.out
    assert "Exit status" in result.out


@pytest.mark.parametrize("command", COMMANDS)
def test_every_subcommand_has_help(cli, command):
    result = cli(command, "--help")
    assert result.code == 0, result.err
    assert f"usage: megadump {command}" in result.out
    assert "--json" in result.out and "--quiet" in result.out


def test_registry_discovers_the_command_modules():
    parser = build_parser()
    choices = next(a for a in parser._actions if a.dest == "command").choices
    assert list(choices)[: len(COMMANDS)] == list(COMMANDS)


def test_usage_errors_are_one_line_and_exit_2(cli, demo):
    assert_input_error(cli(), "required")
    assert_input_error(cli("frobnicate"), "unknown command 'frobnicate'")
    assert_input_error(cli("ls", demo.roots["L1"], "--rank", "x"), "--rank", "invalid int value")
    assert_input_error(cli("ls", demo.roots["L1"], "--io", "sideways"), "--io")
    assert_input_error(cli("ls", demo.roots["L1"], "--storage-option", "novalue"), "KEY=VALUE")
    result = cli("show", demo.roots["L1"])
    assert_input_error(result, "SELECTOR")
    assert len([line for line in result.err.splitlines() if line.strip()]) == 1


# --------------------------------------------------------------------------- info
def test_info_tree_of_a_demo_run(cli, demo):
    result = cli("info", demo.root)  # the run directory holds two dump roots
    assert result.code == 0, result.err
    out = result.out
    for root in demo.roots.values():
        assert str(root) in out
    assert out.count("rank 0") == 2
    assert "window 0000" in out and "complete" in out
    assert " L0 " in out and " L1 " in out
    assert "logical" in out and "stored" in out and "on disk" in out and "ratio" not in out
    assert re.search(r"on disk, compression \d+\.\d\d×", out), out  # layout.sizes: logical / on disk
    assert "invocation_000000_forward" in out and "moe_experts" in out


def test_info_json_sizes(cli, demo):
    result = cli("info", demo.roots["L1"], "--json")
    assert result.code == 0, result.err
    info = result.json()
    assert info["root"] == str(demo.roots["L1"])
    (window,) = info["windows"]
    records = open_dump(demo.roots["L1"]).records()
    assert window["status"] == "complete" and window["level"] == "L1"
    assert window["records"] == len(records)
    assert window["raw_bytes"] == int(records["bytes"].sum())
    assert window["stored_bytes"] == int(records["stored_bytes"].sum())
    assert window["disk_bytes"] > 0 and "ratio" not in window
    assert window["compression"] == pytest.approx(window["raw_bytes"] / window["disk_bytes"])
    assert window["invocations"] == len(window["invocation_list"]) == 4
    assert info == cli("--json", "info", demo.roots["L1"]).json()  # --json also before the command


# --------------------------------------------------------------------------- ls
def test_ls_table_and_filters(cli, demo):
    result = cli("ls", demo.roots["L1"], "--stage", "expert_up", "--owner", "1", "--invocation", "0")
    assert result.code == 0, result.err
    lines = [line for line in result.out.splitlines() if re.search(r"\b(in|out)\[\d\]", line)]
    assert len(lines) == 4  # xs, expert_counts, w_up in; ws out
    assert "stage expert_up" in result.out.splitlines()[0]  # shared by every row: printed once above
    for name in ("xs", "expert_counts", "w_up", "ws"):
        assert any(f" {name} " in line for line in lines), name
    assert "task_000001" in result.out and "task_000000" not in result.out


def test_ls_json_matches_records(cli, demo):
    records = open_dump(demo.roots["L1"]).records()
    result = cli("ls", demo.roots["L1"], "--json", "--io", "output", "--name", "w*")
    assert result.code == 0, result.err
    rows = result.json()
    expected = records[(records["io"] == "output") & records["name"].str.startswith("w")]
    assert [r["path"] for r in rows] == list(expected["path"])
    assert all(r["io"] == "output" and r["name"].startswith("w") for r in rows)
    assert isinstance(rows[0]["shape"], list) and isinstance(rows[0]["min"], float)
    assert set(rows[0]) >= {"rank", "window", "invocation", "stage", "task_id", "owner_id", "name", "dtype", "path"}


def test_ls_quiet_prints_paths_only(cli, demo):
    result = cli("ls", demo.roots["L0"], "--name", "x", "--quiet")
    assert result.code == 0
    paths = result.out.split()
    assert paths and all(p.startswith("rank_0/window_") and p.endswith("/x") for p in paths)


def test_ls_no_match_is_bad_input_naming_what_exists(cli, demo):
    result = cli("ls", demo.roots["L1"], "--name", "no_such_tensor")
    assert result.code == 2 and result.err.startswith("error: no records with name 'no_such_tensor'; names: bws, ")
    assert len(result.err.splitlines()) == 1 and result.out == ""
    assert cli("ls", demo.roots["L1"], "--name", "no_such_tensor", "--json").code == 2


# --------------------------------------------------------------------------- show
def test_show_record_path(cli, demo):
    dump = open_dump(demo.roots["L1"])
    row = dump.records().iloc[0]
    result = cli("show", demo.roots["L1"], row["path"], "--head", "5")
    assert result.code == 0, result.err
    assert row["path"] in result.out and row["name"] in result.out
    assert "stats (stored)" in result.out and "first 5 values" in result.out
    info = cli("show", demo.roots["L1"], row["path"], "--head", "5", "--json").json()
    values = np.asarray(dump.record_array(row["path"]).values).reshape(-1)[:5]
    np.testing.assert_allclose(info["head"], values.astype(np.float64), rtol=1e-6)
    assert info["stats"]["min"] == pytest.approx(row["min"]) and info["stats_source"] == "stored"
    absolute = Path(demo.roots["L1"]) / row["path"]  # a full path below the root works too
    assert cli("show", demo.roots["L1"], absolute, "--json").json()["path"] == row["path"]


def test_show_name_stitched_and_owner(cli, demo):
    dump = open_dump(demo.roots["L1"])
    stitched = dump.tensor("ws", stage="expert_up", invocation=0)
    info = cli(
        "show", demo.roots["L1"], "ws", "--stage", "expert_up", "--invocation", "0", "--json", "--head", "40"
    ).json()
    assert info["shape"] == list(stitched.shape) and len(info["paths"]) == 2
    values = stitched.values
    np.testing.assert_allclose(info["head"], values.reshape(-1)[:40], rtol=1e-6)
    assert info["stats"]["max"] == pytest.approx(float(np.nanmax(values)))
    assert info["stats"]["nan_count"] == 0
    owner = cli(
        "show", demo.roots["L1"], "ws", "--stage", "expert_up", "--invocation", "0", "--owner", "1", "--json"
    ).json()
    expected = stitched.isel({stitched.dims[0]: stitched.coords["owner_id"].values == 1})
    assert owner["shape"] == list(expected.shape)
    text = cli("show", demo.roots["L1"], "ws", "--stage", "expert_up", "--invocation", "0")
    assert text.code == 0 and "stitched along axis 0" in text.out and "stats (computed)" in text.out


def test_show_bad_selectors(cli, demo):
    assert_input_error(cli("show", demo.roots["L1"], "no_such_tensor"), "no tensor named 'no_such_tensor'", "tensors:")
    assert_input_error(cli("show", demo.roots["L1"], "ws"), "--stage")  # ambiguous: the message says how to choose
    assert_input_error(cli("show", demo.roots["L0"], "x"), "narrow it")
    assert_input_error(cli("show", demo.roots["L1"], "rank_0/window_0000/nope/x"), "rank_0/window_0000/nope/x")
    assert_input_error(cli("show", demo.roots["L1"], "a/b"), "neither a tensor name nor a record path")
    assert_input_error(cli("show", demo.roots["L1"], "ws", "--head", "-1"), "--head")


# --------------------------------------------------------------------------- stats
def test_stats_table_and_json(cli, demo):
    records = open_dump(demo.roots["L0"]).records()
    result = cli("stats", demo.roots["L0"], "--name", "w_up")
    assert result.code == 0, result.err
    assert "w_up" in result.out and "l2norm" in result.out and "nan" in result.out
    rows = cli("stats", demo.roots["L0"], "--name", "w_up", "--json").json()
    expected = records[records["name"] == "w_up"]
    assert len(rows) == len(expected) > 0
    assert sorted(r["l2norm"] for r in rows) == pytest.approx(sorted(expected["l2norm"]))
    assert all(r["nan_count"] == 0 and r["inf_count"] == 0 for r in rows)
    nonfinite = cli("stats", demo.roots["L0"], "--nonfinite", "--json")
    assert nonfinite.code == 0 and nonfinite.json() == []


# --------------------------------------------------------------------------- bad paths
@pytest.mark.parametrize("command", ["info", "ls", "stats", "show", "plot", "compare"])
def test_missing_path_is_an_input_error(cli, tmp_path, command):
    missing = tmp_path / "nowhere"
    extra = {"show": ["x"], "plot": ["x", "--out", tmp_path / "x.png"], "compare": [missing]}.get(command, [])
    assert_input_error(cli(command, missing, *extra), str(missing), "does not exist")


@pytest.mark.parametrize("command", ["info", "ls", "stats"])
def test_not_a_dump_is_an_input_error(cli, tmp_path, command):
    (tmp_path / "notes.txt").write_text("hello")
    assert_input_error(cli(command, tmp_path), "not a megadump_zarr dump root")


def test_demo_run_directory_points_at_its_roots(cli, demo):
    assert_input_error(cli("ls", demo.root), "holds the dump roots", str(demo.roots["L0"]))


def test_window_group_is_not_a_root(cli, demo):
    assert_input_error(cli("ls", Path(demo.roots["L1"]) / "rank_0" / "window_0000"), "window group")


def test_info_marks_torn_and_aborted_windows(cli, demo, tmp_path):
    import shutil

    from megadump_zarr.store.writer import WindowWriter

    root = tmp_path / "l1"
    shutil.copytree(demo.roots["L1"], root)
    with WindowWriter(root) as writer:
        writer.begin(0, 3, {"schemaVersion": 5, "level": "L1", "rank": 0, "windowIndex": 3})  # never committed
        writer.begin(0, 4, {"schemaVersion": 5, "level": "L1", "rank": 0, "windowIndex": 4}).commit("aborted")
    result = cli("info", root)
    assert result.code == 0, result.err
    assert "window 0003  WRITING" in result.out and "window 0004  ABORTED" in result.out
    statuses = {w["window"]: w["status"] for w in cli("info", root, "--json").json()["windows"]}
    assert statuses == {0: "complete", 3: "writing", 4: "aborted"}
    hint = cli("ls", root, "--window", "3")
    assert hint.code == 2 and "no records with window 3; windows: 0" in hint.err
    assert "--include-incomplete" in hint.err and "window_0003 (writing)" in hint.err


def test_info_line_of_a_window_torn_inside_an_invocation_reads_cleanly(cli, demo, tmp_path):
    import shutil

    from megadump_zarr.layout.write_model import ArrayWrite, InvocationWrite
    from megadump_zarr.store.writer import WindowWriter

    root = tmp_path / "l0"
    shutil.copytree(demo.roots["L0"], root)
    attrs = {"invocationId": 0, "step": 9, "direction": "forward", "kernelName": "k", "level": "L0", "rank": 0}
    inv = InvocationWrite(
        "invocation_000000_forward",
        attrs,
        [],
        [ArrayWrite("x", np.ones((4, 3), np.float32), ("r", "c"), {"name": "x"})],
    )
    writer = WindowWriter(root)
    writer.begin(0, 7, {"schemaVersion": 5, "level": "L0", "rank": 0, "windowIndex": 7}).write_invocation(inv)
    result = cli("info", root)  # the process "died" here: arrays written, no group documents, no commit
    assert result.code == 0, result.err
    torn = result.out[result.out.index("window 0007") :]
    assert "None" not in torn and "nan" not in torn, torn
    assert "committed never (torn, or still being written)" in torn
    assert "invocation_000000_forward  kernel ?  step ?  1 records" in torn
    (window,) = [w for w in cli("info", root, "--json").json()["windows"] if w["window"] == 7]
    assert window["committed_at"] is None and window["invocation_list"][0]["kernel"] is None
    writer.close()
