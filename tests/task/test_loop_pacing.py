"""A worker's executor loop sets the interpreter's switch interval by load (issue 24): 1 ms
while it waits for work at least ``BUSY_BELOW`` of the time, 5 ms while it waits less, unless
the worker pinned its threads to one core (then 1 ms throughout); and its
thread runs under the worker's guard, so that a step ending it (``SystemExit`` is no
Exception) is reported, never silent."""
from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

import pytest

from stormpy import Bolt, Spout, Topology
from stormpy.api.compile import compile_topology
from stormpy.task import bolt_executor, scheduler
from stormpy.task.runtime import WorkerRuntime
from stormpy.task.scheduler import ExecutorLoop
from stormpy.topology.plan import build_plan


@pytest.fixture
def restore_switch_interval() -> Any:
    before = sys.getswitchinterval()
    yield
    sys.setswitchinterval(before)


def test_the_switch_interval_follows_the_load(restore_switch_interval: Any) -> None:
    loop = ExecutorLoop([])
    loop.pace_switches = True
    sys.setswitchinterval(scheduler.IDLE_SWITCH_SECS)
    window = scheduler.PACE_SECS
    loop._pace(100.0)                                   # the first window starts
    loop._waited = window / 2                           # waited half of it: half the rate
    loop._pace(100.0 + window)
    assert sys.getswitchinterval() == pytest.approx(scheduler.IDLE_SWITCH_SECS)
    loop._waited = window * scheduler.BUSY_BELOW / 2   # hardly waited: the maximum rate
    loop._pace(100.0 + 2 * window)
    assert sys.getswitchinterval() == pytest.approx(scheduler.BUSY_SWITCH_SECS)
    loop._waited = window                               # waits again
    loop._pace(100.0 + 3 * window)
    assert sys.getswitchinterval() == pytest.approx(scheduler.IDLE_SWITCH_SECS)


class _Guard:
    """The part of a worker's ThreadGuard the loop uses: ``run`` reports what ends a thread."""

    def __init__(self) -> None:
        self.failed: list[tuple[str, BaseException, bool]] = []

    def run(self, name: str, target: Any, restart: bool = True) -> None:
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 - what the real guard does
            self.failed.append((name, exc, restart))


def test_a_loop_thread_ended_by_system_exit_is_reported_by_the_guard() -> None:
    loop = ExecutorLoop([])
    guard = _Guard()
    loop.guard = guard

    def body() -> None:
        raise SystemExit("user code called sys.exit()")

    thread = loop._new_thread(body, "executor-loop")
    assert isinstance(thread, threading.Thread) and thread.daemon
    thread.start()
    thread.join(5)
    assert [(name, type(exc), restart) for name, exc, restart in guard.failed] == [
        ("executor-loop", SystemExit, False)]


def test_a_replacement_loop_thread_that_fails_is_reported_by_the_guard() -> None:
    """The thread the watchdog starts after a stuck step (``_continue``) must not end with a log
    line only: the executors left on it would never be stepped again while the worker lives."""
    loop = ExecutorLoop([])
    guard = _Guard()
    loop.guard = guard

    def broken_run(generation: int) -> None:
        raise RuntimeError("framework bug in the loop")

    loop._run = broken_run   # type: ignore[method-assign]
    thread = loop._new_thread(loop._continue(1), "executor-loop")
    thread.start()
    thread.join(5)
    assert [(name, type(exc)) for name, exc, _restart in guard.failed] == [("executor-loop", RuntimeError)]


def test_a_worker_loop_moves_an_executor_after_its_second_blocked_step() -> None:
    class _Executor:
        name = "sleepy[3-3]"

    loop = ExecutorLoop([])
    loop.strikes_to_detach = 2
    moved: list[str] = []
    loop._detach = lambda executor, why: moved.append(why)  # type: ignore[method-assign]
    executor = _Executor()
    mark = (100.0, 1.0, 0.0, 1.0)
    slept = (100.2, 1.0, 0.0, 1.0)          # 200 ms with no CPU: sleeping
    loop._fd = 0
    original = scheduler.sched_times
    try:
        scheduler.sched_times = lambda fd: slept   # type: ignore[assignment]
        loop._check_blocked(executor, mark)        # type: ignore[arg-type]
        assert moved == []                         # one may be a hiccup
        slept = (105.0, 1.0, 0.0, 1.0)
        loop._check_blocked(executor, (104.8, 1.0, 0.0, 1.0))  # type: ignore[arg-type]
        assert len(moved) == 1 and "sleeping or blocked" in moved[0]
    finally:
        scheduler.sched_times = original           # type: ignore[assignment]


class _Sends:
    """A transport with a send thread's ``send_many`` (a worker's): the runtime hands rounds to it."""

    def send(self, dest: int, messages: list[Any]) -> None:
        pass

    def send_many(self, batches: list[Any]) -> None:
        pass


class _Words(Spout):
    outputs = ["word"]

    def next_tuple(self) -> None:
        pass


class _Sink(Bolt):
    outputs: list[str] = []

    def process(self, tup: Any) -> None:
        pass


class _Pair(Topology):
    words = _Words.spec()
    sink = _Sink.spec(inputs=[words])


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="needs Linux CPU affinity")
@pytest.mark.parametrize("pinned", [False, True])
def test_a_worker_pinned_to_one_core_keeps_1_ms_and_an_unpinned_one_paces(restore_switch_interval: Any,
                                                                           pinned: bool) -> None:
    plan = build_plan(compile_topology(_Pair), {"topology.acker.executors": 0}, "p-1", "p")
    cpu = min(os.sched_getaffinity(0)) if pinned else None
    runtime = WorkerRuntime(plan, plan.executors(), _Sends(), one_thread_by_default=True, cpu=cpu)
    runtime.start()
    try:
        assert runtime.loop is not None
        assert runtime.loop.pace_switches is not pinned
        if pinned:   # never paced (unpinned, the first window may count as busy: timing)
            assert sys.getswitchinterval() == pytest.approx(scheduler.IDLE_SWITCH_SECS)
            assert runtime.loop.thread is not None
            assert os.sched_getaffinity(runtime.loop.thread.native_id) == {cpu}
    finally:
        runtime.stop(drain_secs=0)


class _RecordingSends:
    """A worker's transport that records when the loop hands it a round (``send_many``)."""

    def __init__(self) -> None:
        self.rounds: list[list[Any]] = []

    def send(self, dest: int, messages: list[Any]) -> None:
        self.rounds.append([(dest, messages)])

    def send_many(self, batches: list[Any]) -> None:
        self.rounds.append(batches)


_sends_seen: list[int] = []
_sends = _RecordingSends()


class _BusySink(Bolt):
    """Spends 1 ms of CPU per tuple (not sleeping: that would move it off the loop) and notes
    how many hand-offs the transport had seen when each tuple came."""
    outputs: list[str] = []

    def process(self, tup: Any) -> None:
        _sends_seen.append(len(_sends.rounds))
        end = time.perf_counter() + 0.001
        while time.perf_counter() < end:
            pass


class _Busy(Topology):
    words = _Words.spec()
    sink = _BusySink.spec(inputs=[words])


def test_a_long_step_hands_its_acks_to_the_transport_before_it_ends(restore_switch_interval: Any,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A bolt working through a backlog hands off, at each due flush, what its round held (its
    acks for an acker on another worker), instead of keeping it until the round ends: the
    spouts waiting on those acks would sit at max pending while the step runs."""
    monkeypatch.setattr(bolt_executor, "_STEP_SECS", 5.0)   # one step takes the whole backlog
    _sends_seen.clear()
    sends = _sends
    sends.rounds.clear()
    plan = build_plan(compile_topology(_Busy), {"topology.acker.executors": 1, "topology.transfer.batch.size": 4},
                      "b-1", "b")
    acker = plan.acker_tasks[0]
    spout, sink = plan.components["words"].tasks[0], plan.components["sink"].tasks[0]
    here = [(s, e) for s, e in plan.executors() if not s <= acker <= e]   # the acker is elsewhere
    runtime = WorkerRuntime(plan, here, sends, one_thread_by_default=True)
    for i in range(60):   # 60 ms of work queued before the loop starts: one step takes it all
        runtime.receive(sink, [("default", spout, [i], (1000 + i, 7 + i))])
    runtime.start()
    try:
        deadline = time.monotonic() + 10
        while len(_sends_seen) < 60 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(_sends_seen) == 60
        # acks left while the step ran: later tuples saw hand-offs the first ones did not
        assert _sends_seen[0] == 0 and _sends_seen[-1] >= 5, _sends_seen
        acked = [m for batch in sends.rounds for dest, messages in batch if dest == acker for m in messages]
        assert acked and all(m[0] == "__ack_ack" for m in acked)
    finally:
        runtime.stop(drain_secs=0)
