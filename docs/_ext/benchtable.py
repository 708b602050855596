"""``.. benchmark-tables:: GLOB``: one table per benchmark JSON file, newest run first.

Each file is what a benchmark's ``--json OUT`` writes (``benchmarks/_common.write_json``):
``{"machine": str, "run": {"date", "load_average_before", "load_average_after", ...}, "entries": [{...}]}``,
optionally with ``title``, ``command``, ``note`` and ``columns`` (the entry keys to show, in order; default:
every key, in order of first appearance). The caption gives the run's date, machine and load average, so
no figure appears without when and how loaded it was measured.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

REQUIRED = ("machine", "run", "entries")


def load_result(path: Path) -> dict[str, Any]:
    """One benchmark JSON file, checked for what the table needs.

    Raises:
        ValueError: A key is missing or of the wrong type (the message names the file and the key).
    """
    document = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(document, dict):
        raise ValueError(f"{path}: a benchmark result must be a JSON object")
    for key in REQUIRED:
        if key not in document:
            raise ValueError(f"{path}: missing key {key!r}")
    run = document["run"]
    if not isinstance(run, dict) or not isinstance(run.get("date"), str):
        raise ValueError(f"{path}: 'run' must hold a 'date' string")
    for key in ("load_average_before", "load_average_after"):
        loads = run.get(key)
        if not isinstance(loads, list) or not loads or not all(x is None or isinstance(x, (int, float)) for x in loads):
            raise ValueError(f"{path}: 'run' must hold {key!r} (a list of load averages, null where not recorded)")
    if not isinstance(document["entries"], list) or not all(isinstance(e, dict) for e in document["entries"]):
        raise ValueError(f"{path}: 'entries' must be a list of objects")
    return document


def columns_of(document: dict[str, Any]) -> list[str]:
    """The columns to show: ``columns`` when given, else every entry key in order of first appearance."""
    if "columns" in document:
        return list(document["columns"])
    seen: dict[str, None] = {}
    for entry in document["entries"]:
        seen.update(dict.fromkeys(entry))
    return list(seen)


def cell_text(value: Any) -> str:
    """A value as the table shows it (floats to 4 significant digits, lists and objects as compact JSON)."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, dict)):
        return json.dumps(value, separators=(", ", ": "))
    return str(value)


def caption(document: dict[str, Any]) -> str:
    """When, where and how loaded: ``2026-12-06T03:30:00+00:00 · machine · load 0.48 → 1.24``."""
    run = document["run"]
    parts = [run["date"], document["machine"]]
    before, after = run["load_average_before"][0], run["load_average_after"][0]
    if before is None or after is None:
        parts.append("load average not recorded")
    else:
        parts.append(f"load average (1 min) {before} → {after}")
    if document.get("command"):
        parts.append(document["command"])
    return " · ".join(str(part) for part in parts)


def _table(document: dict[str, Any]) -> nodes.table:
    columns = columns_of(document)
    table = nodes.table(classes=["benchmark-table"])
    group = nodes.tgroup(cols=len(columns))
    table += group
    for _ in columns:
        group += nodes.colspec(colwidth=1)
    head = nodes.thead()
    group += head
    head += _row(columns)
    body = nodes.tbody()
    group += body
    for entry in document["entries"]:
        body += _row([cell_text(entry.get(column)) for column in columns])
    return table


def _row(cells: list[str]) -> nodes.row:
    row = nodes.row()
    for text in cells:
        entry = nodes.entry()
        entry += nodes.paragraph(text=text)
        row += entry
    return row


class BenchmarkTables(SphinxDirective):
    """Render every benchmark JSON file matching the glob (relative to the documentation's source folder)."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        source = Path(self.env.srcdir)
        paths = sorted(source.glob(self.arguments[0]))
        documents = []
        for path in paths:
            self.env.note_dependency(str(path))
            document = load_result(path)
            document.setdefault("title", path.stem)
            documents.append(document)
        documents.sort(key=lambda document: document["run"]["date"], reverse=True)
        out: list[nodes.Node] = []
        for document in documents:
            out.append(nodes.rubric(text=document["title"]))
            out.append(nodes.paragraph(text=caption(document)))
            if document.get("note"):
                out.append(nodes.paragraph(text=document["note"]))
            out.append(_table(document))
        if not out:
            out.append(nodes.paragraph(text=f"No benchmark results match {self.arguments[0]}."))
        return out


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the directive."""
    app.add_directive("benchmark-tables", BenchmarkTables)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
