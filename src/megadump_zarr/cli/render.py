"""Rich renderings of records tables, statistics and comparison results."""

from __future__ import annotations

from collections.abc import Callable, Sequence
import math
from typing import Any

from rich.table import Table
from rich.text import Text

__all__ = ["Column", "cell", "frame_table", "is_missing", "location", "shape_text"]


def is_missing(value: Any) -> bool:
    """None, NaN or pandas' NA/NaT."""
    if value is None:
        return True
    if isinstance(value, (str, bytes, tuple, list, dict)):
        return False
    import numpy as np
    import pandas as pd

    try:
        result = pd.isna(value)
    except (TypeError, ValueError):
        return False
    return isinstance(result, (bool, np.bool_)) and bool(result)


def shape_text(shape: Any) -> str:
    """``(37, 16)`` → ``37×16``; ``()`` → ``scalar``."""
    if is_missing(shape):
        return ""
    dims = [int(d) for d in shape]
    return "×".join(str(d) for d in dims) if dims else "scalar"


def cell(value: Any) -> str:
    """One table cell: blanks for missing values, compact floats and shapes."""
    if is_missing(value):
        return ""
    if isinstance(value, bool):
        return "yes" if value else ""
    if isinstance(value, (tuple, list)):
        return shape_text(value)
    if isinstance(value, float) or type(value).__name__.startswith("float"):
        v = float(value)
        if math.isnan(v):
            return "nan"
        return f"{v:.6g}"
    return str(value)


def location(row: Any) -> str:
    """A compact where-is-it of one record: ``w0 i2 moe_experts/fwd expert_up t3 in[0]``."""
    def get(key: str) -> Any:
        value = row.get(key) if hasattr(row, "get") else getattr(row, key, None)
        return None if is_missing(value) else value

    parts = []
    if get("rank") not in (None, 0):
        parts.append(f"r{get('rank')}")
    if get("window") is not None:
        parts.append(f"w{get('window')}")
    if get("invocation") is not None:
        parts.append(f"i{get('invocation')}")
    kernel, direction = get("kernel"), get("direction")
    if kernel is not None:
        parts.append(f"{kernel}{'/bwd' if direction == 'backward' else ''}")
    if get("stage") is not None:
        parts.append(str(get("stage")))
    if get("task_id") is not None:
        parts.append(f"t{get('task_id')}")
    if get("io") is not None:
        index = get("index")
        parts.append(f"{'in' if get('io') == 'input' else 'out'}[{'' if index is None else index}]")
    return " ".join(parts)


class Column:
    """One table column: heading, value getter and cell style.

    Args:
        heading: The column title.
        get: ``row -> value`` (a row is a pandas Series); default: ``row[heading]``.
        justify: ``left`` or ``right``.
        style: Optional cell style (or ``row -> style``).
        fmt: Optional ``value -> str``.
        key: The frame column it shows (for dropping empty columns).
        wrap: Let long cells wrap (for long text such as paths and notes); other cells are cut with "…"
            when the console is too narrow.
    """

    def __init__(self, heading: str, get: Callable[[Any], Any] | None = None, *, justify: str = "left",
                 style: str | Callable[[Any], str | None] | None = None, fmt: Callable[[Any], str] | None = None,
                 key: str | None = None, wrap: bool = False) -> None:
        self.heading = heading
        self.key = key or heading
        self.get = get or (lambda row: row.get(self.key))
        self.justify = justify
        self.style = style
        self.fmt = fmt or cell
        self.wrap = bool(wrap)


def frame_table(frame: Any, columns: Sequence[Column], *, title: str | None = None, drop_empty: bool = True,
                row_style: Callable[[Any], str | None] | None = None, width: int | None = None) -> Table:
    """A rich table of ``frame``'s rows; columns whose every cell is blank are left out.

    When ``width`` (the console's) is narrower than the table, wrapping columns keep a fixed share of it
    (rich would otherwise collapse them first, possibly to nothing) and the others are shortened.
    """
    rows = [row for _, row in frame.iterrows()]
    rendered = [[c.fmt(c.get(row)) for c in columns] for row in rows]
    keep = [i for i, _ in enumerate(columns) if not drop_empty or not rows or any(r[i] for r in rendered)]
    natural = {i: max([len(columns[i].heading)] + [len(r[i]) for r in rendered]) for i in keep}
    fixed: dict[int, int] = {}
    if width is not None and sum(natural.values()) + 3 * len(keep) + 1 > width:
        wrapping = [i for i in keep if columns[i].wrap]
        rigid = sum(natural[i] for i in keep if not columns[i].wrap)
        if wrapping:
            share = max(12, (width - 3 * len(keep) - 1 - rigid) // len(wrapping))
            fixed = {i: min(natural[i], share) for i in wrapping}
    table = Table(title=title, show_lines=False, header_style="bold")
    for i in keep:
        c = columns[i]
        table.add_column(c.heading, justify=c.justify, overflow="fold" if c.wrap else "ellipsis", no_wrap=not c.wrap,
                         width=fixed.get(i))
    for row, values in zip(rows, rendered):
        cells = []
        for i in keep:
            c = columns[i]
            style = c.style(row) if callable(c.style) else c.style
            cells.append(Text(values[i], style=style or ""))
        table.add_row(*cells, style=row_style(row) if row_style else None)
    return table
