"""A record name holding ESC, CR or LF is shown escaped (repr-style), one line per record: it can never colour
the terminal or forge an output line (ls, show, stats, compare)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from megadump_zarr.cli.render import safe_text
from tests.cli._helpers import write_named_l0

NAMES = ("a\x1b[31mb", "x\ny", "p\rq", "ok")
SHOWN = {"a\x1b[31mb": "a\\x1b[31mb", "x\ny": "x\\ny", "p\rq": "p\\rq", "ok": "ok"}


def _write(root: Path, shift: float) -> None:
    """One L0 window whose records carry ``NAMES``; the first record is off by ``shift``."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    write_named_l0(root, {name: x + (shift if k == 0 else 0) for k, name in enumerate(NAMES)})


@pytest.fixture(scope="module")
def dumps(tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("control")
    _write(base / "a", 0.0)
    _write(base / "b", 1.0)
    return base / "a", base / "b"


def _no_raw_controls(text: str) -> None:
    assert "\x1b" not in text and "\r" not in text, repr(text)


def _rows_by_name(out: str) -> dict[str, list[str]]:
    """For each name, the output lines showing it escaped (a name must never split a line)."""
    lines = out.splitlines()
    return {name: [line for line in lines if f" {shown} " in f" {line} "] for name, shown in SHOWN.items()}


def test_safe_text_escapes_like_repr():
    assert safe_text("a\x1b[31mb") == "a\\x1b[31mb" and safe_text("x\ny") == "x\\ny" and safe_text("p\rq") == "p\\rq"
    assert safe_text("\u2028\x7f\x9b plain") == "\\u2028\\x7f\\x9b plain" and safe_text("ws [1]") == "ws [1]"


@pytest.mark.parametrize("command", ["ls", "stats"])
def test_tables_show_one_escaped_line_per_record(cli, dumps, command):
    result = cli(command, dumps[0])
    assert result.code == 0, result.err
    _no_raw_controls(result.out + result.err)
    rows = _rows_by_name(result.out)
    assert all(len(lines) == 1 for lines in rows.values()), rows
    assert len(result.out.splitlines()) == 3 + len(NAMES)  # shared values, header, rule, one line per record


def test_compare_escapes_names_in_table_and_summary(cli, dumps):
    result = cli("compare", dumps[0], dumps[1])
    assert result.code == 1, result.err
    _no_raw_controls(result.out + result.err)
    rows = _rows_by_name(result.out)
    assert [line.split()[0] for line in rows["a\x1b[31mb"]] == ["fail", "first", "root"]
    assert all(len(rows[n]) == 1 and rows[n][0].split()[0] == "pass" for n in ("x\ny", "p\rq", "ok"))
    assert "first divergence: a\\x1b[31mb (fail) at r0 w0 i0 k" in result.out.splitlines()


def test_show_escapes_the_name(cli, dumps):
    result = cli("show", dumps[0], "x\ny")
    assert result.code == 0, result.err
    _no_raw_controls(result.out)
    assert result.out.splitlines()[0].split() == ["tensor", "x\\ny"]
    missing = cli("show", dumps[0], "zz\x1b[2J")
    assert missing.code == 2 and "\x1b" not in missing.err and "'zz\\x1b[2J'" in missing.err
    assert len(missing.err.splitlines()) == 1


def test_json_keeps_the_names_exact(cli, dumps):
    rows = json.loads(cli("ls", dumps[0], "--json").out)
    assert [r["name"] for r in rows] == list(NAMES)


# --------------------------------------------------------------------------- spreadsheet formulas, terminals
HOSTILE = ("=2+5+cmd|' -C calc'!A0", "a\x1b]0;pwn\x07b", "r\u202eevil", "-x", "@SUM(1)", "\tt", "ok;=1+1", "＝1")


@pytest.fixture(scope="module")
def formula_dumps(tmp_path_factory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("formula")
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 3  # negative statistics: numbers, never neutralised
    write_named_l0(base / "a", dict.fromkeys(HOSTILE, x))
    write_named_l0(base / "b", {name: x + (1 if k < 2 else 0) for k, name in enumerate(HOSTILE)})
    return base / "a", base / "b"


def _csv_cells(text: str) -> list[str]:
    import csv
    import io

    return [cell for row in csv.reader(io.StringIO(text)) for cell in row]


def test_msprobe_csv_neutralises_formula_cells_and_keeps_numbers(cli, formula_dumps, tmp_path):
    import pandas as pd

    out = tmp_path / "c.csv"
    result = cli("compare", formula_dumps[0], formula_dumps[1], "--format", "msprobe-csv", "-o", out)
    assert result.code == 1, result.err
    cells = _csv_cells(out.read_text())
    assert not [c for c in cells if c[:1] in ("=", "+", "@", "\t", "\r", "＝") and not _is_number(c)], cells
    assert not [c for c in cells if c.startswith("-") and not _is_number(c)], cells
    names = set(pd.read_csv(out)["NPU Name"])
    assert {"'=2+5+cmd|' -C calc'!A0", "'-x", "'@SUM(1)", "'\tt", "ok;'=1+1", "'＝1"} <= names
    assert "a\x1b]0;pwn\x07b" in names  # a file gets the names exactly (no terminal)
    frame = pd.read_csv(out)
    assert frame["NPU min"].dtype.kind == "f" and (frame["NPU min"] == -3.0).sum() == len(HOSTILE)
    assert "-3.0" in cells


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def test_neutral_cell_matches_msprobes_patterns():
    from hypothesis import given, strategies as st

    from megadump_zarr.cli.msprobe_csv import neutral_cell

    blacklist = __import__("re").compile(r"^[＋－＝％＠\+\-=%@\t\r]|;[＋－＝％＠\+\-=%@]")  # msprobe's + tab, CR

    @given(st.text(alphabet=st.sampled_from("=+-@%;\t\r1.e aA＝－"), max_size=8) | st.floats().map(str))
    def check(text):
        out = neutral_cell(text)
        if _is_number(text):
            assert out == text
        else:
            assert out.startswith("'") or not blacklist.search(out)
            assert not __import__("re").search(r";[＋－＝％＠\+\-=%@]", out)
            assert out.replace("'", "") == text.replace("'", "")

    check()
    assert neutral_cell(-1.5) == -1.5 and neutral_cell("-1.5") == "-1.5" and neutral_cell("-inf") == "-inf"


def test_msprobe_csv_to_a_terminal_escapes_control_characters(formula_dumps):
    import os
    import pty
    import subprocess
    import sys

    leader, follower = pty.openpty()
    args = ["compare", str(formula_dumps[0]), str(formula_dumps[1]), "--format", "msprobe-csv"]
    proc = subprocess.Popen([sys.executable, "-m", "megadump_zarr.cli.main", *args], stdout=follower, stderr=follower)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    proc.wait(timeout=120)
    os.close(leader)
    shown = b"".join(chunks).decode()
    assert proc.returncode == 1, shown
    # the terminal gets our own colours and progress bar, never a name's raw escape, bell or bidi override
    assert "\x1b]0;pwn" not in shown and "\u202e" not in shown and "\x07" not in shown, repr(shown)
    assert "a\\x1b]0;pwn\\x07b" in shown and "r\\u202eevil" in shown
