"""Guard: a test that reads a stored fixture (``tests/**/data/``) never asserts exact float equality unmarked.

A stored fixture's floats were computed on another machine; a fresh run may differ by an ulp (another CPU
capability, thread count or BLAS), so ``make test`` went red on an AVX-512 machine (issue 22). In every
test file that builds a path to a ``data`` fixture directory, the exact-equality forms below are refused
unless one of the lines of its (simple) statement carries a marker comment saying why exact is right:
``# exact: stored bytes`` (both sides read from stored files) or ``# exact: integers``.

Refused forms: ``assert_array_equal``, ``array_equal``, ``assert_equal``, ``assert_identical``,
``assert_frame_equal`` without ``check_exact=False``, ``x.tobytes() == ...`` and ``(... max_abs ... == 0)``.
"""

from __future__ import annotations

import ast
from pathlib import Path
import re

TESTS = Path(__file__).parent
MARKER = re.compile(r"#\s*exact:\s*\S")
EXACT_CALLS = {"assert_array_equal", "array_equal", "assert_equal", "assert_identical", "assert_frame_equal"}


def reads_a_fixture(tree: ast.AST) -> bool:
    """Whether the module builds a path to a ``data`` fixture directory (``... / "data"`` or ``".../data/..."``).

    Args:
        tree: The parsed module.
    """
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            if any(isinstance(s, ast.Constant) and s.value == "data" for s in (node.left, node.right)):
                return True
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.search(r"(^|/)data/\w", node.value):
            return True
    return False


def _name(func: ast.AST) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _mentions(node: ast.AST, word: str) -> bool:
    return any(
        (isinstance(n, ast.Constant) and n.value == word)
        or (isinstance(n, ast.Attribute) and n.attr == word)
        or (isinstance(n, ast.Name) and n.id == word)
        for n in ast.walk(node)
    )


def _exact(node: ast.AST) -> str | None:
    """The refused form ``node`` is, or None."""
    if isinstance(node, ast.Call) and _name(node.func) in EXACT_CALLS:
        if _name(node.func) == "assert_frame_equal" and any(
            k.arg == "check_exact" and isinstance(k.value, ast.Constant) and k.value.value is False
            for k in node.keywords
        ):
            return None
        return _name(node.func)
    if isinstance(node, ast.Compare) and any(isinstance(op, ast.Eq) for op in node.ops):
        sides = [node.left, *node.comparators]
        if any(isinstance(s, ast.Call) and _name(s.func) == "tobytes" for s in sides):
            return ".tobytes() =="
        if _mentions(node.left, "max_abs") and any(
            isinstance(c, ast.Constant) and c.value == 0 for c in node.comparators
        ):
            return "max_abs == 0"
    return None


def violations(source: str, filename: str) -> list[str]:
    """``file:line: form`` for every unmarked exact-equality form of a fixture-reading test module.

    Args:
        source: The module's text.
        filename: Names it in the result.
    """
    tree = ast.parse(source, filename)
    if not reads_a_fixture(tree):
        return []
    lines = source.splitlines()
    statements = {}
    for stmt in ast.walk(tree):
        if isinstance(stmt, ast.stmt):
            for n in ast.walk(stmt):
                if hasattr(n, "lineno"):
                    statements[id(n)] = stmt  # the innermost statement (walk goes outside in)
    found = []
    for node in ast.walk(tree):
        form = _exact(node)
        if form is None:
            continue
        stmt = statements.get(id(node))
        # Any line of the form itself: a formatter may spread one call over several lines.
        candidates = set(range(node.lineno, getattr(node, "end_lineno", node.lineno) + 1))
        if stmt is not None and not isinstance(stmt, (ast.FunctionDef, ast.For, ast.With, ast.If, ast.While, ast.Try)):
            candidates |= set(range(stmt.lineno, getattr(stmt, "end_lineno", stmt.lineno) + 1))
        if not any(MARKER.search(lines[n - 1]) for n in candidates):
            found.append(f"{filename}:{node.lineno}: {form}")
    return sorted(set(found), key=lambda v: (v.split(":")[0], int(v.split(":")[1])))


def test_no_test_asserts_exact_float_equality_against_a_stored_fixture_unmarked():
    scanned, found = 0, []
    for path in sorted(TESTS.rglob("*.py")):
        if "data" in path.relative_to(TESTS).parts[:-1]:
            continue  # the fixtures' own generators
        source = path.read_text()
        scanned += bool(reads_a_fixture(ast.parse(source)))
        found += violations(source, str(path.relative_to(TESTS.parent)))
    assert scanned >= 3  # test_schema5, test_schema6, test_schema7 at least
    assert not found, (
        "exact float equality against a stored fixture (mark '# exact: stored bytes' if both "
        "sides are stored, else compare within tolerance):\n" + "\n".join(found)
    )


BAD = """
from pathlib import Path
import numpy as np
DATA = Path(__file__).parent / "data" / "schema6"

def test_fresh(stored, fresh):
    np.testing.assert_array_equal(stored.values, fresh.values)
    assert a.tobytes() == b.tobytes()
    assert (result["max_abs"] == 0).all()
    pd.testing.assert_frame_equal(a, b)
    xr.testing.assert_identical(
        a, b)
    np.testing.assert_array_equal(a, b)  # exact: stored bytes
    np.testing.assert_array_equal(  # exact: integers
        a, b)
    pd.testing.assert_frame_equal(a, b, check_exact=False, rtol=1e-5)
    np.testing.assert_allclose(a, b, rtol=1e-5)
"""


def test_the_lint_fires_on_each_bad_form_and_names_file_and_line():
    assert violations(BAD, "tests/x.py") == [
        "tests/x.py:7: assert_array_equal",
        "tests/x.py:8: .tobytes() ==",
        "tests/x.py:9: max_abs == 0",
        "tests/x.py:10: assert_frame_equal",
        "tests/x.py:11: assert_identical",
    ]


def test_the_lint_ignores_files_that_read_no_fixture():
    assert violations(BAD.replace('/ "data" /', '/ "other" /'), "tests/y.py") == []
    assert violations('P = "tests/read/data/schema5"\nassert a.tobytes() == b\n', "tests/z.py") == [
        "tests/z.py:2: .tobytes() =="
    ]
