"""The live view of ``megadump watch`` (cli.watch_view): newest step per rank × stage × owner or core, its norm,
NaN/Inf counts and trend, and the anomalies; names from a dump are shown literally (no markup, no controls)."""

from __future__ import annotations

from dataclasses import FrozenInstanceError

import pytest
from rich.console import Console

from megadump_zarr.analyse.watch_events import AnomalyEvent, StepEvent, WindowEvent
from megadump_zarr.cli.watch_view import WatchView, sparkline


def _step(step, norm, nan=0, stage="expert_up", owner=1):
    return StepEvent(0, 0, step, "moe_experts", "forward", stage, owner, None, norm, nan, 0, 3)


def test_sparkline_scales_between_min_and_max():
    assert sparkline([1.0, 2.0, 3.0, None, 3.0]) == "▁▄█ █"
    assert sparkline([5.0, 5.0]) == "▁▁" and sparkline([None]) == ""


def test_the_view_shows_the_newest_step_its_trend_and_the_anomalies():
    view = WatchView("run")
    view.add(WindowEvent(0, 0, "complete", (1, 2, 3), "nonfinite", "trigger"))
    for step, norm in ((1, 1.0), (2, 2.0), (3, 4.0)):
        view.add(_step(step, norm, nan=int(step == 3)))
    view.add(_step(2, 9.0, stage="[red]evil\x1b[2J"))
    view.add(AnomalyEvent("nonfinite", "recorder", 0, 0, 3, "moe_experts", "forward", "expert_up", 1, 1, "MIX1",
                          "w_up", "input", 2, 1.0, None, "1 NaN/Inf"))  # fmt: skip
    console = Console(record=True, width=160, color_system=None)
    console.print(view.render())
    text = console.export_text()
    assert "1 window(s)" in text
    row = next(line for line in text.splitlines() if "expert_up/owner 1" in line)
    assert [cell.strip() for cell in row.split("│")[4:9]] == ["3", "4", "1", "0", "▁▃█"]
    assert "[red]evil\\x1b[2J/owner 1" in text  # shown literally
    assert (
        "anomaly nonfinite: rank 0, step 3, stage expert_up, task 1, owner 1, core MIX1, record w_up (input[2])" in text
    )
    with pytest.raises(FrozenInstanceError):
        view.anomalies[0].step = 4
