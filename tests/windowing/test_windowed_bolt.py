"""WindowedBolt in local mode: real executor threads and a real acker."""
from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from stormpy import Bolt, Grouping, Spout, Stream, Topology, WindowedBolt
from stormpy.errors import UserError
from stormpy.local.runner import LocalTopology
from stormpy.testing import wait_until

STATE: dict[str, Any] = {}


def reset(**values: Any) -> None:
    STATE.clear()
    STATE.update(acked=[], failed=[], windows=[], late=[], ack_seen_windows={}, lock=threading.Lock(), **values)


wait = functools.partial(wait_until, interval=0.02)


@pytest.fixture
def local_topology() -> Iterator[Callable[..., LocalTopology]]:
    started: list[LocalTopology] = []

    def start(topology_cls: type, **conf: Any) -> LocalTopology:
        local = LocalTopology(topology_cls, "windows", user_overrides=conf)
        started.append(local)
        return local.start()

    yield start
    for local in started:
        local.stop(drain_secs=0)


class NumberSpout(Spout):
    """Emits ids 0..count-1 with tup_id (replaying failures); with "ts" also a timestamp field."""

    outputs = ["n", "ts"]

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.next_id = 0
        self.replays: list[int] = []

    def next_tuple(self) -> None:
        if self.replays:
            n = self.replays.pop(0)
        elif self.next_id < STATE["count"]:
            n = self.next_id
            self.next_id += 1
        else:
            return
        self.emit([n, STATE.get("timestamps", {}).get(n, 0)], tup_id=n)
        time.sleep(STATE.get("spout_sleep", 0))

    def ack(self, tup_id: Any) -> None:
        with STATE["lock"]:
            STATE["acked"].append(tup_id)
            # which windows had been processed when this tuple was acked
            STATE["ack_seen_windows"][tup_id] = len(STATE["windows"])

    def fail(self, tup_id: Any) -> None:
        with STATE["lock"]:
            STATE["failed"].append(tup_id)
        self.replays.append(tup_id)


class Recording(WindowedBolt):
    outputs = ["ns", "start", "end"]

    def process_window(self, window: Any) -> None:
        ns = [t.values.n for t in window.get()]
        if STATE.get("crash_on") in ns and not STATE.get("crashed"):
            STATE["crashed"] = True
            raise RuntimeError("boom in process_window")
        with STATE["lock"]:
            STATE["windows"].append(ns)
        self.emit([ns, window.start_timestamp, window.end_timestamp])


class Sink(Bolt):
    outputs: list[str] = []

    def process(self, tup: Any) -> None:
        if tup.stream == "late":
            with STATE["lock"]:
                STATE["late"].append(list(tup.values))


def test_a_tuple_is_acked_only_after_it_left_its_last_window(local_topology: Any) -> None:
    reset(count=10)

    class Topo(Topology):
        numbers = NumberSpout.spec()
        windows = Recording().with_window(WindowedBolt.Count(4), WindowedBolt.Count(2)).spec(inputs=[numbers])
        sink = Sink.spec(inputs=[windows])

    local_topology(Topo)
    wait(lambda: len(STATE["acked"]) >= 6 and len(STATE["windows"]) >= 5, timeout=20,
         what="six tuples acked, five windows")
    time.sleep(0.5)
    with STATE["lock"]:
        windows = [list(w) for w in STATE["windows"]]
        acked = sorted(STATE["acked"])
        seen = dict(STATE["ack_seen_windows"])
    assert windows == [[0, 1], [0, 1, 2, 3], [2, 3, 4, 5], [4, 5, 6, 7], [6, 7, 8, 9]]
    assert acked == [0, 1, 2, 3, 4, 5]        # 6..9 are still in the last window
    for n in acked:
        last = max(i for i, w in enumerate(windows) if n in w)
        assert seen[n] > last, f"tuple {n} acked before its last window {windows[last]} was processed"


def test_a_failing_window_fails_its_tuples_and_they_replay(local_topology: Any) -> None:
    reset(count=10, crash_on=3, spout_sleep=0.01)

    class Topo(Topology):
        numbers = NumberSpout.spec()
        windows = Recording().with_tumbling_window(WindowedBolt.Duration(0.3)).spec(inputs=[numbers])

    local = local_topology(Topo, **{"topology.message.timeout.secs": 10})
    wait(lambda: set(STATE["acked"]) == set(range(10)), timeout=30, what="every tuple acked after the replay")
    assert 3 in STATE["failed"]
    assert STATE["crashed"]
    processed = [n for w in STATE["windows"] for n in w]
    assert sorted(set(processed)) == list(range(10))
    assert local.reporter.counts["windows"] >= 1   # the crash was reported for the component


class EventTime(WindowedBolt):
    outputs = [Stream(fields=["ns", "start", "end"]), Stream(fields=["n", "ts"], name="late")]

    def initialize(self, stormconf: Any, context: Any) -> None:
        (self.with_tumbling_window(WindowedBolt.Duration(10))
             .with_timestamp_field("ts").with_lag(1).with_watermark_interval(0.05).with_late_tuple_stream("late"))

    def process_window(self, window: Any) -> None:
        with STATE["lock"]:
            STATE["windows"].append(([t.values.n for t in window.get()], window.start_timestamp, window.end_timestamp))
        self.emit([[t.values.n for t in window.get()], window.start_timestamp, window.end_timestamp])


class SlowLateSpout(NumberSpout):
    def next_tuple(self) -> None:
        if self.next_id == STATE["hold_before"] and not STATE.get("released"):
            return  # wait until the test saw the watermark pass
        super().next_tuple()


def test_event_time_routes_tuples_older_than_the_watermark_to_the_late_stream(local_topology: Any) -> None:
    base = 1_700_000_000_000
    reset(count=4, hold_before=3, timestamps={0: base + 1000, 1: base + 12_000, 2: base + 25_000, 3: base + 2000})

    class Topo(Topology):
        numbers = SlowLateSpout.spec()
        windows = EventTime.spec(inputs=[numbers])
        sink = Sink.spec(inputs={windows: Grouping.SHUFFLE, windows["late"]: Grouping.SHUFFLE})

    local_topology(Topo)
    # watermark = 25000 - 1000 = 24000: the windows ending at base+10000 and base+20000 fired
    wait(lambda: len(STATE["windows"]) >= 2, timeout=20, what="two event-time windows")
    STATE["released"] = True
    wait(lambda: STATE["late"], timeout=20, what="the late tuple on the late stream")
    assert STATE["late"] == [[3, base + 2000]]
    assert STATE["windows"][:2] == [([0], base, base + 10_000), ([1], base + 10_000, base + 20_000)]
    wait(lambda: 3 in STATE["acked"], timeout=10, what="the late tuple acked")
    assert all(n not in (w[0]) for w in STATE["windows"] for n in [3])


def test_submit_refuses_a_window_longer_than_the_message_timeout() -> None:
    class Topo(Topology):
        numbers = NumberSpout.spec()
        windows = Recording().with_window(WindowedBolt.Duration(25), WindowedBolt.Duration(10)).spec(inputs=[numbers])

    with pytest.raises(UserError, match=r"'windows'.*window length \+ sliding interval \(35s\).*"
                                        r"topology.message.timeout.secs \(30s\)"):
        LocalTopology(Topo, "too-long")


class Hundreds(WindowedBolt):
    """Tumbling count windows of 100: records each window's ids and emits its sum, anchored."""

    outputs = ["first", "total"]

    def process_window(self, window: Any) -> None:
        ns = [t.values.n for t in window.get()]
        with STATE["lock"]:
            STATE["windows"].append(ns)
        self.emit([ns[0], sum(ns)])


def test_tumbling_count_windows_ack_every_tuple_of_a_finite_stream(local_topology: Any,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """3,000 numbered tuples in tumbling windows of 100: all acked (the last window's too, with no
    next window to evict them), none failed or replayed, and the run stops without waiting out
    the message timeout for tuples still held."""
    reset(count=3000)

    class Topo(Topology):
        numbers = NumberSpout.spec()
        windows = Hundreds().with_tumbling_window(WindowedBolt.Count(100)).spec(inputs=[numbers])
        sink = Sink.spec(inputs=[windows])

    local = local_topology(Topo, **{"topology.message.timeout.secs": 8, "topology.max.spout.pending": 500})
    wait(lambda: len(STATE["acked"]) >= 3000, timeout=60, what="all 3000 tuples acked")
    with STATE["lock"]:
        windows = [list(w) for w in STATE["windows"]]
        seen = dict(STATE["ack_seen_windows"])
    assert sorted(STATE["acked"]) == list(range(3000))
    assert STATE["failed"] == []
    assert [w[0] for w in windows] == list(range(0, 3000, 100)) and all(len(w) == 100 for w in windows)
    for n in (0, 99, 2900, 2999):   # acked after the window holding it was processed, not before
        assert seen[n] > n // 100, f"tuple {n} acked before its window was processed"
    assert sum(s.pending_count() for s in local.runtime._spouts) == 0, "spout tuples still pending"
    local.stop()     # drains for up to the message timeout (8 s), then warns about what is in flight
    assert not [r for r in caplog.records if "still in flight" in r.getMessage()], \
        "the run stopped with tuples still held by the windows"
    assert local.totals()["failed"] == 0 and STATE["failed"] == []


@pytest.mark.parametrize("event_time", [False, True], ids=["processing-time", "event-time"])
def test_tumbling_duration_windows_ack_the_last_window_once_it_fired(local_topology: Any, event_time: bool) -> None:
    base = 1_700_000_000_000
    reset(count=30, timestamps={n: base + 100 * n for n in range(30)})

    class Windows(WindowedBolt):
        outputs = ["ns"]

        def initialize(self, stormconf: Any, context: Any) -> None:
            self.with_tumbling_window(WindowedBolt.Duration(1))
            if event_time:
                self.with_timestamp_field("ts").with_lag(0).with_watermark_interval(0.05)

        def process_window(self, window: Any) -> None:
            with STATE["lock"]:
                STATE["windows"].append([t.values.n for t in window.get()])
            self.emit([[t.values.n for t in window.get()]])

    class Topo(Topology):
        numbers = NumberSpout.spec()
        windows = Windows.spec(inputs=[numbers])
        sink = Sink.spec(inputs=[windows])

    local_topology(Topo, **{"topology.message.timeout.secs": 30})
    if event_time:
        # the watermark only passes what a newer timestamp follows: the newest tuple (29) stays held
        wait(lambda: len(STATE["acked"]) >= 20, timeout=15, what="the fired event-time windows' tuples acked")
        time.sleep(0.3)
        acked = set(STATE["acked"])
        fired = {n for w in STATE["windows"] for n in w}
        assert acked == fired and set(range(20)) <= acked and 29 not in acked
    else:
        wait(lambda: len(STATE["acked"]) >= 30, timeout=15, what="all 30 tuples acked by their windows")
        assert sorted(STATE["acked"]) == list(range(30))
    assert STATE["failed"] == []
