"""Every test the promises page (docs/promises.md) names exists: its file, and its function or class when a
``::name`` is given, so a promise never points at a renamed or deleted test."""

from __future__ import annotations

import ast
from pathlib import Path
import re

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "promises.md"
NODE = re.compile(r"`(tests/[\w/]+\.py(?:::\w+)*)`")


def named_tests(text: str) -> list[str]:
    """The test node ids (``tests/x.py`` or ``tests/x.py::name``) written in backticks on a page."""
    return NODE.findall(text)


def missing(node: str, repo: Path = REPO) -> str | None:
    """Why ``node`` does not exist (None when it does): the file, or a name in it, is absent."""
    file, *names = node.split("::")
    path = repo / file
    if not path.is_file():
        return f"{node}: no file {file}"
    scope: list[ast.stmt] = ast.parse(path.read_text(encoding="utf-8")).body
    for name in names:
        found = [
            n for n in scope if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == name
        ]
        if not found:
            return f"{node}: no {name} in {file}"
        scope = found[0].body if isinstance(found[0], ast.ClassDef) else []
    return None


def test_every_promise_names_tests_that_exist() -> None:
    text = PAGE.read_text(encoding="utf-8")
    nodes = named_tests(text)
    assert len(nodes) > 100, "the promises page lost its tests"
    problems = [why for why in map(missing, nodes) if why]
    assert problems == []


def test_every_promise_row_names_a_test() -> None:
    rows = [line for line in PAGE.read_text(encoding="utf-8").splitlines() if line.startswith("| **")]
    assert rows and all(named_tests(row) for row in rows)


def test_a_renamed_test_is_found(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("class TestA:\n    def test_b(self): ...\n\ndef test_c(): ...\n")
    assert missing("tests/test_x.py::test_c", tmp_path) is None
    assert missing("tests/test_x.py::TestA::test_b", tmp_path) is None
    assert "no test_d" in missing("tests/test_x.py::test_d", tmp_path)
    assert "no file" in missing("tests/test_y.py", tmp_path)
