"""The package's layer contract, checked from the source (an AST walk: no module is imported).

Imports go one way along the data path (README, "Code map")::

    leaves (codecs, _version, _parallel, tables, tensor_arrays, layout) -> l1 -> diagnostics -> runtime -> dump
        -> store -> read -> verify
        -> analyse -> replay -> api (the capture composition root) -> demo (the embedded model)
        -> faces (cli, report, engine) and the edge (interop, transfer) -> the package's __init__

A module may import a module of its own rank or below. Every import counts, the ones inside functions
too (a lazy import is still a dependency). :func:`file_graph` is the same walk between files, with literal
``importlib.import_module("...")``/``__import__("...")`` calls counted as imports: ``tests/test_layers.py``
refuses any cycle between two files and any upward edge between files. ``tests/test_layers.py`` runs :func:`upward_edges` over
``src/megadump_zarr`` against the list of edges that were already there when the rule began
(issue 25 removes them); a new upward edge fails the suite naming the importing file and line.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "megadump_zarr"

RANKS: dict[str, int] = {
    "codecs": 0,
    "_version": 0,
    "_parallel": 0,
    "tables": 0,
    "tensor_arrays": 0,
    "layout": 0,
    "l1": 1,
    "diagnostics": 2,
    "runtime": 3,
    "dump": 4,
    "store": 5,
    "read": 6,
    "verify": 7,
    "migrate": 7,
    "analyse": 8,
    "replay": 9,
    "api": 10,
    "demo": 11,
    "cli": 12,
    "report": 12,
    "engine": 12,
    "interop": 12,
    "transfer": 12,
    "__init__": 13,
}
"""Rank of each top-level room of the package (a sub-package or a top-level module)."""


@dataclass(frozen=True, order=True)
class Edge:
    """One import that goes up the layers.

    Args:
        source: The importing module's room and path inside the package (``read/dump.py``).
        target: The imported module (``megadump_zarr.verify``).
        line: The import's line in the source file.
    """

    source: str
    target: str
    line: int

    def __str__(self) -> str:
        return f"src/{PACKAGE}/{self.source}:{self.line} imports {self.target} (a higher layer)"


def room_of(module: str) -> str:
    """The top-level room of a dotted module name inside the package (``megadump_zarr.read.dump`` -> ``read``).

    Args:
        module: A dotted name starting with the package name.
    """
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(tree: ast.AST, module: str, is_package: bool) -> list[tuple[str, int]]:
    """Every module of the package that a parsed source imports, with the line.

    Args:
        tree: The parsed source.
        module: The source's own dotted name (for relative imports).
        is_package: Whether the source is a package's ``__init__``.
    """
    found: list[tuple[str, int]] = []
    base = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                target = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from megadump_zarr import read` imports the sub-package `read`, not the package's __init__.
            rooms = [alias.name for alias in node.names if alias.name in RANKS] if target == PACKAGE else []
            if rooms and len(rooms) == len(node.names):
                found += [(f"{PACKAGE}.{name}", node.lineno) for name in rooms]
            else:
                found.append((target, node.lineno))
    return [(name, line) for name, line in found if name == PACKAGE or name.startswith(PACKAGE + ".")]


def upward_edges(root: Path) -> list[Edge]:
    """Every import in the package under ``root`` whose target ranks above its source.

    Args:
        root: The package directory (``src/megadump_zarr``).

    Raises:
        ValueError: A room of the package that :data:`RANKS` does not place (name it there first).
    """
    edges: list[Edge] = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        parts = list(rel.with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        module = ".".join([PACKAGE, *parts[:-1]] if is_package else [PACKAGE, *parts])
        source_room = parts[0] if len(parts) > 1 else parts[0]
        if source_room not in RANKS:
            raise ValueError(f"{path}: room {source_room!r} has no rank in tests/_layers.py RANKS")
        tree = ast.parse(path.read_text(), filename=str(path))
        for target, line in _imports(tree, module, is_package):
            target_room = room_of(target)
            if target_room not in RANKS:
                raise ValueError(f"{path}:{line}: imports {target}, whose room has no rank in RANKS")
            if RANKS[target_room] > RANKS[source_room]:
                edges.append(Edge(rel.as_posix(), target, line))
    return edges


FORBIDDEN: dict[str, tuple[frozenset[str], str]] = {
    "store": (frozenset({"dump"}), "the store takes the write model from layout/, never from the dumper"),
    "interop": (frozenset({"dump"}), "importers write through layout/ and the store, never through the dumper"),
    "layout": (frozenset(RANKS) - {"layout", "_version"}, "layout/ is a leaf: stdlib, numpy and _version only"),
}
"""Edges the ranks allow but the house does not (issue 25): source room -> (target rooms, why)."""


@dataclass(frozen=True, order=True)
class ForbiddenEdge:
    """One import that :data:`FORBIDDEN` refuses, whatever the ranks say.

    Args:
        source: The importing module's path inside the package (``store/writer.py``).
        target: The imported module (``megadump_zarr.dump.window``).
        line: The import's line in the source file.
        why: The rule's reason.
    """

    source: str
    target: str
    line: int
    why: str

    def __str__(self) -> str:
        return f"src/{PACKAGE}/{self.source}:{self.line} imports {self.target} (forbidden: {self.why})"


def forbidden_edges(root: Path) -> list[ForbiddenEdge]:
    """Every import in the package under ``root`` that :data:`FORBIDDEN` refuses (lazy ones included).

    Args:
        root: The package directory (``src/megadump_zarr``).
    """
    found: list[ForbiddenEdge] = []
    for path in sorted(root.rglob("*.py")):
        module, is_package = _module_of(root, path)
        rel = path.relative_to(root)
        targets, why = FORBIDDEN.get(rel.parts[0] if len(rel.parts) > 1 else rel.stem, (frozenset(), ""))
        if not targets:
            continue
        for target, line in _imports(ast.parse(path.read_text(), filename=str(path)), module, is_package):
            if room_of(target) in targets:
                found.append(ForbiddenEdge(rel.as_posix(), target, line, why))
    return found


def room_graph(root: Path) -> dict[str, set[str]]:
    """Which rooms each room imports (every import, lazy ones included; a room's imports of itself left out).

    Args:
        root: The package directory (``src/megadump_zarr``).
    """
    graph: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        module = ".".join([PACKAGE, *parts[:-1]] if is_package else [PACKAGE, *parts])
        source = parts[0]
        for target, _line in _imports(ast.parse(path.read_text(), filename=str(path)), module, is_package):
            if room_of(target) != source:
                graph.setdefault(source, set()).add(room_of(target))
    return graph


def room_cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The strongly connected groups of more than one room (each a cycle of imports), sorted.

    Args:
        graph: From :func:`room_graph`.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[tuple[str, ...]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                groups.append(tuple(sorted(group)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(groups)


@dataclass(frozen=True, order=True)
class PrivateImport:
    """One ``from megadump_zarr.x import _name`` of another module's private name.

    Args:
        source: The importing module's path inside the package (``cli/main.py``).
        target: The module the name comes from (``megadump_zarr.store.redact``).
        name: The private name (``_Scrubber``).
        line: The import's line in the source file.
    """

    source: str
    target: str
    name: str
    line: int

    def __str__(self) -> str:
        return f"src/{PACKAGE}/{self.source}:{self.line} imports {self.name} from {self.target} (a private name)"


def _module_of(root: Path, path: Path) -> tuple[str, bool]:
    """The dotted module name of a source file below ``root``, and whether it is a package's ``__init__``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    return ".".join([PACKAGE, *parts[:-1]] if is_package else [PACKAGE, *parts]), is_package


def private_imports(root: Path) -> list[PrivateImport]:
    """Every ``from <module of the package> import _name`` whose module is not the importing one.

    A module's private names (one leading underscore; dunders are not private) are its own business: used
    from another module they are an interface without the name of one. Private *modules* (``_version``,
    ``_parallel``) are package leaves and may be imported; their private names may not.

    Args:
        root: The package directory (``src/megadump_zarr``).
    """
    found: list[PrivateImport] = []
    for path in sorted(root.rglob("*.py")):
        module, is_package = _module_of(root, path)
        base = module.split(".") if is_package else module.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                target = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target != PACKAGE and not target.startswith(PACKAGE + ".") or target == module:
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(PrivateImport(path.relative_to(root).as_posix(), target, alias.name, node.lineno))
    return found


# --- files -----------------------------------------------------------------------------------------------

_DYNAMIC_IMPORTERS = frozenset({"import_module", "__import__"})
"""Call names whose string-literal first argument is an import (``importlib.import_module("...")``)."""


def _dynamic_imports(tree: ast.AST) -> list[tuple[str, int]]:
    """Every ``import_module("x")``/``importlib.import_module("x")``/``__import__("x")`` with a literal name.

    Args:
        tree: The parsed source.
    """
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        first = node.args[0]
        if name in _DYNAMIC_IMPORTERS and isinstance(first, ast.Constant) and isinstance(first.value, str):
            found.append((first.value, node.lineno))
    return [(name, line) for name, line in found if name == PACKAGE or name.startswith(PACKAGE + ".")]


def _module_files(root: Path) -> dict[str, str]:
    """Dotted module name -> file path inside the package (``megadump_zarr.read`` -> ``read/__init__.py``).

    Args:
        root: The package directory (``src/megadump_zarr``).
    """
    return {_module_of(root, path)[0]: path.relative_to(root).as_posix() for path in sorted(root.rglob("*.py"))}


def _file_targets(tree: ast.AST, module: str, is_package: bool, files: dict[str, str]) -> list[tuple[str, int]]:
    """The files of the package that one parsed source imports by name, with the line.

    ``from a.b import c`` reaches ``a/b/c.py`` when that is a module, else ``a/b/__init__.py`` (or ``a/b.py``);
    a package's ``__init__`` that Python runs on the way to a sub-module is not counted (it is not named),
    except the package root's: ``from megadump_zarr import x`` names the root and counts as importing it.

    Args:
        tree: The parsed source.
        module: The source's own dotted name (for relative imports).
        is_package: Whether the source is a package's ``__init__``.
        files: From :func:`_module_files`.
    """
    base = module.split(".") if is_package else module.split(".")[:-1]
    named: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            named += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                target = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == PACKAGE:  # `from megadump_zarr import x` runs the root's __init__ for `x`
                named.append((PACKAGE, node.lineno))
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                named.append((sub if sub in files else target, node.lineno))
    named += _dynamic_imports(tree)
    return [(files[name], line) for name, line in named if name in files]


def file_graph(root: Path) -> dict[str, dict[str, int]]:
    """Which files each file of the package imports (lazy, ``TYPE_CHECKING`` and literal ``importlib`` ones too).

    Args:
        root: The package directory (``src/megadump_zarr``).

    Returns:
        source file -> {imported file: first line that imports it}; a file's import of itself is left out.
    """
    files = _module_files(root)
    graph: dict[str, dict[str, int]] = {}
    for path in sorted(root.rglob("*.py")):
        module, is_package = _module_of(root, path)
        source = path.relative_to(root).as_posix()
        edges = graph.setdefault(source, {})
        for target, line in _file_targets(ast.parse(path.read_text(), filename=str(path)), module, is_package, files):
            if target != source:
                edges.setdefault(target, line)
    return graph


def file_cycles(graph: dict[str, dict[str, int]]) -> list[tuple[str, ...]]:
    """The strongly connected groups of more than one file (each a cycle of imports), sorted.

    Args:
        graph: From :func:`file_graph`.
    """
    return room_cycles({source: set(targets) for source, targets in graph.items()})


def cycle_path(graph: dict[str, dict[str, int]], group: tuple[str, ...]) -> str:
    """One closed walk through a cycle's files with the import lines (``a.py:3 -> b.py:7 -> a.py``).

    Args:
        graph: From :func:`file_graph`.
        group: One group from :func:`file_cycles`.
    """
    members = set(group)
    start = group[0]
    # Breadth-first from start's successors back to start, inside the group: the shortest loop through it.
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt: list[str] = []
        for node in frontier:
            for target in sorted(graph.get(node, {})):
                if target in members and target not in previous:
                    previous[target] = node
                    nxt.append(target)
        if start in previous:
            break
        frontier = nxt
    walk = [start]
    node = previous[start]
    while node != start:
        walk.append(node)
        node = previous[node]
    walk.append(start)
    walk.reverse()
    steps = [f"{a}:{graph[a][b]}" for a, b in zip(walk, walk[1:])]
    return " -> ".join([*steps, walk[-1]])


def file_rank(path: str) -> int:
    """The layer rank of a file inside the package (``read/dump.py`` -> the rank of ``read``).

    Args:
        path: The file's path inside the package.
    """
    parts = path.removesuffix(".py").split("/")
    room = parts[0] if len(parts) > 1 else parts[0]
    if room not in RANKS:
        raise ValueError(f"{path}: room {room!r} has no rank in tests/_layers.py RANKS")
    return RANKS[room]


def upward_file_edges(graph: dict[str, dict[str, int]]) -> list[str]:
    """Every import between files (dynamic literal ones included) whose target ranks above its source.

    Args:
        graph: From :func:`file_graph`.
    """
    return [
        f"src/{PACKAGE}/{source}:{line} imports {target} (a higher layer)"
        for source, targets in sorted(graph.items())
        for target, line in sorted(targets.items())
        if file_rank(target) > file_rank(source)
    ]
