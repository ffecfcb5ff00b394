"""Small time-series charts (sparklines) of a topology or component over the last hour.

``charts_markup(url, latency_label)`` is the markup the topology and component pages embed: four empty SVGs
(emitted/s, acked/s, failed/s, latency ms) that ``/static/charts.js`` fills from the
``/timeseries`` API (``history.History.series``) and redraws every ``POLL_MS``. Vanilla JS
and inline SVG, served by the UI itself: no CDN, no library, works offline and under the
UI's Content-Security-Policy (no inline script or style). Pure; called from request threads.
"""
from __future__ import annotations

import html
from collections.abc import Mapping

POLL_MS = 5000
CHART_WIDTH, CHART_HEIGHT = 240, 56
CHARTS: tuple[tuple[str, str], ...] = (
    ("emitted", "Emitted / s"), ("acked", "Acked / s"), ("failed", "Failed / s"), ("latency", "Latency (ms)"),
)


def esc(value: str) -> str:
    return html.escape(value, quote=True)


def charts_markup(url: str, latency_label: str) -> str:
    """The "last hour" charts for the series at ``url``; ``latency_label`` names which latency.
    Plain markup (``pages`` wraps it in its section), so this module needs nothing from ``pages``."""
    figures = []
    for series, caption in CHARTS:
        if series == "latency":
            caption = latency_label
        figures.append(
            f'<figure class="chart" data-series="{esc(series)}"><figcaption>{esc(caption)} '
            '<span class="chart-value"></span></figcaption>'
            f'<svg class="sparkline" xmlns="http://www.w3.org/2000/svg" width="{CHART_WIDTH}" '
            f'height="{CHART_HEIGHT}" viewBox="0 0 {CHART_WIDTH} {CHART_HEIGHT}" role="img" '
            f'aria-label="{esc(caption)} over the last hour"></svg></figure>')
    return (f'<div class="charts" data-url="{esc(url)}" data-poll-ms="{POLL_MS}">{"".join(figures)}</div>'
            '<p class="charts-status"></p><script src="/static/charts.js" defer></script>')


CHARTS_JS = r"""
"use strict";
// Sparklines of the last hour: polls each div.charts' data-url (the UI's /timeseries API) and
// draws one inline-SVG line per figure[data-series]; null points (no latency in an interval)
// break the line. No libraries, no CDN.
(function () {
  var SVG = "http://www.w3.org/2000/svg";

  function el(name, attrs, text) {
    var node = document.createElementNS(SVG, name);
    Object.keys(attrs).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) { node.textContent = text; }
    return node;
  }
  function fmt(v) {
    if (v === null || v === undefined) { return "–"; }
    return v >= 100 ? String(Math.round(v)) : v.toFixed(v >= 10 ? 1 : 2);
  }
  function draw(svg, times, values, unit) {
    var w = parseInt(svg.getAttribute("width"), 10), h = parseInt(svg.getAttribute("height"), 10);
    var pad = 4, max = 0, t0 = times[0], t1 = times[times.length - 1];
    while (svg.firstChild) { svg.removeChild(svg.firstChild); }
    svg.dataset.points = values.filter(function (v) { return v !== null; }).length;
    values.forEach(function (v) { if (v !== null && v > max) { max = v; } });
    svg.appendChild(el("line", {x1: 0, y1: h - pad, x2: w, y2: h - pad, stroke: "#ccc", "stroke-width": "1"}));
    if (!times.length) {
      svg.appendChild(el("text", {x: w / 2, y: h / 2 + 4, "text-anchor": "middle", "font-size": "11",
                                  fill: "#777"}, "collecting samples…"));
      return;
    }
    var span = Math.max(t1 - t0, 1), scale = max > 0 ? max : 1, d = "", pen = "M";
    values.forEach(function (v, i) {
      if (v === null) { pen = "M"; return; }
      var x = times.length === 1 ? w - pad : pad + (w - 2 * pad) * (times[i] - t0) / span;
      var y = (h - pad) - (h - 2 * pad - 14) * v / scale;
      d += pen + x.toFixed(1) + " " + y.toFixed(1) + " ";
      if (times.length === 1) { d += "L" + (x - 6).toFixed(1) + " " + y.toFixed(1) + " "; }
      pen = "L";
    });
    if (d) {
      svg.appendChild(el("path", {d: d.trim(), fill: "none", stroke: "#1d3557", "stroke-width": "1.5",
                                  "stroke-linejoin": "round"}));
    }
    svg.appendChild(el("text", {x: 2, y: 10, "font-size": "9", fill: "#555"}, "max " + fmt(max) + " " + unit));
    svg.appendChild(el("title", {}, times.length + " points, " +
                       new Date(t0 * 1000).toLocaleTimeString() + " – " + new Date(t1 * 1000).toLocaleTimeString()));
  }
  function render(box, doc) {
    box.querySelectorAll("figure[data-series]").forEach(function (fig) {
      var name = fig.dataset.series, values = doc[name] || [], last = null;
      values.forEach(function (v) { if (v !== null) { last = v; } });
      draw(fig.querySelector("svg"), doc.time || [], values, doc.units[name]);
      fig.querySelector(".chart-value").textContent = "now " + fmt(last);
    });
  }
  function poll(box, status) {
    var pollMs = parseInt(box.dataset.pollMs, 10) || 5000;
    fetch(box.dataset.url)
      .then(function (resp) { return resp.json().then(function (doc) { return {ok: resp.ok, doc: doc}; }); })
      .then(function (res) {
        if (!res.ok) { status.className = "charts-status error"; status.textContent = res.doc.errorMessage; return; }
        render(box, res.doc);
        status.className = "charts-status";
        status.textContent = res.doc.samples + " samples over the last " + Math.round(res.doc.windowSecs / 60) +
          " min; rates per second between samples; updated " + new Date().toLocaleTimeString();
      })
      .catch(function (err) { status.className = "charts-status error"; status.textContent = String(err); })
      .then(function () { window.setTimeout(function () { poll(box, status); }, pollMs); });
  }
  document.querySelectorAll("div.charts[data-url]").forEach(function (box) {
    var status = box.nextElementSibling;
    poll(box, status);
  });
})();
"""

STATIC: Mapping[str, tuple[str, str]] = {"charts.js": ("text/javascript; charset=utf-8", CHARTS_JS.lstrip())}
