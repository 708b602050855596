"""One self-contained HTML page from a :class:`~megadump_zarr.report.collect.ReportData`.

The page needs nothing at view time: the style sheet and script are inline (see ``assets.py``), the
data is one embedded JSON document, heatmaps are drawn on canvases and histograms are inline SVG. The
static parts (summary, first divergence, root cause, error maps, histograms) are plain HTML, so the
answer is readable even with scripts disabled.
"""

from __future__ import annotations

from html import escape
import json
import math
from typing import Any

from megadump_zarr.analyse.plot import heatmap_title
from megadump_zarr.report.assets import DIVERGING, SCRIPT, STYLE
from megadump_zarr.report.collect import ReportData

__all__ = ["render_html", "script_json"]

_SCRIPT_SAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def script_json(value: Any) -> str:
    """``value`` as JSON that is safe inside a ``<script>`` element, whatever strings it holds.

    ``<``, ``>`` and ``&`` are written as ``\\u003c``, ``\\u003e`` and ``\\u0026`` (still the same JSON
    strings), so no data can close the element (``</script>``) or switch the HTML parser into the
    escaped states of ``<!--`` and ``<script>`` that would keep it from ever closing; U+2028/U+2029
    are escaped too (line terminators to older JavaScript parsers).

    Args:
        value: A JSON-ready value (no NaN or infinity).
    """
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    return "".join(_SCRIPT_SAFE.get(ch, ch) for ch in text) if any(ch in text for ch in _SCRIPT_SAFE) else text


_WHERE_FIELDS = (
    "name",
    "verdict",
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
    "worst_index",
    "worst_task_id",
    "worst_owner_id",
    "worst_core_type",
    "worst_core_id",
    "max_abs",
    "max_rel",
    "note",
    "path",
)


def _text(value: Any, key: str = "") -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e5):
            return f"{value:.3e}"
        return f"{value:.4g}"
    if isinstance(value, list):
        if key.endswith("index") or key == "first_mismatch":
            return "(" + ", ".join(_text(v) for v in value) + ")"
        return "×".join(_text(v) for v in value) if all(isinstance(v, int) for v in value) else json.dumps(value)
    return str(value)


_WIDE = ("note", "path")


def _wide(key: str) -> str:
    return ' class="wide"' if key in _WIDE else ""


def _card(title: str, where: dict[str, Any] | None, card_id: str, empty: str, lines: list[str] = ()) -> str:
    """A box of ``where``'s fields, headed ``title``, with ``lines`` (plain text) above the fields."""
    if where is None:
        return f'<div class="card" id="{card_id}"><h3>{escape(title)}</h3><p class="note">{escape(empty)}</p></div>'
    keys = [k for k in _WHERE_FIELDS if where.get(k) not in (None, "")]
    keys = [k for k in keys if k not in _WIDE] + [k for k in keys if k in _WIDE]
    items = "".join(
        f"<dt{_wide(k)}>{escape(k)}</dt><dd{_wide(k)}>"
        f"{_breakable(_text(where.get(k), k)) if k == 'path' else escape(_text(where.get(k), k))}</dd>"
        for k in keys
    )
    said = "".join(f'<p class="card-line">{escape(line)}</p>' for line in lines)
    return f'<div class="card" id="{card_id}"><h3>{escape(title)}</h3>{said}<dl>{items}</dl></div>'


def _breakable(text: str) -> str:
    """``text`` HTML-escaped, with a line-break opportunity (``<wbr>``) after each ``/``, ``.`` and ``_``
    (long paths wrap there, never in the middle of a word)."""
    return "".join(escape(ch) + ("<wbr>" if ch in "/._" else "") for ch in text)


def _root_lines(where: dict[str, Any]) -> list[str]:
    """What the root-cause box says first: why it is the root, which stage wrote it, what replay found."""
    lines = []
    if where.get("root_stage"):
        lines.append(f"written by stage {where['root_stage']}")
    if where.get("root_reason"):
        lines.append(f"why: {where['root_reason']}")
    if where.get("replay"):
        lines.append(f"replay of task {where.get('task_id')}: {where['replay']}")
    elif where.get("replay_note"):
        lines.append(str(where["replay_note"]))
    return lines


def _cards(data: ReportData) -> str:
    """The root-cause and first-divergence boxes: one box saying both roles when they are one record."""
    empty = "none: every record passes" if not data.summary.get("failing") else "not determined (see the notes below)"
    root, first = data.root_cause, data.first_divergence
    lines = _root_lines(root) if root else []
    if root is not None and first is not None and root.get("path") == first.get("path"):
        return _card(
            "Root cause and first divergence (one record): the first failing record is where the divergence is born",
            root,
            "root-cause",
            empty,
            lines,
        )
    return _card("Root cause: where the divergence is born", root, "root-cause", empty, lines) + _card(
        "First divergence: the first failing record", first, "first-divergence", empty
    )


def _summary(data: ReportData) -> str:
    s = data.summary
    verdict = s.get("verdict", "")
    if data.kind == "compare":
        counts = ", ".join(f"{n} {v}" for v, n in sorted(s.get("counts", {}).items()))
        line = (
            f'<span class="verdict-{escape(verdict)}" id="verdict">{escape(verdict.upper())}</span>: '
            f"{s.get('failing', 0)} of {s.get('records', 0)} records do not pass ({escape(counts)})"
        )
        if s.get("rtol") is not None or s.get("atol") is not None:
            line += f"; rtol={escape(_text(s.get('rtol')))}, atol={escape(_text(s.get('atol')))}"
    else:
        line = (
            f'<span class="verdict-{escape(verdict)}" id="verdict">{escape(verdict.upper())}</span>: '
            f"{s.get('nonfinite', 0)} of {s.get('records', 0)} records hold NaN or Inf "
            f"({s.get('windows', 0)} windows)"
        )
    sources = " vs ".join(f"<code>{escape(v)}</code>" for k, v in data.sources.items() if k in ("a", "b"))
    return f"<p>{sources}</p><p>{line}</p>"


def _heat_color(value: float | None, top: float) -> str:
    """CSS colours for a worst relative error: white at 0 (and up to 1e-6), dark red at ``top`` (log scale)."""
    if value == "inf":  # an infinite relative error (JSON "inf"): the worst there is
        return "background:rgb(103,0,31);color:#fff"
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return "background:#eeeeee"
    if value <= 0:  # exact: white, the colour of no error
        return "background:#ffffff;color:#1f2328"
    floor = 1e-6
    span = math.log10(max(top, floor * 10) / floor)
    t = 0.0 if value <= floor else max(0.0, min(1.0, math.log10(value / floor) / span))
    r, g, b = (255 - int(t * 152), 255 - int(t * 255), 255 - int(t * 224))
    return f"background:rgb({r},{g},{b});color:{'#fff' if t > 0.55 else '#1f2328'}"


def _error_maps(data: ReportData) -> str:
    if not data.error_maps:
        return '<p class="note">No stage grid: these records have no L1 stage, task, owner or core (L0).</p>'
    parts = []
    first = data.error_maps[0]
    if first.get("asked") not in (None, first["by"]):
        missing = "owners" if first["asked"] == "owner" else "cores"
        if first["by"] == "task" and first["asked"] == "owner":
            missing = "owners or cores"
        parts.append(f'<p class="note">These records have no {missing}: the grid is by {escape(first["by"])}.</p>')
    for m in data.error_maps:
        values = [
            c["worst_rel"] for line in m["cells"] for c in line if c and isinstance(c.get("worst_rel"), (int, float))
        ]
        top = max(values) if values else 1.0
        where = ", ".join(f"{k} {v}" for k, v in m["where"].items() if v is not None)
        head = "".join(f"<th>{escape(m['by'])} {escape(str(c))}</th>" for c in m["columns"])
        body = []
        for stage, line in zip(m["rows"], m["cells"]):
            cells = []
            for col, cell in zip(m["columns"], line):
                if cell is None:
                    cells.append('<td class="empty" style="background:#fafafa"></td>')
                    continue
                rel = cell.get("worst_rel")
                title = (
                    f"stage {stage}, {m['by']} {col}: worst max_rel {_text(rel)}, "
                    f"{cell['failing']} of {cell['records']} records failing"
                )
                mark = "fail" if cell["failing"] else "ok"
                cells.append(
                    f'<td class="{mark}" data-value="{escape(_text(rel))}" title="{escape(title)}" '
                    f'style="{_heat_color(rel, top)}">{escape(_text(rel))}</td>'
                )
            body.append(f"<tr><th>{escape(stage)}</th>{''.join(cells)}</tr>")
        parts.append(
            f'<h3>{escape(where)}</h3><div class="map-wrap"><table class="errormap"><thead><tr><th>stage</th>{head}'
            f"</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
        )
    return (
        "".join(parts) + '<p class="note">Cells: worst relative error of the records of that stage and '
        f"{escape(data.error_maps[0]['by'])} (darker is worse); hover for counts.</p>"
    )


def _ticks(n: int, count: int = 5) -> list[int]:
    """Up to ``count`` evenly spread cell indices of ``n`` cells, first and last included."""
    if n <= 1:
        return [0]
    return sorted({round(k * (n - 1) / (count - 1)) for k in range(count)})


def _histogram_svg(hist: dict[str, Any]) -> str:
    """An SVG histogram with a count axis (0, half, top) and the value range under the bars."""
    counts, edges = hist["counts"], hist["edges"]
    if not counts:
        return '<p class="note">no finite differences</p>'
    left, width, height, top = 58, 300, 120, max(counts) or 1
    bar = width / len(counts)
    bars = "".join(
        f'<rect x="{left + i * bar:.1f}" y="{height - c / top * height + 6:.1f}" '
        f'width="{max(bar - 1, 1):.1f}" height="{c / top * height:.1f}" fill="#4c72b0"><title>'
        f"{escape(_text(edges[i]))} .. {escape(_text(edges[i + 1]))}: {c}</title></rect>"
        for i, c in enumerate(counts)
    )
    axis = [f'<line class="y-axis" x1="{left - 2}" y1="6" x2="{left - 2}" y2="{height + 6}" stroke="#6a737d"/>']
    for value in sorted({0, top // 2, top}):
        y = height - value / top * height + 6
        axis.append(
            f'<line x1="{left - 6}" y1="{y:.1f}" x2="{left - 2}" y2="{y:.1f}" stroke="#6a737d"/>'
            f'<text class="y-tick" x="{left - 8}" y="{y + 3.5:.1f}" font-size="10" text-anchor="end">'
            f"{value}</text>"
        )
    axis.append(
        f'<text class="y-label" x="12" y="{height / 2 + 6:.1f}" font-size="10" text-anchor="middle" '
        f'transform="rotate(-90 12 {height / 2 + 6:.1f})">count</text>'
    )
    base = height + 6
    lo, hi = f"{edges[0]:.6g}", f"{edges[-1]:.6g}"
    if lo == hi:  # a narrow range: enough digits to tell the ends apart
        lo, hi = f"{edges[0]:.9g}", f"{edges[-1]:.9g}"
    axis.append(
        f'<line x1="{left - 2}" y1="{base}" x2="{left + width}" y2="{base}" stroke="#6a737d"/>'
        f'<text x="{left}" y="{base + 13}" font-size="10">{escape(lo)}</text>'
        f'<text x="{left + width}" y="{base + 13}" font-size="10" text-anchor="end">'
        f"{escape(hi)}</text>"
        f'<text x="{left + width / 2}" y="{base + 13}" font-size="10" text-anchor="middle">A−B</text>'
    )
    return (
        f'<figure><svg class="histogram" width="{left + width + 4}" height="{height + 26}" role="img" '
        f'aria-label="histogram of A-B">{"".join(axis)}{bars}</svg>'
        f"<figcaption>histogram of A−B ({sum(counts)} finite values)</figcaption></figure>"
    )


def _heatmap(i: int, w: dict[str, Any]) -> str:
    """The canvas of worst record ``i`` inside its axes: dimension names, and ticks in the whole tensor's
    indices (an L1 record's global rows)."""
    rows, cols = w["shape"][0], (w["shape"][1] if len(w["shape"]) > 1 else 1)
    scale = max(1, 288 // max(rows, cols))  # the script sizes the canvas the same way
    steps, dims = w.get("steps") or [1, 1], w.get("dims") or ["", ""]
    index = w.get("index") or [[r * steps[0] for r in range(rows)], [c * steps[1] for c in range(cols)]]
    y_ticks = (
        "".join(
            f'<span class="tick y-tick" style="top:{(r + 0.5) * scale:.1f}px">{index[0][r]}</span>'
            for r in _ticks(rows)
        )
        if rows > 1
        else ""
    )
    x_ticks = "".join(
        f'<span class="tick x-tick" style="left:{(c + 0.5) * scale:.1f}px">{index[1][c]}</span>' for c in _ticks(cols)
    )

    def label(dim: str, step: int) -> str:
        return escape(dim or "") + (f" (every {step})" if step > 1 else "")

    name = escape(str(w["where"].get("name")))
    return (
        f'<div class="heat-axes"><div class="y-label">{label(dims[0], steps[0])}</div>'
        f'<div class="y-ticks" style="height:{rows * scale}px">{y_ticks}</div>'
        f'<canvas class="heatmap" data-index="{i}" aria-label="A-B heatmap of {name}" '
        f'style="width:{cols * scale}px;height:{rows * scale}px"></canvas>'
        f'<div></div><div></div><div class="x-ticks" style="width:{cols * scale}px">{x_ticks}</div>'
        f'<div></div><div></div><div class="x-label">{label(dims[1], steps[1])}</div></div>'
    )


def _where_line(where: dict[str, Any]) -> str:
    """One line: which record, where it was produced, and how wrong it is."""
    parts = [f"{where.get('io') or 'tensor'} {where.get('name')}"]
    if where.get("task_id") is not None:
        worker = [f"owner {_text(where.get('owner_id'))}"] if where.get("owner_id") is not None else []
        if where.get("core_id") is not None:
            worker.append(f"{_text(where.get('core_type'))} core {_text(where.get('core_id'))}".strip())
        parts.append(
            f"task {where.get('task_id')} of stage {where.get('stage')}" + (f" ({', '.join(worker)})" if worker else "")
        )
    errors = [f"{k} {_text(where.get(k))}" for k in ("max_abs", "max_rel") if where.get(k) is not None]
    if errors:
        parts.append(", ".join(errors))
    if where.get("worst_index") is not None:
        parts.append(f"worst at {_text(where.get('worst_index'), 'worst_index')}")
    return "; ".join(parts)


def _engine_group(path: str) -> str:
    """The group ``engine="megadump"`` opens for a record: an L0 invocation, or an L1 invocation's stage.

    Args:
        path: The record's path below the root (``rank_0/window_0000/invocation_.../stages/{stage}/task_.../NAME``).
    """
    parts = path.split("/")
    return "/".join(parts[:5] if len(parts) > 5 and parts[3] == "stages" else parts[:3])


def _open_snippet(root: str, path: str, stored: list[Any] | None = None) -> str:
    """The lines that open a record with plain xarray, and with the megadump engine.

    Args:
        root: The dump root.
        path: The record's path below the root.
        stored: ``[pack array, row]`` of a packed record (``layout="packs"``): plain xarray opens its pack
            and takes its row.
    """
    group, _, array = path.rpartition("/")
    top = _engine_group(path)
    if stored:
        pack, _, name = str(stored[0]).rpartition("/")
        plain = f"xr.open_zarr({json.dumps(root + '/' + pack)})[{json.dumps(name)}].isel(task={int(stored[1])})"
    else:
        plain = f"xr.open_zarr({json.dumps(root + '/' + group)})[{json.dumps(array)}]"
    return (
        f"import xarray as xr\n{plain}\n"
        f'# or: xr.open_dataset({json.dumps(root)}, engine="megadump", group={json.dumps(top)})'
    )


def _worst(data: ReportData) -> str:
    if not data.worst:
        return '<p class="note">No failing record with tensor data on both sides.</p>'
    parts = []
    root = data.sources.get("root_a", data.sources.get("a", ""))
    for i, w in enumerate(data.worst):
        where = w["where"]
        title = heatmap_title(where.get("name"), where)  # no "stage" where the record has none (L0)
        sampled = " (strided sample)" if w.get("sampled") else ""
        path = str(where.get("path", ""))
        parts.append(
            f'<div class="worst" id="worst-{i}"><div><h3>{escape(title)}</h3>{_heatmap(i, w)}'
            f'<div class="colorbar"><span>{escape(_text(-w["limit"]))}</span>'
            f'<canvas class="colorbar-scale" width="160" height="12"></canvas><span>{escape(_text(w["limit"]))}</span>'
            f"<span>A−B{escape(sampled)}, 0 = white</span></div></div>"
            f'<div>{_histogram_svg(w["histogram"])}<p class="mono">{escape(_where_line(where))}</p>'
            f'<pre class="mono">{escape(_open_snippet(root, path, data.stored.get(path)))}</pre></div></div>'
        )
    return "".join(parts)


def render_html(data: ReportData) -> str:
    """The report page, one string of HTML."""
    payload = data.to_json()
    payload["colormap"] = [list(c) for c in DIVERGING]
    payload["worst"] = [{"shape": w["shape"], "cells": w["cells"]} for w in data.worst]
    blob = script_json({k: payload[k] for k in ("columns", "rows", "worst", "colormap", "sources", "stored")})
    if data.kind == "compare":
        cards = _cards(data)
        sections = f"<h2>Error map</h2>{_error_maps(data)}<h2>Worst records</h2>{_worst(data)}"
        failures_toggle = '<label><input type="checkbox" id="failures-only"> failures only</label>'
    else:
        cards = _card("First NaN/Inf", data.first_nonfinite, "first-nonfinite", "none: every record is finite")
        sections = ""
        failures_toggle = '<label><input type="checkbox" id="failures-only"> non-finite only</label>'
    notes = "".join(f'<p class="note">{escape(n)}</p>' for n in data.notes)
    same = ", ".join(f"{k} {_text(v, k)}" for k, v in data.shared.items())
    shared = f'<p class="note" id="shared-columns">Every record: {escape(same)}.</p>' if same else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:">
<title>{escape(data.title)}</title><style>{STYLE}</style></head>
<body data-kind="{escape(data.kind)}">
<h1>{escape(data.title)}</h1>
<pre id="js-errors"></pre>
<section id="summary">{_summary(data)}</section>
<div class="cards">{cards}</div>
{notes}
{sections}
<h2>Records</h2>
{shared}<div class="controls"><input id="filter" type="search" placeholder="filter: name, stage, verdict, path ...">
{failures_toggle}<span id="shown-count" class="note"></span></div>
<div class="table-wrap"><table id="records"><thead><tr></tr></thead><tbody></tbody></table></div>
<p><button id="more" type="button" hidden>show more records</button></p>
<p class="note">Click a row to see how to open that record with xarray.</p>
<pre id="open-snippet" class="mono"></pre>
<script type="application/json" id="report-data">{blob}</script>
<script>{SCRIPT}</script>
</body></html>
"""
