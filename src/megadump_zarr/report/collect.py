"""What a report shows, gathered from the analysis layer into plain, JSON-ready values.

Nothing here renders: :mod:`megadump_zarr.report.html` turns a :class:`ReportData` into one HTML file.
Two shapes of report:

* a comparison of dump A (under test) with dump B (reference): :func:`collect_comparison` runs
  ``megadump_zarr.analyse.compare`` once, then takes the verdict counts, the first divergence and the
  root cause, the per-invocation error maps, and for the worst records a strided A−B difference (the
  heatmap) and a histogram of the differences;
* a single dump: :func:`collect_single` takes its records' stored statistics and the records that hold
  NaN or Inf (no tensor data is read).
"""

from __future__ import annotations

from dataclasses import dataclass, field
import os
from typing import Any

import numpy as np
import pandas as pd

from megadump_zarr.tables import failures_first, to_jsonable  # the CLI's JSON values and row order

__all__ = ["DIFF_MAX_SIZE", "HISTOGRAM_BINS", "WORST_RECORDS", "ReportData", "collect_comparison", "collect_single"]

WORST_RECORDS = 6
"""How many of the worst failing records get a difference heatmap and a histogram."""
DIFF_MAX_SIZE = 96
"""Largest side of a difference heatmap (longer axes are strided): keeps a report small."""
HISTOGRAM_BINS = 40

_LOCATION = (
    "rank",
    "window",
    "invocation",
    "step",
    "direction",
    "kernel",
    "stage",
    "task_id",
    "owner_id",
    "core_type",
    "core_id",
    "io",
    "index",
    "name",
    "path",
)
_TABLE_COLUMNS = (
    "verdict",
    "name",
    "rank",
    "window",
    "invocation",
    "step",
    "stage",
    "task_id",
    "owner_id",
    "core_type",
    "core_id",
    "io",
    "dtype",
    "shape",
    "1-cos",
    "max_abs",
    "max_rel",
    "rmse",
    "mismatches",
    "worst_index",
    "note",
    "path",
)
_STATS_COLUMNS = (
    "name",
    "rank",
    "window",
    "invocation",
    "step",
    "stage",
    "task_id",
    "owner_id",
    "core_type",
    "core_id",
    "io",
    "dtype",
    "shape",
    "min",
    "max",
    "mean",
    "l2norm",
    "nan_count",
    "inf_count",
    "truncated",
    "stats_scope",
    "path",
)
_PASSING = ("pass",)


@dataclass
class ReportData:
    """Everything one report shows, as JSON-ready values.

    Args:
        kind: ``"compare"`` or ``"single"``.
        title: The page title.
        sources: The dumps' URLs (``{"a": ..., "b": ...}`` or ``{"a": ...}``).
        summary: Verdict counts and the overall verdict (compare) or record counts (single).
        first_divergence: Where the first failing record lives (compare), or None.
        root_cause: Where the divergence is born (compare), or None.
        first_nonfinite: The first record holding NaN/Inf (single), or None.
        error_maps: Per invocation, a stage × owner (or core) grid of worst relative errors.
        rows: The per-record table, failures first.
        columns: The table's column names, in order.
        shared: Key columns left out of the table because every record has the same value there
            (column -> value).
        worst: For the worst records, the difference heatmap and histogram.
        notes: Things the reader should know (e.g. analysis functions not available).
        stored: Record path -> ``[pack array, row]`` of dump A's packed records (``layout="packs"``): where
            the snippets open them.
    """

    kind: str
    title: str
    sources: dict[str, str]
    summary: dict[str, Any]
    first_divergence: dict[str, Any] | None = None
    root_cause: dict[str, Any] | None = None
    first_nonfinite: dict[str, Any] | None = None
    error_maps: list[dict[str, Any]] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)
    columns: list[str] = field(default_factory=list)
    shared: dict[str, Any] = field(default_factory=dict)
    worst: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stored: dict[str, list[Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The report as one JSON-ready mapping."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _where(row: Any, columns: tuple[str, ...] = _LOCATION) -> dict[str, Any] | None:
    if row is None:
        return None
    get = row.get if hasattr(row, "get") else (lambda k, d=None: d)
    out = {k: to_jsonable(get(k)) for k in columns}
    for extra in (
        "verdict",
        "note",
        "max_abs",
        "max_rel",
        "worst_index",
        "worst_task_id",
        "worst_owner_id",
        "worst_core_type",
        "worst_core_id",
        "root_reason",
        "root_stage",
    ):
        if extra in getattr(row, "index", ()):
            out[extra] = to_jsonable(get(extra))
    return out


def _display_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with the table's derived columns: ``dtype`` and ``shape`` (side A's, ``A vs B`` where the
    sides differ: one column each keeps the table inside a 1400-pixel window) and ``1-cos`` (``1 - cosine``:
    a cosine of 0.99999 rounds to 1 in any short format, its distance from 1 does not)."""
    out = {}
    for name in ("dtype", "shape"):
        a, b = f"{name}_a", f"{name}_b"
        if a in frame.columns and b in frame.columns:
            out[name] = [_side_pair(x, y) for x, y in zip(frame[a], frame[b])]
    if "cosine" in frame.columns:
        out["1-cos"] = 1.0 - pd.to_numeric(frame["cosine"], errors="coerce")
    return frame.assign(**out)


def _side_pair(a: Any, b: Any) -> Any:
    a, b = to_jsonable(a), to_jsonable(b)
    if a == b or b is None:
        return a
    if a is None:
        return b

    def text(v: Any) -> str:
        return "×".join(str(d) for d in v) if isinstance(v, list) else str(v)

    return f"{text(a)} vs {text(b)}"


_SHARED_COLUMNS = ("rank", "window", "invocation", "step", "core_type", "io")
"""Key columns the table leaves out where every record has the same value (said once above the table)."""


def _table(frame: pd.DataFrame, columns: tuple[str, ...]) -> tuple[list[str], list[dict[str, Any]], dict[str, Any]]:
    """The table's columns (those with a value), its rows, and the :data:`_SHARED_COLUMNS` left out
    because every one of two or more records has the same value there (column -> that value)."""
    present = [c for c in columns if c in frame.columns]
    present = [c for c in present if frame[c].notna().any()] if len(frame) else present
    shared: dict[str, Any] = {}
    if len(frame) > 1:
        for c in _SHARED_COLUMNS:
            if c in present and frame[c].notna().all() and frame[c].nunique() == 1:
                shared[c] = to_jsonable(frame[c].iloc[0])
        present = [c for c in present if c not in shared]
    rows = [{c: to_jsonable(v) for c, v in zip(present, values)} for values in frame[present].itertuples(index=False)]
    return present, rows, shared


# ------------------------------------------------------------------------------------------- analysis
def _error_maps(result: pd.DataFrame, by: str) -> list[dict[str, Any]]:
    """Per invocation, a stage × owner grid of ``analyse.errormap.error_map``'s worst relative error and
    failing counts; by core where the records have no owners, by task where they have no cores either
    (``analyse.errormap.mapped_by``; each map's ``by`` says which, ``asked`` what was asked); empty where
    they have no stage (L0).

    Args:
        result: The compare result.
        by: ``"owner"`` or ``"core"``.
    """
    from megadump_zarr.analyse.errormap import mapped_by

    return [m | {"asked": by} for m in _error_maps_by(result, mapped_by(result, by))]


def _error_maps_by(result: pd.DataFrame, by: str) -> list[dict[str, Any]]:
    """:func:`_error_maps` for one ``by``; empty where no record has its key."""
    from megadump_zarr.analyse.errormap import BY_KEYS, error_map

    keys = list(BY_KEYS[by])
    table = error_map(result, by=by)
    identity = "task_id" if by == "task" else keys[-1]  # the key a grid column needs
    table = table[table["stage"].notna() & table[identity].notna()]
    if table.empty:
        return []
    steps = {}
    if "step" in result.columns:
        for (rank, window, invocation), group in result.groupby(["rank", "window", "invocation"], dropna=False):
            known = group["step"].dropna()
            steps[(rank, window, invocation)] = known.iloc[0] if len(known) else None
    maps = []
    for labels, group in table.groupby(["rank", "window", "invocation"], sort=False, dropna=False):
        stages = list(dict.fromkeys(str(s) for s in group["stage"]))
        columns = sorted(
            {tuple(to_jsonable(v) for v in row) for row in group[keys].itertuples(index=False)},
            key=lambda c: tuple((v is None, str(v) if not isinstance(v, int) else f"{v:012d}") for v in c),
        )
        lookup = {(str(row["stage"]), tuple(to_jsonable(row[k]) for k in keys)): row for _, row in group.iterrows()}
        cells = []
        for stage in stages:
            line = []
            for column in columns:
                row = lookup.get((stage, column))
                line.append(
                    None
                    if row is None
                    else {
                        "worst_rel": to_jsonable(row["max_rel"]),
                        "failing": int(row["failing"]),
                        "records": int(row["records"]),
                    }
                )
            cells.append(line)
        where = dict(zip(("rank", "window", "invocation"), (to_jsonable(v) for v in labels)))
        maps.append(
            {
                "where": where | {"step": to_jsonable(steps.get(tuple(labels)))},
                "by": by,
                "rows": stages,
                "columns": [" ".join(str(v) for v in c if v is not None) for c in columns],
                "cells": cells,
            }
        )
    return maps


def _with_replay(where: dict[str, Any] | None, dump: Any) -> dict[str, Any] | None:
    """``where`` plus ``replay`` (the replay verdict of its L1 task) or ``replay_note`` (why there is none).

    Replay (``megadump_zarr.replay``) applies to an L1 task's output; it runs guarded: a dump it cannot
    replay (statistics only, no reference for the kernel, ...) gets the reason in one line.

    Args:
        where: The root cause's location (from :func:`_where`), or None.
        dump: The dump under test.
    """
    if where is None:
        return None
    if where.get("task_id") is None or where.get("stage") is None:
        return where | {"replay": None, "replay_note": "replay applies to L1 task records; this record has no task"}
    if where.get("io") != "output":
        return where | {"replay": None, "replay_note": "replay judges a task's outputs; the root cause is an input"}
    try:
        from megadump_zarr.replay import replay

        found = replay(
            dump,
            str(where["stage"]),
            task_id=int(where["task_id"]),
            invocation=where.get("invocation"),
            rank=where.get("rank"),
            window=where.get("window"),
        )
    except Exception as error:  # noqa: BLE001 - a report is still written; the reason is shown
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        return where | {"replay": None, "replay_note": f"replay not run: {first}"}
    return where | {"replay": found.verdict, "replay_note": None}


def _strided(da: Any, max_size: int) -> tuple[np.ndarray, tuple[int, int], tuple[str, str]]:
    from megadump_zarr.analyse.plot import heatmap_values

    values, steps, dims = heatmap_values(da, max_size)
    return values.astype(np.float64), steps, dims


def _open_pair(dump_a: Any, dump_b: Any, row: pd.Series) -> tuple[Any, Any]:
    path = str(row["path"])
    path_b = row.get("path_b")  # records pair by step: B's record may sit at another path
    return dump_a.record_array(path), dump_b.record_array(str(path_b) if isinstance(path_b, str) else path)


def _worst(dump_a: Any, dump_b: Any, result: pd.DataFrame, limit: int) -> tuple[list[dict[str, Any]], list[str]]:
    """Difference heatmaps and histograms of the ``limit`` worst failing records with data on both sides."""
    failing = result[result["verdict"].isin(("fail",))]
    if "payload" in result.columns:
        failing = failing[failing["payload"].fillna(True).astype(bool)]
    if failing.empty:
        return [], []
    rel = pd.to_numeric(failing["max_rel"], errors="coerce").fillna(-1.0)
    order = failing.assign(_rel=rel).sort_values("_rel", ascending=False, kind="stable")
    out, notes = [], []
    for _, row in order.head(limit).iterrows():
        try:
            a, b = _open_pair(dump_a, dump_b, row)
            (va, steps, dims), (vb, _, _) = _strided(a, DIFF_MAX_SIZE), _strided(b, DIFF_MAX_SIZE)
            diff = va - vb
            index = _axis_indices(a, dims, steps, diff.shape)
        except (ValueError, KeyError, OSError, TypeError) as error:
            notes.append(f"no difference heatmap for {row['path']}: {error}")
            continue
        finite = diff[np.isfinite(diff)]
        limit_abs = float(np.max(np.abs(finite))) if finite.size else 0.0
        counts, edges = (
            np.histogram(finite, bins=HISTOGRAM_BINS) if finite.size else (np.zeros(0, dtype=int), np.zeros(0))
        )
        out.append(
            {
                "where": _where(row),
                "shape": [int(s) for s in diff.shape],
                "logical_shape": to_jsonable(row.get("shape_a")),
                "steps": [int(v) for v in steps],  # every steps[0]-th row, steps[1]-th column of the tensor
                "dims": [str(d) for d in dims],
                "index": index,  # the whole tensor's index of each shown row and column
                "limit": limit_abs,
                # Quantised to 0..254 around 0 (127); 255 marks a non-finite cell. Small enough to embed.
                "cells": _quantise(diff, limit_abs),
                "histogram": {"counts": [int(c) for c in counts], "edges": [float(e) for e in edges]},
                "sampled": int(diff.size) < int(np.prod(a.shape)) if a.ndim else False,
            }
        )
    return out, notes


def _axis_indices(da: Any, dims: tuple[str, str], steps: tuple[int, int], shape: tuple[int, ...]) -> list[list[int]]:
    """The whole tensor's index of each row and column a heatmap shows: the record's integer coordinate
    along that dimension where it has one (an L1 record's global rows), else the position in the record.

    Args:
        da: The record (a DataArray).
        dims: The heatmap's row and column dimensions (``""``: a 1-D record's single row).
        steps: Their strides.
        shape: The heatmap's shape.
    """
    out = []
    for dim, step, n in zip(dims, steps, shape):
        coord = getattr(da, "coords", {}).get(dim) if dim else None
        values = None if coord is None or coord.ndim != 1 else np.asarray(coord.values)
        if values is not None and values.dtype.kind in "iu":
            out.append([int(v) for v in values[::step][:n]])
        else:
            out.append([i * step for i in range(n)])
    return out


def _quantise(diff: np.ndarray, limit: float) -> list[int]:
    scaled = np.full(diff.shape, 255, dtype=np.int64)
    finite = np.isfinite(diff)
    if limit > 0:
        scaled[finite] = np.clip(np.rint(diff[finite] / limit * 127 + 127), 0, 254)
    else:
        scaled[finite] = 127
    return scaled.reshape(-1).tolist()


def collect_comparison(
    a: Any,
    b: Any,
    *,
    rtol: float | None = None,
    atol: float | None = None,
    names: Any = None,
    select: dict[str, Any] | None = None,
    by: str = "owner",
    worst: int = WORST_RECORDS,
    result: pd.DataFrame | None = None,
    pair: Any = None,
    accept_partial: bool = False,
) -> ReportData:
    """Compare dump ``a`` with dump ``b`` and gather what the report shows.

    Args:
        a: The dump under test (a ``Dump`` or a path/URL).
        b: The reference dump.
        rtol: Relative tolerance, as in ``compare``.
        atol: Absolute tolerance, as in ``compare``.
        names: Only these tensor names, as in ``compare``.
        select: Record selection, as in ``compare``.
        by: Error-map columns: ``"owner"`` or ``"core"``.
        worst: How many worst records get a difference heatmap.
        result: A ``compare`` result already computed for ``a`` and ``b`` (skips the comparison).
        pair: ``{step of A: step of B}``, as in ``compare`` (default: each step with the same step).
        accept_partial: As in ``compare``: truncated records that pass on their stored part pass.
    """
    from megadump_zarr.analyse.compare import compare, first_divergence
    from megadump_zarr.analyse.rootcause import root_cause
    from megadump_zarr.analyse.side import open_side

    if by not in ("owner", "core"):
        raise ValueError(f"by must be 'owner' or 'core', got {by!r}")
    dump_a, dump_b = open_side(a).value, open_side(b).value  # opened once, here; compare reuses them
    if result is None:
        result = compare(
            dump_a,
            dump_b,
            rtol=rtol,
            atol=atol,
            names=names,
            pair=pair,
            accept_partial=accept_partial,
            **(select or {}),
        )
    steps = (result.attrs.get("pairing") or {}).get("line")
    notes: list[str] = [steps] if steps else []
    counts = {str(v): int(n) for v, n in result["verdict"].value_counts(sort=False).items()}
    failing = int((~result["verdict"].isin(_PASSING)).sum())
    summary = {
        "verdict": "fail" if failing else "pass",
        "records": len(result),
        "failing": failing,
        "counts": counts,
        "rtol": to_jsonable(rtol),
        "atol": to_jsonable(atol),
    }
    worst_rows, worst_notes = _worst(dump_a, dump_b, result, worst)
    notes.extend(worst_notes)
    columns, rows, shared = _table(_display_columns(failures_first(result)), _TABLE_COLUMNS)
    return ReportData(
        kind="compare",
        title=f"megadump report: {_url(a)} vs {_url(b)}",
        sources={"a": _url(a), "b": _url(b), "root_a": _root(dump_a), "root_b": _root(dump_b)},
        summary=summary,
        first_divergence=_where(first_divergence(result)),
        root_cause=_with_replay(_where(root_cause(result)), dump_a),
        error_maps=_error_maps(result, by),
        rows=rows,
        columns=columns,
        shared=shared,
        worst=worst_rows,
        notes=notes,
        stored=_stored_of(dump_a, result),
    )


def collect_single(a: Any, *, names: Any = None, select: dict[str, Any] | None = None) -> ReportData:
    """Gather one dump's statistics and non-finite records (metadata only, no tensor data).

    Args:
        a: The dump (a ``Dump`` or a path/URL).
        names: Only these tensor names.
        select: Record selection, as in ``compare``.
    """
    from megadump_zarr.analyse.matching import name_filter
    from megadump_zarr.analyse.side import open_dump_side

    side = open_dump_side(a, "the report's dump")
    dump = side.value
    records = side.records(dict(select or {}), name_filter(names))  # in execution order
    nan = pd.to_numeric(records.get("nan_count"), errors="coerce") if len(records) else pd.Series(dtype=float)
    inf = pd.to_numeric(records.get("inf_count"), errors="coerce") if len(records) else pd.Series(dtype=float)
    nonfinite = records[(nan.fillna(0) > 0) | (inf.fillna(0) > 0)] if len(records) else records
    first = nonfinite.iloc[0] if len(nonfinite) else None
    ordered = pd.concat([nonfinite, records.drop(nonfinite.index)]) if len(records) else records
    columns, rows, shared = _table(ordered, _STATS_COLUMNS)
    summary = {
        "verdict": "nonfinite" if len(nonfinite) else "finite",
        "records": len(records),
        "nonfinite": len(nonfinite),
        "windows": int(records["window"].nunique()) if len(records) else 0,
    }
    return ReportData(
        kind="single",
        title=f"megadump report: {_url(a)}",
        sources={"a": _url(a), "root_a": _root(dump)},
        summary=summary,
        first_nonfinite=_where(first),
        rows=rows,
        columns=columns,
        shared=shared,
        stored=_stored(records),  # the rows just read: no second catalogue walk
    )


def _stored(records: pd.DataFrame, shown: pd.DataFrame | None = None) -> dict[str, list[Any]]:
    """Where the packed records among ``records`` are stored: path -> ``[pack array, row]``.

    Args:
        records: Records-table rows (``Dump.records()`` columns).
        shown: Only the records whose ``path`` is in this frame (default: all of ``records``).
    """
    if not len(records) or not {"path", "pack_array", "pack_row"} <= set(records.columns):
        return {}
    packed = records[records["pack_array"].notna()]
    if shown is not None:
        packed = packed[packed["path"].isin(set(shown["path"].dropna()) if "path" in shown.columns else set())]
    return {str(p): [str(a), int(r)] for p, a, r in zip(packed["path"], packed["pack_array"], packed["pack_row"])}


def _stored_of(dump: Any, shown: pd.DataFrame) -> dict[str, list[Any]]:
    """:func:`_stored` of the records of ``dump`` (a ``Dump``; anything else stores no pack) among ``shown``."""
    if not hasattr(dump, "records") or "path" not in shown.columns or not len(shown):
        return {}
    return _stored(dump.records(include_incomplete=True), shown)


def _url(x: Any) -> str:
    if isinstance(x, (str, os.PathLike)):  # a path's own ``root`` attribute is "/" (pathlib), never the dump's
        return os.fspath(x) if not isinstance(x, str) else x
    root = getattr(x, "root", None)
    return str(root if root is not None else x)


def _root(dump: Any) -> str:
    return str(getattr(dump, "root", ""))
