"""The live terminal view of ``megadump watch``: the newest step per rank × stage × owner (or core), with its
norm, NaN/Inf counts and a short trend, and the anomalies named so far (rich renderables)."""

from __future__ import annotations

from collections import deque
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from megadump_zarr.cli.render import safe_text

__all__ = ["WatchView", "sparkline"]

_BARS = "▁▂▃▄▅▆▇█"
TREND = 12
"""Norms kept per group for the trend."""


def sparkline(values: list[float | None]) -> str:
    """A one-line bar chart of ``values`` (missing values as spaces).

    Args:
        values: Values, oldest first.
    """
    finite = [v for v in values if v is not None]
    if not finite:
        return ""
    low, high = min(finite), max(finite)
    span = high - low
    out = []
    for value in values:
        if value is None:
            out.append(" ")
        else:
            out.append(_BARS[0 if span == 0 else min(len(_BARS) - 1, int((value - low) / span * (len(_BARS) - 1)))])
    return "".join(out)


class WatchView:
    """What the live view shows, updated event by event.

    Args:
        root: The dump root (the title).
        anomalies_shown: How many of the latest anomalies are listed.
    """

    def __init__(self, root: str, anomalies_shown: int = 10) -> None:
        self.root = root
        self.latest: dict[tuple[int, str, str], Any] = {}
        self.trends: dict[tuple[int, str, str], deque[float | None]] = {}
        self.anomalies: list[Any] = []
        self.windows = 0
        self._shown = anomalies_shown

    def add(self, event: Any) -> None:
        """Take one watch event.

        Args:
            event: A ``WindowEvent``, ``StepEvent`` or ``AnomalyEvent``.
        """
        kind = type(event).__name__
        if kind == "WindowEvent":
            self.windows += 1
        elif kind == "StepEvent":
            key = (event.rank, event.kernel, event.group)
            current = self.latest.get(key)
            if current is None or event.step >= current.step:
                self.latest[key] = event
                self.trends.setdefault(key, deque(maxlen=TREND)).append(event.l2norm)
        elif kind == "AnomalyEvent":
            self.anomalies.append(event)

    def render(self) -> Group:
        """The view: the table of groups, then the latest anomalies."""
        table = Table(title=f"megadump watch {safe_text(self.root)} — {self.windows} window(s)", expand=False)
        for name, justify in (
            ("rank", "right"),
            ("kernel", "left"),
            ("stage / owner or core", "left"),
            ("step", "right"),
            ("L2 norm", "right"),
            ("NaN", "right"),
            ("Inf", "right"),
            ("trend", "left"),
        ):
            table.add_column(name, justify=justify)  # type: ignore[arg-type]
        for key in sorted(self.latest):
            event = self.latest[key]
            bad = event.nan_count or event.inf_count
            cells = (
                str(event.rank),
                safe_text(event.kernel),
                safe_text(event.group),
                str(event.step),
                "—" if event.l2norm is None else f"{event.l2norm:.4g}",
                str(event.nan_count),
                str(event.inf_count),
                sparkline(list(self.trends[key])),
            )
            table.add_row(*(Text(cell) for cell in cells), style="red" if bad else None)  # Text: no markup
        lines = [Text(f"anomaly {safe_text(a.describe())}", style="bold red") for a in self.anomalies[-self._shown :]]
        if not lines:
            lines = [Text("no anomaly so far", style="green")]
        return Group(table, *lines)
