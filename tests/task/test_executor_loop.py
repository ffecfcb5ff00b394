"""One scheduler thread for every executor of ``stormpy local`` (``topology.executor.threads``):
the same results as a thread per executor, and user code that blocks moves to its own thread."""
from __future__ import annotations

import functools
import os
import threading
import time
from typing import Any

import pytest

from stormpy import Bolt, Grouping, Spout, Topology
from stormpy.config import ConfigError
from stormpy.local.runner import LocalTopology
from stormpy.task.scheduler import blocked_secs, open_sched_times, sched_times
from stormpy.trident import Count, MemoryMapState, PartitionedSpout, TridentTopology

STATE: dict[str, Any] = {}


class CountingSpout(Spout):
    """Acked ids 0..; ``STATE['block']`` (an Event) makes one ``next_tuple`` wait for it."""

    outputs = ["n"]

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.n = 0

    def next_tuple(self) -> None:
        block = STATE.get("block")
        if block is not None and self.n == 100:
            STATE["blocked"] = True
            block.wait(20)
        if self.n < 5000:
            self.emit([self.n], tup_id=self.n)
            self.n += 1

    def ack(self, tup_id: Any) -> None:
        with STATE["lock"]:
            STATE["acked"] += 1


class FastSpout(Spout):
    outputs = ["n"]

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.n = 0

    def next_tuple(self) -> None:
        self.n += 1
        self.emit([self.n], tup_id=self.n)

    def ack(self, tup_id: Any) -> None:
        with STATE["lock"]:
            STATE["fast_acked"] += 1


class SumBolt(Bolt):
    outputs: list[str] = []

    def process(self, tup: Any) -> None:
        with STATE["lock"]:
            STATE["sum"] += tup.values[0]


class SleepyBolt(Bolt):
    outputs: list[str] = []

    def process(self, tup: Any) -> None:
        time.sleep(0.1)


class SumTopology(Topology):
    numbers = CountingSpout.spec()
    total = SumBolt.spec(inputs={numbers: Grouping.SHUFFLE}, par=2)


class SleepyTopology(Topology):
    """A fast path and a bolt that sleeps 100 ms a tuple, in one process."""

    slow_source = FastSpout.spec()
    sleepy = SleepyBolt.spec(inputs=[slow_source])
    numbers = CountingSpout.spec()
    total = SumBolt.spec(inputs=[numbers])


def reset(**values: Any) -> None:
    STATE.clear()
    STATE.update(acked=0, fast_acked=0, sum=0, lock=threading.Lock(), **values)


@pytest.mark.parametrize("threads", ["one", "per-executor"])
def test_both_modes_count_every_tuple_once(local_topology: Any, waiter: Any, threads: str) -> None:
    reset()
    local = local_topology(SumTopology, **{"topology.executor.threads": threads})
    waiter(lambda: STATE["acked"] == 5000, 60, "5000 acks")
    assert STATE["sum"] == sum(range(5000))
    executor_threads = {ex.thread for ex in local.runtime.executors.values()}
    if threads == "one":
        assert local.runtime.loop is not None and len(executor_threads) == 1
    else:
        assert local.runtime.loop is None and len(executor_threads) == len(local.runtime.executors)


def test_stormpy_local_runs_one_loop_by_default(local_topology: Any, waiter: Any) -> None:
    reset()
    local = local_topology(SumTopology)
    assert local.runtime.loop is not None
    waiter(lambda: STATE["acked"] == 5000, 60, "5000 acks")


def test_a_bolt_that_sleeps_moves_to_its_own_thread(local_topology: Any, waiter: Any) -> None:
    reset()
    local = local_topology(SleepyTopology, **{"topology.max.spout.pending": 50})
    loop = local.runtime.loop
    waiter(lambda: any(name.startswith("sleepy") for name in loop.detached), 30, "the sleepy bolt to move")
    sleepy = next(ex for ex in local.runtime.executors.values() if ex.component_id == "sleepy")
    assert sleepy.thread is not loop.thread
    # The others kept their loop and do not wait 100 ms per sleepy tuple any more.
    waiter(lambda: STATE["acked"] == 5000, 30, "the fast path's 5000 acks")
    assert STATE["sum"] == sum(range(5000))


def test_a_spout_stuck_in_next_tuple_does_not_starve_the_others(local_topology: Any, waiter: Any) -> None:
    block = threading.Event()
    reset(block=block)
    try:
        local = local_topology(SleepyTopology, **{"topology.max.spout.pending": 50})
        waiter(lambda: STATE.get("blocked"), 30, "the spout to block")
        loop = local.runtime.loop
        waiter(lambda: any(name.startswith("numbers") for name in loop.detached), 30, "the watchdog to act")
        before = STATE["fast_acked"]
        waiter(lambda: STATE["fast_acked"] > before + 5, 30, "the other spout's acks while one is stuck")
    finally:
        block.set()
    waiter(lambda: STATE["acked"] == 5000, 60, "the released spout to finish")


def test_a_bad_value_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="topology.executor.threads must be one of auto, one, per-executor"):
        LocalTopology(SumTopology, "bad", user_overrides={"topology.executor.threads": "two"})


def _blocked_while(wait: Any) -> float:
    """``blocked_secs`` of the calling thread around ``wait()``."""
    fd = open_sched_times()
    if fd < 0:
        pytest.skip("no /proc/self/task/<tid>/schedstat on this system")
    try:
        mark = sched_times(fd)
        wait()
        now = sched_times(fd)
    finally:
        os.close(fd)
    assert mark is not None and now is not None
    return blocked_secs(mark, now)


def test_a_sleeping_step_counts_as_blocked() -> None:
    assert _blocked_while(lambda: time.sleep(0.2)) > 0.1


def _spin(secs: float) -> None:
    end = time.thread_time() + secs
    while time.thread_time() < end:
        pass


def test_waiting_for_the_gil_while_another_thread_of_the_process_computes_is_not_blocked() -> None:
    """In a worker the loop thread waits for the GIL while the transfer threads run: that
    wait is not user code blocking, so a busy executor must not be moved off the loop."""
    other = threading.Thread(target=_spin, args=(0.3,))
    other.start()
    try:
        blocked = _blocked_while(lambda: _spin(0.3))   # both compute: they take turns at the GIL
    finally:
        other.join(30)
    assert blocked < 0.1


class PassBolt(Bolt):
    outputs = ["n"]

    def process(self, tup: Any) -> None:
        self.emit([tup.values[0]])


class Chain(Topology):
    """Named so that the runtime's order (by name) is not the order tuples flow."""

    zsource = CountingSpout.spec()
    mid = PassBolt.spec(inputs={zsource: Grouping.SHUFFLE})
    alpha = SumBolt.spec(inputs={mid: Grouping.SHUFFLE}, par=2)


def test_the_loop_steps_executors_in_the_order_tuples_flow() -> None:
    """Spouts first, each bolt after the components it subscribes to, the acker last: a round
    carries tuples through every stage (issue 24)."""
    local = LocalTopology(Chain, "order", user_overrides={"topology.acker.executors": 1})
    assert [ex.component_id for ex in local.runtime._all][0] == "__acker"   # by name
    assert local.runtime.loop is not None
    order = [ex.component_id for ex in local.runtime.loop.executors]
    assert order == ["zsource", "mid", "alpha", "alpha", "__acker"], order


class EveryCall(Spout):
    """One unanchored tuple per call (no pending cap holds it back), the calls counted."""

    outputs = ["n"]

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.calls = 0

    def next_tuple(self) -> None:
        self.calls += 1
        self.emit([self.calls])


def _fan_out(par: int) -> type[Topology]:
    class FanOut(Topology):
        source = EveryCall.spec()
        mid = PassBolt.spec(inputs={source: Grouping.SHUFFLE}, par=par)
        sink = SumBolt.spec(inputs={mid: Grouping.fields("n")}, par=par)

    return FanOut


@pytest.mark.parametrize(("topology", "calls"), [(_fan_out(1), 64), (_fan_out(2), 128), (Chain, 128),
                                                 (_fan_out(8), 256)])
def test_a_spouts_share_of_a_round_grows_with_the_parallelism_of_the_loops_bolts(topology: Any, calls: int) -> None:
    """At parallelism 2 a fixed share of 64 ``next_tuple`` calls reached each bolt executor as
    half the batch parallelism 1 gave it (issue 24): the share is 64 times the mean parallelism
    of the loop's bolts (the acker not counted; Chain's 1 and 2 round to 2), at most 4 times."""
    local = LocalTopology(topology, "share", user_overrides={"topology.acker.executors": 1})
    spout = next(ex for ex in local.runtime.executors.values() if ex.kind == "spout")
    assert local.runtime.loop is not None
    assert spout.next_tuple_calls == calls


def test_a_step_calls_next_tuple_up_to_the_spouts_share_and_a_spout_leaving_the_loop_gets_64_again() -> None:
    from stormpy.task.scheduler import size_spout_shares
    from stormpy.task.spout_executor import SpoutTask

    local = LocalTopology(_fan_out(2), "share", user_overrides={"topology.acker.executors": 0})
    spout = next(ex for ex in local.runtime.executors.values() if ex.kind == "spout")
    task = SpoutTask(spout, spout.start_task)
    spout.tasks[task.task_id] = task
    spout._start_task(task)
    spout.active = True
    spout.step()
    assert task.component.calls == 128
    others = [ex for ex in local.runtime.loop.executors if ex is not spout]
    assert size_spout_shares(others, alone=[spout]) == 2
    assert spout.next_tuple_calls == 64
    spout.step()
    assert task.component.calls == 128 + 64


class TenPerCall(Spout):
    """Ten unanchored tuples per call: a polled batch, or a rate limiter catching up."""

    outputs = ["n"]

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.calls = 0
        self.emitted = 0

    def next_tuple(self) -> None:
        self.calls += 1
        for _ in range(10):
            self.emitted += 1
            self.emit([self.emitted])


def test_a_step_stops_once_the_calls_emitted_the_share_and_never_cuts_a_call_short() -> None:
    """The share bounds what a step emits, not only its calls: 64 calls of 10 tuples put 640
    new trees into one round, and every hop of every tree waits for that round (p99 complete
    latency of the cluster word count at 60,000 sentences/s, 7 runs each: 15-83 ms against 10-27 ms with the bound,
    issue 24). Seven calls reach the share of 64; the seventh is finished."""
    class TenTopology(Topology):
        source = TenPerCall.spec()
        sink = SumBolt.spec(inputs={source: Grouping.SHUFFLE})

    from stormpy.task.spout_executor import SpoutTask

    local = LocalTopology(TenTopology, "bound", user_overrides={"topology.acker.executors": 0})
    spout = next(ex for ex in local.runtime.executors.values() if ex.kind == "spout")
    task = SpoutTask(spout, spout.start_task)
    spout.tasks[task.task_id] = task
    spout._start_task(task)
    spout.active = True
    assert spout.next_tuple_calls == 64
    spout.step()
    assert (task.component.calls, task.component.emitted) == (7, 70)
    spout.step()
    assert (task.component.calls, task.component.emitted) == (14, 140)


class Numbers(PartitionedSpout):
    """Two partitions, 10 numbers a batch each, 30 batches: 600 numbers, 0..299 twice."""

    outputs = ["n"]

    def partitions(self) -> list:
        return [0, 1]

    def emit_new_batch(self, txid: int, collector: Any, partition: Any, last_meta: Any) -> Any:
        start = last_meta["end"] if last_meta else 0
        meta = {"start": start, "end": min(start + 10, 300)}
        self.emit_batch(txid, collector, partition, meta)
        return meta

    def emit_batch(self, txid: int, collector: Any, partition: Any, meta: Any) -> None:
        for n in range(meta["start"], meta["end"]):
            collector.emit([n])


@pytest.mark.parametrize("apart", [True, False], ids=["cluster-worker", "local"])
def test_trident_coordinators_run_beside_a_cluster_workers_loop(local_topology: Any, waiter: Any, monkeypatch: Any,
                                                               apart: bool) -> None:
    """A cluster worker (``pacers_apart``) leaves the ``$`` components to threads of their own:
    they pace every batch, and in the loop each of their steps would wait behind a whole batch
    of the user's components (benchmarks/trident_wordcount.py --cluster: about 1.5x the
    committed words/s). ``stormpy local`` keeps them in its loop (one busy core: apart they
    only add GIL hand-offs). Either way every number is counted exactly once."""
    import stormpy.local.runner as runner
    monkeypatch.setattr(runner, "WorkerRuntime", functools.partial(runner.WorkerRuntime, pacers_apart=apart))
    state = MemoryMapState.transactional(f"loop-{apart}")

    class Counts(TridentTopology):
        def build(self, conf: Any) -> None:
            (self.new_stream("numbers", Numbers(), par=2)
                 .group_by(["n"])
                 .persistent_aggregate(state, Count(), ["count"]).parallelism_hint(2))

    local = local_topology(Counts, **{"topology.max.spout.pending": 3,
                                      "topology.trident.batch.emit.interval.millis": 0})

    def counts() -> dict:
        return dict(state.open_map().items())
    waiter(lambda: sum(counts().values()) == 600, 60, "600 numbers counted")
    assert sorted(counts().values()) == [2] * 300, "each number once from each partition, exactly"
    loop = local.runtime.loop
    assert loop is not None
    pacers = {ex.component_id: ex for ex in local.runtime.executors.values() if ex.component_id.startswith("$")}
    assert set(pacers) == {"$mastercoord-bg0", "$spoutcoord-numbers"}
    looped = {ex.component_id for ex in loop.executors}
    moved = set(loop.detached)   # a step a loaded machine held up >50 ms off the CPU moves that executor
    others = [ex for ex in local.runtime.executors.values() if ex.component_id not in pacers]
    assert all(ex.component_id in looped or ex.name in moved for ex in others)
    if apart:
        assert not looped & set(pacers) and not moved & {ex.name for ex in pacers.values()}
        assert all(ex.thread is not loop.thread and ex.thread.is_alive() for ex in pacers.values())
    else:
        assert all(ex.thread is loop.thread or ex.name in moved for ex in pacers.values())
