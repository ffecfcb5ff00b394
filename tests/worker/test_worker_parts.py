"""Pure parts of the worker: which executors are ours, task routes, heartbeats, error reporting."""
from __future__ import annotations

import threading
import time

from stormpy.testing import wait_until
from stormpy.thrift import storm
from stormpy.worker.heartbeat import ErrorReporter, Heart, cluster_heartbeat, local_heartbeat
from stormpy.worker.worker import my_executors, task_routes


def assignment() -> storm.Assignment:
    ei = storm.ExecutorInfo
    return storm.Assignment(
        master_code_dir="/x", node_host={"sup-a": "host-a", "sup-b": "host-b"},
        executor_node_port={ei(task_start=1, task_end=2): storm.NodeInfo(node="sup-a", port={6700}),
                            ei(task_start=3, task_end=3): storm.NodeInfo(node="sup-b", port={6700}),
                            ei(task_start=4, task_end=4): storm.NodeInfo(node="sup-a", port={6701})})


def test_my_executors_and_routes():
    a = assignment()
    assert my_executors(a, "sup-a", 6700) == [(1, 2)]
    assert my_executors(a, "sup-a", 6701) == [(4, 4)]
    assert my_executors(a, "sup-c", 6700) == []
    assert task_routes(a) == {1: ("host-a", 6700), 2: ("host-a", 6700), 3: ("host-b", 6700),
                              4: ("host-a", 6701)}


def test_heartbeat_structs():
    hb = local_heartbeat("t", [(3, 4), (1, 1)], 6700)
    assert hb.topology_id == "t" and hb.port == 6700 and hb.pid > 0
    assert [(e.task_start, e.task_end) for e in hb.executors] == [(1, 1), (3, 4)]
    stats = storm.ExecutorStats(emitted={}, transferred={}, specific=storm.ExecutorSpecificStats(
        spout=storm.SpoutStats(acked={}, failed={}, complete_ms_avg={})))
    beat = cluster_heartbeat("t", {(1, 1): stats, storm.ExecutorInfo(task_start=2, task_end=2): stats}, 0.0)
    assert set(beat.executor_stats) == {storm.ExecutorInfo(task_start=1, task_end=1),
                                        storm.ExecutorInfo(task_start=2, task_end=2)}


def test_error_reporter_writes_in_background_and_rate_limits():
    written: list[tuple[str, object]] = []
    reporter = ErrorReporter(lambda c, info: written.append((c, info)), "h", 6700,
                             per_component_per_min=3).start()
    try:
        for i in range(10):
            reporter.report_error("split", 4, f"boom {i}")
        reporter.report_error("count", 5, "other")
        wait_until(lambda: len(written) == 4, 10, "3 split errors and 1 count error written")
        assert reporter.dropped == 7
        assert written[0][1].error == "boom 0" and written[0][1].port == 6700
    finally:
        reporter.stop()


def test_error_reporter_runs_then_after_the_write_or_when_it_drops_the_report():
    """A spout settles a skipped record in ``then``: never before ZooKeeper has its error."""
    gate, written, events = threading.Event(), [], []

    def write(component: str, info: object) -> None:
        gate.wait(10)
        written.append(component)
        if component == "down":
            raise ConnectionError("ZooKeeper away")

    reporter = ErrorReporter(write, "h", 6700, per_component_per_min=1).start()
    try:
        reporter.report_error("spout", 4, "bad record", then=lambda: events.append(("kept", list(written))))
        reporter.report_error("spout", 4, "over the limit", then=lambda: events.append(("dropped", list(written))))
        assert events == [("dropped", [])], "a dropped report's then runs at once"
        time.sleep(0.2)
        assert len(events) == 1, "then waited for the write"
        reporter.report_error("down", 5, "lost", then=lambda: events.append(("failed", list(written))))
        gate.set()
        wait_until(lambda: len(events) == 3, 10, "both thens ran")
        assert events[1:] == [("kept", ["spout"]), ("failed", ["spout", "down"])]
    finally:
        reporter.stop()


def test_heart_survives_failing_beats():
    calls = []
    done = threading.Event()

    def beat():
        calls.append(1)
        if len(calls) < 3:
            raise OSError("disk full")
        done.set()

    heart = Heart("test-heart", 0.05, beat).start()
    try:
        assert done.wait(10), "the heart kept beating after failures"
    finally:
        heart.stop()
