"""Pure translation of Nimbus's Thrift structs into the UI's JSON documents.

Field names follow Apache Storm's UI REST API (``docs/STORM-UI-REST-API.md``): ``slotsTotal``,
``executorsTotal``, ``topologyStats``, ``spouts[].spoutId``, ``bolts[].processLatency``, ... so
scripts written against Storm's UI keep working. Nothing here does I/O or reads the clock:
``server.py`` fetches the structs and passes ``now_secs``, so every function is testable with
hand-built structs. Aggregation rules live in ``stats``. Called from the HTTP request threads.
"""
from __future__ import annotations

import json
import logging
from typing import Any

from stormpy.config import TOPOLOGY_MESSAGE_TIMEOUT_SECS, read
from stormpy.streams import SYSTEM_COMPONENT, is_framework_id, is_system_id
from stormpy.thrift import storm
from stormpy.ui.stats import (ALL_TIME, WINDOWS, aggregate, bolt_stats, components,
                              executor_stats, input_stats, output_stats, pretty_uptime,
                              spout_stats, window_hint, window_rows, workers)

log = logging.getLogger(__name__)


class ApiError(Exception):
    """A request that cannot be answered; ``status`` is the HTTP status, ``message`` for people."""

    def __init__(self, status: int, error: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error = error
        self.message = message

    def to_json(self) -> dict[str, Any]:
        """Storm's error body: ``{"error": <short>, "errorMessage": <what happened>}``."""
        return {"error": self.error, "errorMessage": self.message}


def bad_request(message: str) -> ApiError:
    """400: the request itself is wrong (window, wait time, rebalance body); Nimbus was not asked."""
    return ApiError(400, "Bad Request", message)


def not_found(message: str) -> ApiError:
    """404: no such topology (Nimbus said NotAlive), component or page."""
    return ApiError(404, "Not Found", message)


def check_window(window: str | None) -> str:
    """The requested window, default ``:all-time``; 400 for anything Nimbus does not keep."""
    if window in (None, ""):
        return ALL_TIME
    if window not in WINDOWS:
        raise bad_request(f"unknown window {window!r}; use one of {', '.join(WINDOWS)}")
    return window


# ---------------------------------------------------------------- cluster

def cluster_summary(cs: Any, version: str) -> dict[str, Any]:
    """``/api/v1/cluster/summary`` from a ClusterSummary."""
    slots_total = sum(s.num_workers or 0 for s in cs.supervisors or [])
    slots_used = sum(s.num_used_workers or 0 for s in cs.supervisors or [])
    topologies = cs.topologies or []
    uptime = cs.nimbus_uptime_secs
    if uptime is None:
        leaders = [n for n in cs.nimbuses or [] if n.isLeader]
        uptime = leaders[0].uptime_secs if leaders else None
    versions = [n.version for n in cs.nimbuses or [] if n.version]
    return {
        "stormVersion": versions[0] if versions else version,
        "supervisors": len(cs.supervisors or []),
        "topologies": len(topologies),
        "slotsTotal": slots_total,
        "slotsUsed": slots_used,
        "slotsFree": max(0, slots_total - slots_used),
        "executorsTotal": sum(t.num_executors or 0 for t in topologies),
        "tasksTotal": sum(t.num_tasks or 0 for t in topologies),
        "nimbusUptime": pretty_uptime(uptime),
        "nimbusUptimeSeconds": uptime,
    }


def supervisor_summary(cs: Any) -> dict[str, Any]:
    """``/api/v1/supervisor/summary``: one entry per live supervisor, sorted by host."""
    rows = []
    for sup in sorted(cs.supervisors or [], key=lambda s: (s.host, s.supervisor_id or "")):
        rows.append({
            "id": sup.supervisor_id or sup.host,
            "host": sup.host,
            "uptime": pretty_uptime(sup.uptime_secs),
            "uptimeSeconds": sup.uptime_secs,
            "slotsTotal": sup.num_workers,
            "slotsUsed": sup.num_used_workers,
            "slotsFree": max(0, (sup.num_workers or 0) - (sup.num_used_workers or 0)),
        })
    return {"supervisors": rows}


def nimbus_summary(cs: Any, host: str, port: int, version: str) -> dict[str, Any]:
    """``/api/v1/nimbus/summary``; when Nimbus lists no NimbusSummary, the one we talked to."""
    rows = []
    for nim in cs.nimbuses or []:
        rows.append({
            "host": nim.host,
            "port": nim.port,
            "status": "Leader" if nim.isLeader else "Not a Leader",
            "version": nim.version,
            "nimbusUpTime": pretty_uptime(nim.uptime_secs),
            "nimbusUpTimeSeconds": nim.uptime_secs,
        })
    if not rows:
        rows.append({
            "host": host, "port": port, "status": "Leader", "version": version,
            "nimbusUpTime": pretty_uptime(cs.nimbus_uptime_secs),
            "nimbusUpTimeSeconds": cs.nimbus_uptime_secs,
        })
    return {"nimbuses": rows}


def topology_summary(cs: Any) -> dict[str, Any]:
    """``/api/v1/topology/summary``: every topology Nimbus knows, sorted by name."""
    rows = []
    for topo in sorted(cs.topologies or [], key=lambda t: (t.name, t.id)):
        rows.append({
            "id": topo.id,
            "name": topo.name,
            "status": topo.status,
            "schedulerInfo": topo.sched_status or "",     # Storm UI's key: code missing, archive refused
            "uptime": pretty_uptime(topo.uptime_secs),
            "uptimeSeconds": topo.uptime_secs,
            "tasksTotal": topo.num_tasks,
            "workersTotal": topo.num_workers,
            "executorsTotal": topo.num_executors,
            # only when there is one: why workers cannot start (a failed requirements install)
            **({"schedulerInfo": topo.sched_status} if topo.sched_status else {}),
        })
    return {"topologies": rows}


def last_errors(info: Any) -> dict[str, list[Any]]:
    """component id -> its ErrorInfo list, newest first."""
    return {comp: sorted(errs or [], key=lambda e: e.error_time_secs or 0, reverse=True)
            for comp, errs in (info.errors or {}).items()}


def error_json(err: Any, now_secs: int) -> dict[str, Any]:
    """One ErrorInfo in Storm's componentErrors shape; age from ``now_secs`` (the UI's clock)."""
    return {"error": err.error, "errorTime": err.error_time_secs, "errorHost": err.host or "",
            "errorPort": err.port, "errorLapsedSecs": max(0, now_secs - (err.error_time_secs or now_secs))}


def _last_error_fields(errors: list[Any], now_secs: int) -> dict[str, Any]:
    if not errors:
        return {"lastError": "", "errorHost": "", "errorPort": None, "errorTime": None, "errorLapsedSecs": None}
    newest = error_json(errors[0], now_secs)
    return {"lastError": newest["error"], "errorHost": newest["errorHost"], "errorPort": newest["errorPort"],
            "errorTime": newest["errorTime"], "errorLapsedSecs": newest["errorLapsedSecs"]}


def parse_conf(text: str | None) -> dict[str, Any]:
    """getTopologyConf's JSON; a conf that is not a JSON object is shown under ``"raw"``."""
    if not text:
        return {}
    try:
        conf = json.loads(text)
    except ValueError:
        return {"raw": text}
    return conf if isinstance(conf, dict) else {"raw": conf}


# ---------------------------------------------------------------- topology and component pages

def topology_page(info: Any, topology: Any | None, conf_json: str | None, window: str, now_secs: int,
                  include_sys: bool = False) -> dict[str, Any]:
    """``/api/v1/topology/<id>``: totals, per-window table, spouts, bolts, workers, config."""
    comps = components(info, topology)
    errors = last_errors(info)
    # Listed: the user's components (Trident's "$" ones are hidden like "__" ones); counted in
    # the topology's totals: everything but Storm's "__" system components, as Storm counts.
    visible = [c for c in comps.values() if include_sys or not is_framework_id(c.id)]
    counted = [c for c in comps.values() if include_sys or not is_system_id(c.id)]
    all_executors = [ex for c in counted for ex in c.executors]
    spout_executors = [ex for c in counted if c.kind == "spout" for ex in c.executors]
    topology_stats = []
    for row_window in WINDOWS:
        everything = aggregate(all_executors, row_window, include_sys)
        spouts_only = aggregate(spout_executors, row_window, include_sys)
        topology_stats.append({
            "window": row_window, "windowPretty": window_hint(row_window),
            "emitted": everything.emitted, "transferred": everything.transferred,
            "acked": spouts_only.acked, "failed": spouts_only.failed,
            "completeLatency": spouts_only.latency("complete"),
        })
    conf = parse_conf(conf_json)
    spouts, bolts = [], []
    for comp in sorted(visible, key=lambda c: c.id):
        totals = aggregate(comp.executors, window, include_sys)
        row: dict[str, Any] = {"executors": comp.num_executors, "tasks": comp.num_tasks}
        if comp.kind == "spout":
            row = {"spoutId": comp.id, **row, **spout_stats(totals)}
            spouts.append({**row, **_last_error_fields(errors.get(comp.id, []), now_secs)})
        else:
            row = {"boltId": comp.id, **row, **bolt_stats(totals)}
            bolts.append({**row, **_last_error_fields(errors.get(comp.id, []), now_secs)})
    executors = info.executors or []
    return {
        "id": info.id,
        "name": info.name,
        "status": info.status,
        "schedulerInfo": info.sched_status,
        "uptime": pretty_uptime(info.uptime_secs),
        "uptimeSeconds": info.uptime_secs,
        "tasksTotal": sum(c.num_tasks for c in comps.values()),
        "executorsTotal": len(executors) or sum(c.num_executors for c in comps.values()),
        "workersTotal": len({(ex.host, ex.port) for ex in executors}),
        # The stored conf holds only what the topology set; the rest is the cluster default.
        "msgTimeout": read(conf, TOPOLOGY_MESSAGE_TIMEOUT_SECS),
        "window": window,
        "windowHint": window_hint(window),
        "topologyStats": topology_stats,
        "spouts": spouts,
        "bolts": bolts,
        "workers": workers(info),
        "componentErrors": {comp: [error_json(e, now_secs) for e in errs] for comp, errs in sorted(errors.items())
                            if errs and (include_sys or not is_framework_id(comp) or comp == SYSTEM_COMPONENT)},
        "configuration": conf,
    }


def component_page(info: Any, topology: Any | None, component_id: str, window: str, now_secs: int,
                   include_sys: bool = False) -> dict[str, Any]:
    """``/api/v1/topology/<id>/component/<component>``: per-window, per-stream and per-executor stats."""
    comps = components(info, topology)
    comp = comps.get(component_id)
    if comp is None:
        raise not_found(f"topology {info.id} has no component {component_id!r}")
    errors = last_errors(info).get(component_id, [])
    doc: dict[str, Any] = {
        "id": comp.id,
        "name": info.name,
        "topologyId": info.id,
        "topologyStatus": info.status,
        "componentType": comp.kind,
        "executors": comp.num_executors,
        "tasks": comp.num_tasks,
        "window": window,
        "windowHint": window_hint(window),
        "componentErrors": [error_json(e, now_secs) for e in errors],
        "outputStats": output_stats(comp, window, include_sys),
        "executorStats": executor_stats(comp, window, include_sys),
    }
    if comp.kind == "spout":
        doc["spoutSummary"] = window_rows(comp.executors, "spout", include_sys)
    else:
        doc["boltStats"] = window_rows(comp.executors, "bolt", include_sys)
        doc["inputStats"] = input_stats(comp, window, include_sys)
    return doc


# ---------------------------------------------------------------- actions (POST)

def parse_wait_secs(text: str) -> int:
    """The ``<wait-secs>`` path segment: a non-negative whole number of seconds."""
    if not text.isdigit():
        raise bad_request(f"wait time must be a non-negative whole number of seconds, got {text!r}")
    return int(text)


def _positive_int(value: Any, what: str) -> int:
    # Storm's UI accepts numbers or numeric strings ({"spout": "5"}).
    if isinstance(value, bool):
        raise bad_request(f"{what} must be a positive whole number, got {value!r}")
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if not isinstance(value, int) or value < 1:
        raise bad_request(f"{what} must be a positive whole number, got {value!r}")
    return value


def kill_options(wait_text: str) -> Any:
    """KillOptions from the ``/kill/<wait-secs>`` path segment."""
    return storm.KillOptions(wait_secs=parse_wait_secs(wait_text))


def rebalance_options(wait_text: str, body: bytes) -> Any:
    """RebalanceOptions from the path's wait time and the optional JSON body
    ``{"rebalanceOptions": {"numWorkers": n, "executors": {component: n}}}``."""
    options = storm.RebalanceOptions(wait_secs=parse_wait_secs(wait_text))
    if not body.strip():
        return options
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise bad_request(f"rebalance body is not JSON: {exc}") from None
    spec = doc.get("rebalanceOptions", {}) if isinstance(doc, dict) else None
    if not isinstance(spec, dict):
        raise bad_request('rebalance body must look like {"rebalanceOptions": {"numWorkers": 2, '
                          '"executors": {"component": 4}}}')
    if spec.get("numWorkers") not in (None, ""):
        options.num_workers = _positive_int(spec["numWorkers"], "numWorkers")
    executors = spec.get("executors") or {}
    if not isinstance(executors, dict):
        raise bad_request("rebalanceOptions.executors must map component ids to executor counts")
    if executors:
        options.num_executors = {str(c): _positive_int(n, f"executors of {c!r}") for c, n in executors.items()}
    return options


def action_result(operation: str, topology_id: str) -> dict[str, Any]:
    """Storm's answer to a successful POST."""
    return {"topologyOperation": operation, "topologyId": topology_id, "status": "success"}
