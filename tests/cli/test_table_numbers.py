"""Tables never misstate a number: a value is shown whole or its column is left out and named below the
table; only long names are elided (in the middle). ``compare`` of msprobe-style names at 80 and 120 columns."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from megadump_zarr.cli.compare_table import COLUMNS
from megadump_zarr.cli.render import elide_middle
from tests.cli._helpers import cli_runner, write_named_l0

NAMES = [f"Functional.linear.{i}.forward.input.0.Module.layers.{i}.mlp.down_proj" for i in range(4)]
NUMBERS = ("1-cos", "max_abs", "max_rel", "rmse", "mism")


@pytest.fixture(scope="module")
def long_dumps(tmp_path_factory) -> tuple[Path, Path]:
    rng = np.random.default_rng(0)
    a = {n: rng.standard_normal((16, 16)).astype(np.float32) for n in NAMES}
    b = {n: v.copy() for n, v in a.items()}
    b[NAMES[0]] += np.float32(0.01) * rng.standard_normal((16, 16)).astype(np.float32)
    b[NAMES[1]][3, 4] += 0.5
    base = tmp_path_factory.mktemp("long")
    write_named_l0(base / "a", a)
    write_named_l0(base / "b", b)
    return base / "a", base / "b"


def _table(out: str) -> tuple[list[str], list[list[str]], list[str]]:
    """(headings, rows split on 2+ spaces, lines below the table) of a compare output."""
    import re

    lines = out.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("────"))
    headings = lines[rule - 1].split()
    rows, below = [], []
    for line in lines[rule + 1 :]:
        (rows if line.split()[0] in ("pass", "fail") and not below else below).append(line)
    return headings, [re.split(r"\s{2,}", r.strip()) for r in rows], below


@pytest.mark.parametrize("columns", [80, 120])
def test_every_number_whole_every_left_out_column_named(capsys, monkeypatch, long_dumps, columns):
    cli = cli_runner(capsys, monkeypatch, columns=columns)
    expected = {row["name"]: row for row in cli("compare", *long_dumps, "--json").json()["results"]}
    result = cli("compare", *long_dumps)
    assert result.code == 1, result.err
    assert "…" in result.out  # the names are elided at these widths...
    headings, rows, below = _table(result.out)
    assert all(len(line) <= columns for line in result.out.splitlines()[: len(rows) + 3])
    by_heading = {c.heading: c for c in COLUMNS}
    fails = [r for r in rows if r[0] == "fail"]
    assert len(fails) == 2
    for row in fails:
        cells = dict(zip(headings, row))
        full = next(n for n in NAMES if elide_middle(n, len(cells["name"])) == cells["name"])
        record = expected[full]
        for heading in NUMBERS:
            if heading in cells:  # ...but a number shown is the whole formatted value
                column = by_heading[heading]
                value = column.get(record)
                shown = (
                    column.fmt(value)
                    if column.custom_fmt
                    else __import__("megadump_zarr.cli.render", fromlist=["compact"]).compact(value)
                )
                assert cells[heading] == shown, (heading, cells[heading], shown)
        assert cells["1-cos"] == f"{1 - record['cosine']:.2e}"
    missing = {h for h in ("1-cos", "max_abs", "max_rel", "rmse", "mism", "worst", "note") if h not in headings}
    assert _left_out(below, columns) == missing
    assert {"1-cos", "max_abs", "worst"} <= set(headings)  # worst is kept before the notes and max_rel


def _left_out(below: list[str], columns: int) -> set[str]:
    import re

    listed = " ".join(line.strip() for line in below)
    match = re.search(rf"columns left out to fit {columns} columns: (.*?) \(--json has every column\)", listed)
    return set(match[1].split(", ")) if match else set()


def test_a_narrow_console_leaves_numbers_out_never_cuts_them(capsys, monkeypatch, long_dumps):
    cli = cli_runner(capsys, monkeypatch, columns=30)
    result = cli("compare", *long_dumps)
    headings, rows, below = _table(result.out)
    assert headings == ["verdict", "name"]
    assert all(len(r) == 2 and len(r[1]) <= 21 and "…" in r[1] for r in rows), rows  # names elided, no number
    assert {"1-cos", "max_abs", "max_rel", "rmse", "mism", "worst", "note"} == _left_out(below, 30)


def test_elide_middle():
    assert elide_middle("abcdefghij", 10) == "abcdefghij"
    assert elide_middle("abcdefghij", 7) == "abc…hij"
    assert len(elide_middle("x" * 65, 32)) == 32
