"""``/metrics``: the cluster's numbers in Prometheus text format, from the stats Nimbus serves.

Each scrape asks Nimbus for the cluster summary and every topology's info (the same calls the
UI pages make) and turns them into metric families with Storm's metric names: emitted,
transferred, acked, failed (counters, all-time), complete latency and capacity (gauges), per
topology, component and worker; plus cluster gauges (supervisors, slots, executors). Nothing is
kept between scrapes, so the numbers are exactly what Nimbus has (workers report every
``task.heartbeat.frequency.secs``).

``families(...)`` is pure (Thrift structs in, metric families out) and tested with hand-built
structs; ``render(...)`` uses prometheus-client's own exposition code. Called from request threads.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from stormpy.ui.stats import ALL_TIME, Totals, add_executor, components, is_system_id

CONTENT_TYPE = CONTENT_TYPE_LATEST
CAPACITY_WINDOW = "600"     # Storm's UI shows capacity over the last 10 minutes

TOPO_LABELS = ["topology", "topology_id"]
COMP_LABELS = [*TOPO_LABELS, "component", "type"]
WORKER_LABELS = [*TOPO_LABELS, "host", "port"]
COUNTS = ("emitted", "transferred", "acked", "failed")


def _avg(weighted: float, count: int) -> float:
    return weighted / count if count else 0.0


class _Families:
    """Named metric families, created on first use, yielded in creation order."""

    def __init__(self) -> None:
        self._by_name: dict[str, Metric] = {}

    def counter(self, name: str, doc: str, labels: Sequence[str]) -> CounterMetricFamily:
        if name not in self._by_name:
            self._by_name[name] = CounterMetricFamily(name, doc, labels=list(labels))
        return self._by_name[name]  # type: ignore[return-value]

    def gauge(self, name: str, doc: str, labels: Sequence[str] = ()) -> GaugeMetricFamily:
        if name not in self._by_name:
            self._by_name[name] = GaugeMetricFamily(name, doc, labels=list(labels))
        return self._by_name[name]  # type: ignore[return-value]

    def __iter__(self) -> Iterator[Metric]:
        return iter(self._by_name.values())


def _cluster(out: _Families, cs: Any) -> None:
    sups = cs.supervisors or []
    topologies = cs.topologies or []
    slots_total = sum(s.num_workers or 0 for s in sups)
    slots_used = sum(s.num_used_workers or 0 for s in sups)
    for name, doc, value in (
            ("storm_cluster_supervisors", "Supervisors alive.", len(sups)),
            ("storm_cluster_topologies", "Topologies on the cluster.", len(topologies)),
            ("storm_cluster_slots_total", "Worker slots of all supervisors.", slots_total),
            ("storm_cluster_slots_used", "Worker slots in use.", slots_used),
            ("storm_cluster_slots_free", "Worker slots free.", max(0, slots_total - slots_used)),
            ("storm_cluster_executors", "Executors of all topologies.", sum(t.num_executors or 0 for t in topologies)),
            ("storm_cluster_tasks", "Tasks of all topologies.", sum(t.num_tasks or 0 for t in topologies)),
            ("storm_nimbus_uptime_seconds", "Uptime of the leader Nimbus.", cs.nimbus_uptime_secs or 0)):
        out.gauge(name, doc).add_metric([], value)
    sup_uptime = out.gauge("storm_supervisor_uptime_seconds", "Supervisor uptime.", ["host", "supervisor_id"])
    sup_used = out.gauge("storm_supervisor_slots_used", "Slots in use on a supervisor.", ["host", "supervisor_id"])
    for s in sups:
        sup_uptime.add_metric([s.host, s.supervisor_id or ""], s.uptime_secs or 0)
        sup_used.add_metric([s.host, s.supervisor_id or ""], s.num_used_workers or 0)


def _counts(out: _Families, level: str, labels: Sequence[str], values: list[str], totals: Totals) -> None:
    for count in COUNTS:
        out.counter(f"storm_{level}_{count}", f"Tuples {count} (Storm's '{count}'), all time.",
                    labels).add_metric(values, getattr(totals, count))


def _topology(out: _Families, summary: Any, info: Any, topology: Any | None) -> None:
    tl = [info.name, info.id]
    for name, doc, value in (
            ("storm_topology_uptime_seconds", "Topology uptime.", info.uptime_secs or 0),
            ("storm_topology_workers", "Worker processes.", summary.num_workers if summary else 0),
            ("storm_topology_executors", "Executors.", summary.num_executors if summary else 0),
            ("storm_topology_tasks", "Tasks.", summary.num_tasks if summary else 0)):
        out.gauge(name, doc, TOPO_LABELS).add_metric(tl, value)
    out.gauge("storm_topology_status", "1 for the topology's current status.", [*TOPO_LABELS, "status"]) \
        .add_metric([*tl, info.status or ""], 1)
    everything, spouts = Totals(), Totals()
    workers: dict[tuple[str, int], Totals] = defaultdict(Totals)
    for comp in components(info, topology).values():
        if is_system_id(comp.id):
            continue
        totals, recent = Totals(), Totals()
        for ex in comp.executors:
            add_executor(totals, ex, ALL_TIME, False)
            add_executor(recent, ex, CAPACITY_WINDOW, False)
            add_executor(everything, ex, ALL_TIME, False)
            add_executor(workers[(ex.host, ex.port)], ex, ALL_TIME, False)
            if comp.kind == "spout":
                add_executor(spouts, ex, ALL_TIME, False)
        cl = [*tl, comp.id, comp.kind]
        _counts(out, "component", COMP_LABELS, cl, totals)
        out.gauge("storm_component_executors", "Executors of the component.", COMP_LABELS).add_metric(cl, comp.num_executors)
        out.gauge("storm_component_errors", "Errors Nimbus keeps for the component.", COMP_LABELS) \
            .add_metric(cl, len((info.errors or {}).get(comp.id) or []))
        if comp.kind == "spout":
            out.gauge("storm_component_complete_latency_ms", "Average complete latency (spouts), all time.",
                      COMP_LABELS).add_metric(cl, _avg(totals.complete_weighted, totals.complete_count))
        else:
            out.counter("storm_component_executed", "Tuples executed (bolts), all time.", COMP_LABELS) \
                .add_metric(cl, totals.executed)
            out.gauge("storm_component_capacity", "Busiest executor's share of the last 10 minutes spent executing.",
                      COMP_LABELS).add_metric(cl, recent.capacity)
            out.gauge("storm_component_execute_latency_ms", "Average execute latency (bolts), all time.",
                      COMP_LABELS).add_metric(cl, _avg(totals.execute_weighted, totals.executed))
            out.gauge("storm_component_process_latency_ms", "Average process latency (bolts), all time.",
                      COMP_LABELS).add_metric(cl, _avg(totals.process_weighted, totals.process_count))
    out.counter("storm_topology_emitted", "Tuples emitted, all time.", TOPO_LABELS).add_metric(tl, everything.emitted)
    out.counter("storm_topology_transferred", "Tuples transferred, all time.", TOPO_LABELS) \
        .add_metric(tl, everything.transferred)
    out.counter("storm_topology_acked", "Spout tuples acked, all time.", TOPO_LABELS).add_metric(tl, spouts.acked)
    out.counter("storm_topology_failed", "Spout tuples failed, all time.", TOPO_LABELS).add_metric(tl, spouts.failed)
    out.gauge("storm_topology_complete_latency_ms", "Average complete latency, all time.", TOPO_LABELS) \
        .add_metric(tl, _avg(spouts.complete_weighted, spouts.complete_count))
    for (host, port), totals in sorted(workers.items()):
        _counts(out, "worker", WORKER_LABELS, [*tl, host, str(port)], totals)
    uptime = out.gauge("storm_worker_uptime_seconds", "Worker uptime.", WORKER_LABELS)
    for host, port in sorted(workers):
        secs = max((ex.uptime_secs or 0) for ex in info.executors or [] if (ex.host, ex.port) == (host, port))
        uptime.add_metric([*tl, host, str(port)], secs)


def families(cs: Any, topologies: Iterable[tuple[Any, Any, Any | None]]) -> list[Metric]:
    """Metric families from a ClusterSummary and (TopologySummary, TopologyInfo, StormTopology) triples."""
    out = _Families()
    _cluster(out, cs)
    for summary, info, topology in topologies:
        _topology(out, summary, info, topology)
    return list(out)


class _Fixed:
    """A prometheus-client collector that yields families computed beforehand."""

    def __init__(self, metrics: list[Metric]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return iter(self._metrics)


def render(metrics: list[Metric]) -> bytes:
    """The Prometheus text exposition of ``metrics``."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(metrics))  # type: ignore[arg-type]
    return generate_latest(registry)


def scrape(client: Any) -> bytes:
    """Ask Nimbus (``client``) for everything and render it; topologies that vanish mid-scrape
    (killed between the two calls) are left out."""
    from stormpy.thrift import storm

    cs = client.getClusterInfo()
    triples = []
    for summary in cs.topologies or []:
        try:
            triples.append((summary, client.getTopologyInfo(summary.id), client.getTopology(summary.id)))
        except storm.NotAliveException:
            continue
    return render(families(cs, triples))
