"""Rich renderings of records tables, statistics and comparison results."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
import math
import re
from typing import Any

from dataclasses import dataclass, field

from rich import box
from rich.table import Table
from rich.text import Text

__all__ = [
    "Column",
    "Fitted",
    "cell",
    "compact",
    "fit_table",
    "frame_table",
    "is_missing",
    "location",
    "location_parts",
    "print_fitted",
    "safe_text",
    "shape_text",
]

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
"""Characters a terminal acts on (ESC, CR, LF, ...; line separators, bidi overrides): never printed raw."""


def safe_text(text: str) -> str:
    """``text`` with every control character shown as its repr escape (``a\\x1b[31mb``, ``x\\ny``), so a
    record name can never colour the terminal, move the cursor or forge an output line.

    Args:
        text: A name, path or message read from a dump.
    """
    if not _CONTROL.search(text):
        return text
    return _CONTROL.sub(lambda m: repr(m[0])[1:-1], text)


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
    return safe_text(str(value))


def compact(value: Any) -> str:
    """A table cell with 4 significant digits for floats (``cell`` keeps 6, for ``show``)."""
    if isinstance(value, float) or (type(value).__name__.startswith("float") and not is_missing(value)):
        v = float(value)
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        if v == int(v) and abs(v) < 1e6:
            return str(int(v))
        return f"{v:.4g}"
    return cell(value)


def location_parts(row: Any, *, kernel_with_stage: bool = True) -> list[tuple[str, str]]:
    """The parts of :func:`location`, keyed by what they name (``rank``, ``window``, ``invocation``,
    ``kernel``, ``stage``, ``task``, ``port``).

    Args:
        row: A records or compare row.
        kernel_with_stage: Also name the kernel of L1 rows (their invocation and stage already place them).
    """

    def get(key: str) -> Any:
        value = row.get(key) if hasattr(row, "get") else getattr(row, key, None)
        return None if is_missing(value) else value

    parts = []
    if get("rank") is not None:  # every rank named, rank 0 too (a table hoists a rank all rows share)
        parts.append(("rank", f"r{get('rank')}"))
    if get("window") is not None:
        parts.append(("window", f"w{get('window')}"))
    if get("invocation") is not None:
        parts.append(("invocation", f"i{get('invocation')}"))
    kernel, direction = get("kernel"), get("direction")
    if kernel is not None and (kernel_with_stage or get("stage") is None):
        backward = direction == "backward" and not str(kernel).endswith("backward")
        parts.append(("kernel", f"{kernel}{'/bwd' if backward else ''}"))
    if get("stage") is not None:
        parts.append(("stage", str(get("stage"))))
    if get("task_id") is not None:
        parts.append(("task", f"t{get('task_id')}"))
    if get("io") is not None:
        index = get("index")
        parts.append(("port", f"{'in' if get('io') == 'input' else 'out'}[{'' if index is None else index}]"))
    return parts


def location(row: Any) -> str:
    """A compact where-is-it of one record: ``w0 i2 moe_experts expert_up t3 in[0]``."""
    return " ".join(text for _, text in location_parts(row))


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
        drop: :func:`fit_table`: 0 never dropped; columns with larger values are dropped first when the
            table is wider than the console.
        hoist: :func:`fit_table`: when every row shows the same value, print it once above the table
            (``heading value``) instead of a column.
        parts: :func:`fit_table`: ``row -> [(key, text), ...]``; the cell joins the texts, and parts whose
            key has the same text in every row are printed once above the table instead.
        footnote: :func:`fit_table`: a note column; a note every row shares is printed once below the
            table, repeated notes become ``[k]`` markers explained below it.
        elide: :func:`fit_table`: a name column whose long cells may be cut in the middle (``abc…xyz``) when
            the table is too wide; numbers are never cut, their column is left out (and named) instead.
    """

    def __init__(
        self,
        heading: str,
        get: Callable[[Any], Any] | None = None,
        *,
        justify: str = "left",
        style: str | Callable[[Any], str | None] | None = None,
        fmt: Callable[[Any], str] | None = None,
        key: str | None = None,
        wrap: bool = False,
        drop: int = 0,
        hoist: bool = False,
        parts: Callable[[Any], list[tuple[str, str]]] | None = None,
        footnote: bool = False,
        elide: bool = False,
    ) -> None:
        self.heading = heading
        self.key = key or heading
        self.get = get or (lambda row: row.get(self.key))
        self.justify = justify
        self.style = style
        self.fmt = fmt or cell
        self.custom_fmt = fmt is not None
        self.wrap = bool(wrap)
        self.drop = int(drop)
        self.hoist = bool(hoist)
        self.parts = parts
        self.footnote = bool(footnote)
        self.elide = bool(elide)


def frame_table(
    frame: Any,
    columns: Sequence[Column],
    *,
    title: str | None = None,
    drop_empty: bool = True,
    row_style: Callable[[Any], str | None] | None = None,
    width: int | None = None,
) -> Table:
    """A rich table of ``frame``'s rows; columns whose every cell is blank are left out.

    When ``width`` (the console's) is narrower than the table, wrapping columns keep a fixed share of it
    (rich would otherwise collapse them first, possibly to nothing) and the others are shortened.
    """
    rows = [row for _, row in frame.iterrows()]
    rendered = [[safe_text(c.fmt(c.get(row))) for c in columns] for row in rows]
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
        table.add_column(
            c.heading,
            justify=c.justify,
            overflow="fold" if c.wrap else "ellipsis",
            no_wrap=not c.wrap,
            width=fixed.get(i),
        )
    for row, values in zip(rows, rendered):
        cells = []
        for i in keep:
            c = columns[i]
            style = c.style(row) if callable(c.style) else c.style
            cells.append(Text(values[i], style=style or ""))
        table.add_row(*cells, style=row_style(row) if row_style else None)
    return table


# ---------------------------------------------------------------------------------------------- fitted tables
_GAP = 2
"""Characters between two columns of a fitted table (one padding, one separator)."""


@dataclass
class Fitted:
    """A table laid out to fit a console width: one line per row.

    Args:
        above: Lines printed before it (values every row shares).
        below: Lines printed after it (shared notes, footnotes, columns left out).
        dropped: Headings of the columns left out for width.
        width: The table's width in characters.
        headings: The headings of the columns shown.
        justify: Their justification (``left``/``right``).
        widths: Their widths.
        cells: Per row, the text of each column shown.
        styles: Per row, the style of each cell (None: plain).
        row_styles: Per row, the style of the whole row.
        fold: Per column shown, whether it folds (only when even the columns never dropped are too wide).
    """

    above: list[str] = field(default_factory=list)
    below: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    width: int = 0
    headings: list[str] = field(default_factory=list)
    justify: list[str] = field(default_factory=list)
    widths: list[int] = field(default_factory=list)
    cells: list[list[str]] = field(default_factory=list)
    styles: list[list[str | None]] = field(default_factory=list)
    row_styles: list[str | None] = field(default_factory=list)
    fold: list[bool] = field(default_factory=list)

    @property
    def table(self) -> Table | None:
        """The rows as a rich ``Table`` (None when there is nothing to tabulate)."""
        if not self.headings:
            return None
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0), header_style="bold")
        for heading, justify, width, fold in zip(self.headings, self.justify, self.widths, self.fold):
            table.add_column(
                heading,
                justify=justify,
                no_wrap=not fold,
                overflow="fold" if fold else "ellipsis",
                min_width=None if fold else width,
            )
        for values, styles, row_style in zip(self.cells, self.styles, self.row_styles):
            table.add_row(*(Text(v, style=st or "") for v, st in zip(values, styles)), style=row_style)
        return table

    def text(self) -> Text:
        """The header, rule and rows as one ``Text`` (what :func:`print_fitted` prints when it fits)."""
        out = Text()
        last = len(self.headings) - 1

        def line(values: Sequence[str], styles: Sequence[str | None], row_style: str | None) -> None:
            text = Text()
            for j, (value, width, justify, style) in enumerate(zip(values, self.widths, self.justify, styles)):
                padded = value.rjust(width) if justify == "right" else (value if j == last else value.ljust(width))
                combined = " ".join(s for s in (row_style, style) if s)
                text.append(padded, style=combined or None)
                if j < last:
                    text.append(" " * _GAP)
            text.rstrip()
            out.append_text(text)
            out.append("\n")

        line(self.headings, ["bold"] * len(self.headings), None)
        out.append("─" * self.width + "\n")
        for values, styles, row_style in zip(self.cells, self.styles, self.row_styles):
            line(values, styles, row_style)
        return out


def _table_width(widths: Sequence[int]) -> int:
    return sum(widths) + _GAP * max(0, len(widths) - 1)


def fit_table(
    frame: Any,
    columns: Sequence[Column],
    *,
    width: int,
    row_style: Callable[[Any], str | None] | None = None,
    drop_empty: bool = True,
) -> Fitted:
    """Lay out ``frame``'s rows so that each is one line of at most ``width`` characters.

    In order: empty columns are left out; columns (and location parts) showing one value in every row
    are printed once above the table (``hoist``/``parts``); notes every row shares are printed once below
    and repeated ones become ``[k]`` markers (``footnote``); then columns are left out by decreasing
    ``drop`` until the table fits. Cells are never cut: when even the columns that are never dropped are
    too wide, only wrapping (``wrap``) text columns fold.

    Args:
        frame: The rows (a DataFrame).
        columns: The columns, in order.
        width: The console width.
        row_style: Optional ``row -> style`` of a whole row.
        drop_empty: Leave out columns whose every cell is blank.
    """
    rows = frame.to_dict("records")  # plain dicts: 10× faster to read than iterrows' Series
    fitted = Fitted()
    markers: dict[int, list[str]] = {}
    if not rows:
        return fitted
    cells: list[list[str]] = []
    keep: list[int] = []
    shared: list[str] = []
    for i, c in enumerate(columns):
        if c.parts is not None:
            per_row = [c.parts(row) for row in rows]
            texts: dict[str, set[str]] = {}
            counts: dict[str, int] = {}
            for parts in per_row:
                for key, text in parts:
                    texts.setdefault(key, set()).add(text)
                    counts[key] = counts.get(key, 0) + 1
            constant = {k for k, t in texts.items() if len(t) == 1 and counts[k] == len(rows)}
            if len(rows) > 1:
                shared.extend(
                    safe_text(next(iter(texts[k])))
                    for k in dict.fromkeys(k for p in per_row for k, _ in p)
                    if k in constant
                )
            else:
                constant = set()
            column_cells = [safe_text(" ".join(t for k, t in parts if k not in constant)) for parts in per_row]
        else:
            fmt = c.fmt if c.custom_fmt else compact
            column_cells = [safe_text(fmt(c.get(row))) for row in rows]
        if drop_empty and not any(column_cells):
            cells.append(column_cells)
            continue
        if c.hoist and len(rows) > 1 and len(set(column_cells)) == 1:
            shared.append(f"{c.heading} {column_cells[0]}")
            cells.append(column_cells)
            continue
        if c.footnote:
            before = len(fitted.below)
            column_cells = _footnotes(column_cells, fitted.below)
            markers[i] = [line for line in fitted.below[before:] if line.startswith("[")]
            if not any(column_cells):
                cells.append(column_cells)
                continue
        cells.append(column_cells)
        keep.append(i)
    if shared:
        fitted.above.append(f"every row: {', '.join(shared)}")
    natural = {i: max([len(columns[i].heading)] + [len(v) for v in cells[i]]) for i in keep}
    _fit_widths(columns, keep, natural, width, fitted.dropped)
    for i, lines in markers.items():  # a left-out note column: its [k] explanations would name no row
        if i not in keep:
            fitted.below = [line for line in fitted.below if line not in lines]
    for i in keep:
        if columns[i].elide:
            cells[i] = [elide_middle(v, natural[i]) for v in cells[i]]
    if not keep:  # every cell blank or shared by every row: nothing left to tabulate
        return fitted
    fitted.width = _table_width([natural[i] for i in keep])
    fitted.headings = [columns[i].heading for i in keep]
    fitted.justify = [columns[i].justify for i in keep]
    fitted.widths = [natural[i] for i in keep]
    fitted.fold = [False for _ in keep]  # never folded nor cut: an overflowing line stays whole
    fitted.cells = [[cells[i][n] for i in keep] for n in range(len(rows))]
    styled = [i for i in keep if columns[i].style is not None]
    fitted.styles = [
        [
            (columns[i].style(row) if callable(columns[i].style) else columns[i].style) if i in styled else None
            for i in keep
        ]
        for row in rows
    ]
    fitted.row_styles = [row_style(row) if row_style else None for row in rows]
    if fitted.dropped:
        fitted.below.append(
            f"columns left out to fit {width} columns: {', '.join(fitted.dropped)} (--json has every column)"
        )
    return fitted


_NAME_FLOOR = 32
"""Names are elided to this width before any column is left out for width."""
_NAME_MIN = 12
"""... and to this width before the last columns (numbers included) are left out."""


def elide_middle(text: str, width: int) -> str:
    """``text`` cut in the middle to ``width`` characters (``msprobe.Fun…forward.0.output``)."""
    if len(text) <= width:
        return text
    keep = max(width - 1, 2)
    head = (keep + 1) // 2
    return f"{text[:head]}…{text[len(text) - (keep - head) :]}"


def _fit_widths(
    columns: Sequence[Column], keep: list[int], natural: dict[int, int], width: int, dropped: list[str]
) -> None:
    """Narrow ``natural`` (name columns elided) and remove columns from ``keep`` until the table fits ``width``.

    Order: names elided to ``_NAME_FLOOR``; columns left out by decreasing ``drop``; names elided to
    ``_NAME_MIN``; then the remaining columns but the first and the name columns, right to left. Names
    grow back into whatever room a left-out column freed. Every left-out heading is appended to ``dropped``.

    Args:
        columns: All columns.
        keep: Indices of the columns shown (edited in place).
        natural: Their widths (edited in place).
        width: The console width.
        dropped: Headings of the columns left out (appended to).
    """
    full = dict(natural)
    names = [i for i in keep if columns[i].elide]

    def excess() -> int:
        return _table_width([natural[i] for i in keep]) - width

    def shrink(floor: int) -> None:
        for i in names:
            if i in keep and excess() > 0:
                low = max(floor, len(columns[i].heading))
                natural[i] = min(natural[i], max(low, natural[i] - excess()))

    def grow() -> None:
        for i in names:
            if i in keep and excess() < 0:
                natural[i] = min(full[i], natural[i] - excess())

    def drop(candidates: list[int], key: Callable[[int], Any]) -> bool:
        if not candidates:
            return False
        victim = max(candidates, key=key)
        keep.remove(victim)
        dropped.append(columns[victim].heading)
        return True

    shrink(_NAME_FLOOR)
    while excess() > 0 and drop([i for i in keep if columns[i].drop > 0], lambda i: (columns[i].drop, i)):
        pass
    shrink(_NAME_MIN)
    while excess() > 0 and drop([i for i in keep[1:] if not columns[i].elide], lambda i: i):
        pass
    grow()


def _footnotes(notes: list[str], below: list[str]) -> list[str]:
    """Replace notes by ``[k]`` markers (listed in ``below``) when they repeat; one shared note moves below."""
    present = [n for n in notes if n]
    if not present:
        return notes
    distinct = list(dict.fromkeys(present))
    if len(distinct) == 1 and len(present) == len(notes) and len(notes) > 1:
        below.append(f"note (every row): {distinct[0]}")
        return [""] * len(notes)
    if len(distinct) == len(present) and max(len(n) for n in present) <= 40:
        return notes
    marker = {n: f"[{k}]" for k, n in enumerate(distinct, start=1)}
    counts = Counter(present)
    for n in distinct:
        count = counts[n]
        below.append(f"{marker[n]} {n}" + (f" ({count} rows)" if count > 1 else ""))
    return [marker[n] if n else "" for n in notes]


def print_fitted(console: Any, fitted: Fitted) -> None:
    """Print a :func:`fit_table` result: shared values, the table, notes.

    The table is printed as plain aligned lines (fast for tens of thousands of rows), never cut: one still
    wider than the console (only the first and the name columns left) overflows whole.
    """
    for line in fitted.above:
        console.print(safe_text(line), highlight=False, markup=False)
    if fitted.headings:
        console.print(fitted.text(), no_wrap=True, overflow="ignore", crop=False, end="", highlight=False)
    for line in fitted.below:
        for part in hanging_lines(safe_text(line), console.width):
            console.print(part, highlight=False, markup=False, no_wrap=True, overflow="ignore", crop=False)


def hanging_lines(line: str, width: int) -> list[str]:
    """``line`` folded at spaces to ``width`` columns, continuation lines indented under the text after a
    ``[k] `` marker (or by four spaces), so a long footnote never reads as a new row or note; a word longer
    than the width stays whole (a record path must stay copyable)."""
    import textwrap

    if len(line) <= width:
        return [line]
    indent = " " * (line.index("] ") + 2) if line.startswith("[") and "] " in line[:8] else "    "
    return textwrap.wrap(
        line,
        width=max(width, len(indent) + 20),
        subsequent_indent=indent,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [line]
