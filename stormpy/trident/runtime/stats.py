"""Latency figures of Trident batches, published as executor metrics (heartbeats, UI, /metrics).

Every Trident component reports ``trident.txid``, ``trident.batches.committed`` and the p50/p99
of its recent batch latencies through its task's ``metrics``; the coordinator adds the commit
latency. The figures travel in ``ExecutorStats.metrics`` like any user metric.
"""
from __future__ import annotations

import time
from collections import deque
from typing import Any

#: a window's percentiles are recomputed at most this often (they are read at heartbeat
#: granularity, seconds; sorting the window on every batch and commit showed in profiles)
PUBLISH_EVERY_SECS = 0.1
#: how often the Trident components' ``on_timer`` publishes what the throttle held back: the
#: last batches before a topology goes idle would otherwise never reach the metrics
REPUBLISH_SECS = 1.0


class LatencyWindow:
    """The last ``size`` latencies of one kind, published as p50/p99 metrics (Storm's UI shows
    averages; a batch pipeline's stalls show in the tail, so stormpy publishes percentiles)."""

    def __init__(self, size: int = 256) -> None:
        self.samples: deque[float] = deque(maxlen=size)
        self._started: dict[tuple[int, int], float] = {}
        self._published = -float("inf")
        self._unpublished = False   # samples arrived since the last publish (the throttle held them)

    def start(self, txid: int, attempt: int, now: float) -> None:
        self._started[(txid, attempt)] = now

    def stop(self, txid: int, attempt: int, now: float) -> float | None:
        t0 = self._started.pop((txid, attempt), None)
        if t0 is None:
            return None
        ms = (now - t0) * 1000.0
        self.samples.append(ms)
        self._unpublished = True
        return ms

    def forget(self, txid: int, attempt: int) -> None:
        self._started.pop((txid, attempt), None)

    def publish(self, metrics: Any, name: str) -> None:
        """Set ``<name>.p50.ms`` / ``.p99.ms`` if samples arrived since the last time, at most
        every ``PUBLISH_EVERY_SECS``; a later call (the components' timer) publishes what waited."""
        now = time.monotonic()
        if not self._unpublished or now - self._published < PUBLISH_EVERY_SECS:
            return
        self._published = now
        self._unpublished = False
        ordered = sorted(self.samples)
        if ordered:
            metrics.set(f"{name}.p50.ms", ordered[len(ordered) // 2])
            metrics.set(f"{name}.p99.ms", ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))])
