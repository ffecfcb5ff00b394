"""The topology graph: Storm's ``/visualization`` JSON and a page that draws it live.

``visualization(info, topology, window)`` returns Storm UI's shape (``core.clj``
``visualization-data``): component id -> ``{":type", ":capacity", ":latency", ":transferred",
":stats": [{":host", ":port", ":uptime_secs", ":transferred": {stream: n}}], ":link",
":inputs": [{":component", ":stream", ":sani-stream", ":grouping"}]}``, plus stormpy's
``":backpressure"`` (bool), ``":receive-pct-full"`` and ``":backpressure-source"`` (see ``backpressure``).

The page (``/topology_graph.html?id=<id>``) is an inline SVG drawn by ``/static/graph.js``
(vanilla JS, no CDN: the UI works offline): components in columns by their distance from a
spout, node size and colour from capacity (green idle -> red saturated), a purple ring and a
bigger node for backpressure, edges labelled with
the tuples/s each stream carried between two polls. It polls the visualization API every few
seconds. Pure; called from the UI's request threads.
"""
from __future__ import annotations

import re
import zlib
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from stormpy.ui.pages import Html, esc, link, page, section, topology_href
from stormpy.ui.stats import Totals, aggregate, components, is_system_id

POLL_MS = 3000


def grouping_name(grouping: Any) -> str:
    """The Thrift Grouping union's set field, as Storm's UI names it."""
    if grouping is None:
        return ""
    if grouping.fields is not None:
        return "fields" if grouping.fields else "global"
    for name in ("shuffle", "all", "none", "direct", "local_or_shuffle", "partial_key"):
        if getattr(grouping, name, None) is not None:
            return name
    return "custom"


def _inputs(spec: Any, include_sys: bool) -> list[dict[str, str]]:
    rows = []
    for gsid, grouping in sorted((spec.common.inputs or {}).items(), key=lambda kv: (kv[0].componentId, kv[0].streamId)):
        if not include_sys and (is_system_id(gsid.componentId) or is_system_id(gsid.streamId)):
            continue
        rows.append({":component": gsid.componentId, ":stream": gsid.streamId,
                     ":sani-stream": re.sub(r"[^A-Za-z0-9_-]", "_", gsid.streamId) + str(zlib.crc32(gsid.streamId.encode())),
                     ":grouping": grouping_name(grouping)})
    return rows


BACKPRESSURE_CAPACITY = 0.8


def backpressure(executors: list[Any], capacity: float) -> dict[str, Any]:
    """Whether a component is the cause of backpressure, from what its executors' heartbeats carry.

    Workers publish per executor ``__backpressure`` (1 while its receive queue is over the
    high watermark, which is what throttles the spouts) and ``__receive.pct_full`` (executor
    metrics, see ``task.executor.ReceiveQueueMetrics``). A component is under backpressure when
    any of its executors says so. Workers that publish neither (older ones) fall back to Storm's
    rule of thumb: ``capacity`` (the window's) above 0.8; ``source`` says which rule was used."""
    published = [ex.stats.metrics for ex in executors
                 if ex.stats is not None and ex.stats.metrics and "__backpressure" in ex.stats.metrics]
    if published:
        return {"backpressure": any(m["__backpressure"] >= 1 for m in published),
                "pct_full": round(max(float(m.get("__receive.pct_full", 0.0)) for m in published), 2),
                "source": "receive-queue"}
    return {"backpressure": capacity > BACKPRESSURE_CAPACITY, "pct_full": None, "source": "capacity"}


def visualization(info: Any, topology: Any | None, window: str, include_sys: bool = False) -> dict[str, Any]:
    """``/api/v1/topology/<id>/visualization`` in Storm's JSON shape."""
    specs: dict[str, Any] = {}
    if topology is not None:
        specs.update(topology.spouts or {})
        specs.update(topology.bolts or {})
    result: dict[str, Any] = {}
    for comp in sorted(components(info, topology).values(), key=lambda c: c.id):
        if not include_sys and is_system_id(comp.id):
            continue
        totals: Totals = aggregate(comp.executors, window, include_sys)
        latency = totals.complete_weighted / totals.complete_count if comp.kind == "spout" and totals.complete_count \
            else (totals.process_weighted / totals.process_count if totals.process_count else 0.0)
        stats = []
        pressure = backpressure(comp.executors, totals.capacity)
        for ex in comp.executors:
            per_stream = {s: int(n) for s, n in ((ex.stats.transferred or {}).get(window) or {}).items()
                          if include_sys or not is_system_id(s)} if ex.stats else {}
            stats.append({":host": ex.host, ":port": ex.port, ":uptime_secs": ex.uptime_secs,
                          ":transferred": per_stream})
        result[comp.id] = {
            ":type": comp.kind,
            ":capacity": round(totals.capacity, 4),
            ":latency": round(latency, 3),
            ":transferred": totals.transferred,
            ":emitted": totals.emitted,
            ":acked": totals.acked,
            ":failed": totals.failed,
            ":executors": comp.num_executors,
            ":backpressure": pressure["backpressure"],
            ":receive-pct-full": pressure["pct_full"],
            ":backpressure-source": pressure["source"],
            ":stats": stats,
            ":link": "/component.html?" + urlencode({"topology_id": info.id, "id": comp.id}),
            ":inputs": _inputs(specs[comp.id], include_sys) if comp.id in specs else [],
        }
    return result


def render_graph_page(topology_id: str, name: str) -> str:
    """The graph page: an empty SVG that ``graph.js`` fills from the visualization API."""
    content = Html(
        f'<p>{link(topology_href(topology_id), "Back to the topology page")}</p>'
        '<p class="legend">Nodes: size and colour = capacity (green idle, red saturated; spouts are squares); '
        'a thick purple ring, a bigger node and "BACKPRESSURE" = an executor\'s receive queue is over its '
        'high watermark at the last heartbeat (the workers\' <code>__backpressure</code> metric; for workers '
        'that do not publish it, capacity above 0.8), with how full the queue is. '
        'Edges: tuples/s per stream between polls. Redrawn every few seconds.</p>'
        f'<div id="graph" data-topology-id="{esc(topology_id)}" data-poll-ms="{POLL_MS}">'
        '<svg id="graph-svg" xmlns="http://www.w3.org/2000/svg" width="960" height="480" role="img" '
        f'aria-label="topology {esc(name)} graph"></svg></div><p id="graph-status"></p>'
        '<script src="/static/graph.js" defer></script>')
    return page(f"Topology {name}: graph", section("Topology Graph", content))


GRAPH_JS = r"""
"use strict";
// The topology graph: polls /api/v1/topology/<id>/visualization (Storm's JSON shape) and draws
// components (columns by distance from a spout) and streams with their rates into an inline SVG.
(function () {
  var SVG = "http://www.w3.org/2000/svg";
  var box = document.getElementById("graph");
  if (!box) { return; }
  var svg = document.getElementById("graph-svg"), status = document.getElementById("graph-status");
  var id = box.dataset.topologyId, pollMs = parseInt(box.dataset.pollMs, 10) || 3000;
  var previous = null;   // {time, sent: {"src stream": transferred}}

  function el(name, attrs, text) {
    var node = document.createElementNS(SVG, name);
    Object.keys(attrs).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) { node.textContent = text; }
    return node;
  }
  function color(capacity) {          // 0 -> green, >= 1 -> red
    var c = Math.max(0, Math.min(1, capacity));
    return "hsl(" + Math.round(120 * (1 - c)) + ",70%,45%)";
  }
  function levels(data) {
    var level = {}, names = Object.keys(data).sort(), changed = true, rounds = 0;
    names.forEach(function (n) { level[n] = data[n][":type"] === "spout" ? 0 : 1; });
    while (changed && rounds++ < names.length + 1) {
      changed = false;
      names.forEach(function (n) {
        data[n][":inputs"].forEach(function (inp) {
          if (level[inp[":component"]] !== undefined && level[n] < level[inp[":component"]] + 1 &&
              data[n][":type"] !== "spout") { level[n] = level[inp[":component"]] + 1; changed = true; }
        });
      });
    }
    return level;
  }
  function sentBy(data) {
    var sent = {};
    Object.keys(data).forEach(function (n) {
      data[n][":stats"].forEach(function (s) {
        Object.keys(s[":transferred"]).forEach(function (stream) {
          var key = n + " " + stream;
          sent[key] = (sent[key] || 0) + s[":transferred"][stream];
        });
      });
    });
    return sent;
  }
  function draw(data) {
    var now = Date.now(), sent = sentBy(data), level = levels(data), columns = {};
    Object.keys(level).sort().forEach(function (n) { (columns[level[n]] = columns[level[n]] || []).push(n); });
    var ncols = Object.keys(columns).length, maxRows = 1;
    Object.keys(columns).forEach(function (c) { maxRows = Math.max(maxRows, columns[c].length); });
    var width = Math.max(480, ncols * 240), height = Math.max(240, maxRows * 140);
    svg.setAttribute("width", width); svg.setAttribute("height", height);
    svg.setAttribute("viewBox", "0 0 " + width + " " + height);
    var pos = {};
    Object.keys(columns).forEach(function (c) {
      columns[c].forEach(function (n, i) {
        pos[n] = {x: 120 + c * 240, y: (i + 0.5) * height / columns[c].length};
      });
    });
    while (svg.firstChild) { svg.removeChild(svg.firstChild); }
    var defs = el("defs", {}), marker = el("marker", {id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5",
      markerWidth: "8", markerHeight: "8", orient: "auto-start-reverse"});
    marker.appendChild(el("path", {d: "M 0 0 L 10 5 L 0 10 z", fill: "#555"}));
    defs.appendChild(marker); svg.appendChild(defs);
    var elapsed = previous ? (now - previous.time) / 1000 : 0;
    Object.keys(data).sort().forEach(function (n) {
      data[n][":inputs"].forEach(function (inp) {
        var src = inp[":component"], a = pos[src], b = pos[n];
        if (!a || !b) { return; }
        var key = src + " " + inp[":stream"], rate = "";
        if (previous && elapsed > 0 && previous.sent[key] !== undefined) {
          rate = Math.max(0, (sent[key] || 0) - previous.sent[key]) / elapsed;
          rate = (rate >= 100 ? Math.round(rate) : rate.toFixed(1)) + " tuples/s";
        } else { rate = "…"; }
        var g = el("g", {"class": "edge", "data-source": src, "data-target": n, "data-stream": inp[":stream"]});
        g.appendChild(el("line", {x1: a.x + 40, y1: a.y, x2: b.x - 42, y2: b.y, stroke: "#555",
                                  "stroke-width": "1.5", "marker-end": "url(#arrow)"}));
        g.appendChild(el("text", {x: (a.x + b.x) / 2, y: (a.y + b.y) / 2 - 6, "text-anchor": "middle",
                                  "font-size": "11", fill: "#333"},
                         inp[":stream"] + " (" + inp[":grouping"] + "): " + rate));
        svg.appendChild(g);
      });
    });
    Object.keys(data).sort().forEach(function (n) {
      var c = data[n], p = pos[n], cap = c[":capacity"] || 0, r = 22 + Math.round(16 * Math.min(1, cap));
      var bp = !!c[":backpressure"], full = c[":receive-pct-full"];
      // Backpressure grows the node and rings it in purple, whatever its capacity says.
      if (bp) { r = Math.max(r, 40); }
      var stroke = bp ? "#7b2cbf" : "#222", width = bp ? "6" : "1";
      var g = el("g", {"class": "node" + (bp ? " backpressure" : ""), "data-component": n,
                       "data-backpressure": bp ? "1" : "0"});
      var a = el("a", {href: c[":link"]});
      if (c[":type"] === "spout") {
        a.appendChild(el("rect", {x: p.x - r, y: p.y - r, width: 2 * r, height: 2 * r, rx: 6, fill: color(cap),
                                  stroke: stroke, "stroke-width": width}));
      } else {
        a.appendChild(el("circle", {cx: p.x, cy: p.y, r: r, fill: color(cap), stroke: stroke, "stroke-width": width}));
      }
      a.appendChild(el("text", {x: p.x, y: p.y - r - 8, "text-anchor": "middle", "font-size": "14",
                                "font-weight": "bold", fill: "#1d3557"}, n));
      g.appendChild(a);
      g.appendChild(el("text", {x: p.x, y: p.y + r + 14, "text-anchor": "middle", "font-size": "11", fill: "#333"},
                       c[":type"] + " ×" + c[":executors"] + " · capacity " + cap.toFixed(3) +
                       (c[":type"] === "spout" ? " · acked " + c[":acked"] : " · " + c[":latency"] + " ms")));
      if (bp || (full !== null && full !== undefined)) {
        g.appendChild(el("text", {x: p.x, y: p.y + r + 27, "text-anchor": "middle", "font-size": "11",
                                  fill: bp ? "#7b2cbf" : "#555", "font-weight": bp ? "bold" : "normal"},
                         (bp ? "BACKPRESSURE · " : "") + (full !== null && full !== undefined ?
                           "receive queue " + full + "% full" : "capacity > 0.8")));
      }
      svg.appendChild(g);
    });
    previous = {time: now, sent: sent};
  }
  function poll() {
    fetch("/api/v1/topology/" + encodeURIComponent(id) + "/visualization?window=600")
      .then(function (resp) { return resp.json().then(function (doc) { return {ok: resp.ok, doc: doc}; }); })
      .then(function (res) {
        if (!res.ok) { status.className = "error"; status.textContent = res.doc.errorMessage; return; }
        draw(res.doc);
        status.className = "";
        status.textContent = "updated " + new Date().toLocaleTimeString();
      })
      .catch(function (err) { status.className = "error"; status.textContent = String(err); })
      .then(function () { window.setTimeout(poll, pollMs); });
  }
  poll();
})();
"""

STATIC: Mapping[str, tuple[str, str]] = {"graph.js": ("text/javascript; charset=utf-8", GRAPH_JS.lstrip())}
