"""Every ```python block of every documentation page runs as written (sybil), so no snippet goes stale.

A page's blocks run in order, in one namespace, in a fresh empty working directory: a block that needs a
dump makes it first on the same page. ``console``, ``text`` and ``bash`` blocks are shown, not run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sybil import Sybil
from sybil.parsers.myst import PythonCodeBlockParser, SkipParser

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = sorted(path for path in DOCS.rglob("*.md") if "_build" not in path.parts)


def _examples(page: Path) -> list:
    sybil = Sybil(parsers=[PythonCodeBlockParser(), SkipParser()], path=str(DOCS))
    return list(sybil.parse(page))


CODE_PAGES = [page for page in PAGES if "```python" in page.read_text(encoding="utf-8")]


def test_the_pages_are_found() -> None:
    names = {path.relative_to(DOCS).as_posix() for path in PAGES}
    assert {"index.md", "guides/own-kernel.md", "guides/integrate-runtime.md", "quickstart.md"} <= names
    code = {path.relative_to(DOCS).as_posix() for path in CODE_PAGES}
    assert {"guides/own-kernel.md", "guides/integrate-runtime.md", "quickstart.md"} <= code


@pytest.mark.parametrize("page", CODE_PAGES, ids=lambda path: path.relative_to(DOCS).as_posix())
def test_python_blocks_run_as_written(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    examples = _examples(page)
    assert examples, f"{page.name} holds a python block that sybil does not find"
    monkeypatch.chdir(tmp_path)
    for example in examples:
        try:
            example.evaluate()
        except Exception as error:
            raise AssertionError(
                f"{page.relative_to(DOCS)} line {example.line}: {type(error).__name__}: {error}"
            ) from error


def test_a_failing_block_fails(tmp_path: Path) -> None:
    page = tmp_path / "bad.md"
    page.write_text("# bad\n\n```python\nassert 1 == 2, 'the block ran'\n```\n\n```text\nnot run\n```\n")
    examples = list(Sybil(parsers=[PythonCodeBlockParser()], path=str(tmp_path)).parse(page))
    assert len(examples) == 1
    with pytest.raises(AssertionError, match="the block ran"):
        examples[0].evaluate()
