"""Tables that fit: ``compare``, ``stats`` and ``ls`` at 120 and 80 columns, one line per record.

Real demo dumps (float32 and bfloat16, L0 and L1), the real CLI with ``COLUMNS`` set and no TTY (pytest
captures stdout).
"""

from __future__ import annotations

import io
import math
from pathlib import Path
import re
import shutil

from hypothesis import given, settings, strategies as st
import pandas as pd
import pytest

from megadump_zarr.cli.compare_table import one_minus_cos, worst_text
from megadump_zarr.cli.render import Column, compact, fit_table, print_fitted
from megadump_zarr.read import open_dump
from tests._layout import stored_record

_FOOTER = re.compile(
    r"^(\[\d+\] |columns left out|note \(every row\)|PASS|FAIL|first divergence|root cause|\d+ passing)"
)


@pytest.fixture(scope="module")
def bf16(tmp_path_factory: pytest.TempPathFactory):
    from megadump_zarr.demo.run import run_demo

    return run_demo(tmp_path_factory.mktemp("bf16") / "run", steps=2, dtype="bfloat16")


@pytest.fixture(scope="module")
def broken(demo, tmp_path_factory) -> tuple[Path, str]:
    """The demo's L1 dump with one late record (an expert_down output of invocation 2) shifted by +1."""
    copy = tmp_path_factory.mktemp("broken") / "l1"
    shutil.copytree(demo.roots["L1"], copy)
    records = open_dump(copy).records()
    row = records[
        (records["stage"] == "expert_down") & (records["io"] == "output") & (records["invocation"] == 2)
    ].iloc[-1]
    array, index = stored_record(copy, row["path"])
    array[index] = array[index] + 1.0
    return copy, row["path"]


def body(out: str) -> list[str]:
    """The row lines of the one fitted table in ``out``: after the header rule, up to the notes."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("─"))
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip() or _FOOTER.match(line):
            break
        rows.append(line)
    return rows


def assert_fits(out: str, width: int) -> None:
    # a location (ls's "open with xarray" lines) is printed whole, to paste, whatever the width
    too_long = [line for line in out.splitlines() if len(line) > width and not line.startswith("xr.open_zarr(")]
    assert not too_long, too_long
    assert "…" not in out  # nothing cut


@pytest.fixture
def columns(monkeypatch):
    def set_width(width: int) -> None:
        monkeypatch.setenv("COLUMNS", str(width))

    return set_width


@pytest.mark.parametrize("width", [120, 80])
@pytest.mark.parametrize("level", ["L0", "L1"])
def test_compare_rows_are_one_line_each(cli, demo, bf16, columns, width, level):
    columns(width)
    result = cli("compare", bf16.roots[level], demo.roots[level])
    assert result.code in (0, 1), result.err
    assert_fits(result.out, width)
    report = cli("compare", bf16.roots[level], demo.roots[level], "--json").json()
    rows = body(result.out)
    assert len(rows) == len(report["results"])
    failing = [r for r in report["results"] if r["verdict"] != "pass"]
    ordered = failing + [r for r in report["results"] if r["verdict"] == "pass"]  # failures first
    for line, record in zip(rows, ordered):
        assert line.split()[0] == record["verdict"] and f" {record['name']} " in line, (line, record)
    if width == 120:  # dtypes never cut, 1-cos in scientific notation
        assert any("bfloat16/float32" in line for line in rows)
        assert re.search(r"\d\.\d\de-\d\d", result.out)
        assert "0.9999" not in result.out
    notes = [line for line in result.out.splitlines() if re.match(r"^\[\d+\] ", line)]
    assert len(notes) == len({line.split(" ", 1)[1] for line in notes})  # each note printed once


def test_compare_failures_first_and_failures_only(cli, demo, broken, columns):
    copy, path = broken
    columns(120)
    result = cli("compare", copy, demo.roots["L1"])
    assert result.code == 1
    assert_fits(result.out, 120)
    rows = body(result.out)
    records = open_dump(demo.roots["L1"]).records()
    assert len(rows) == len(records)
    assert rows[0].split()[0] == "fail" and all(line.split()[0] == "pass" for line in rows[1:])
    row = records[records["path"] == path].iloc[0]
    assert f" {row['name']} " in rows[0] and f"t{row['task_id']}" in rows[0]
    (failing,) = [
        r for r in cli("compare", copy, demo.roots["L1"], "--json").json()["results"] if r["verdict"] != "pass"
    ]
    worst = ",".join(str(i) for i in failing["worst_index"])  # where in the tensor, and which owner and core
    assert f" {worst} o{row['owner_id']} {row['core_type']}{row['core_id']} " in rows[0]
    only = cli("compare", copy, demo.roots["L1"], "--failures-only")
    assert [line.split()[0] for line in body(only.out)] == ["fail"]
    assert f"{len(records) - 1} passing records not shown" in only.out


@pytest.mark.parametrize("width", [120, 80])
@pytest.mark.parametrize("command", ["ls", "stats"])
@pytest.mark.parametrize("level", ["L0", "L1"])
def test_ls_and_stats_rows_are_one_line_each(cli, demo, columns, width, command, level):
    columns(width)
    result = cli(command, demo.roots[level])
    assert result.code == 0, result.err
    assert_fits(result.out, width)
    rows = body(result.out)
    records = cli(command, demo.roots[level], "--json").json()
    assert len(rows) == len(records)
    for line, record in zip(rows, records):
        assert f"{record['name']} " in line + " ", (line, record)
    assert "every row: " in result.out.splitlines()[0]  # window 0 everywhere: said once


def test_stats_numbers_have_four_significant_digits(cli, demo, columns):
    columns(120)
    result = cli("stats", demo.roots["L0"], "--name", "x")
    records = cli("stats", demo.roots["L0"], "--name", "x", "--json").json()
    rows = body(result.out)
    assert len(rows) == len(records) == 2
    for line, record in zip(rows, records):
        assert f" {float(record['min']):.4g} " in line and f" {float(record['max']):.4g} " in line


def test_80_columns_leave_columns_out_and_say_which(cli, demo, bf16, columns):
    columns(80)
    result = cli("compare", bf16.roots["L1"], demo.roots["L1"])
    assert "columns left out to fit 80 columns:" in result.out
    header = result.out.splitlines()[
        [i for i, line in enumerate(result.out.splitlines()) if line.startswith("─")][0] - 1
    ]
    assert header.split()[:3] == ["verdict", "name", "where"] and "max_abs" in header


def test_fit_table_units():
    frame = pd.DataFrame(
        {
            "a": ["x", "y", "z"],
            "b": [1.23456789, 2.0, 3e-7],
            "c": ["same", "same", "same"],
            "n": ["long note one", "long note one", ""],
            "wide": ["w" * 50] * 3,
        }
    )
    columns = [
        Column("a"),
        Column("b", justify="right"),
        Column("c", hoist=True),
        Column("n", footnote=True),
        Column("wide", drop=1),
    ]
    fitted = fit_table(frame, columns, width=40)
    assert fitted.above == ["every row: c same"]
    assert fitted.dropped == ["wide"]
    assert "[1] long note one (2 rows)" in fitted.below
    assert fitted.headings == ["a", "b", "n"] and [c.header for c in fitted.table.columns] == ["a", "b", "n"]
    assert compact(1.23456789) == "1.235" and compact(3e-7) == "3e-07" and compact(2.0) == "2"
    stitched = {
        "worst_index": (3, 7),
        "worst_task_id": 4,
        "worst_owner_id": 2,
        "worst_core_type": "MIX",
        "worst_core_id": 5,
        "task_id": None,
    }
    assert worst_text(stitched) == "3,7 t4 o2 MIX5" and worst_text({**stitched, "task_id": 4}) == "3,7 o2 MIX5"
    assert one_minus_cos(0.999994) == "6.00e-06" and one_minus_cos(1.0) == "0" and one_minus_cos(None) == ""


def test_long_footnotes_fold_under_their_marker():
    """A note longer than the console (an L0 fault's tolerance + cosine reasons at 120 columns) folds at
    spaces with continuation lines indented under its text, never starting at column 0 like a new row."""
    long = (
        "128 of 592 not within rtol 1.3e-06 atol 1e-05 (max_abs 0.5), first mismatch at (3, 0); "
        "cosine 0.934958 < 0.99 with max_abs 0.5 > 0.001"
    )
    from rich.console import Console

    frame = pd.DataFrame({"name": ["ws", "ys", "out"], "n": [long, long + " ", "short"]})
    fitted = fit_table(frame, [Column("name"), Column("n", footnote=True)], width=60)
    console = Console(width=60, record=True, no_color=True, file=io.StringIO())
    print_fitted(console, fitted)
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 60
    first = next(i for i, line in enumerate(lines) if line.startswith("[1] "))
    second = next(i for i, line in enumerate(lines) if line.startswith("[2] "))
    continuation = lines[first + 1 : second]
    assert continuation and all(line.startswith("    ") and line[4] != " " for line in continuation)
    assert " ".join([lines[first][4:]] + [line.strip() for line in continuation]) == long
    assert lines[second + 1].startswith("    ")  # the second long note folds the same way


def test_compare_table_keeps_the_worst_element_and_leaves_uncompared_metrics_blank():
    """The bfloat16-vs-float32 demo rows at 120 columns (the issue's case): the worst element of each failing
    row stays on screen (max_rel goes first), and a shape_mismatch row shows blank metrics, not ``nan``."""
    from megadump_zarr.analyse.compare import RESULT_COLUMNS
    from megadump_zarr.cli.compare_table import compare_table

    base = dict.fromkeys(RESULT_COLUMNS)
    base.update(rank=0, window=0, kernel="moe_experts", level="L1", dtype_a="bfloat16", dtype_b="float32")
    rows = [
        {
            **base,
            "invocation": 0,
            "stage": "expert_up",
            "task_id": 0,
            "owner_id": 0,
            "core_type": "MIX",
            "core_id": 0,
            "io": "input",
            "index": 1,
            "name": "expert_counts",
            "dtype_a": "int64",
            "dtype_b": "int64",
            "shape_a": (4,),
            "shape_b": (4,),
            "verdict": "fail",
            "cosine": 0.9973,
            "max_abs": 1.0,
            "max_rel": 0.125,
            "rmse": 0.7,
            "mismatches": 2,
            "worst_index": (1,),
            "worst_owner_id": 0,
            "worst_core_type": "MIX",
            "worst_core_id": 0,
            "note": "2 of 4 elements differ, first at (1,)",
        },
        {
            **base,
            "invocation": 0,
            "stage": "expert_up",
            "task_id": 1,
            "owner_id": 1,
            "core_type": "MIX",
            "core_id": 1,
            "io": "input",
            "index": 0,
            "name": "xs",
            "shape_a": (13, 16),
            "shape_b": (12, 16),
            "verdict": "shape_mismatch",
            "cosine": math.nan,
            "max_abs": math.nan,
            "max_rel": math.nan,
            "rmse": math.nan,
            "note": "shape 13×16 vs 12×16; not compared",
        },
        {
            **base,
            "invocation": 1,
            "stage": "expert_up_bwd",
            "task_id": 15,
            "owner_id": 1,
            "core_type": "MIX",
            "core_id": 1,
            "io": "output",
            "index": 1,
            "name": "grad_w_up",
            "shape_a": (16, 16),
            "shape_b": (16, 16),
            "verdict": "fail",
            "cosine": 0.986478,
            "max_abs": 0.009289,
            "max_rel": 17.88,
            "rmse": 0.002,
            "mismatches": 0,
            "worst_index": (3, 9),
            "worst_owner_id": 1,
            "worst_core_type": "MIX",
            "worst_core_id": 1,
            "note": "cosine 0.986478 < 0.99 with max_abs 0.009289 > 0.001; dtype bfloat16 vs float32",
        },
        {
            **base,
            "invocation": 0,
            "stage": "expert_up",
            "task_id": 0,
            "owner_id": 0,
            "core_type": "MIX",
            "core_id": 0,
            "io": "input",
            "index": 0,
            "name": "xs",
            "shape_a": (8, 16),
            "shape_b": (8, 16),
            "verdict": "pass",
            "cosine": 0.9999955,
            "max_abs": 0.0174,
            "max_rel": 0.008256,
            "rmse": 0.003,
            "mismatches": 0,
            "note": "dtype bfloat16 vs float32",
        },
    ]
    fitted = compare_table(pd.DataFrame(rows, columns=list(RESULT_COLUMNS)), width=120)
    assert fitted.width <= 120 and "worst" in fitted.headings and "dtype" in fitted.headings
    lines = fitted.text().plain.splitlines()
    assert " 1 o0 MIX0 " in lines[2] and " 3,9 o1 MIX1 " in lines[4]
    assert lines[3].split()[:3] == ["shape_mismatch", "xs", "i0"] and "nan" not in lines[3]


@st.composite
def _frames(draw):
    n_columns = draw(st.integers(1, 6))
    n_rows = draw(st.integers(1, 8))
    text = st.text(alphabet="abcxyz_/×0123456789", min_size=0, max_size=25)
    number = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64), st.integers(-(10**9), 10**9))
    data, columns = {}, []
    for i in range(n_columns):
        values = draw(st.lists(draw(st.sampled_from([text, number])), min_size=n_rows, max_size=n_rows))
        data[f"c{i}"] = pd.Series(values, dtype=object)
        columns.append(
            Column(
                f"c{i}",
                hoist=draw(st.booleans()),
                footnote=draw(st.booleans()),
                drop=0 if i == 0 else draw(st.integers(0, 5)),
                justify=draw(st.sampled_from(["left", "right"])),
            )
        )
    return pd.DataFrame(data), columns


@settings(max_examples=200, deadline=None)
@given(_frames(), st.integers(20, 200))
def test_fitted_tables_never_exceed_the_width_they_report(frame_columns, width):
    from rich.console import Console

    frame, columns = frame_columns
    fitted = fit_table(frame, columns, width=width)
    if fitted.table is None:  # every cell blank or shared: nothing left to tabulate
        return
    kept = [c.header for c in fitted.table.columns]
    assert kept and not set(kept) & set(fitted.dropped)
    if any(c.drop == 0 for c in columns if c.heading in fitted.dropped):  # the last resort: only the first is left
        assert all(c.drop == 0 for c in columns if c.heading in kept) and (fitted.width <= width or len(kept) == 1)
    if fitted.dropped:  # every left-out column is named below the table
        assert any(", ".join(fitted.dropped) in line for line in fitted.below)
    console = Console(width=width, record=True, no_color=True, file=io.StringIO())
    console.print(fitted.table)
    lines = console.export_text().splitlines()
    if fitted.width <= width:
        assert max(len(line) for line in lines) == fitted.width
        assert len(lines) == len(frame) + 2  # header, rule, one line per row: no row wrapped
        assert "…" not in "\n".join(lines)
        fast = Console(width=width, record=True, no_color=True, file=io.StringIO())
        print_fitted(fast, fitted)  # the plain-lines path prints what rich's table layout prints
        printed = [line.rstrip() for line in fast.export_text().splitlines()]
        start = printed.index("─" * fitted.width) - 1  # after the shared values (which may wrap: not rows)
        assert printed[start : start + len(lines)] == [line.rstrip() for line in lines]
    else:  # only the first column remains, wider than the console: printed whole, never cut
        assert len(kept) == 1
        print_fitted(Console(width=width, file=io.StringIO()), fitted)


@pytest.fixture(scope="module")
def nonfinite(tmp_path_factory) -> Path:
    """An L0 dump whose last tensor (y = log(h - 1000)) is all NaN while x and h are finite."""
    import torch

    from megadump_zarr import TensorDumpConfig, tensor_dump
    from megadump_zarr.runtime import Graph, MegaKernel, OperatorNode, SplitSpec, TensorSpec

    specs = [TensorSpec(name, (4, 3), torch.float32, i, ("row", "col")) for i, name in enumerate(("x", "h", "y"))]

    def double(t) -> None:
        t.params[1][t.rows] = t.params[0][t.rows] * 2

    def log(t) -> None:
        t.params[2][t.rows] = torch.log(t.params[1][t.rows] - 1000)

    kernel = MegaKernel(
        Graph(
            [
                OperatorNode("double", "vector", (specs[0],), (specs[1],), double, SplitSpec(((0, 0),), (0,)), 2),
                OperatorNode("log", "vector", (specs[1],), (specs[2],), log, SplitSpec(((0, 0),), (0,)), 2),
            ]
        ),
        name="nan_maker",
        num_workers=2,
    )
    root = tmp_path_factory.mktemp("nonfinite") / "l0"
    with tensor_dump(TensorDumpConfig(root, level="L0")) as dumper:
        kernel.launch([torch.arange(12, dtype=torch.float32).reshape(4, 3), torch.zeros(4, 3), torch.zeros(4, 3)])
        dumper.step()
    return root


def test_stats_puts_records_with_nan_or_inf_first(cli, nonfinite, columns):
    columns(120)
    records = cli("stats", nonfinite, "--json").json()
    assert [r["name"] for r in records] == ["x", "h", "y"]  # JSON: execution order
    assert [r["nan_count"] for r in records] == [0, 0, 12]
    rows = body(cli("stats", nonfinite).out)
    assert [line.split()[0] for line in rows] == ["y", "x", "h"]  # the table: non-finite first
    assert [line.split()[0] for line in body(cli("stats", nonfinite, "--nonfinite").out)] == ["y"]
