"""Executors never die silently (issue 10, item 1): framework errors are reported as the
component's errors and the task restarts; the executor thread stays alive."""
from __future__ import annotations

import threading
from typing import Any

from stormpy import Bolt, Spout, Topology
from stormpy.streams import ACK_ACK

STATE: dict[str, Any] = {}


class CountingSpout(Spout):
    outputs = ["n"]

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.n = 0
        STATE["inits"] = STATE.get("inits", 0) + 1

    def next_tuple(self) -> None:
        self.n += 1
        self.emit([self.n], tup_id=self.n)

    def ack(self, tup_id: Any) -> None:
        with STATE["lock"]:
            STATE["acked"] = STATE.get("acked", 0) + 1


class Sink(Bolt):
    outputs: list[str] = []

    def process(self, tup: Any) -> None:
        pass


class SmallTopology(Topology):
    spout = CountingSpout.spec()
    sink = Sink.spec(inputs=[spout])


def test_malformed_acker_answer_does_not_kill_the_spout_executor(local_topology: Any, waiter: Any) -> None:
    STATE.clear()
    STATE["lock"] = threading.Lock()
    local = local_topology(SmallTopology, **{"topology.max.spout.pending": 100,
                                             "topology.task.restart.backoff.secs": 0.05})
    spout = next(e for e in local.runtime.executors.values() if e.component_id == "spout")
    waiter(lambda: STATE.get("acked", 0) >= 100, 30, "the spout's first acks")
    # Past the transport's door (an in-process sender): an int where the roots list belongs.
    local.runtime.receive(spout.start_task, [(ACK_ACK, 99, 5, None)])
    waiter(lambda: local.reporter.counts.get("spout", 0) >= 1, 20, "the framework error reported")
    assert "receive (framework)" in local.reporter.errors["spout"][-1][2]
    waiter(lambda: STATE["inits"] >= 2, 20, "the spout task re-created")
    before = STATE["acked"]
    waiter(lambda: STATE["acked"] >= before + 100, 30, "acks after the restart")
    assert spout.thread is not None and spout.thread.is_alive()


def test_a_framework_error_in_the_loop_restarts_the_loop(local_topology: Any, waiter: Any) -> None:
    STATE.clear()
    STATE["lock"] = threading.Lock()
    local = local_topology(SmallTopology, **{"topology.max.spout.pending": 100,
                                             "topology.task.restart.backoff.secs": 0.05})
    spout = next(e for e in local.runtime.executors.values() if e.component_id == "spout")
    waiter(lambda: STATE.get("acked", 0) >= 10, 30, "the spout's first acks")

    def broken() -> None:
        raise RuntimeError("framework bug")
    spout.call_soon(broken)   # control calls run in the loop itself, outside any task guard
    waiter(lambda: spout.loop_restarts >= 1, 20, "the loop restarted")
    waiter(lambda: local.reporter.counts.get("spout", 0) >= 1, 20, "the error reported")
    assert "executor loop" in local.reporter.errors["spout"][-1][2]
    before = STATE["acked"]
    waiter(lambda: STATE["acked"] >= before + 50, 30, "acks after the loop restart")
    assert spout.thread is not None and spout.thread.is_alive()


class EndlessSpout(Spout):
    outputs = ["n"]

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.n = 0

    def next_tuple(self) -> None:
        self.n += 1
        STATE["emitted"] = self.n
        self.emit([self.n])


class NeverStarts(Bolt):
    outputs: list[str] = []

    def initialize(self, stormconf: Any, context: Any) -> None:
        raise RuntimeError("this bolt never initializes")

    def process(self, tup: Any) -> None:
        raise AssertionError("never called")


class DownBoltTopology(Topology):
    spout = EndlessSpout.spec()
    down = NeverStarts.spec(inputs=[spout])


def test_messages_for_a_down_task_count_toward_backpressure_and_are_bounded(local_topology: Any,
                                                                             waiter: Any) -> None:
    """Issue 10 item 2: before, the down task's backlog grew without bound while spouts emitted."""
    STATE.clear()
    buffer = 500
    local = local_topology(DownBoltTopology, **{"topology.executor.receive.buffer.size": buffer,
                                                "topology.transfer.batch.size": 20,
                                                "topology.acker.executors": 0,
                                                "topology.task.restart.backoff.secs": 0.05})
    down = next(e for e in local.runtime.executors.values() if e.component_id == "down")
    waiter(lambda: down.overloaded, 30, "the down bolt's executor to report itself overloaded")
    emitted = []
    for _ in range(40):   # the spout gets many rounds to emit more: it must not
        emitted.append(STATE.get("emitted", 0))
        waiter(lambda: local.reporter.counts.get("down", 0) >= 1, 10, "the initialize error reported")
        threading.Event().wait(0.025)
    task = down.tasks[down.start_task]
    held = down.queued   # includes the backlog held for the down task
    # Bounded: what the down task holds plus what waits in its queue is about the buffer; the
    # spout stopped (one round of next_tuple calls and a batch per target past the watermark).
    assert task.backlog_held <= buffer + 64 + 20, task.backlog_held
    assert held <= buffer + 64 + 40, held
    assert emitted[-1] <= buffer + 64 + 40, f"spout kept emitting: {emitted[-1]}"
    assert local.runtime.is_overloaded()


class ReplayingSpout(Spout):
    """Endless ids; failed (timed-out) ones are replayed first, as a reliable source would."""

    outputs = ["n"]

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.n = 0
        self.replays: list[int] = []

    def next_tuple(self) -> None:
        if self.replays:
            n = self.replays.pop()
        else:
            self.n += 1
            n = self.n
        self.emit([n], tup_id=n)

    def ack(self, tup_id: Any) -> None:
        with STATE["lock"]:
            STATE["acked"] = STATE.get("acked", 0) + 1

    def fail(self, tup_id: Any) -> None:
        self.replays.append(tup_id)


class SlowBolt(Bolt):
    """50 ms per tuple: 20 tuples/s."""

    outputs: list[str] = []

    def process(self, tup: Any) -> None:
        threading.Event().wait(0.05)


class SlowTopology(Topology):
    spout = ReplayingSpout.spec()
    slow = SlowBolt.spec(inputs=[spout])


def test_unset_max_spout_pending_adapts_so_a_slow_bolt_keeps_acking(local_topology: Any, waiter: Any) -> None:
    """Issue 10 item 8: with no cap, every tuple waited in the queues past its timeout and was
    replayed; acks stopped for good. The adaptive cap keeps the queue workable: tuples keep
    being acked after the first timeouts (message timeout 4 s: 80 tuples' worth of work)."""
    STATE.clear()
    STATE["lock"] = threading.Lock()
    local = local_topology(SlowTopology, **{"topology.message.timeout.secs": 6,
                                            "topology.executor.receive.buffer.size": 100000})
    spout = next(e for e in local.runtime.executors.values() if e.component_id == "spout")
    assert spout.adaptive
    waiter(lambda: spout.pending_cap < 256, 30, "the pending cap to shrink")
    waiter(lambda: local.totals()["failed"] > 0 or spout.pending_cap < 100, 30, "the first timeouts or a small cap")
    start = STATE.get("acked", 0)
    waiter(lambda: STATE.get("acked", 0) >= start + 100, 60, "100 more acks after the queue was cut down")
    assert spout.flow["throttled_ms"] > 0
    assert spout.stats.metrics()["max_spout_pending"] == spout.pending_cap


def test_executor_loop_failures_count_toward_the_worker_guard(local_topology: Any, waiter: Any) -> None:
    """In a worker the executors run under its ThreadGuard (issue 26, item 7): a loop failure
    is reported there too and counted, so a loop that keeps failing ends the worker."""
    from stormpy.daemon_guard import ThreadGuard

    STATE.clear()
    STATE["lock"] = threading.Lock()
    local = local_topology(SmallTopology, **{"topology.max.spout.pending": 100,
                                             "topology.task.restart.backoff.secs": 0.05})
    reports: list[tuple[str, str]] = []
    fatal: list[str] = []
    local.runtime.thread_guard = ThreadGuard("test worker", report=lambda t, text: reports.append((t, text)),
                                             on_fatal=fatal.append, max_failures=2)
    spout = next(e for e in local.runtime.executors.values() if e.component_id == "spout")
    waiter(lambda: STATE.get("acked", 0) >= 10, 30, "the spout's first acks")

    def broken() -> None:
        raise RuntimeError("injected framework bug")
    spout.call_soon(broken)
    waiter(lambda: reports, 20, "the loop failure reported to the guard")
    assert reports[0][0] == f"executor-{spout.name}" and "injected framework bug" in reports[0][1]
    before = STATE["acked"]
    waiter(lambda: STATE["acked"] >= before + 50, 30, "acks after the loop restart (recovered)")
    assert fatal == []
    spout.call_soon(broken)   # a second one within the window: the budget of 2 is spent
    waiter(lambda: fatal, 20, "the guard giving up on the worker")
    waiter(lambda: spout.thread is not None and not spout.thread.is_alive(), 20, "the executor thread ending")
