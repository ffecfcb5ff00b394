"""``report_error(text, then=...)``: the callback runs on the task's thread, for the instance that
asked, guarded like the component's own code (the Kafka and Redis Streams spouts settle a skipped
record in it; tests/kafka and tests/redis_streams show that end to end)."""
from __future__ import annotations

import threading
import time
from typing import Any

from stormpy import Bolt, Spout, Topology
from stormpy.local.runner import LocalTopology
from stormpy.testing import wait_until
from stormpy.testing.reporters import HeldReporter

EVENTS: list[str] = []
INSTANCES: list["Skipper"] = []


class Skipper(Spout):
    """Instance 1 reports with a ``then``, crashes and reports again from ``close()``; instance 2
    reports with a ``then`` that raises."""

    outputs = ["n"]

    def initialize(self, stormconf: Any, context: Any) -> None:
        INSTANCES.append(self)
        self.number = len(INSTANCES)
        self.calls = 0
        self.thread = ""

    def next_tuple(self) -> None:
        self.calls += 1
        if self.calls != 1 or self.number > 2:
            return
        if self.number == 1:
            self._stormpy_collector.report_error("first: skipped", then=self.settled)
            raise RuntimeError("instance 1 crashes before its report is kept")
        self.thread = threading.current_thread().name
        self._stormpy_collector.report_error("second: skipped", then=self.settle_fails)

    def close(self) -> None:
        if self.number == 1:   # closed after its crash, the task down: a then asked for now is dropped too
            self._stormpy_collector.report_error("closing", then=lambda: EVENTS.append("then from close()"))

    def settled(self) -> None:
        EVENTS.append(f"settled by instance {self.number}")

    def settle_fails(self) -> None:
        EVENTS.append(f"settling on {threading.current_thread().name}")
        raise ConnectionError("the broker went away while settling")


class Quiet(Bolt):
    def process(self, tup: Any) -> None:
        pass


class Skips(Topology):
    skipper = Skipper.spec()
    quiet = Quiet.spec(inputs=[skipper])


def test_then_runs_for_its_own_instance_and_a_raise_restarts_only_the_task() -> None:
    EVENTS.clear()
    INSTANCES.clear()
    reporter = HeldReporter()
    # the crashed task stays down 3 s: instance 1's thens are released while it is down
    local = LocalTopology(Skips, "report-then", user_overrides={"topology.task.restart.backoff.secs": 3})
    local.reporter = local.runtime.reporter = reporter
    local.start()
    try:
        wait_until(lambda: len(reporter.held) == 2, 30, "instance 1 reported, crashed and reported from close()")
        assert len(INSTANCES) == 1 and reporter.release() == 2
        time.sleep(0.5)   # the loop runs both (call_soon) at once: neither may touch the crashed instance
        assert EVENTS == [], EVENTS
        wait_until(lambda: len(INSTANCES) == 2 and INSTANCES[1].thread and len(reporter.held) == 1, 30,
                   "instance 2 reported")
        assert reporter.release() == 1
        wait_until(lambda: len(INSTANCES) == 3, 30, "the raising then crashed instance 2: a third instance")
        (executor,) = [e for e in local.runtime.executors.values() if e.component_id == "skipper"]
        (task,) = executor.tasks.values()
        assert task.restarts == 2
    finally:
        local.stop(drain_secs=0)
    # instance 1's thens were dropped (it crashed; close() ran with the task down); instance 2's ran on its executor's thread
    assert EVENTS == [f"settling on {INSTANCES[1].thread}"]
    texts = [text for _t, _task, text in reporter.errors["skipper"]]
    assert any(t.startswith("report_error then:") and "the broker went away" in t for t in texts), texts
