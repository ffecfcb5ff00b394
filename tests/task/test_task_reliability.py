"""Acking end to end with real executor threads: tuple trees, fail, timeout, pending, replay."""
from __future__ import annotations

import random
import threading
import time
from collections import Counter
from typing import Any

from stormpy import Bolt, Grouping, Spout, Topology
from stormpy.testing import complete_topology

# Components run on executor threads; tests read what they record here.
STATE: dict[str, Any] = {}


def reset(**values: Any) -> None:
    STATE.clear()
    STATE.update(acked=[], failed=[], emitted=[], lock=threading.Lock(), **values)


class ListSpout(Spout):
    """Emits ids 0..STATE['count']-1 once each (replays failures when STATE['replay'])."""

    outputs = ["n"]

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.next_id = 0
        self.replays: list[int] = []

    def next_tuple(self) -> None:
        if self.replays:
            n = self.replays.pop()
        elif self.next_id < STATE["count"]:
            n = self.next_id
            self.next_id += 1
        else:
            return
        STATE["emitted"].append(n)
        self.emit([n], tup_id=n)

    def ack(self, tup_id: Any) -> None:
        STATE["acked"].append(tup_id)

    def fail(self, tup_id: Any) -> None:
        STATE["failed"].append(tup_id)
        if STATE.get("replay"):
            self.replays.append(tup_id)


# ---------------------------------------------------------------- the seed's tree example

class Bolt1(Bolt):
    outputs = ["n"]

    def process(self, tup: Any) -> None:
        self.emit([tup.values.n])


class HoldingLeaf(Bolt):
    """Holds its tuples until the test sets STATE['release'][component]; acks from its timer."""

    outputs: list[str] = []
    auto_ack = False
    timer_interval_secs = 0.02

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.name = context.component_id
        self.held: list[Any] = []

    def process(self, tup: Any) -> None:
        self.held.append(tup)
        STATE["holding"][self.name] = len(self.held)

    def on_timer(self) -> None:
        if STATE["release"][self.name].is_set() and self.held:
            for tup in self.held:
                self.ack(tup)
            self.held.clear()
            STATE["released"][self.name] = True


class TreeTopology(Topology):
    spout = ListSpout.spec()
    bolt1 = Bolt1.spec(inputs=[spout])
    bolt11 = HoldingLeaf.spec(inputs=[bolt1])
    bolt12 = HoldingLeaf.spec(inputs=[bolt1])


def test_seed_tree_completes_only_when_the_last_leaf_acks(local_topology: Any, waiter: Any) -> None:
    reset(count=1, holding={}, released={},
          release={"bolt11": threading.Event(), "bolt12": threading.Event()})
    local_topology(TreeTopology, **{"topology.acker.executors": 2})
    waiter(lambda: len(STATE["holding"]) == 2, 20, "both leaves to hold the tuple")
    time.sleep(0.2)
    assert STATE["acked"] == [], "acked before any leaf acked"
    STATE["release"]["bolt11"].set()
    waiter(lambda: STATE["released"].get("bolt11"), 20, "bolt11 to ack")
    time.sleep(0.3)
    assert STATE["acked"] == [], "acked although bolt12 still holds its tuple"
    STATE["release"]["bolt12"].set()
    waiter(lambda: STATE["acked"] == [0], 20, "the spout's ack after the last leaf acked")
    assert STATE["failed"] == []


# ------------------------------------------- the fast emit's edges reach every ack path

class EmitThenHold(Bolt):
    """Emits from its tuple (the fast emit keeps the edges in ``BoltTask.hand``); acks odd
    ones in ``process`` with ``ack_many`` together with the one before, holds even ones for
    the next call or the timer: each way the edges must be in the ack value."""

    outputs = ["n"]
    auto_ack = False
    timer_interval_secs = 0.05

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.held: list[Any] = []

    def process(self, tup: Any) -> None:
        self.emit([tup.values.n])
        self.emit([tup.values.n + 1000])
        if tup.values.n % 2:
            self.ack_many([*self.held, tup])
            self.held = []
        else:
            self.held.append(tup)

    def on_timer(self) -> None:
        for tup in self.held:
            self.ack(tup)
        self.held = []


class EmitAckEmit(Bolt):
    """Acks its tuple inside ``process`` after emitting from it (``ack`` folds the edges)."""

    outputs = ["n"]
    auto_ack = False

    def process(self, tup: Any) -> None:
        self.emit([tup.values.n])
        self.ack(tup)


class Leaf(Bolt):
    """Acks, except tuples of 2000 and up (``EmitAnchoredToPrevious``'s), which it fails."""

    outputs: list[str] = []

    def process(self, tup: Any) -> None:
        if 2000 <= tup.values.n < 3000:
            self.fail(tup)


class HandTopology(Topology):
    spout = ListSpout.spec()
    hold = EmitThenHold.spec(inputs=[spout])
    ack_in = EmitAckEmit.spec(inputs=[spout])
    leaf = Leaf.spec(inputs={hold: Grouping.SHUFFLE, ack_in: Grouping.SHUFFLE}, par=2)


def test_trees_extended_by_the_fast_emit_complete_on_every_ack_path(local_topology: Any, waiter: Any) -> None:
    # Not complete_topology: its capture bolt would give every stream a second target, and
    # the fast emit only takes one-target emits.
    reset(count=60)
    local_topology(HandTopology, **{"topology.message.timeout.secs": 3})
    waiter(lambda: len(STATE["acked"]) + len(STATE["failed"]) >= 60, 30, "every tree acked or failed")
    assert (sorted(STATE["acked"]), STATE["failed"]) == (list(range(60)), []), "an edge went missing"


class EmitAnchoredToPrevious(Bolt):
    """While processing tuple n, emits inside ``with self.anchored([tuple n-1])``: the emit
    must extend n-1's tree, not the tree of the tuple in hand."""

    outputs = ["n"]
    auto_ack = False
    timer_interval_secs = 0.05

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.previous: Any = None

    def process(self, tup: Any) -> None:
        if self.previous is not None:
            with self.anchored([self.previous]):
                self.emit([self.previous.values.n + 2000])
            self.ack(self.previous)
        self.previous = tup

    def on_timer(self) -> None:
        if self.previous is not None and self.previous.values.n == STATE["count"] - 1:
            self.ack(self.previous)
            self.previous = None


class AnchoredTopology(Topology):
    spout = ListSpout.spec()
    anchored = EmitAnchoredToPrevious.spec(inputs=[spout])
    leaf = Leaf.spec(inputs=[anchored])


def test_an_emit_inside_anchored_extends_the_named_tuples_tree(local_topology: Any, waiter: Any) -> None:
    reset(count=30)
    local_topology(AnchoredTopology, **{"topology.message.timeout.secs": 30})
    waiter(lambda: len(STATE["acked"]) + len(STATE["failed"]) >= 30, 30, "every tree acked or failed")
    assert (sorted(STATE["failed"]), STATE["acked"]) == (list(range(29)), [29]), "the leaf failed the wrong trees"


# ---------------------------------------------------------------- explicit fail, timeout

class FailEvens(Bolt):
    outputs: list[str] = []

    def process(self, tup: Any) -> None:
        if tup.values.n % 2 == 0:
            self.fail(tup)


class FailTopology(Topology):
    spout = ListSpout.spec()
    judge = FailEvens.spec(inputs=[spout], par=2)


def test_explicit_fail_reaches_spout_fail() -> None:
    result = complete_topology(FailTopology, {"spout": [[n] for n in range(40)]})
    assert (result.acked["spout"], result.failed["spout"]) == (20, 20), "odd ids ack, even ids fail"


class BlackHole(Bolt):
    """Never acks (auto_ack off), so trees can only time out."""

    outputs: list[str] = []
    auto_ack = False

    def process(self, tup: Any) -> None:
        STATE.setdefault("swallowed", []).append(tup.values.n)


class TimeoutTopology(Topology):
    spout = ListSpout.spec()
    hole = BlackHole.spec(inputs=[spout])


def test_timeout_reaches_spout_fail(local_topology: Any, waiter: Any) -> None:
    reset(count=3)
    local_topology(TimeoutTopology, **{"topology.message.timeout.secs": 1})
    waiter(lambda: sorted(STATE["failed"]) == [0, 1, 2], 30, "three timed-out trees failed")
    assert STATE["acked"] == []


def test_max_spout_pending_holds(local_topology: Any, waiter: Any) -> None:
    reset(count=1000)
    local_topology(TimeoutTopology, **{"topology.max.spout.pending": 7, "topology.message.timeout.secs": 120})
    waiter(lambda: len(STATE["emitted"]) >= 7 and len(STATE.get("swallowed", [])) >= 7, 20,
           "7 pending tuples, swallowed by the bolt")
    time.sleep(0.5)
    assert len(STATE["emitted"]) == 7, "the spout emitted beyond topology.max.spout.pending"
    assert len(STATE.get("swallowed", [])) == 7


def test_no_ackers_means_spout_ack_at_once(local_topology: Any, waiter: Any) -> None:
    reset(count=25)
    local = local_topology(TimeoutTopology, **{"topology.acker.executors": 0})
    assert local.plan.acker_tasks == []
    waiter(lambda: len(STATE["acked"]) == 25, 20, "25 immediate acks without ackers")
    assert STATE["failed"] == []


# ---------------------------------------------------------------- 5% failures, replaying spout

class FlakyBolt(Bolt):
    """Fails about 5% of its tuples (explicitly); passes the rest on."""

    outputs = ["n"]

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.rng = random.Random(context.task_id)

    def process(self, tup: Any) -> None:
        if self.rng.random() < 0.05:
            self.fail(tup)
            return
        self.emit([tup.values.n])


class Sink(Bolt):
    outputs: list[str] = []

    def process(self, tup: Any) -> None:
        with STATE["lock"]:
            STATE["sunk"][tup.values.n] += 1


class FlakyTopology(Topology):
    config = {"topology.max.spout.pending": 300}
    spout = ListSpout.spec(par=2)
    flaky = FlakyBolt.spec(inputs={spout: Grouping.SHUFFLE}, par=2)
    sink = Sink.spec(inputs={flaky: Grouping.fields("n")}, par=2)


def test_failing_five_percent_still_acks_every_tuple_exactly_once(local_topology: Any, waiter: Any) -> None:
    reset(count=2000, replay=True, sunk=Counter())
    # Two spout tasks each emit ids 0..1999: count per (id) must be exactly 2 acks.
    local_topology(FlakyTopology)
    waiter(lambda: len(STATE["acked"]) >= 4000, 90, "4000 acked tuples")
    time.sleep(0.2)
    acks = Counter(STATE["acked"])
    assert len(STATE["acked"]) == 4000
    assert set(acks.values()) == {2}, "a tuple was acked more than once per spout task"
    assert STATE["failed"], "the flaky bolt should have failed some tuples"
    assert set(STATE["sunk"]) == set(range(2000))


# ---------------------------------------------------------------- backpressure

class EndlessSpout(Spout):
    """Unanchored and unlimited: only backpressure can hold it back."""

    outputs = ["n"]

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.n = 0

    def next_tuple(self) -> None:
        self.n += 1
        STATE["emitted_count"] = self.n
        self.emit([self.n])


class SlowBolt(Bolt):
    outputs: list[str] = []

    def process(self, tup: Any) -> None:
        time.sleep(0.0005)
        STATE["processed"] = STATE.get("processed", 0) + 1


class BackpressureTopology(Topology):
    spout = EndlessSpout.spec()
    slow = SlowBolt.spec(inputs=[spout])


def test_backpressure_stops_the_spout_while_a_receiver_is_over_its_watermark(local_topology: Any,
                                                                             waiter: Any) -> None:
    reset()
    # Threads per executor, as in a worker: on one scheduler thread the slow bolt drains its
    # queue every round, so this queue never reaches the watermark.
    local = local_topology(BackpressureTopology, **{"topology.executor.receive.buffer.size": 200,
                                                    "topology.transfer.batch.size": 20,
                                                    "topology.acker.executors": 0,
                                                    "topology.executor.threads": "per-executor"})
    slow = next(e for e in local.runtime.executors.values() if e.component_id == "slow")
    peak = 0
    waiter(lambda: STATE.get("processed", 0) >= 300, 60, "the slow bolt to process 300 tuples")
    for _ in range(50):
        peak = max(peak, slow.queued)
        time.sleep(0.01)
    # Without backpressure the spout would have queued tens of thousands by now. The bound is
    # the watermark plus what a spout emits before it checks again (one round of next_tuple
    # calls and one batch per destination).
    assert peak <= 200 + 64 + 20 + 20, f"receive queue grew to {peak}"
    assert STATE["emitted_count"] - STATE["processed"] <= 200 + 64 + 40 + 20
    # What the heartbeat carries to the UI: the receive queue and the backpressure flag.
    waiter(lambda: slow.stats.metrics()["__backpressure"] == 1.0, 30, "slow's __backpressure metric to be 1")
    metrics = slow.stats.metrics()
    assert metrics["__receive.population"] >= 0 and 0 <= metrics["__receive.pct_full"] <= 200
    spout = next(e for e in local.runtime.executors.values() if e.component_id == "spout")
    assert spout.stats.metrics()["__backpressure"] == 0.0
