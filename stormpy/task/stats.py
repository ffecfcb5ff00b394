"""Per-executor counters and latencies, with Storm's rolling windows.

The executor thread updates plain dicts (no locks, one ``+=`` per event); readers (the
worker heartbeat, the local runner's progress line) call :meth:`ExecutorStats.to_dict` or
:meth:`ExecutorStats.to_thrift` from other threads, which only copy those dicts (a dict copy
is atomic under the GIL). Windows "600", "10800" and "86400" are the difference between the
current totals and the oldest snapshot inside the window; the executor thread takes a
snapshot every ``SNAPSHOT_SECS`` through :meth:`snapshot_if_due`.
"""
from __future__ import annotations

import logging
import time
from collections import defaultdict, deque
from collections.abc import Mapping
from typing import Any

log = logging.getLogger(__name__)

WINDOWS = ("600", "10800", "86400", ":all-time")
SNAPSHOT_SECS = 30.0
_LATENCIES = ("complete_ms", "process_ms", "execute_ms")
_COUNTERS = ("emitted", "transferred", "acked", "failed", "executed")


class ExecutorStats:
    """Counters of one executor. ``kind`` is "spout" or "bolt".

    Keys: emitted/transferred by stream id; for spouts acked/failed/complete_ms by stream;
    for bolts acked/failed/executed/process_ms/execute_ms by (source component, stream).
    Latencies are ``[sum_ms, count]`` pairs (sampled; see topology.stats.sample.rate).
    """

    def __init__(self, kind: str, clock: Any = time.monotonic) -> None:
        self.kind = kind
        self._clock = clock
        # stream -> [emitted, transferred]: one list per stream, bumped in place by emit
        self.stream_counts: dict[str, list[int]] = {}
        self.acked: defaultdict[Any, int] = defaultdict(int)
        self.failed: defaultdict[Any, int] = defaultdict(int)
        self.executed: defaultdict[Any, int] = defaultdict(int)
        self.complete_ms: dict[Any, list[float]] = {}
        self.process_ms: dict[Any, list[float]] = {}
        self.execute_ms: dict[Any, list[float]] = {}
        self.metric_sources: list[Mapping[str, float]] = []
        self.started = clock()
        self._snapshots: deque[tuple[float, dict[tuple[str, Any], float]]] = deque()
        self._snapshots.append((self.started, {}))
        self._next_snapshot = self.started + SNAPSHOT_SECS

    # ------------------------------------------------------------ executor thread
    def stream_counter(self, stream: str) -> list[int]:
        """The ``[emitted, transferred]`` pair of a stream (emit closures keep a reference)."""
        counter = self.stream_counts.get(stream)
        if counter is None:
            counter = self.stream_counts[stream] = [0, 0]
        return counter

    @property
    def emitted(self) -> dict[str, int]:
        return {stream: c[0] for stream, c in list(self.stream_counts.items())}

    @property
    def transferred(self) -> dict[str, int]:
        return {stream: c[1] for stream, c in list(self.stream_counts.items())}

    @staticmethod
    def add_latency(table: dict[Any, list[float]], key: Any, ms: float, count: int = 1) -> None:
        """One latency, or ``count`` of them summing to ``ms`` (a run of acks added at once)."""
        entry = table.get(key)
        if entry is None:
            table[key] = [ms, count]
        else:
            entry[0] += ms
            entry[1] += count

    def snapshot_if_due(self, now: float | None = None) -> None:
        now = self._clock() if now is None else now
        if now < self._next_snapshot:
            return
        self._next_snapshot = now + SNAPSHOT_SECS
        self._snapshots.append((now, self._flat()))
        horizon = now - float(WINDOWS[2]) - SNAPSHOT_SECS
        while len(self._snapshots) > 1 and self._snapshots[1][0] < horizon:
            self._snapshots.popleft()

    # ------------------------------------------------------------ readers (any thread)
    def metrics(self) -> dict[str, float]:
        """The tasks' ``self.metrics`` values, summed over the executor's tasks."""
        out: dict[str, float] = {}
        for source in list(self.metric_sources):
            for name, value in dict(source).items():
                if isinstance(value, (int, float)):
                    out[name] = out.get(name, 0) + value
        return out

    def _flat(self) -> dict[tuple[str, Any], float]:
        flat: dict[tuple[str, Any], float] = {}
        for name in _COUNTERS:
            for key, value in dict(getattr(self, name)).items():
                flat[(name, key)] = value
        for name in _LATENCIES:
            for key, pair in dict(getattr(self, name)).items():
                total, count = pair[0], pair[1]
                flat[(name + ":sum", key)] = total
                flat[(name + ":count", key)] = count
        return flat

    def windows(self, now: float | None = None) -> dict[str, dict[tuple[str, Any], float]]:
        """Flat totals per window: current totals minus the oldest snapshot in the window."""
        now = self._clock() if now is None else now
        current = self._flat()
        snapshots = list(self._snapshots)
        out: dict[str, dict[tuple[str, Any], float]] = {":all-time": current}
        for window in WINDOWS[:3]:
            start = now - float(window)
            base = next((snap for t, snap in snapshots if t >= start), current)
            out[window] = {k: v - base.get(k, 0) for k, v in current.items()}
        return out

    @staticmethod
    def _section(flat: dict[tuple[str, Any], float], name: str) -> dict[Any, float]:
        return {key: value for (kind, key), value in flat.items() if kind == name}

    @staticmethod
    def _averages(flat: dict[tuple[str, Any], float], name: str) -> dict[Any, float]:
        out = {}
        for (kind, key), total in flat.items():
            if kind == name + ":sum":
                count = flat.get((name + ":count", key), 0)
                if count:
                    out[key] = total / count
        return out

    def to_dict(self) -> dict[str, Any]:
        """All-time totals, JSON-friendly (tuple keys become "component:stream")."""
        flat = self._flat()

        def keyed(d: dict[Any, float]) -> dict[str, float]:
            return {(":".join(k) if isinstance(k, tuple) else str(k)): v for k, v in d.items()}

        out: dict[str, Any] = {"kind": self.kind, "uptime_secs": self._clock() - self.started}
        for name in _COUNTERS:
            out[name] = keyed(self._section(flat, name))
        for name in _LATENCIES:
            out[name + "_avg"] = keyed(self._averages(flat, name))
        out["metrics"] = self.metrics()
        return out

    def totals(self) -> dict[str, int]:
        """Sums over all streams of emitted/transferred/acked/failed/executed (all time)."""
        return {name: int(sum(dict(getattr(self, name)).values())) for name in _COUNTERS}

    def to_thrift(self) -> Any:
        """``storm.ExecutorStats`` for worker heartbeats (windows as in Storm)."""
        from stormpy.thrift import storm

        per_window = self.windows()

        def gsid(key: Any) -> Any:
            component, stream = key
            return storm.GlobalStreamId(componentId=str(component), streamId=str(stream))

        def table(name: str, conv: Any, avg: bool = False) -> dict[str, dict[Any, Any]]:
            pick = self._averages if avg else self._section
            return {w: {conv(k): (float(v) if avg else int(v)) for k, v in pick(flat, name).items()}
                    for w, flat in per_window.items()}

        emitted = table("emitted", str)
        transferred = table("transferred", str)
        if self.kind == "spout":
            specific = storm.ExecutorSpecificStats(spout=storm.SpoutStats(
                acked=table("acked", str), failed=table("failed", str),
                complete_ms_avg=table("complete_ms", str, avg=True)))
        else:
            specific = storm.ExecutorSpecificStats(bolt=storm.BoltStats(
                acked=table("acked", gsid), failed=table("failed", gsid),
                process_ms_avg=table("process_ms", gsid, avg=True),
                executed=table("executed", gsid), execute_ms_avg=table("execute_ms", gsid, avg=True)))
        uptime = max(self._clock() - self.started, 1e-9)
        rate = sum(dict(self.transferred).values()) / uptime
        return storm.ExecutorStats(emitted=emitted, transferred=transferred, specific=specific,
                                   rate=rate, metrics={k: float(v) for k, v in self.metrics().items()})
