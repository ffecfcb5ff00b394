"""Trident's batch and commit latency metrics (stormpy/trident/runtime/stats.py): the publish
throttle never keeps the last latencies before a topology goes idle out of the metrics."""
from __future__ import annotations

from typing import Any

import pytest

from stormpy.api.component import Metrics
from stormpy.trident.runtime import stats
from stormpy.trident.runtime.bolts import TridentBolt
from stormpy.trident.runtime.coordinator import MasterBatchCoordinator
from stormpy.trident.runtime.stats import PUBLISH_EVERY_SECS, REPUBLISH_SECS, LatencyWindow


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [100.0]
    monkeypatch.setattr(stats.time, "monotonic", lambda: now[0])
    return now


def batch(window: LatencyWindow, txid: int, ms: float) -> None:
    window.start(txid, 0, 0.0)
    window.stop(txid, 0, ms / 1000.0)


def test_a_latency_the_throttle_held_back_is_published_by_the_next_call(clock: list[float]) -> None:
    window, metrics = LatencyWindow(), Metrics()
    batch(window, 1, 10.0)
    window.publish(metrics, "lat")
    assert metrics == {"lat.p50.ms": 10.0, "lat.p99.ms": 10.0}
    batch(window, 2, 500.0)           # the last batch before idle, right after a publish
    window.publish(metrics, "lat")
    assert metrics["lat.p99.ms"] == 10.0, "throttled"
    clock[0] += 2 * PUBLISH_EVERY_SECS
    window.publish(metrics, "lat")    # what the components' on_timer does, later
    assert metrics["lat.p99.ms"] == 500.0


def test_nothing_new_publishes_nothing(clock: list[float]) -> None:
    window, metrics = LatencyWindow(), Metrics()
    window.publish(metrics, "lat")
    assert metrics == {}
    batch(window, 1, 10.0)
    window.publish(metrics, "lat")
    metrics["lat.p50.ms"] = -1.0      # a publish with no new sample would overwrite this
    clock[0] += 10 * PUBLISH_EVERY_SECS
    window.publish(metrics, "lat")
    assert metrics["lat.p50.ms"] == -1.0


def test_the_coordinator_and_trident_bolts_republish_on_their_timer(clock: list[float]) -> None:
    assert MasterBatchCoordinator.timer_interval_secs == REPUBLISH_SECS
    assert TridentBolt.timer_interval_secs == REPUBLISH_SECS
    coordinator: Any = MasterBatchCoordinator()
    coordinator.metrics = Metrics()
    batch(coordinator.batch_latency, 1, 10.0)
    coordinator.batch_latency.publish(coordinator.metrics, "trident.batch.latency")
    batch(coordinator.batch_latency, 2, 300.0)
    batch(coordinator.commit_latency, 1, 40.0)
    coordinator.batch_latency.publish(coordinator.metrics, "trident.batch.latency")   # throttled
    clock[0] += REPUBLISH_SECS
    coordinator.on_timer()
    assert coordinator.metrics["trident.batch.latency.p99.ms"] == 300.0
    assert coordinator.metrics["trident.commit.latency.p50.ms"] == 40.0
