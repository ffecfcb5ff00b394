"""Pure tests of the window managers, driven by a fake clock (no threads, milliseconds)."""
from __future__ import annotations

from typing import Any

import pytest

from stormpy.windowing.windows import (Count, Duration, Window, WindowManager, WindowSpec, spec_from_conf,
                                       spec_to_conf, validate_timeout)


class FakeClock:
    def __init__(self, now_ms: int = 1_000_000) -> None:
        self.now = now_ms

    def __call__(self) -> float:
        return self.now


class Recorder:
    """A manager with a fake clock that records windows and expiries."""

    def __init__(self, spec: WindowSpec, now_ms: int = 1_000_000) -> None:
        self.clock = FakeClock(now_ms)
        self.windows: list[Window] = []
        self.expired: list[Any] = []
        self.manager = WindowManager(spec, self.windows.append, self.expired.extend, self.clock)

    def at(self, ms: int, *items: Any) -> None:
        self.clock.now = ms
        for item in items:
            self.manager.add(item)
        self.manager.tick()


def test_count_tumbling() -> None:
    r = Recorder(WindowSpec(Count(3), Count(3)))
    r.at(1, *range(7))
    assert [w.get() for w in r.windows] == [[0, 1, 2], [3, 4, 5]]
    assert r.windows[1].get_new() == [3, 4, 5]
    assert r.windows[1].get_expired() == [0, 1, 2]
    # a tumbling window's items expire (are acked) as soon as it was processed, the last
    # window's too: a finite stream leaves nothing behind but an incomplete window
    assert r.expired == [0, 1, 2, 3, 4, 5]
    assert r.manager.held() == [6]


def test_count_sliding_items_stay_until_their_last_window() -> None:
    r = Recorder(WindowSpec(Count(4), Count(2)))
    r.at(1, *range(8))
    assert [w.get() for w in r.windows] == [[0, 1], [0, 1, 2, 3], [2, 3, 4, 5], [4, 5, 6, 7]]
    assert [w.get_new() for w in r.windows] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert [w.get_expired() for w in r.windows] == [[], [], [0, 1], [2, 3]]
    assert r.expired == [0, 1, 2, 3]


def test_time_tumbling_processing_time() -> None:
    r = Recorder(WindowSpec(Duration(10), Duration(10)), now_ms=0)
    r.at(1000, "a")
    r.at(9000, "b")
    r.at(9998)
    assert r.windows == []
    r.at(9_999)
    assert [w.get() for w in r.windows] == [["a", "b"]]
    assert (r.windows[0].start_timestamp, r.windows[0].end_timestamp) == (-1, 9_999)
    assert r.expired == ["a", "b"] and r.manager.held() == []   # expired right after processing
    r.at(12_000, "c")
    r.at(20_500)
    assert [w.get() for w in r.windows] == [["a", "b"], ["c"]]
    assert r.windows[1].get_expired() == ["a", "b"]
    assert (r.windows[1].start_timestamp, r.windows[1].end_timestamp) == (9_999, 19_999)
    assert r.expired == ["a", "b", "c"]


def test_time_sliding_processing_time_and_empty_windows_skipped() -> None:
    r = Recorder(WindowSpec(Duration(6), Duration(2)), now_ms=0)
    r.at(1000, "a")
    r.at(3000, "b")
    r.at(6000)
    # the processing-time grid starts 1 ms before the manager (see WindowManager.__init__)
    assert [(w.end_timestamp, w.get()) for w in r.windows] == [(1999, ["a"]), (3999, ["a", "b"]), (5999, ["a", "b"])]
    r.at(30_000)  # a tick long after: windows at 8000 (b only) fire, empty ones are skipped
    assert [(w.end_timestamp, w.get()) for w in r.windows][3:] == [(7999, ["b"])]
    assert r.expired == ["a", "b"]
    assert r.manager.held() == []


def test_an_item_added_in_the_first_millisecond_is_in_the_first_window() -> None:
    r = Recorder(WindowSpec(Duration(1), Duration(1)), now_ms=5000)
    r.at(5000, "first")
    r.at(6000)
    assert [w.get() for w in r.windows] == [["first"]]


def test_count_length_time_slide() -> None:
    r = Recorder(WindowSpec(Count(2), Duration(5)), now_ms=0)
    r.at(1000, 1, 2, 3)
    r.at(4999)
    assert [w.get() for w in r.windows] == [[2, 3]]
    assert r.expired == [1]


def event_spec(**kw: Any) -> WindowSpec:
    base = dict(length=Duration(10), sliding=Duration(10), timestamp_field="ts", lag_ms=0,
                watermark_interval_ms=1000)
    base.update(kw)
    return WindowSpec(**base)


def test_event_time_windows_fire_on_the_watermark_aligned_to_the_slide() -> None:
    r = Recorder(event_spec(lag_ms=2000), now_ms=0)
    m = r.manager
    for ts in (1000, 4000, 12_000, 3000):   # out of order within the lag
        assert m.add(ts, ts_ms=ts)
    r.at(1000)                               # watermark = 12000 - 2000 = 10000
    assert m.watermark == 10_000
    assert [w.get() for w in r.windows] == [[1000, 3000, 4000]]
    assert (r.windows[0].start_timestamp, r.windows[0].end_timestamp) == (0, 10_000)
    # tumbling: expired as soon as their window was processed; 12000 waits above the watermark
    assert m.held() == [12_000] and r.expired == [1000, 3000, 4000]
    m.add(25_000, ts_ms=25_000)
    r.at(2000)                               # watermark 23000: window (10000, 20000] fires
    assert [w.get() for w in r.windows][1:] == [[12_000]]
    assert r.windows[1].get_expired() == [1000, 3000, 4000]
    assert r.expired == [1000, 3000, 4000, 12_000]


def test_an_item_on_the_grid_belongs_to_the_window_ending_there() -> None:
    r = Recorder(event_spec(), now_ms=0)
    for ts in (10_000, 15_000, 30_000):
        r.manager.add(ts, ts_ms=ts)
    r.at(1000)
    assert [(w.start_timestamp, w.end_timestamp, w.get()) for w in r.windows] == [
        (0, 10_000, [10_000]), (10_000, 20_000, [15_000]), (20_000, 30_000, [30_000])]


def test_late_tuples_are_refused_and_the_watermark_uses_the_slowest_stream() -> None:
    r = Recorder(event_spec(), now_ms=0)
    m = r.manager
    m.add("a", ts_ms=50_000, stream="s1")
    m.add("b", ts_ms=20_000, stream="s2")
    r.at(1000)
    assert m.watermark == 20_000             # min over streams of their newest timestamp
    assert m.add("late", ts_ms=19_999, stream="s1") is False
    assert m.add("on time", ts_ms=20_000, stream="s1") is True
    assert "late" not in m.held()


def test_lag_delays_the_watermark_and_the_interval_paces_it() -> None:
    r = Recorder(event_spec(lag_ms=5000, watermark_interval_ms=3000), now_ms=0)
    m = r.manager
    m.add("x", ts_ms=100_000)
    r.at(2000)
    assert m.watermark is None               # not due yet
    r.at(3000)
    assert m.watermark == 95_000
    assert m.add("within lag", ts_ms=96_000) is True
    assert m.add("too late", ts_ms=94_000) is False


def test_event_time_count_windows_follow_timestamp_order() -> None:
    r = Recorder(event_spec(length=Count(2), sliding=Count(2)), now_ms=0)
    m = r.manager
    for ts in (30, 10, 20, 40, 50):
        m.add(ts, ts_ms=ts)
    r.at(1000)                               # watermark 50: all five released in ts order
    assert [w.get() for w in r.windows] == [[10, 20], [30, 40]]
    assert r.expired == [10, 20, 30, 40] and m.held() == [50]


def test_spec_round_trips_through_component_config_and_timeout_check() -> None:
    spec = WindowSpec(Duration(30), Duration(5), timestamp_field="ts", lag_ms=1000, watermark_interval_ms=500,
                      late_stream="late")
    assert spec_from_conf(spec_to_conf(spec)) == spec
    assert spec_from_conf({}) is None
    assert validate_timeout(spec, 60) is None
    message = validate_timeout(spec, 30)
    assert message is not None and "topology.message.timeout.secs (30s)" in message
    assert validate_timeout(WindowSpec(Count(100), Count(10)), 30, max_spout_pending=50) is not None
    with pytest.raises(ValueError):
        Count(0)
    with pytest.raises(ValueError):
        Duration(-1)
