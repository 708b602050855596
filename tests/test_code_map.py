"""The code map (docs/reference/code-map.md) names the real tree: every sub-package and module of ``src/megadump_zarr``, and
nothing that is not there (a new, moved or renamed file fails here until the map says so)."""

from __future__ import annotations

from pathlib import Path
import re

REPO = Path(__file__).resolve().parents[1]
ROOT = REPO / "src" / "megadump_zarr"


def _mapped() -> list[str]:
    page = (REPO / "docs" / "reference" / "code-map.md").read_text()
    block = re.search(r"```text\n(.*?)```", page, re.S).group(1)
    return [line.split()[0] for line in block.splitlines() if line.strip()]


def _tree() -> list[str]:
    names = []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT).as_posix()
        names.append(rel[: -len("__init__.py")] if rel.endswith("/__init__.py") else rel)
    return names


def test_the_code_map_names_every_file_once() -> None:
    mapped = _mapped()
    assert len(mapped) == len(set(mapped)), sorted(name for name in mapped if mapped.count(name) > 1)
    assert sorted(set(_tree()) - set(mapped)) == [], "add these to docs/reference/code-map.md"
    assert sorted(set(mapped) - set(_tree())) == [], "these are in docs/reference/code-map.md but not in the tree"
