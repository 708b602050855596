"""The README's numbers are produced by the code they describe: the quickstart runs as printed and prints what
the README shows; `megadump compare test gold --by owner` on its dumps gives the figures quoted. The README stays
short, says what `megadump --help` says about exit statuses, names only commands that exist, links only pages
that exist, and its quickstart is the documentation's; the documentation's compare rules are `compare --help`'s.

Integers and names are compared exactly; floats within 1e-3 relative (the README rounds them to 4 digits,
and one ulp differs between CPUs)."""

from __future__ import annotations

import math
from pathlib import Path
import re
import subprocess
import sys

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
_NUMBER = re.compile(r"^-?\d+(\.\d+)?(e[-+]?\d+)?$")


def _block(after: str, lang: str) -> str:
    start = README.index(after)
    return re.search(rf"```{lang}\n(.*?)```", README[start:], re.S).group(1)


def _same_line(got: str, want: str) -> bool:
    a, b = got.split(), want.split()
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if _NUMBER.match(x) and _NUMBER.match(y) and "." in x + y:
            if not math.isclose(float(x), float(y), rel_tol=1e-3, abs_tol=0):
                return False
        elif x != y:
            return False
    return True


def _matches(got: list[str], want: list[str]) -> bool:
    """The README lines match the output's in order; a ``...`` line stands for any lines."""
    i, skipping = 0, False
    for line in want:
        if line.strip() == "...":
            skipping = True
            continue
        while skipping and i < len(got) and not _same_line(got[i], line):
            i += 1
        if i == len(got) or not _same_line(got[i], line):
            return False
        i, skipping = i + 1, False
    return True


def test_the_quickstart_prints_what_the_readme_shows(tmp_path: Path) -> None:
    code = _block("## Quickstart", "python")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == _block("## Quickstart", "text").rstrip("\n").splitlines()
    assert (tmp_path / "ys.png").stat().st_size > 1000
    # the path the README opens with plain xarray exists, and the by-owner figures are the code's own
    task = tmp_path / "gold/rank_0/window_0000/invocation_000000_forward/stages/expert_up/task_000000"
    assert (task / "zarr.json").is_file()
    want = _block("```text\n$ megadump compare test gold --by owner", "text").splitlines()[1:]
    done = subprocess.run(
        [sys.executable, "-m", "megadump_zarr.cli.main", "compare", "test", "gold", "--by", "owner"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={"COLUMNS": "120", "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 1, done.stderr
    assert _matches(done.stdout.splitlines(), want), done.stdout


def test_the_line_matcher_can_fail() -> None:
    assert _same_line("expert_down 2 4 2 2 0.08342 30.86 ys", "expert_down 2 4 2 2 0.08342 30.86 ys")
    assert _same_line("x 0.083421", "x 0.08342")
    assert not _same_line("expert_down 2 4 2 2 0.06861 16.72 ys", "expert_down 2 4 2 2 0.08342 30.86 ys")
    assert not _same_line("x 5 ys", "x 4 ys")
    assert not _matches(["a 1", "b 2"], ["a 1", "c 2"])
    assert _matches(["a 1", "z", "b 2"], ["a 1", "...", "b 2"])


def test_the_readme_is_short() -> None:
    assert len(README.splitlines()) <= 300


def test_the_exit_status_is_the_one_help_prints() -> None:
    from megadump_zarr.cli.main import EXIT_RULE

    assert EXIT_RULE in README.splitlines()
    assert EXIT_RULE in (REPO / "docs" / "reference" / "cli.md").read_text().splitlines()


def test_the_readme_names_only_commands_that_exist() -> None:
    from megadump_zarr.cli.main import build_parser

    commands = set(build_parser()._subparsers._group_actions[0].choices)
    listed = _block("## The command line", "text")
    named = set()
    for line in listed.splitlines():
        words = line.split("  ")[0].split()
        named.update(word for word in words[1:] if word != "|" and word.islower() and not word.startswith("-"))
    named -= {"a", "b", "root", "dump", "buffer"}
    assert named and named <= commands, sorted(named - commands)


def test_the_readme_links_pages_that_exist() -> None:
    links = re.findall(r"\]\(((?:docs/|CHANGELOG)[^)#]*)", README)
    assert len(links) > 10
    missing = [link for link in links if not (REPO / link).exists()]
    assert missing == []


def test_the_quickstart_is_the_documentations() -> None:
    page = (REPO / "docs" / "quickstart.md").read_text()
    first = re.search(r"```python\n(.*?)```", page, re.S).group(1)
    assert first == _block("## Quickstart", "python")


def test_the_compare_rules_page_prints_what_compare_help_prints() -> None:
    from megadump_zarr.analyse.verdict import RULES_TEXT

    page = (REPO / "docs" / "reference" / "compare-rules.md").read_text()
    shown = re.search(r"```text\n(verdict rules.*?)```", page, re.S).group(1)
    assert shown.rstrip("\n") == RULES_TEXT
