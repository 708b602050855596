"""What ``compare``, ``ls``, ``stats`` and ``show`` say of truncated records (``max_bytes_per_tensor``): the rows
stored, statistics of the stored prefix labelled as such, and partial comparisons that exit 1 unless accepted."""

from __future__ import annotations

import pytest

from tests._truncated import write
from tests.cli._helpers import cli_runner


@pytest.fixture(scope="module")
def dumps(tmp_path_factory):
    base = tmp_path_factory.mktemp("truncated_cli")
    return write(base / "a", "beyond"), write(base / "b")


def test_compare_exits_1_on_a_partial_pass_unless_accepted(dumps, capsys, monkeypatch):
    run = cli_runner(capsys, monkeypatch)
    plain = run("compare", *dumps)
    assert plain.code == 1
    assert "FAIL: 8 pass_partial, 0 pass of 8 compared" in plain.out
    assert "compared 32 of 2048 rows (16384 of 1048576 elements)" in plain.out
    accepted = run("compare", *dumps, "--accept-partial")
    assert accepted.code == 0
    assert "PASS: 0 pass, 8 pass_partial accepted (--accept-partial) of 8 compared" in accepted.out
    bitwise = run("compare", *dumps, "--bitwise", "--accept-partial")
    assert bitwise.code == 2 and "--accept-partial does not apply" in bitwise.err


def test_ls_and_stats_show_how_much_was_stored(dumps, capsys, monkeypatch):
    run = cli_runner(capsys, monkeypatch)
    listing = run("ls", dumps[0])
    assert listing.code == 0 and "trunc 32/2048 rows" in listing.out
    stats = run("stats", dumps[0])
    assert stats.code == 0 and "stats of prefix" in stats.out
    assert "8 truncated records (stats of prefix): statistics of the stored elements only" in stats.out + stats.err
    rows = run("stats", dumps[0], "--json").json()
    assert {r["stats_scope"] for r in rows} == {"prefix"}


def test_show_counts_the_captured_rows(dumps, capsys, monkeypatch):
    run = cli_runner(capsys, monkeypatch)
    stitched = run("show", dumps[0], "a")
    assert stitched.code == 0 and "4 stitched along axis 0 (128 rows captured, 8064 missing)" in stitched.out
    info = run("show", dumps[0], "a", "--json").json()
    assert (info["captured_rows"], info["missing_rows"]) == (128, 8064)
    assert info["stats"]["nan_count"] == 0  # the padding is not the tensor's NaN
    path = info["paths"][0]
    one = run("show", dumps[0], path)
    assert "stats (stored, prefix only)" in one.out and "32 of 2048 rows whole" in one.out
