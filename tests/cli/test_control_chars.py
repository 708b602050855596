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
