"""Aggregation of executor stats into the numbers the UI shows (pure; no I/O, no clock).

Nimbus reports one ExecutorStats per executor: counts and average latencies per window
("600", "10800", "86400", ":all-time") and per stream. The UI shows them per component,
per topology, per stream and per executor, following Storm's ``ui/core`` rules:
- counts are summed over executors and streams; streams and components whose id starts with
  ``__`` (acker traffic, ``__acker``, ``__system``) are left out unless ``include_sys``;
- latencies are averages weighted by the count they describe (complete latency by spout acks,
  process latency by bolt acks, execute latency by executed tuples), formatted "%.3f" (ms);
- capacity of a bolt executor = executed * execute latency / window length (uptime if shorter),
  and a component's capacity is its busiest executor's.
Called from the HTTP request threads through ``api``; no shared state.
"""
from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from stormpy.config import TOPOLOGY_TASKS
from stormpy.streams import is_system_id

ALL_TIME = ":all-time"
WINDOWS: tuple[str, ...] = ("600", "10800", "86400", ALL_TIME)
WINDOW_SECS: dict[str, int] = {"600": 600, "10800": 10800, "86400": 86400}

# ---------------------------------------------------------------- formatting

def pretty_uptime(secs: int | None) -> str:
    """Storm's uptime string: ``"1d 2h 3m 4s"``, leading zero units dropped (``"5m 0s"``)."""
    if secs is None or secs < 0:
        return ""
    days, rest = divmod(int(secs), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m")]
    while parts and parts[0][0] == 0:
        parts.pop(0)
    return " ".join(f"{value}{unit}" for value, unit in parts + [(seconds, "s")])


def window_hint(window: str) -> str:
    """``"600"`` -> ``"10m 0s"``, ``":all-time"`` -> ``"All time"`` (Storm's windowPretty)."""
    if window == ALL_TIME:
        return "All time"
    return pretty_uptime(WINDOW_SECS.get(window, 0))


def _ms(value: float) -> str:
    return f"{value:.3f}"


# ---------------------------------------------------------------- stats aggregation

@dataclass
class Totals:
    """Counts and weighted latency sums of some executors for one window (mutable accumulator)."""

    emitted: int = 0
    transferred: int = 0
    acked: int = 0
    failed: int = 0
    executed: int = 0
    complete_weighted: float = 0.0   # sum(avg * acked) on spout streams
    complete_count: int = 0
    process_weighted: float = 0.0    # sum(avg * acked) on bolt inputs
    process_count: int = 0
    execute_weighted: float = 0.0    # sum(avg * executed)
    capacity: float = 0.0            # max over bolt executors

    def latency(self, kind: str) -> str:
        weighted, count = {
            "complete": (self.complete_weighted, self.complete_count),
            "process": (self.process_weighted, self.process_count),
            "execute": (self.execute_weighted, self.executed),
        }[kind]
        return _ms(weighted / count if count else 0.0)


def _in_window(stat_map: Mapping[str, Mapping[Any, Any]] | None, window: str) -> Mapping[Any, Any]:
    if not stat_map:
        return {}
    return stat_map.get(window) or {}


def _keep(key: Any, include_sys: bool) -> bool:
    if include_sys:
        return True
    if isinstance(key, str):
        return not is_system_id(key)
    return not (is_system_id(key.streamId) or is_system_id(key.componentId))


def add_executor(totals: Totals, ex: Any, window: str, include_sys: bool) -> Totals:
    """Fold one ExecutorSummary's stats for ``window`` into ``totals`` (executors without stats add 0)."""
    stats = ex.stats
    if stats is None:
        return totals
    for stream, count in _in_window(stats.emitted, window).items():
        if _keep(stream, include_sys):
            totals.emitted += int(count)
    for stream, count in _in_window(stats.transferred, window).items():
        if _keep(stream, include_sys):
            totals.transferred += int(count)
    specific = stats.specific
    if specific is not None and specific.spout is not None:
        _add_spout(totals, specific.spout, window, include_sys)
    elif specific is not None and specific.bolt is not None:
        _add_bolt(totals, specific.bolt, window, include_sys, ex.uptime_secs)
    return totals


def _add_spout(totals: Totals, spout: Any, window: str, include_sys: bool) -> None:
    acked = _in_window(spout.acked, window)
    latency = _in_window(spout.complete_ms_avg, window)
    for stream, count in acked.items():
        if _keep(stream, include_sys):
            totals.acked += int(count)
            totals.complete_count += int(count)
            totals.complete_weighted += float(latency.get(stream, 0.0)) * int(count)
    totals.failed += sum(int(c) for s, c in _in_window(spout.failed, window).items() if _keep(s, include_sys))


def _add_bolt(totals: Totals, bolt: Any, window: str, include_sys: bool, uptime_secs: int | None) -> None:
    acked = _in_window(bolt.acked, window)
    process = _in_window(bolt.process_ms_avg, window)
    for gsid, count in acked.items():
        if _keep(gsid, include_sys):
            totals.acked += int(count)
            totals.process_count += int(count)
            totals.process_weighted += float(process.get(gsid, 0.0)) * int(count)
    totals.failed += sum(int(c) for g, c in _in_window(bolt.failed, window).items() if _keep(g, include_sys))
    execute = _in_window(bolt.execute_ms_avg, window)
    busy_ms = 0.0
    for gsid, count in _in_window(bolt.executed, window).items():
        if _keep(gsid, include_sys):
            totals.executed += int(count)
            busy_ms += float(execute.get(gsid, 0.0)) * int(count)
    totals.execute_weighted += busy_ms
    span_secs = WINDOW_SECS.get(window) or uptime_secs or 0
    if uptime_secs:
        span_secs = min(span_secs, uptime_secs)
    if span_secs > 0:
        totals.capacity = max(totals.capacity, busy_ms / (span_secs * 1000.0))


def aggregate(executors: Iterable[Any], window: str, include_sys: bool = False) -> Totals:
    """Totals of ``executors`` for one window."""
    totals = Totals()
    for ex in executors:
        add_executor(totals, ex, window, include_sys)
    return totals


def spout_stats(totals: Totals) -> dict[str, Any]:
    """The numbers Storm shows for a spout (a row of spouts, spoutSummary or executorStats)."""
    return {"emitted": totals.emitted, "transferred": totals.transferred, "acked": totals.acked,
            "failed": totals.failed, "completeLatency": totals.latency("complete")}


def bolt_stats(totals: Totals) -> dict[str, Any]:
    """The numbers Storm shows for a bolt (a row of bolts, boltStats or executorStats)."""
    return {"emitted": totals.emitted, "transferred": totals.transferred, "acked": totals.acked,
            "failed": totals.failed, "executed": totals.executed,
            "processLatency": totals.latency("process"), "executeLatency": totals.latency("execute"),
            "capacity": _ms(totals.capacity)}


def window_rows(executors: list[Any], kind: str, include_sys: bool) -> list[dict[str, Any]]:
    """One row per window (10m, 3h, 1d, all time): the per-window tables of topology and component."""
    render = spout_stats if kind == "spout" else bolt_stats
    rows = []
    for window in WINDOWS:
        row = {"window": window, "windowPretty": window_hint(window)}
        row.update(render(aggregate(executors, window, include_sys)))
        rows.append(row)
    return rows


# ---------------------------------------------------------------- components of a topology

@dataclass
class ComponentInfo:
    """What the topology page needs about one component, before stats."""

    id: str
    kind: str                       # "spout" | "bolt"
    executors: list[Any] = field(default_factory=list)
    parallelism_hint: int = 0
    declared_tasks: int = 0

    @property
    def num_executors(self) -> int:
        return len(self.executors) or self.parallelism_hint

    @property
    def num_tasks(self) -> int:
        if self.executors:
            return sum(_task_count(ex) for ex in self.executors)
        return self.declared_tasks or self.parallelism_hint


def _task_count(ex: Any) -> int:
    info = ex.executor_info
    return max(0, info.task_end - info.task_start + 1)


def _declared_tasks(common: Any) -> int:
    hint = common.parallelism_hint or 1
    if not common.json_conf:
        return hint
    try:
        conf = json.loads(common.json_conf)
    except ValueError:
        return hint
    tasks = conf.get(TOPOLOGY_TASKS.name) if isinstance(conf, dict) else None
    return tasks if isinstance(tasks, int) and tasks > 0 else hint


def components(info: Any, topology: Any | None) -> dict[str, ComponentInfo]:
    """Components of a topology: declared ones (from the StormTopology) plus any that only show up
    in executors (``__acker``). Kinds come from the topology, else from the executors' stats."""
    result: dict[str, ComponentInfo] = {}
    if topology is not None:
        for kind, specs in (("spout", topology.spouts or {}), ("bolt", topology.bolts or {})):
            for comp_id, spec in specs.items():
                result[comp_id] = ComponentInfo(comp_id, kind, parallelism_hint=spec.common.parallelism_hint or 1,
                                                declared_tasks=_declared_tasks(spec.common))
    for ex in info.executors or []:
        comp = result.get(ex.component_id)
        if comp is None:
            specific = ex.stats.specific if ex.stats is not None else None
            kind = "spout" if specific is not None and specific.spout is not None else "bolt"
            comp = result[ex.component_id] = ComponentInfo(ex.component_id, kind)
        comp.executors.append(ex)
    return result


def workers(info: Any) -> list[dict[str, Any]]:
    """Workers of a topology, from where its executors run (host, port)."""
    by_slot: dict[tuple[str, int], list[Any]] = defaultdict(list)
    for ex in info.executors or []:
        by_slot[(ex.host, ex.port)].append(ex)
    rows = []
    for (host, port), executors in sorted(by_slot.items()):
        tasks: dict[str, int] = defaultdict(int)
        for ex in executors:
            tasks[ex.component_id] += _task_count(ex)
        uptime = max(ex.uptime_secs or 0 for ex in executors)
        rows.append({"host": host, "port": port, "topologyId": info.id, "topologyName": info.name,
                     "executorsTotal": len(executors), "componentNumTasks": dict(sorted(tasks.items())),
                     "uptime": pretty_uptime(uptime), "uptimeSeconds": uptime})
    return rows


def output_stats(comp: ComponentInfo, window: str, include_sys: bool) -> list[dict[str, Any]]:
    """Per output stream: emitted and transferred (and for spouts acked/failed/complete latency)."""
    rows: dict[str, Totals] = defaultdict(Totals)
    for ex in comp.executors:
        if ex.stats is None:
            continue
        for stream, count in _in_window(ex.stats.emitted, window).items():
            rows[stream].emitted += int(count)
        for stream, count in _in_window(ex.stats.transferred, window).items():
            rows[stream].transferred += int(count)
        spout = ex.stats.specific.spout if ex.stats.specific is not None else None
        if spout is not None:
            latency = _in_window(spout.complete_ms_avg, window)
            for stream, count in _in_window(spout.acked, window).items():
                rows[stream].acked += int(count)
                rows[stream].complete_count += int(count)
                rows[stream].complete_weighted += float(latency.get(stream, 0.0)) * int(count)
            for stream, count in _in_window(spout.failed, window).items():
                rows[stream].failed += int(count)
    result = []
    for stream in sorted(rows):
        if not _keep(stream, include_sys):
            continue
        t = rows[stream]
        row: dict[str, Any] = {"stream": stream, "emitted": t.emitted, "transferred": t.transferred}
        if comp.kind == "spout":
            row.update(acked=t.acked, failed=t.failed, completeLatency=t.latency("complete"))
        result.append(row)
    return result


def input_stats(comp: ComponentInfo, window: str, include_sys: bool) -> list[dict[str, Any]]:
    """Per input (component, stream) of a bolt: executed, latencies, acked, failed."""
    rows: dict[tuple[str, str], Totals] = defaultdict(Totals)
    for ex in comp.executors:
        bolt = ex.stats.specific.bolt if ex.stats is not None and ex.stats.specific is not None else None
        if bolt is None:
            continue
        process = _in_window(bolt.process_ms_avg, window)
        execute = _in_window(bolt.execute_ms_avg, window)
        for gsid, count in _in_window(bolt.acked, window).items():
            t = rows[(gsid.componentId, gsid.streamId)]
            t.acked += int(count)
            t.process_count += int(count)
            t.process_weighted += float(process.get(gsid, 0.0)) * int(count)
        for gsid, count in _in_window(bolt.failed, window).items():
            rows[(gsid.componentId, gsid.streamId)].failed += int(count)
        for gsid, count in _in_window(bolt.executed, window).items():
            t = rows[(gsid.componentId, gsid.streamId)]
            t.executed += int(count)
            t.execute_weighted += float(execute.get(gsid, 0.0)) * int(count)
    result = []
    for (source, stream), t in sorted(rows.items()):
        if not include_sys and (is_system_id(source) or is_system_id(stream)):
            continue
        result.append({"component": source, "stream": stream, "executed": t.executed,
                       "executeLatency": t.latency("execute"), "processLatency": t.latency("process"),
                       "acked": t.acked, "failed": t.failed})
    return result


def executor_stats(comp: ComponentInfo, window: str, include_sys: bool) -> list[dict[str, Any]]:
    """One row per executor: where it runs, its uptime and its stats for ``window``."""
    render = spout_stats if comp.kind == "spout" else bolt_stats
    rows = []
    for ex in sorted(comp.executors, key=lambda e: e.executor_info.task_start):
        info = ex.executor_info
        rows.append({"id": f"[{info.task_start}-{info.task_end}]", "host": ex.host, "port": ex.port,
                     "uptime": pretty_uptime(ex.uptime_secs), "uptimeSeconds": ex.uptime_secs,
                     # the tasks' own metrics (all time): Trident's txid, batches, batch latency
                     "metrics": dict(sorted((ex.stats.metrics or {}).items())) if ex.stats is not None else {},
                     **render(add_executor(Totals(), ex, window, include_sys))})
    return rows
