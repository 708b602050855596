"""Error maps drawn: stage × owner (or core, or task) heatmaps of the worst relative error.

Input is the table of :func:`megadump_zarr.analyse.errormap.error_map` (one row per stage, invocation
and owner/core/task, with verdict counts and the worst ``max_abs``/``max_rel``); each cell shows the
largest value over invocations, so one glance tells which expert on which core drifts::

    from megadump_zarr.analyse import compare
    from megadump_zarr.analyse.errormap import error_map
    from megadump_zarr.analyse.errormap_plot import plot_error_map
    plot_error_map(error_map(compare(a, b), by="owner"), by="owner")

Cells are coloured on a sequential scale (logarithmic when the values span more than two decades),
annotated with their value when the grid is small, and marked ``✗`` (in red) where any record of the
cell did not pass. Cells of exactly 0 are white; cells no record reached are blank (grey).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

__all__ = ["BY", "error_grid", "plot_error_map"]

BY = ("owner", "core", "task")
"""What the columns of an error map can be."""
_FAILING = ("fail", "shape_mismatch", "dtype_mismatch", "error", "missing", "missing_data")
_ANNOTATE = 400


def _check_by(by: str) -> None:
    if by not in BY:
        raise ValueError(f"by must be one of {', '.join(BY)}, got {by!r}")


def _column_key(table: pd.DataFrame, by: str) -> pd.Series:
    def present(v: Any) -> bool:
        return v is not None and not (not isinstance(v, str) and pd.isna(v))

    if by == "owner":
        return table["owner_id"].map(lambda v: f"{int(v)}" if present(v) else None)
    if by == "task":
        return table["task_id"].map(lambda v: f"{int(v)}" if present(v) else None)
    types = table["core_type"] if "core_type" in table.columns else pd.Series([None] * len(table), index=table.index)
    return pd.Series(
        [f"{t if present(t) else ''}{int(i) if present(i) else ''}" or None for t, i in zip(types, table["core_id"])],
        index=table.index,
    )


def _value_column(table: pd.DataFrame, value: str) -> str:
    for name in (value, f"worst_{value}", f"{value}_worst"):
        if name in table.columns:
            return name
    raise ValueError(f"the error map has no {value!r} column; columns: {list(table.columns)}")


def _failures(table: pd.DataFrame) -> pd.Series:
    if "failing" in table.columns:
        return pd.to_numeric(table["failing"], errors="coerce").fillna(0).astype("int64")
    total = pd.Series(0, index=table.index, dtype="int64")
    for verdict in _FAILING:
        for name in (verdict, f"n_{verdict}", f"{verdict}_count"):
            if name in table.columns:
                total += pd.to_numeric(table[name], errors="coerce").fillna(0).astype("int64")
                break
    return total


def error_grid(
    table: pd.DataFrame, *, by: str = "owner", value: str = "max_rel"
) -> tuple[np.ndarray, np.ndarray, list[str], list[str]]:
    """The cells of an error map: worst ``value`` and failure counts per (stage, owner/core/task).

    Args:
        table: An :func:`~megadump_zarr.analyse.errormap.error_map` table.
        by: ``owner``, ``core`` or ``task``: what the columns are.
        value: The error column (``max_rel`` or ``max_abs``).

    Returns:
        ``(worst, failures, stages, columns)``: ``worst[i, j]`` the largest ``value`` over invocations
        (NaN where no record), ``failures[i, j]`` the records that did not pass; stages in the table's
        (execution) order, columns sorted (numerically for ids).

    Raises:
        ValueError: ``by`` unknown, or the table lacks the columns it needs.
    """
    _check_by(by)
    column = _value_column(table, value)
    keys = _column_key(table, by)
    frame = pd.DataFrame(
        {
            "stage": table["stage"],
            "key": keys,
            "value": pd.to_numeric(table[column], errors="coerce").astype("float64"),
            "failures": _failures(table),
        }
    )
    frame = frame[frame["stage"].notna() & frame["key"].notna()]
    stages = list(dict.fromkeys(str(s) for s in frame["stage"]))
    columns = sorted(
        set(frame["key"]), key=lambda k: (k.rstrip("0123456789"), int(k[len(k.rstrip("0123456789")) :] or -1))
    )
    worst = np.full((len(stages), len(columns)), np.nan)
    failures = np.zeros((len(stages), len(columns)), dtype=np.int64)
    row_of = {s: i for i, s in enumerate(stages)}
    col_of = {c: j for j, c in enumerate(columns)}
    for stage, key, v, f in frame.itertuples(index=False):
        i, j = row_of[str(stage)], col_of[key]
        if not np.isnan(v):
            worst[i, j] = v if np.isnan(worst[i, j]) else max(worst[i, j], v)
        failures[i, j] += int(f)
    return worst, failures, stages, columns


def plot_error_map(
    table: pd.DataFrame, ax: Any = None, *, by: str = "owner", value: str = "max_rel", title: str | None = None
) -> Any:
    """Draw a stage × owner (``by="core"``: × core, ``by="task"``: × task) heatmap of the worst error.

    Args:
        table: An :func:`~megadump_zarr.analyse.errormap.error_map` table.
        ax: Axes to draw on (default: a new pyplot figure).
        by: ``owner``, ``core`` or ``task``.
        value: ``max_rel`` (default) or ``max_abs``.
        title: Title (default: what is shown and how many cells fail).

    Returns:
        The Axes.

    Raises:
        ValueError: ``by`` unknown, missing columns, or no row with a stage and an owner/core/task
            (an L0 comparison has none).
    """
    import matplotlib
    from matplotlib.colors import LogNorm, Normalize

    worst, failures, stages, columns = error_grid(table, by=by, value=value)
    if not stages or not columns:
        raise ValueError(
            f"nothing to draw: no compared L1 record has a stage and a{'n' if by == 'owner' else ''} {by} "
            "(error maps need L1 dumps)"
        )
    if ax is None:
        import matplotlib.pyplot as plt

        _, ax = plt.subplots(figsize=(max(5, 1 + 0.8 * len(columns)), max(3, 1 + 0.5 * len(stages))))
    finite = worst[np.isfinite(worst)]
    positive = finite[finite > 0]
    if positive.size and positive.max() / positive.min() > 100:
        norm = LogNorm(vmin=float(positive.min()), vmax=float(positive.max()))
    else:
        hi = float(finite.max()) if finite.size else 1.0
        norm = Normalize(vmin=0.0, vmax=hi if hi > 0 else 1.0)
    colormap = matplotlib.colormaps["magma_r"].with_extremes(bad="#d9d9d9", under="#ffffff")
    # Exact cells (0) are white (drawn below the scale's low end), never the "no record" grey.
    below = norm.vmin / 10 if isinstance(norm, LogNorm) else -1.0
    shown = np.where(np.isfinite(worst) & (worst <= 0), below, worst)
    image = ax.imshow(np.ma.masked_invalid(shown), aspect="auto", interpolation="nearest", cmap=colormap, norm=norm)
    ax.set_xticks(range(len(columns)), labels=columns)
    ax.set_yticks(range(len(stages)), labels=stages)
    ax.set_xlabel({"owner": "owner", "core": "core", "task": "task"}[by])
    ax.set_ylabel("stage")
    if worst.size <= _ANNOTATE:
        for i in range(len(stages)):
            for j in range(len(columns)):
                text = "" if np.isnan(worst[i, j]) else f"{worst[i, j]:.2g}"
                if failures[i, j]:
                    text = f"✗ {text}".strip()
                if text:
                    dark = np.isfinite(shown[i, j]) and norm(shown[i, j]) > 0.6  # magma_r: dark at the top
                    ax.text(
                        j,
                        i,
                        text,
                        ha="center",
                        va="center",
                        fontsize=8,
                        color=("#ff6b6b" if dark else "red") if failures[i, j] else ("white" if dark else "black"),
                        fontweight="bold" if failures[i, j] else "normal",
                    )
    failing_cells = int((failures > 0).sum())
    if title is None:
        empty = "; grey: no record" if np.isnan(worst).any() else ""
        title = (
            f"worst {value} per stage × {by} (max over invocations)\n"
            f"{failing_cells} of {worst.size} cells with failing records (✗){empty}"
        )
    ax.set_title(title, fontsize=10)
    bar = ax.figure.colorbar(image, ax=ax)
    bar.set_label(f"worst {value}" + (" (log scale)" if isinstance(norm, LogNorm) else ""))
    return ax
