"""The layer contract (``tests/_layers.py``): no new import goes up the data path.

``KNOWN`` lists the upward edges that were there when the rule began (issue 25 names each); the test
fails on any other upward edge, naming the file and line, and on a listed edge that is gone (so the list
only shrinks).
"""

from __future__ import annotations

from pathlib import Path
import textwrap

import pytest

from tests._layers import (
    Edge,
    cycle_path,
    file_cycles,
    file_graph,
    forbidden_edges,
    room_cycles,
    room_graph,
    upward_edges,
    upward_file_edges,
)

ROOT = Path(__file__).resolve().parents[1] / "src" / "megadump_zarr"

KNOWN: set[tuple[str, str]] = set()
"""Upward edges still allowed between rooms (none: keep it empty)."""


def test_no_new_upward_import() -> None:
    edges = upward_edges(ROOT)
    new = [str(edge) for edge in edges if (edge.source, edge.target) not in KNOWN]
    assert not new, "imports against the layers (docs/reference/code-map.md):\n" + "\n".join(new)


def test_known_edges_are_still_there() -> None:
    present = {(edge.source, edge.target) for edge in upward_edges(ROOT)}
    gone = sorted(KNOWN - present)
    assert not gone, f"remove these from tests/test_layers.py KNOWN, they are fixed: {gone}"


KNOWN_CYCLES: list[tuple[str, ...]] = []


def test_no_new_cycle_between_rooms() -> None:
    assert room_cycles(room_graph(ROOT)) == KNOWN_CYCLES


def test_a_cycle_is_found(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "cli/__init__.py": "from megadump_zarr.report import x\n",
            "report/__init__.py": "def f():\n    from megadump_zarr.cli import common\n",
        },
    )
    assert room_cycles(room_graph(root)) == [("cli", "report")]


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "megadump_zarr"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def test_a_deliberate_upward_import_is_named(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "store/__init__.py": "",
            "store/writer.py": "def f():\n    from megadump_zarr.read.dump import open_dump  # lazy, still an edge\n",
            "read/__init__.py": "",
            "read/dump.py": "from megadump_zarr.store import writer\nfrom ..store.writer import f\n",
        },
    )
    assert upward_edges(root) == [Edge("store/writer.py", "megadump_zarr.read.dump", 2)]
    assert str(upward_edges(root)[0]) == (
        "src/megadump_zarr/store/writer.py:2 imports megadump_zarr.read.dump (a higher layer)"
    )


def test_relative_and_package_imports_count(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "l1/__init__.py": "from .. import analyse\n",
            "l1/format.py": "from ..dump import config\n",
            "analyse/__init__.py": "",
            "dump/__init__.py": "",
            "dump/config.py": "",
        },
    )
    assert sorted((e.source, e.target) for e in upward_edges(root)) == [
        ("l1/__init__.py", "megadump_zarr.analyse"),
        ("l1/format.py", "megadump_zarr.dump"),
    ]


def test_an_unplaced_room_is_refused(tmp_path: Path) -> None:
    root = _package(tmp_path, {"__init__.py": "", "mystery/__init__.py": ""})
    with pytest.raises(ValueError, match="room 'mystery' has no rank"):
        upward_edges(root)


def test_an_upward_import_added_to_the_real_tree_fails(tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "megadump_zarr"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert upward_edges(copy) == [] and room_cycles(room_graph(copy)) == []  # the copy is the tree as it is
    target = copy / "read" / "dump.py"
    lines = target.read_text().splitlines()
    target.write_text("\n".join([*lines, "def _report():", "    from megadump_zarr.report import render_html", ""]))
    assert [str(edge) for edge in upward_edges(copy)] == [
        f"src/megadump_zarr/read/dump.py:{len(lines) + 2} imports megadump_zarr.report (a higher layer)"
    ]
    cycles = room_cycles(room_graph(copy))  # report reads dumps (through analyse): the new edge closes a loop
    assert len(cycles) == 1 and {"read", "report"} <= set(cycles[0]), cycles


def test_no_forbidden_import() -> None:
    found = [str(edge) for edge in forbidden_edges(ROOT)]
    assert not found, "imports the house forbids (tests/_layers.py FORBIDDEN):\n" + "\n".join(found)


def test_store_or_interop_importing_the_dumper_fails(tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "megadump_zarr"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert forbidden_edges(copy) == []
    for name, line in (
        ("store/writer.py", "from megadump_zarr.dump.window import build_window"),
        ("interop/legacy.py", "    from megadump_zarr.dump import config"),
        ("layout/names.py", "from megadump_zarr.codecs import DEFAULT_COMPRESSOR"),
    ):
        target = copy / name
        lines = target.read_text().splitlines()
        body = [line] if not line.startswith(" ") else ["def _late():", line]
        target.write_text("\n".join([*lines, *body, ""]))
    found = [str(edge) for edge in forbidden_edges(copy)]
    assert len(found) == 3, found
    assert found[0].startswith("src/megadump_zarr/interop/legacy.py:") and "imports megadump_zarr.dump " in found[0]
    assert "src/megadump_zarr/layout/names.py:" in found[1] and "layout/ is a leaf" in found[1]
    assert "src/megadump_zarr/store/writer.py:" in found[2] and "megadump_zarr.dump.window" in found[2]
    assert upward_edges(copy) == []  # the ranks alone allow all three: only FORBIDDEN names them


# --- files ---------------------------------------------------------------------------------------------


def test_no_import_cycle_between_files() -> None:
    graph = file_graph(ROOT)
    found = [f"{', '.join(group)}: {cycle_path(graph, group)}" for group in file_cycles(graph)]
    assert not found, "import cycles between files (file:line of each import):\n" + "\n".join(found)


def test_no_upward_import_between_files() -> None:
    found = upward_file_edges(file_graph(ROOT))
    assert not found, "imports against the layers:\n" + "\n".join(found)


def test_nothing_inside_imports_the_package_root() -> None:
    graph = file_graph(ROOT)
    found = sorted(
        f"src/megadump_zarr/{source}:{targets['__init__.py']}"
        for source, targets in graph.items()
        if "__init__.py" in targets
    )
    assert not found, "the package root is the top: nothing in it imports it:\n" + "\n".join(found)


def test_a_file_cycle_is_found_through_lazy_and_importlib_imports(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "store/__init__.py": "",
            "store/a.py": "from megadump_zarr.store.b import f\n",
            "store/b.py": "def f():\n    from . import c\n",
            "store/c.py": "import importlib\n\ndef g():\n    return importlib.import_module('megadump_zarr.store.a')\n",
            "store/d.py": "from megadump_zarr.store import a\n",
        },
    )
    graph = file_graph(root)
    assert file_cycles(graph) == [("store/a.py", "store/b.py", "store/c.py")]
    assert cycle_path(graph, ("store/a.py", "store/b.py", "store/c.py")) == (
        "store/a.py:1 -> store/b.py:2 -> store/c.py:4 -> store/a.py"
    )


def test_a_dunder_import_upward_is_named(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "read/__init__.py": "",
            "read/dump.py": "def verify(self):\n    return __import__('megadump_zarr.verify').verify\n",
            "verify/__init__.py": "from megadump_zarr import __version__\n",
        },
    )
    assert upward_file_edges(file_graph(root)) == [
        "src/megadump_zarr/read/dump.py:2 imports verify/__init__.py (a higher layer)",
        "src/megadump_zarr/verify/__init__.py:1 imports __init__.py (a higher layer)",
    ]


def test_a_from_import_of_the_root_counts_as_importing_it(tmp_path: Path) -> None:
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "analyse/__init__.py": "",
            "report/__init__.py": "def f():\n    from megadump_zarr import analyse\n",
        },
    )
    assert file_graph(root)["report/__init__.py"] == {"__init__.py": 2, "analyse/__init__.py": 2}
