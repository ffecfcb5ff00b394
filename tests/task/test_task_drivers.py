"""Component hooks with real executor threads: drivers, ``anchored()``, serialized instances.

The raw-batch driver is what Trident's framework bolts build on: they keep raw messages, emit
their own tuples on direct streams anchored to all of them, and ack (or fail) them later.
"""
from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from stormpy import Bolt, Grouping, Spout, Stream, Topology
from stormpy.task.drivers import Driver, RawBatchDriver
from stormpy.thrift import storm
from stormpy.api.compile import compile_topology
from stormpy.api.dsl import ComponentSpec
from stormpy.topology.plan import build_plan
from stormpy.topology.validate import validate_topology

STATE: dict[str, Any] = {}


def reset(**values: Any) -> None:
    STATE.clear()
    STATE.update(acked=[], failed=[], lock=threading.Lock(), **values)


class CountSpout(Spout):
    """Emits ids 0..STATE['count']-1 once each, tracked."""

    outputs = ["n"]

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.next_id = 0

    def next_tuple(self) -> None:
        if self.next_id < STATE["count"]:
            self.emit([self.next_id], tup_id=self.next_id)
            self.next_id += 1

    def ack(self, tup_id: Any) -> None:
        STATE["acked"].append(tup_id)

    def fail(self, tup_id: Any) -> None:
        STATE["failed"].append(tup_id)


class ReleasedLeaf(Bolt):
    """Holds every tuple until STATE['release'] is set, then acks them from its timer."""

    outputs: list[str] = []
    auto_ack = False
    timer_interval_secs = 0.02

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.held: list[Any] = []

    def process(self, tup: Any) -> None:
        self.held.append(tup)
        with STATE["lock"]:
            STATE.setdefault("leaf", []).append(tuple(tup.values))

    def on_timer(self) -> None:
        if STATE["release"].is_set() and self.held:
            for tup in self.held:
                self.ack(tup)
            self.held.clear()


# ---------------------------------------------------------------- anchored()

class SumAnchored(Bolt):
    """Keeps every input; once it has them all, emits their sum anchored to all of them."""

    outputs = ["total"]
    auto_ack = False

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.kept: list[Any] = []

    def process(self, tup: Any) -> None:
        self.kept.append(tup)
        if len(self.kept) == STATE["count"]:
            with self.anchored(self.kept):
                self.emit([sum(t.values.n for t in self.kept)])
            for kept in self.kept:
                self.ack(kept)


class AnchoredTopology(Topology):
    spout = CountSpout.spec()
    summer = SumAnchored.spec(inputs={spout: Grouping.GLOBAL})
    leaf = ReleasedLeaf.spec(inputs=[summer])


def test_anchored_block_ties_every_input_tree_to_the_emitted_tuple(local_topology: Any, waiter: Any) -> None:
    reset(count=5, release=threading.Event())
    local_topology(AnchoredTopology)
    waiter(lambda: STATE.get("leaf") == [(10,)], 20, "the leaf to receive the sum")
    time.sleep(0.3)
    assert STATE["acked"] == [], "a tree completed while the tuple anchored to it is unacked"
    STATE["release"].set()
    waiter(lambda: sorted(STATE["acked"]) == [0, 1, 2, 3, 4], 20, "every spout tuple acked after the leaf acked")
    assert STATE["failed"] == []


# ---------------------------------------------------------------- the raw-batch driver

class BatchCloser(Bolt):
    """A Trident-like framework bolt: keeps raw messages, then announces the batch on a direct
    stream to every task of the next component, anchored to all kept messages, and acks them
    (or, with STATE['fail'], fails them)."""

    outputs = [Stream(["count"], name="coord", direct=True)]

    def make_driver(self, task: Any) -> Driver:
        self.kept: list[Any] = []
        return RawBatchDriver(self.on_batch, pending=lambda: list(self.kept))

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.targets = context.get_component_tasks("leaf")

    def on_batch(self, messages: list[Any]) -> None:
        self.kept.extend(messages)
        if STATE.get("crash") and self.kept:
            raise RuntimeError("crash while holding messages")
        if len(self.kept) < STATE["count"]:
            return
        if STATE.get("fail"):
            for message in self.kept:
                self.fail_message(message)
        else:
            for target in self.targets:
                self.emit([len(self.kept)], stream="coord", anchors=self.kept, direct_task=target)
            for message in self.kept:
                self.ack_message(message)
        self.kept = []


class RawTopology(Topology):
    spout = CountSpout.spec()
    closer = BatchCloser.spec(inputs={spout: Grouping.GLOBAL})
    leaf = ReleasedLeaf.spec(inputs={closer["coord"]: Grouping.DIRECT}, par=2)


def test_raw_driver_emits_on_a_direct_stream_anchored_to_kept_messages(local_topology: Any, waiter: Any) -> None:
    reset(count=4, release=threading.Event())
    local_topology(RawTopology, **{"topology.acker.executors": 2})
    waiter(lambda: STATE.get("leaf") == [(4,), (4,)], 20, "both leaf tasks to get the coordination tuple")
    time.sleep(0.3)
    assert STATE["acked"] == [], "trees completed while the direct tuples anchored to them are held"
    STATE["release"].set()
    waiter(lambda: sorted(STATE["acked"]) == [0, 1, 2, 3], 20, "the spout's acks once both leaves acked")
    assert STATE["failed"] == []


def test_raw_driver_fail_message_fails_the_trees_at_once(local_topology: Any, waiter: Any) -> None:
    reset(count=3, fail=True, release=threading.Event())
    local_topology(RawTopology, **{"topology.message.timeout.secs": 60})
    waiter(lambda: sorted(STATE["failed"]) == [0, 1, 2], 20, "spout fail for every failed raw message")
    assert STATE["acked"] == []


def test_a_crash_fails_what_the_driver_says_it_holds(local_topology: Any, waiter: Any) -> None:
    reset(count=2, crash=True, release=threading.Event())
    local_topology(RawTopology, **{"topology.message.timeout.secs": 60, "topology.task.restart.backoff.secs": 0.01})
    waiter(lambda: set(STATE["failed"]) == {0, 1}, 20, "the held messages failed by the crash (not by timeout)")


class BatchAcker(Bolt):
    """Keeps raw messages (counting them as executed) and acks them all with one
    ``ack_messages`` call once STATE['count'] arrived: the Spark sink's way."""

    outputs: list[str] = []

    def make_driver(self, task: Any) -> Driver:
        self.kept: list[Any] = []
        return RawBatchDriver(self.on_batch, pending=lambda: list(self.kept))

    def on_batch(self, messages: list[Any]) -> None:
        self.count_executed(("spout", "default"), len(messages))
        self.kept.extend(messages)
        if len(self.kept) >= STATE["count"]:
            self.ack_messages(self.kept)
            self.kept = []


class BatchAckTopology(Topology):
    spout = CountSpout.spec()
    acker_bolt = BatchAcker.spec(inputs={spout: Grouping.GLOBAL})


def test_ack_messages_settles_a_whole_batch_and_counts_it_once(local_topology: Any, waiter: Any) -> None:
    reset(count=200)   # under the default pending cap of the local runtime
    local = local_topology(BatchAckTopology, **{"topology.acker.executors": 2})
    waiter(lambda: sorted(STATE["acked"]) == list(range(200)), 20, "the spout's acks of the whole batch")
    stats = next(s for s in local.runtime.stats().values() if s["component"] == "acker_bolt")
    assert stats["acked"] == {"spout:default": 200} and stats["executed"] == {"spout:default": 200}
    assert STATE["failed"] == []


# ---------------------------------------------------------------- serialized instances

class Scale(Bolt):
    """Configured by its constructor, which a class-declared component cannot be."""

    outputs = ["n"]

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.instance_marks: list[int] = []

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.instance_marks.append(context.task_id)  # a shared instance would collect several
        with STATE["lock"]:
            STATE.setdefault("marks", []).append(list(self.instance_marks))

    def process(self, tup: Any) -> None:
        with STATE["lock"]:
            STATE.setdefault("scaled", []).append(self.fn(tup.values.n))


def _scaled_topology(factor: int) -> type[Topology]:
    class ScaledTopology(Topology):
        spout = CountSpout.spec()
        scale = Scale(lambda n: n * factor).spec(inputs=[spout], par=2)

    return ScaledTopology


def test_an_instance_travels_pickled_and_each_task_gets_its_own_copy(local_topology: Any, waiter: Any) -> None:
    reset(count=4)
    local_topology(_scaled_topology(3))
    waiter(lambda: sorted(STATE.get("scaled", [])) == [0, 3, 6, 9], 20, "the lambda inside the instance to run")
    assert sorted(len(m) for m in STATE["marks"]) == [1, 1], "two tasks shared one instance"


def test_compile_puts_the_instance_in_python_object_serialized_and_keeps_the_class_name() -> None:
    topology = compile_topology(_scaled_topology(2))
    obj = topology.bolts["scale"].bolt_object.python_object
    assert obj.class_name.endswith(":Scale") and isinstance(obj.serialized, bytes)
    assert topology.spouts["spout"].spout_object.python_object.serialized is None
    validate_topology(topology, {})  # Nimbus's check works on the bytes without unpickling
    plan = build_plan(topology, {}, "t-1", "t")
    assert plan.components["scale"].serialized == obj.serialized
    assert plan.components["spout"].serialized is None


def test_a_spec_instance_must_be_of_the_spec_class() -> None:
    with pytest.raises(TypeError, match="is not a Scale"):
        ComponentSpec(Scale, instance=CountSpout())


def test_an_unpicklable_instance_is_an_invalid_topology() -> None:
    class Unpicklable(Topology):
        numbers = CountSpout.spec()
        scale = Scale(threading.Lock()).spec(inputs=[numbers])

    with pytest.raises(storm.InvalidTopologyException, match="cannot be pickled"):
        compile_topology(Unpicklable)
