"""The charts' history (pure, on hand-made structs and a fake clock), the sampler against the
fake Nimbus, the backpressure rule of the graph, and the /timeseries API over real sockets."""
from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from test_ui_server import Client, serve
from ui_structs import TOPOLOGY_ID, FakeNimbus, bolt_executor, fake_connect, spout_executor, storm_topology

from stormpy.config import Config
from stormpy.thrift import storm
from stormpy.ui.graph import backpressure, visualization
from stormpy.ui.history import History, Sampler, sample_of
from stormpy.ui.server import make_server


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def info_at(emitted: int, acked: int, failed: int = 0, latency_ms: float = 10.0, executed: int = 0,
            process_ms: float = 1.0, topology_id: str = TOPOLOGY_ID) -> Any:
    """A topology whose spout ``words`` has these all-time totals (split over 2 executors) and
    whose bolt ``count`` executed/acked ``executed`` tuples; ``__acker`` must never be counted."""
    executors = [
        spout_executor(1, 2, 6700, emitted=emitted // 2, acked=acked // 2, latency_ms=latency_ms, failed=failed),
        spout_executor(3, 4, 6701, emitted=emitted - emitted // 2, acked=acked - acked // 2, latency_ms=latency_ms),
        bolt_executor("count", 5, 5, 6700, executed=executed, process_ms=process_ms, execute_ms=0.5),
        bolt_executor("__acker", 7, 7, 6701, executed=10_000, process_ms=0.1, execute_ms=0.1),
    ]
    return storm.TopologyInfo(id=topology_id, name="wordcount", uptime_secs=600, executors=executors,
                              status="ACTIVE", errors={})


def test_sample_counts_like_the_topology_page() -> None:
    sample = sample_of(info_at(emitted=1000, acked=400, failed=3, executed=200), None, 5.0)
    assert (sample.topology.emitted, sample.topology.acked, sample.topology.failed) == (1000, 400, 3)
    assert sorted(sample.components) == ["count", "words"]            # no __acker
    kind, count = sample.components["count"]
    assert kind == "bolt" and (count.acked, count.latency_count, count.latency_weighted) == (200, 200, 200.0)


def test_series_are_rates_between_samples_and_interval_latency() -> None:
    clock = Clock()
    history = History(clock=clock)
    assert history.record(info_at(emitted=0, acked=0))
    clock.now += 10
    assert history.record(info_at(emitted=1000, acked=500, failed=20, latency_ms=10.0, executed=100))
    clock.now += 5
    # all-time average 10 ms over 500 acks, then 40 ms over 1000: the 500 acks in between took
    # (1000*40 - 500*10) / 500 = 70 ms, which is what the chart must show (not the all-time 40).
    assert history.record(info_at(emitted=1500, acked=1000, failed=20, latency_ms=40.0, executed=100))
    doc = history.series(TOPOLOGY_ID)
    assert doc["time"] == [1010.0, 1015.0] and doc["samples"] == 3
    assert doc["emitted"] == [100.0, 100.0] and doc["acked"] == [50.0, 100.0] and doc["failed"] == [2.0, 0.0]
    assert doc["latency"] == [10.0, 70.0] and doc["latencyKind"] == "complete"
    bolt = history.series(TOPOLOGY_ID, "count")
    assert bolt["type"] == "bolt" and bolt["latencyKind"] == "process"
    assert bolt["acked"] == [10.0, 0.0] and bolt["latency"] == [1.0, None]   # nothing completed: null
    assert history.series(TOPOLOGY_ID, "nope")["time"] == []
    assert json.loads(json.dumps(doc)) == doc


def test_a_counter_reset_by_a_worker_restart_is_not_a_negative_rate() -> None:
    clock = Clock()
    history = History(clock=clock)
    history.record(info_at(emitted=5000, acked=2000))
    clock.now += 10
    history.record(info_at(emitted=100, acked=50))
    doc = history.series(TOPOLOGY_ID)
    assert doc["emitted"] == [0.0] and doc["acked"] == [0.0]


def test_history_is_bounded_by_gap_and_window() -> None:
    clock = Clock()
    history = History(window_secs=60, min_gap_secs=2, clock=clock)
    assert history.record(info_at(emitted=0, acked=0))
    clock.now += 1
    assert not history.record(info_at(emitted=10, acked=0))        # too soon: dropped
    for i in range(100):                                             # 200 s of samples every 2 s
        clock.now += 2
        history.record(info_at(emitted=10 * i, acked=i))
    assert len(history) <= history.max_samples == 32
    doc = history.series(TOPOLOGY_ID)
    assert doc["time"][0] >= clock.now - 60 and doc["time"][-1] == clock.now
    clock.now += 120                                                 # nobody records: the window empties
    assert history.series(TOPOLOGY_ID)["samples"] == 0


def test_topologies_that_are_gone_are_dropped() -> None:
    clock = Clock()
    history = History(clock=clock)
    history.record(info_at(1, 1))
    history.record(info_at(1, 1, topology_id="other-2-2"))
    history.record(info_at(1, 1, topology_id="third-3-3"))
    history.retain([TOPOLOGY_ID, "third-3-3"])
    assert history.topology_ids() == ["third-3-3", TOPOLOGY_ID]
    history.forget("third-3-3")
    assert history.topology_ids() == [TOPOLOGY_ID]
    assert history.series("other-2-2")["samples"] == 0


def test_sampler_records_live_topologies_drops_gone_ones_and_stops() -> None:
    nimbus = FakeNimbus()
    history = History(min_gap_secs=0.01)
    history.record(info_at(1, 1, topology_id="gone-9-9"))
    connect = fake_connect(nimbus)
    sampler = Sampler(history, lambda: connect(None), interval_secs=0.02)
    # alpha-2-2000 is listed by getClusterInfo but not alive: forgotten, not an error
    assert sampler.sample_once() == 1
    assert history.topology_ids() == [TOPOLOGY_ID]
    sampler.start()
    try:
        deadline = threading.Event()
        for _ in range(200):
            if history.series(TOPOLOGY_ID)["samples"] >= 3:
                break
            deadline.wait(0.02)
        assert history.series(TOPOLOGY_ID)["samples"] >= 3
    finally:
        sampler.stop(reason="test done")
    assert not sampler.is_alive()


def test_sampler_survives_nimbus_failures() -> None:
    calls = []

    @contextmanager
    def broken() -> Iterator[Any]:
        calls.append(1)
        raise ConnectionRefusedError(111, "Connection refused")
        yield  # pragma: no cover

    sampler = Sampler(History(), broken, interval_secs=0.01)
    sampler.start()
    try:
        for _ in range(200):
            if len(calls) >= 3:
                break
            threading.Event().wait(0.01)
        assert len(calls) >= 3 and sampler.is_alive()
    finally:
        sampler.stop(reason="test done")
    assert not sampler.is_alive()


# ---------------------------------------------------------------- backpressure in the graph

def with_metrics(ex: Any, metrics: dict[str, float]) -> Any:
    ex.stats.metrics = metrics
    return ex


def test_backpressure_from_the_executors_receive_queue_metrics() -> None:
    calm = with_metrics(bolt_executor("count", 5, 5, 6700, 10, 1.0, 0.5),
                        {"__backpressure": 0.0, "__receive.pct_full": 12.5})
    full = with_metrics(bolt_executor("count", 6, 6, 6701, 10, 1.0, 0.5),
                        {"__backpressure": 1.0, "__receive.pct_full": 91.0})
    assert backpressure([calm], 0.95) == {"backpressure": False, "pct_full": 12.5, "source": "receive-queue"}
    assert backpressure([calm, full], 0.1) == {"backpressure": True, "pct_full": 91.0, "source": "receive-queue"}
    # workers that publish no queue metrics: Storm's capacity rule of thumb
    old = bolt_executor("count", 5, 5, 6700, 10, 1.0, 0.5)
    assert backpressure([old], 0.81) == {"backpressure": True, "pct_full": None, "source": "capacity"}
    assert backpressure([old], 0.5)["backpressure"] is False


def test_visualization_carries_backpressure_per_component() -> None:
    info = info_at(emitted=100, acked=50, executed=10)
    for ex in info.executors:
        with_metrics(ex, {"__backpressure": 1.0 if ex.component_id == "count" else 0.0, "__receive.pct_full": 5.0})
    doc = visualization(info, storm_topology(), ":all-time")
    assert doc["count"][":backpressure"] is True and doc["words"][":backpressure"] is False
    assert doc["count"][":receive-pct-full"] == 5.0 and doc["count"][":backpressure-source"] == "receive-queue"


# ---------------------------------------------------------------- the API over real sockets

@pytest.fixture
def ui() -> Iterator[Client]:
    conf = Config({"nimbus.seeds": ["127.0.0.1"], "nimbus.thrift.port": 1})
    server = make_server(conf, "127.0.0.1", 0, connect=fake_connect(FakeNimbus()))
    server.app.history.min_gap_secs = 0.0
    yield from serve(server)


def test_timeseries_api_shape(ui: Client) -> None:
    for _ in range(3):
        status, doc = ui.json("GET", f"/api/v1/topology/{TOPOLOGY_ID}/timeseries")
        assert status == 200
    assert doc["topologyId"] == TOPOLOGY_ID and doc["component"] is None and doc["type"] == "topology"
    assert doc["samples"] == 3 and doc["windowSecs"] == 3600
    assert doc["units"] == {"emitted": "tuples/s", "acked": "tuples/s", "failed": "tuples/s", "latency": "ms"}
    assert all(len(doc[k]) == 2 for k in ("time", "emitted", "acked", "failed", "latency"))
    assert doc["emitted"] == [0.0, 0.0]          # the fake Nimbus's counters do not move
    status, doc = ui.json("GET", f"/api/v1/topology/{TOPOLOGY_ID}/component/count/timeseries")
    assert status == 200 and doc["component"] == "count" and doc["latencyKind"] == "process"
    status, doc = ui.json("GET", f"/api/v1/topology/{TOPOLOGY_ID}/component/idle/timeseries")
    assert status == 200 and doc["samples"] == 0          # declared, not running: an empty series
    status, doc = ui.json("GET", f"/api/v1/topology/{TOPOLOGY_ID}/component/nope/timeseries")
    assert status == 404 and "nope" in doc["errorMessage"]
    status, doc = ui.json("GET", "/api/v1/topology/gone-1-1/timeseries")
    assert status == 404


def test_pages_embed_the_charts_and_serve_their_script(ui: Client) -> None:
    status, _, body = ui.request("GET", f"/topology.html?id={TOPOLOGY_ID}")
    html = body.decode()
    assert status == 200 and f'data-url="/api/v1/topology/{TOPOLOGY_ID}/timeseries"' in html
    assert html.count('class="sparkline"') == 4 and '/static/charts.js' in html
    status, _, body = ui.request("GET", f"/component.html?topology_id={TOPOLOGY_ID}&id=count")
    assert f"/api/v1/topology/{TOPOLOGY_ID}/component/count/timeseries" in body.decode()
    assert "Process latency (ms)" in body.decode()
    status, headers, body = ui.request("GET", "/static/charts.js")
    assert status == 200 and headers["Content-Type"].startswith("text/javascript") and b"createElementNS" in body
