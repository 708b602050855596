"""The report page's own style sheet and script, inlined into every report (no network at view time).

The script reads the report's data from ``<script type="application/json" id="report-data">``, renders
the per-record table (sortable by any column, filterable by text and by verdict, failures first), draws
the difference heatmaps on canvases with a diverging colour map centred on 0 and a labelled colour bar,
and shows how to open a record with xarray when its row is clicked. Script errors are caught and listed
in ``#js-errors``; ``<body data-ready="1">`` marks a page that finished rendering, and ``data-render-ms`` says how many
milliseconds after navigation started it did.
"""

from __future__ import annotations

import math

__all__ = ["DIVERGING", "SCRIPT", "STYLE", "diverging_rgb"]

# RdBu reversed (blue negative, white 0, red positive; its centre made pure white): anchors interpolated linearly in the script.
DIVERGING = (
    (5, 48, 97),
    (33, 102, 172),
    (67, 147, 195),
    (146, 197, 222),
    (209, 229, 240),
    (255, 255, 255),
    (253, 219, 199),
    (244, 165, 130),
    (214, 96, 77),
    (178, 24, 43),
    (103, 0, 31),
)


def diverging_rgb(q: int) -> tuple[int, int, int]:
    """The colour the page's script gives a quantised heatmap cell ``q`` (0..254, 127 = 0; 255 = not
    finite): :data:`DIVERGING` interpolated linearly, exactly as ``color(q / 254)`` in :data:`SCRIPT`.

    Args:
        q: The cell, as ``collect`` quantised it (``diff / limit * 127 + 127``, limit = max|diff|).
    """
    if q == 255:
        return (200, 200, 200)
    x = max(0.0, min(1.0, q / 254)) * (len(DIVERGING) - 1)
    i = min(len(DIVERGING) - 2, int(x))
    f = x - i
    return tuple(int(math.floor(lo + (hi - lo) * f + 0.5)) for lo, hi in zip(DIVERGING[i], DIVERGING[i + 1]))


STYLE = """
:root { --fail: #b2182b; --pass: #1a7f37; --muted: #6a737d; --line: #d0d7de; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0 auto; max-width: 1280px;
       padding: 16px 24px 48px; color: #1f2328; }
h1 { font-size: 20px; margin: 8px 0 4px; } h2 { font-size: 16px; margin: 28px 0 8px; border-bottom: 1px solid var(--line); }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12.5px; }
.verdict-pass { color: var(--pass); font-weight: 600; } .verdict-fail, .verdict-nonfinite { color: var(--fail); font-weight: 600; }
.cards { display: flex; gap: 12px; flex-wrap: wrap; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 10px 14px; min-width: 280px; flex: 1; }
.card h3 { margin: 0 0 6px; font-size: 14px; } .card dl { margin: 0; display: grid; grid-template-columns: max-content 1fr max-content 1fr; gap: 2px 10px; }
.card dt { color: var(--muted); } .card dt.wide { grid-column: 1; } .card dd.wide { grid-column: 2 / -1; } .card dd { margin: 0; overflow-wrap: break-word; word-break: normal; }
.card-line { margin: 0 0 4px; } .card-line:first-of-type { font-weight: 600; }
table { border-collapse: collapse; } th, td { padding: 3px 7px; border-bottom: 1px solid #eaeef2; text-align: left; white-space: nowrap; }
#records th { cursor: pointer; position: sticky; top: 0; background: #f6f8fa; user-select: none; }
#records th.sorted-asc::after { content: " \\25B2"; } #records th.sorted-desc::after { content: " \\25BC"; }
#records tr.fail td:first-child { color: var(--fail); font-weight: 600; }
#records tr:hover { background: #f6f8fa; } #records td.num { text-align: right; font-variant-numeric: tabular-nums; }
.table-wrap { max-height: 70vh; overflow: auto; border: 1px solid var(--line); }
#records { width: 100%; font-size: 12px; } #records th { white-space: normal; } #records th, #records td { padding: 3px 5px; }
#records td.text { white-space: normal; } #records td.wrap { white-space: normal; min-width: 8em; }
.map-wrap { max-width: 100%; overflow-x: auto; }
.controls { display: flex; gap: 10px; align-items: center; margin: 8px 0; } .controls input { width: 320px; padding: 4px 6px; }
table.errormap td { width: 56px; height: 26px; text-align: center; font-size: 11px; border: 1px solid #fff; }
table.errormap th { font-weight: 500; color: var(--muted); font-size: 12px; }
.worst { display: flex; gap: 18px; flex-wrap: wrap; align-items: flex-start; border: 1px solid var(--line);
         border-radius: 6px; padding: 10px; margin: 10px 0; }
.heat-axes { display: grid; grid-template-columns: 16px max-content max-content; align-items: center; margin: 4px 0; }
.heat-axes .y-label { writing-mode: vertical-rl; transform: rotate(180deg); font-size: 11px; color: var(--muted);
                      text-align: center; }
.heat-axes .y-ticks { position: relative; min-width: 34px; } .heat-axes .x-ticks { position: relative; height: 16px; }
.heat-axes .tick { position: absolute; font-size: 10px; color: var(--muted); white-space: nowrap; }
.heat-axes .y-tick { right: 4px; transform: translateY(-50%); } .heat-axes .y-tick::after { content: ""; display: inline-block; width: 4px; margin-left: 2px;
                            vertical-align: middle; border-top: 1px solid var(--muted); }
.heat-axes .x-tick { top: 0; transform: translateX(-50%); } .heat-axes .x-tick::before { content: ""; display: block; margin: 0 auto 1px;
                     width: 0; height: 4px; border-left: 1px solid var(--muted); }
.heat-axes .x-label { text-align: center; font-size: 11px; color: var(--muted); }
.worst canvas.heatmap { box-sizing: content-box; image-rendering: pixelated; border: 1px solid var(--line); }
.colorbar { display: flex; align-items: center; gap: 6px; font-size: 11px; color: var(--muted); }
#open-snippet { background: #f6f8fa; padding: 8px; border-radius: 6px; white-space: pre-wrap; }
.note { color: var(--muted); } #js-errors:empty { display: none; } #js-errors { color: var(--fail); }
"""

SCRIPT = r"""
(function () {
  "use strict";
  var errors = document.getElementById("js-errors");
  window.addEventListener("error", function (e) { errors.textContent += "error: " + e.message + "\n"; });
  var data = JSON.parse(document.getElementById("report-data").textContent);
  var LUT = data.colormap;

  function color(t) {               // t in [0, 1] -> [r, g, b] along the diverging map
    var x = Math.max(0, Math.min(1, t)) * (LUT.length - 1), i = Math.min(LUT.length - 2, Math.floor(x)), f = x - i;
    return [0, 1, 2].map(function (k) { return Math.round(LUT[i][k] + (LUT[i + 1][k] - LUT[i][k]) * f); });
  }
  function fmt(v) {
    if (v === null || v === undefined) return "";
    if (typeof v === "number") {
      if (Number.isInteger(v)) return String(v);
      var a = Math.abs(v);
      return (a !== 0 && (a < 1e-3 || a >= 1e5)) ? v.toExponential(3) : String(Number(v.toPrecision(4)));
    }
    if (Array.isArray(v)) return v.join("\u00d7");
    return String(v);
  }

  // ---- heatmaps: quantised cells 0..254 (127 = 0), 255 = not finite
  document.querySelectorAll("canvas.heatmap").forEach(function (canvas) {
    var w = data.worst[Number(canvas.dataset.index)], rows = w.shape[0], cols = w.shape[1] || 1;
    canvas.width = cols; canvas.height = rows;
    var scale = Math.max(1, Math.floor(288 / Math.max(rows, cols)));
    canvas.style.width = cols * scale + "px"; canvas.style.height = rows * scale + "px";
    var ctx = canvas.getContext("2d"), img = ctx.createImageData(cols, rows);
    for (var i = 0; i < w.cells.length; i++) {
      var q = w.cells[i], rgb = q === 255 ? [200, 200, 200] : color(q / 254);
      img.data[4 * i] = rgb[0]; img.data[4 * i + 1] = rgb[1]; img.data[4 * i + 2] = rgb[2]; img.data[4 * i + 3] = 255;
    }
    ctx.putImageData(img, 0, 0);
    canvas.dataset.rendered = "1";
  });
  document.querySelectorAll("canvas.colorbar-scale").forEach(function (canvas) {
    var ctx = canvas.getContext("2d");
    for (var x = 0; x < canvas.width; x++) {
      var rgb = color(x / (canvas.width - 1));
      ctx.fillStyle = "rgb(" + rgb.join(",") + ")"; ctx.fillRect(x, 0, 1, canvas.height);
    }
  });

  // ---- the per-record table
  var table = document.getElementById("records"), body = table.querySelector("tbody");
  var filter = document.getElementById("filter"), failuresOnly = document.getElementById("failures-only");
  var columns = data.columns, rows = data.rows.map(function (r, i) { r.__order = i; return r; });
  var sortKey = "__order", sortDir = 1, PAGE = 200, limit = PAGE;
  var WRAP = {path: 1, note: 1};  // long text wraps: the table stays as wide as the page
  function breakable(html) { return html.replace(/([_.\/])/g, "$1<wbr>"); }  // names break after _ . and /
  var more = document.getElementById("more");
  var head = table.querySelector("thead tr");
  columns.forEach(function (c) {
    var th = document.createElement("th"); th.dataset.key = c;
    c.split("_").forEach(function (part, i) {  // headers may break after an underscore
      if (i) { th.appendChild(document.createTextNode("_")); th.appendChild(document.createElement("wbr")); }
      th.appendChild(document.createTextNode(part));
    });
    th.addEventListener("click", function () {
      sortDir = sortKey === c ? -sortDir : 1; sortKey = c;
      head.querySelectorAll("th").forEach(function (h) { h.className = ""; });
      th.className = sortDir > 0 ? "sorted-asc" : "sorted-desc"; limit = PAGE; render();
    });
    head.appendChild(th);
  });
  function passes(r) {
    if (failuresOnly && failuresOnly.checked && (r.verdict === "pass" || r.verdict === undefined && !(r.nan_count || r.inf_count))) return false;
    var q = filter.value.trim().toLowerCase();
    if (!q) return true;
    return columns.some(function (c) { return fmt(r[c]).toLowerCase().indexOf(q) >= 0; });
  }
  function compareValues(a, b) {
    if (a === b) return 0; if (a === null || a === undefined) return 1; if (b === null || b === undefined) return -1;
    if (typeof a === "number" && typeof b === "number") return a - b;
    return String(a) < String(b) ? -1 : 1;
  }
  function escape(s) { return s.replace(/[&<>"]/g, function (ch) { return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[ch]; }); }
  function render() {
    var shown = rows.filter(passes).sort(function (a, b) { return sortDir * compareValues(a[sortKey], b[sortKey]); });
    // Only the first rows are put in the DOM (sorting and filtering see every record): a 4096-record
    // report opens at once, and "show more" adds the rest a page at a time.
    var html = shown.slice(0, limit).map(function (r) {
      var bad = r.verdict !== undefined ? r.verdict !== "pass" : (r.nan_count || r.inf_count);
      return "<tr class=\"" + (bad ? "fail" : "ok") + "\" data-order=\"" + r.__order + "\">" + columns.map(function (c) {
        var v = r[c];
        if (typeof v === "number") return "<td class=\"num\">" + escape(fmt(v)) + "</td>";
        return "<td class=\"" + (WRAP[c] ? "wrap" : "text") + "\">" + breakable(escape(fmt(v))) + "</td>";
      }).join("") + "</tr>";
    }).join("");
    body.innerHTML = html;
    var listed = Math.min(limit, shown.length);
    document.getElementById("shown-count").textContent = shown.length + " of " + rows.length + " records match" +
      (listed < shown.length ? "; first " + listed + " listed" : "");
    more.hidden = listed >= shown.length;
  }
  function reset() { limit = PAGE; render(); }
  filter.addEventListener("input", reset);
  if (failuresOnly) failuresOnly.addEventListener("change", reset);
  more.addEventListener("click", function () { limit += 4 * PAGE; render(); });
  function engineGroup(path) {  // an L0 invocation, or an L1 invocation's stage (html.py _engine_group)
    var parts = path.split("/");
    return parts.slice(0, parts.length > 5 && parts[3] === "stages" ? 5 : 3).join("/");
  }
  body.addEventListener("click", function (e) {
    var tr = e.target.closest("tr"); if (!tr) return;
    var r = rows[Number(tr.dataset.order)], root = data.sources.root_a || data.sources.a;
    var path = String(r.path || ""), cut = path.lastIndexOf("/");
    var stored = (data.stored || {})[path];  // a packed record: its pack array and row (html.py _open_snippet)
    var pack = stored ? String(stored[0]) : "", at = pack.lastIndexOf("/");
    document.getElementById("open-snippet").textContent =
      "import xarray as xr\n" +
      (stored
        ? "ds = xr.open_zarr(" + JSON.stringify(root + "/" + pack.slice(0, at)) + ")\n" +
          "da = ds[" + JSON.stringify(pack.slice(at + 1)) + "].isel(task=" + Number(stored[1]) + ")\n"
        : "ds = xr.open_zarr(" + JSON.stringify(root + "/" + path.slice(0, cut)) + ")\n" +
          "da = ds[" + JSON.stringify(path.slice(cut + 1)) + "]\n") +
      "# or: xr.open_dataset(" + JSON.stringify(root) + ", engine=\"megadump\", group=" +
      JSON.stringify(engineGroup(path)) + ")";
  });
  render();
  document.body.dataset.renderMs = String(Math.round(performance.now()));  // navigation start to rendered
  document.body.dataset.ready = "1";
})();
"""
