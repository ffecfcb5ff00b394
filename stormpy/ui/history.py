"""The UI's time series: a bounded in-memory history of each live topology's counters.

Nimbus keeps windowed sums (10m, 3h, 1d, all time), not series, so the UI samples the
all-time totals of every getTopologyInfo it fetches anyway (page and API requests) and of a
light background ``Sampler`` thread, one sample per ``min_gap_secs`` at most, for the last
``window_secs`` (an hour). A series point is the difference between two consecutive samples:
emitted / acked / failed per second and the latency of the tuples completed in between
(weighted sums over counts, so it is the interval's latency, not an all-time average).

Bounds: per topology a deque of at most ``window_secs / min_gap_secs + 1`` samples, trimmed to
the window on every record; topologies Nimbus no longer lists are dropped (``retain``,
``forget``). A worker restart resets its executors' all-time counters: such a drop counts as 0,
never as a negative rate.

Threads: request threads and the sampler call ``record``/``series``; one lock guards the dict.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from stormpy.streams import is_system_id
from stormpy.ui.stats import ALL_TIME, Totals, aggregate, components

log = logging.getLogger(__name__)

WINDOW_SECS = 3600
MIN_GAP_SECS = 2.0
SAMPLE_SECS = 10.0
SERIES = ("emitted", "acked", "failed", "latency")


@dataclass(frozen=True)
class Point:
    """All-time totals of one component (or of the topology) at one sample."""

    emitted: int
    acked: int
    failed: int
    latency_weighted: float     # complete latency (spouts, topology) or process latency (bolts) x count
    latency_count: int

    @staticmethod
    def of(totals: Totals, latency_kind: str) -> "Point":
        if latency_kind == "complete":
            return Point(totals.emitted, totals.acked, totals.failed, totals.complete_weighted, totals.complete_count)
        return Point(totals.emitted, totals.acked, totals.failed, totals.process_weighted, totals.process_count)


@dataclass(frozen=True)
class Sample:
    time: float
    topology: Point
    components: dict[str, tuple[str, Point]]     # component id -> (kind, point)


def sample_of(info: Any, topology: Any | None, now: float) -> Sample:
    """One sample from a TopologyInfo, counted the way the topology page counts: components
    without Storm's ``__`` prefix; the topology's acked/failed/latency from its spouts."""
    comps = [c for c in components(info, topology).values() if not is_system_id(c.id)]
    everything = aggregate([ex for c in comps for ex in c.executors], ALL_TIME)
    spouts = aggregate([ex for c in comps if c.kind == "spout" for ex in c.executors], ALL_TIME)
    topo = Point(everything.emitted, spouts.acked, spouts.failed, spouts.complete_weighted, spouts.complete_count)
    per_component = {}
    for comp in comps:
        kind = "complete" if comp.kind == "spout" else "process"
        per_component[comp.id] = (comp.kind, Point.of(aggregate(comp.executors, ALL_TIME), kind))
    return Sample(now, topo, per_component)


def _series(points: list[tuple[float, Point]]) -> dict[str, list[Any]]:
    """Rates between consecutive points; a counter that went down (worker restart) counts 0."""
    out: dict[str, list[Any]] = {"time": [], "emitted": [], "acked": [], "failed": [], "latency": []}
    for (t0, a), (t1, b) in zip(points, points[1:]):
        dt = t1 - t0
        if dt <= 0:
            continue
        out["time"].append(round(t1, 3))
        for name in ("emitted", "acked", "failed"):
            out[name].append(round(max(0, getattr(b, name) - getattr(a, name)) / dt, 3))
        count = b.latency_count - a.latency_count
        weighted = b.latency_weighted - a.latency_weighted
        out["latency"].append(round(weighted / count, 3) if count > 0 and weighted >= 0 else None)
    return out


class History:
    """Samples per topology id, bounded in time, count and topologies (see the module doc)."""

    def __init__(self, window_secs: float = WINDOW_SECS, min_gap_secs: float = MIN_GAP_SECS,
                 clock: Callable[[], float] = time.time) -> None:
        self.window_secs = float(window_secs)
        self.min_gap_secs = float(min_gap_secs)
        self.max_samples = int(self.window_secs / self.min_gap_secs) + 2
        self._clock = clock
        self._lock = threading.Lock()
        self._samples: dict[str, deque[Sample]] = {}

    def record(self, info: Any, topology: Any | None = None) -> bool:
        """Add a sample of ``info`` unless the last one is younger than ``min_gap_secs``;
        True when one was added."""
        now = self._clock()
        with self._lock:
            samples = self._samples.get(info.id)
            if samples and now - samples[-1].time < self.min_gap_secs:
                return False
        sample = sample_of(info, topology, now)      # outside the lock: it walks every executor
        with self._lock:
            samples = self._samples.setdefault(info.id, deque(maxlen=self.max_samples))
            if samples and now - samples[-1].time < self.min_gap_secs:
                return False                         # another thread recorded meanwhile
            samples.append(sample)
            while samples and samples[0].time < now - self.window_secs:
                samples.popleft()
        return True

    def forget(self, topology_id: str) -> None:
        """Drop a topology (Nimbus said it is not alive)."""
        with self._lock:
            self._samples.pop(topology_id, None)

    def retain(self, live_ids: Iterable[str]) -> None:
        """Drop every topology not in ``live_ids`` (the sampler's view of the cluster)."""
        live = set(live_ids)
        with self._lock:
            for topology_id in [t for t in self._samples if t not in live]:
                del self._samples[topology_id]

    def topology_ids(self) -> list[str]:
        with self._lock:
            return sorted(self._samples)

    def __len__(self) -> int:
        with self._lock:
            return sum(len(s) for s in self._samples.values())

    def _window(self, topology_id: str) -> list[Sample]:
        horizon = self._clock() - self.window_secs
        with self._lock:
            return [s for s in self._samples.get(topology_id, ()) if s.time >= horizon]

    def series(self, topology_id: str, component_id: str | None = None) -> dict[str, Any]:
        """The JSON of ``/api/v1/topology/<id>[/component/<c>]/timeseries``: per point the
        time (epoch secs), emitted/acked/failed per second and latency (ms, null when
        nothing completed in the interval)."""
        samples = self._window(topology_id)
        kind = "topology"
        if component_id is None:
            points = [(s.time, s.topology) for s in samples]
            latency = "complete"
        else:
            points = []
            for s in samples:
                if component_id in s.components:
                    kind, point = s.components[component_id]
                    points.append((s.time, point))
            latency = "complete" if kind == "spout" else "process"
        return {"topologyId": topology_id, "component": component_id, "type": kind,
                "windowSecs": int(self.window_secs), "minGapSecs": self.min_gap_secs,
                "samples": len(points), "latencyKind": latency,
                "units": {"emitted": "tuples/s", "acked": "tuples/s", "failed": "tuples/s", "latency": "ms"},
                **_series(points)}


class Sampler:
    """Records every live topology every ``interval_secs`` on its own thread, so the charts
    have an hour of history even when nobody had a page open; drops topologies that are gone.

    ``connect(conf)`` yields a Nimbus client (as the UI's requests use). A failed round is
    logged (once per outage at WARNING) and retried on the next tick; the thread ends only on
    ``stop()``."""

    def __init__(self, history: History, connect: Callable[[], AbstractContextManager[Any]],
                 interval_secs: float = SAMPLE_SECS) -> None:
        self.history = history
        self._connect = connect
        self.interval_secs = interval_secs
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ui-sampler", daemon=True)
        self._thread.start()

    def stop(self, reason: str = "ui stopping") -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            if self._thread.is_alive():
                log.warning("ui sampler: still busy after 30 s (%s); left as a daemon thread", reason)
            else:
                log.debug("ui sampler: stopped (%s)", reason)

    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample_once()
                if self._failing:
                    log.info("ui sampler: Nimbus answers again")
                self._failing = False
            except Exception as exc:  # noqa: BLE001 - a sampler that dies would silently freeze the charts
                (log.debug if self._failing else log.warning)("ui sampler: round failed: %s: %s",
                                                            type(exc).__name__, exc)
                self._failing = True
            self._stop.wait(self.interval_secs)

    def sample_once(self) -> int:
        """One round: sample every topology Nimbus lists, forget the rest; returns how many."""
        from stormpy.thrift import storm

        recorded = 0
        with self._connect() as client:
            ids = [t.id for t in client.getClusterInfo().topologies or []]
            self.history.retain(ids)
            for topology_id in ids:
                if self._stop.is_set():
                    break
                try:
                    info = client.getTopologyInfo(topology_id)
                except storm.NotAliveException:
                    self.history.forget(topology_id)
                    continue
                # No getTopology: component kinds come from the executors' stats, which is all
                # a series needs (a component without executors has no numbers to chart).
                recorded += self.history.record(info)
        return recorded
