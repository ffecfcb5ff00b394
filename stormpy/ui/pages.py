"""Server-rendered HTML for the UI: index (cluster + topologies), topology page, component page.

The pages render the same JSON documents the API returns (``api.py``), so what a person sees
and what a script reads never disagree. Every value goes through ``esc`` (names, ids, error
texts and config values come from users); markup built here is wrapped in ``Html`` so it is not
escaped twice. No external assets: the stylesheet and the small script for the action buttons
are served from ``/static/`` by this process (see ``STATIC``), which lets the server send a
Content-Security-Policy that forbids inline scripts. Called from request threads; pure.
"""
from __future__ import annotations

import html
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode

from stormpy.ui.charts import charts_markup
from stormpy.ui.stats import WINDOWS, window_hint


class Html(str):
    """A string that is already markup; ``esc`` leaves it alone."""


def esc(value: Any) -> Html:
    """Escape any value for HTML text or a quoted attribute; None shows as empty."""
    if isinstance(value, Html):
        return value
    if value is None:
        return Html("")
    return Html(html.escape(str(value), quote=True))


def link(href: str, text: Any) -> Html:
    return Html(f'<a href="{esc(href)}">{esc(text)}</a>')


def topology_href(topology_id: str, window: str | None = None) -> str:
    query = {"id": topology_id, **({"window": window} if window else {})}
    return "/topology.html?" + urlencode(query)


def component_href(topology_id: str, component_id: str, window: str | None = None) -> str:
    query = {"topology_id": topology_id, "id": component_id, **({"window": window} if window else {})}
    return "/component.html?" + urlencode(query)


def timeseries_href(topology_id: str, component_id: str | None = None) -> str:
    path = "/api/v1/topology/" + quote(topology_id, safe="")
    return path + ("/component/" + quote(component_id, safe="") if component_id is not None else "") + "/timeseries"


def graph_href(topology_id: str) -> str:
    return "/topology_graph.html?" + urlencode({"id": topology_id})


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], empty: str = "None") -> Html:
    """A table; cells are escaped unless they are ``Html``."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    if not body:
        body = f'<tr><td colspan="{len(headers)}" class="empty">{esc(empty)}</td></tr>'
    return Html(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")


def section(title: str, content: str) -> Html:
    return Html(f"<section><h2>{esc(title)}</h2>{content}</section>")


def page(title: str, content: str) -> str:
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{esc(title)} - stormpy UI</title>"
            '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">'
            '<link rel="stylesheet" href="/static/ui.css"><script src="/static/ui.js" defer></script>'
            '</head><body><header><a href="/">stormpy UI</a></header>'
            f"<main><h1>{esc(title)}</h1>{content}</main></body></html>\n")


def _utc(secs: int | None) -> str:
    if secs is None:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(secs))


def _ago(secs: int | None) -> str:
    return "" if secs is None else f"{secs}s ago"


def _short(text: str, limit: int = 120) -> str:
    # The last line of a traceback names the exception, which is what fits in a table cell.
    lines = (text or "").strip().splitlines()
    line = lines[-1] if lines else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


# ---------------------------------------------------------------- index

def _status_cell(row: Mapping[str, Any]) -> Any:
    """The status, and loudly what keeps the topology from being served (its code missing, ...)."""
    if not row.get("schedulerInfo"):
        return row["status"]
    return Html(f'{esc(row["status"])} <span class="error">{esc(row["schedulerInfo"])}</span>')


def render_index(cluster: Mapping[str, Any] | None, nimbuses: Mapping[str, Any] | None,
                 supervisors: Mapping[str, Any] | None, topologies: Mapping[str, Any] | None,
                 unavailable: str | None = None) -> str:
    """Cluster summary, Nimbus, topology and supervisor tables; or why Nimbus cannot be asked."""
    if unavailable is not None or cluster is None:
        note = Html(f'<p class="error">{esc(unavailable or "no data")}</p><p>This page retries when reloaded.</p>')
        return page("Cluster Summary", section("Nimbus unavailable", note))
    c = cluster
    parts = [section("Cluster Summary", table(
        ["Version", "Supervisors", "Used slots", "Free slots", "Total slots", "Executors", "Tasks",
         "Topologies", "Nimbus uptime"],
        [[c["stormVersion"], c["supervisors"], c["slotsUsed"], c["slotsFree"], c["slotsTotal"],
          c["executorsTotal"], c["tasksTotal"], c["topologies"], c["nimbusUptime"]]]))]
    parts.append(section("Nimbus Summary", table(
        ["Host", "Port", "Status", "Version", "Uptime"],
        [[n["host"], n["port"], n["status"], n["version"], n["nimbusUpTime"]] for n in nimbuses["nimbuses"]]
        if nimbuses else [])))
    parts.append(section("Topology Summary", table(
        ["Name", "Id", "Status", "Uptime", "Workers", "Executors", "Tasks"],
        [[link(topology_href(t["id"]), t["name"]), t["id"], _status_cell(t), t["uptime"], t["workersTotal"],
          t["executorsTotal"], t["tasksTotal"]] for t in (topologies or {}).get("topologies", [])],
        empty="No topologies running")))
    parts.append(section("Supervisor Summary", table(
        ["Id", "Host", "Uptime", "Slots", "Used slots"],
        [[s["id"], s["host"], s["uptime"], s["slotsTotal"], s["slotsUsed"]]
         for s in (supervisors or {}).get("supervisors", [])],
        empty="No supervisors registered")))
    return page("Cluster Summary", "".join(parts))


# ---------------------------------------------------------------- topology

def _window_links(href: Any, current: str) -> Html:
    items = []
    for window in WINDOWS:
        label = esc(window_hint(window))
        items.append(f"<strong>{label}</strong>" if window == current else str(link(href(window), label)))
    return Html('<p class="windows">Window: ' + " | ".join(items) + "</p>")


def _actions(doc: Mapping[str, Any]) -> Html:
    """Buttons that POST to the API (``/static/ui.js`` asks for confirmation and sends them)."""
    data = (f'data-topology-id="{esc(doc["id"])}" data-topology-name="{esc(doc["name"])}" '
            f'data-csrf-token="{esc(doc.get("antiForgeryToken") or "")}"')
    wait = doc.get("msgTimeout") or 30
    status = doc.get("status")
    forms = [
        f'<form data-action="activate" {data}><button{" disabled" if status == "ACTIVE" else ""}>'
        "Activate</button></form>",
        f'<form data-action="deactivate" {data}><button{" disabled" if status == "INACTIVE" else ""}>'
        "Deactivate</button></form>",
        f'<form data-action="rebalance" {data}><label>wait <input name="wait" size="4" value="{esc(wait)}"> s'
        '</label> <label>workers <input name="workers" size="3"></label> '
        '<label>executors <input name="executors" size="24" placeholder="component=n, ..."></label> '
        "<button>Rebalance</button></form>",
        f'<form data-action="kill" {data}><label>wait <input name="wait" size="4" value="{esc(wait)}"> s</label> '
        '<button class="danger">Kill</button></form>',
    ]
    return Html('<div class="actions">' + "".join(forms) + '</div><p id="action-result"></p>')


def _error_cells(row: Mapping[str, Any]) -> list[Any]:
    port = row.get("errorPort")
    where = f'{row.get("errorHost") or ""}:{port}' if port is not None else ""
    error = Html(f'<span class="error" title="{esc(row["lastError"])}">{esc(_short(row["lastError"]))}</span>') \
        if row.get("lastError") else ""
    return [error, where, _ago(row.get("errorLapsedSecs"))]


def _errors_section(errors_by_component: Mapping[str, list[Mapping[str, Any]]]) -> Html:
    rows = []
    for comp, errors in errors_by_component.items():
        for err in errors:
            port = err.get("errorPort")
            rows.append([comp, _utc(err.get("errorTime")), _ago(err.get("errorLapsedSecs")),
                         f'{err.get("errorHost") or ""}:{port}' if port is not None else "",
                         Html(f'<pre>{esc(err.get("error"))}</pre>')])
    return section("Last Errors", table(["Component", "Time", "Age", "Worker", "Error"], rows, empty="No errors"))


def render_topology(doc: Mapping[str, Any]) -> str:
    """The topology page from ``api.topology_page``'s document."""
    tid, window = doc["id"], doc["window"]
    parts = [section("Topology Summary", table(
        ["Name", "Id", "Status", "Uptime", "Workers", "Executors", "Tasks", "Message timeout"],
        [[doc["name"], tid, doc["status"], doc["uptime"], doc["workersTotal"], doc["executorsTotal"],
          doc["tasksTotal"], f'{doc["msgTimeout"]} s' if doc.get("msgTimeout") is not None else ""]]))]
    if doc.get("schedulerInfo"):     # workers cannot start, e.g. the topology's requirements failed to install
        parts.append(section("Scheduler Info", table(["Why workers are not running"], [[doc["schedulerInfo"]]])))
    parts.append(section("Topology Visualization", link(graph_href(tid), "Show the topology graph")))
    parts.append(section("Last Hour", Html(charts_markup(timeseries_href(tid), "Complete latency (ms)"))))
    parts.append(section("Topology Actions", _actions(doc)))
    parts.append(section("Topology Stats", table(
        ["Window", "Emitted", "Transferred", "Complete latency (ms)", "Acked", "Failed"],
        [[link(topology_href(tid, s["window"]), s["windowPretty"]), s["emitted"], s["transferred"],
          s["completeLatency"], s["acked"], s["failed"]] for s in doc["topologyStats"]])))
    parts.append(_window_links(lambda w: topology_href(tid, w), window))
    parts.append(section(f'Spouts ({doc["windowHint"]})', table(
        ["Id", "Executors", "Tasks", "Emitted", "Transferred", "Complete latency (ms)", "Acked", "Failed",
         "Last error", "Error worker", "Error age"],
        [[link(component_href(tid, s["spoutId"], window), s["spoutId"]), s["executors"], s["tasks"], s["emitted"],
          s["transferred"], s["completeLatency"], s["acked"], s["failed"], *_error_cells(s)]
         for s in doc["spouts"]])))
    parts.append(section(f'Bolts ({doc["windowHint"]})', table(
        ["Id", "Executors", "Tasks", "Emitted", "Transferred", "Capacity", "Execute latency (ms)", "Executed",
         "Process latency (ms)", "Acked", "Failed", "Last error", "Error worker", "Error age"],
        [[link(component_href(tid, b["boltId"], window), b["boltId"]), b["executors"], b["tasks"], b["emitted"],
          b["transferred"], b["capacity"], b["executeLatency"], b["executed"], b["processLatency"], b["acked"],
          b["failed"], *_error_cells(b)] for b in doc["bolts"]])))
    parts.append(section("Workers", table(
        ["Host", "Port", "Executors", "Uptime", "Tasks per component"],
        [[w["host"], w["port"], w["executorsTotal"], w["uptime"],
          ", ".join(f"{c}: {n}" for c, n in w["componentNumTasks"].items())] for w in doc["workers"]],
        empty="No workers assigned")))
    parts.append(_errors_section(doc["componentErrors"]))
    parts.append(section("Topology Configuration", table(
        ["Key", "Value"], [[k, json.dumps(v, default=str)] for k, v in sorted(doc["configuration"].items())])))
    return page(f'Topology {doc["name"]}', "".join(parts))


# ---------------------------------------------------------------- component

def render_component(doc: Mapping[str, Any]) -> str:
    """The component page from ``api.component_page``'s document."""
    tid, cid, window = doc["topologyId"], doc["id"], doc["window"]
    is_spout = doc["componentType"] == "spout"
    parts = [section("Component Summary", table(
        ["Id", "Topology", "Type", "Executors", "Tasks"],
        [[cid, link(topology_href(tid, window), doc["name"]), doc["componentType"], doc["executors"],
          doc["tasks"]]]))]
    if is_spout:
        parts.append(section("Spout Stats", table(
            ["Window", "Emitted", "Transferred", "Complete latency (ms)", "Acked", "Failed"],
            [[link(component_href(tid, cid, s["window"]), s["windowPretty"]), s["emitted"], s["transferred"],
              s["completeLatency"], s["acked"], s["failed"]] for s in doc["spoutSummary"]])))
    else:
        parts.append(section("Bolt Stats", table(
            ["Window", "Emitted", "Transferred", "Execute latency (ms)", "Executed", "Process latency (ms)",
             "Acked", "Failed"],
            [[link(component_href(tid, cid, s["window"]), s["windowPretty"]), s["emitted"], s["transferred"],
              s["executeLatency"], s["executed"], s["processLatency"], s["acked"], s["failed"]]
             for s in doc["boltStats"]])))
    parts.append(section("Last Hour", Html(charts_markup(
        timeseries_href(tid, cid), "Complete latency (ms)" if is_spout else "Process latency (ms)"))))
    parts.append(_window_links(lambda w: component_href(tid, cid, w), window))
    if not is_spout:
        parts.append(section(f'Input Stats ({doc["windowHint"]})', table(
            ["Component", "Stream", "Execute latency (ms)", "Executed", "Process latency (ms)", "Acked", "Failed"],
            [[i["component"], i["stream"], i["executeLatency"], i["executed"], i["processLatency"], i["acked"],
              i["failed"]] for i in doc["inputStats"]])))
    parts.append(section(f'Output Stats ({doc["windowHint"]})', table(
        ["Stream", "Emitted", "Transferred"] + (["Complete latency (ms)", "Acked", "Failed"] if is_spout else []),
        [[o["stream"], o["emitted"], o["transferred"]]
         + ([o["completeLatency"], o["acked"], o["failed"]] if is_spout else []) for o in doc["outputStats"]])))
    extra = ["Complete latency (ms)", "Acked", "Failed"] if is_spout else \
        ["Capacity", "Execute latency (ms)", "Executed", "Process latency (ms)", "Acked", "Failed"]
    parts.append(section(f'Executors ({doc["windowHint"]})', table(
        ["Id", "Host", "Port", "Uptime", "Emitted", "Transferred"] + extra,
        [[e["id"], e["host"], e["port"], e["uptime"], e["emitted"], e["transferred"]]
         + ([e["completeLatency"], e["acked"], e["failed"]] if is_spout else
            [e["capacity"], e["executeLatency"], e["executed"], e["processLatency"], e["acked"], e["failed"]])
         for e in doc["executorStats"]], empty="No executors assigned")))
    metric_rows = [[e["id"], name, f"{value:,.1f}" if isinstance(value, float) and not value.is_integer() else
                    f"{value:,.0f}"] for e in doc["executorStats"] for name, value in e.get("metrics", {}).items()]
    if metric_rows:
        parts.append(section("Metrics (task metrics, all time; __receive.* and __backpressure at the last heartbeat)",
                             table(["Executor", "Metric", "Value"], metric_rows)))
    parts.append(_errors_section({cid: doc["componentErrors"]}))
    return page(f"Component {cid}", "".join(parts))


def render_error(status: int, error: str, message: str) -> str:
    """An error page: the status, Storm's short error and the message a person can act on."""
    return page(f"{status} {error}", Html(f'<p class="error">{esc(message)}</p><p>{link("/", "Back to the cluster summary")}</p>'))


# ---------------------------------------------------------------- static assets

CSS = """
body { font-family: sans-serif; margin: 0; color: #222; }
header { background: #1d3557; padding: 0.6em 1em; }
header a { color: #fff; font-weight: bold; text-decoration: none; }
main { padding: 0 1em 2em; }
h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 1.5em; }
table { border-collapse: collapse; margin: 0.3em 0; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #eef2f7; }
td.empty { color: #777; font-style: italic; }
pre { margin: 0; white-space: pre-wrap; max-width: 70em; font-size: 0.85em; }
.error { color: #b00020; }
.actions form { display: inline-block; margin: 0 1em 0.5em 0; }
button.danger { color: #fff; background: #b00020; border: 1px solid #800018; }
.windows { margin: 0.3em 0; }
.charts { display: flex; flex-wrap: wrap; gap: 0.5em 1.5em; }
figure.chart { margin: 0; }
figure.chart figcaption { font-size: 0.85em; color: #333; }
.chart-value { color: #1d3557; font-weight: bold; }
svg.sparkline { border: 1px solid #ddd; background: #fbfcfe; display: block; }
.charts-status { font-size: 0.8em; color: #555; }
.charts-status.error { color: #b00020; }
"""

JS = """
"use strict";
// Action buttons of the topology page: confirm, POST to /api/v1, show the answer, reload.
function stormParseExecutors(text) {
  var result = {};
  text.split(",").forEach(function (item) {
    var parts = item.split("=");
    if (parts.length === 2 && parts[0].trim()) { result[parts[0].trim()] = parts[1].trim(); }
  });
  return result;
}
function stormAction(form) {
  var action = form.dataset.action, id = form.dataset.topologyId, name = form.dataset.topologyName;
  var url = "/api/v1/topology/" + encodeURIComponent(id) + "/" + action;
  var body = null;
  if (action === "kill" || action === "rebalance") {
    url += "/" + encodeURIComponent(form.elements["wait"].value.trim() || "0");
  }
  if (action === "rebalance") {
    var options = {};
    var workers = form.elements["workers"].value.trim();
    if (workers) { options.numWorkers = workers; }
    var executors = stormParseExecutors(form.elements["executors"].value);
    if (Object.keys(executors).length) { options.executors = executors; }
    body = JSON.stringify({rebalanceOptions: options});
  }
  if (!window.confirm("Do you really want to " + action + " topology '" + name + "'?")) { return; }
  var out = document.getElementById("action-result");
  fetch(url, {method: "POST", headers: {"Content-Type": "application/json",
                                        "X-CSRF-Token": form.dataset.csrfToken || ""}, body: body})
    .then(function (resp) { return resp.json().then(function (doc) { return {ok: resp.ok, doc: doc}; }); })
    .then(function (res) {
      out.className = res.ok ? "" : "error";
      out.textContent = res.ok ? action + ": " + res.doc.status : res.doc.error + ": " + res.doc.errorMessage;
      if (res.ok) { window.setTimeout(function () { window.location.reload(); }, 1500); }
    })
    .catch(function (err) { out.className = "error"; out.textContent = String(err); });
}
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll("form[data-action]").forEach(function (form) {
    form.addEventListener("submit", function (event) { event.preventDefault(); stormAction(form); });
  });
});
"""

FAVICON = ('<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" height="16" rx="3" '
           'fill="#1d3557"/><path d="M9 1 3 9h4l-1 6 6-8H8z" fill="#ffd166"/></svg>')

STATIC: dict[str, tuple[str, str]] = {
    "favicon.svg": ("image/svg+xml", FAVICON),
    "ui.css": ("text/css; charset=utf-8", CSS.lstrip()),
    "ui.js": ("text/javascript; charset=utf-8", JS.lstrip()),
}
