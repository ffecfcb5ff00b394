"""The user API with real executor threads: streams, direct grouping, ticks, batching, errors."""
from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Any

import msgpack

from stormpy import BatchingBolt, Bolt, Grouping, Spout, Stream, TicklessBatchingBolt, Topology
from stormpy.testing import complete_topology
from stormpy.serialization import INT_MAX, INT_MIN
from stormpy.thrift import deserialize, serialize, storm

STATE: dict[str, Any] = {}


def reset(**values: Any) -> None:
    STATE.clear()
    STATE.update(acked=[], failed=[], got=defaultdict(list), lock=threading.Lock(), **values)


def record(key: Any, value: Any) -> None:
    with STATE["lock"]:
        STATE["got"][key].append(value)


class CountingSpout(Spout):
    """Emits 0..count-1 (tracked), replaying failures."""

    outputs = ["n"]

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.next_id = 0
        self.replays: list[int] = []
        STATE.setdefault("spout_conf", stormconf)
        STATE.setdefault("spout_attrs", (self.component_name, self.task_id, self.topology_name, self.pid))

    def next_tuple(self) -> None:
        if self.replays:
            n = self.replays.pop()
        elif self.next_id < STATE["count"]:
            n, self.next_id = self.next_id, self.next_id + 1
        else:
            return
        self.emit([n], tup_id=n)

    def ack(self, tup_id: Any) -> None:
        STATE["acked"].append(tup_id)

    def fail(self, tup_id: Any) -> None:
        STATE["failed"].append(tup_id)
        self.replays.append(tup_id)


# ---------------------------------------------------------------- streams and groupings

class Router(Bolt):
    outputs = [Stream(["n", "parity"], name="even"), Stream(["n"], name="odd", direct=True)]

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.odd_tasks = context.get_component_tasks("odd")

    def process(self, tup: Any) -> None:
        n = tup.values.n
        if n % 2:
            target = self.odd_tasks[n % len(self.odd_tasks)]
            got = self.emit([n], stream="odd", direct_task=target, need_task_ids=True)
            record("direct_ids", (n, tuple(got)))
        else:
            self.emit([n, "even"], "even")  # pystorm: the second positional argument is the stream


class Recorder(Bolt):
    outputs: list[str] = []

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.key = (context.component_id, context.task_id)

    def process(self, tup: Any) -> None:
        assert tup.values[0] == tup.values.n
        record(self.key, (tup.stream, tup.component, tup.values.n))


class StreamsTopology(Topology):
    spout = CountingSpout.spec()
    router = Router.spec(inputs=[spout], par=2)
    odd = Recorder.spec(inputs={router["odd"]: Grouping.DIRECT}, par=3)
    everyone = Recorder.spec(inputs={router["even"]: Grouping.ALL}, par=2)
    lowest = Recorder.spec(inputs={router["even"]: Grouping.GLOBAL}, par=3)


def test_named_streams_direct_all_and_global(local_topology: Any, waiter: Any) -> None:
    reset(count=60)
    local = local_topology(StreamsTopology)
    waiter(lambda: len(STATE["acked"]) == 60, 30, "60 acked tuples")
    got = STATE["got"]
    odd_tasks = local.plan.components["odd"].tasks
    for task in odd_tasks:
        values = [v for _s, _c, v in got[("odd", task)]]
        assert values and all(odd_tasks[v % 3] == task for v in values), "direct emit reached the wrong task"
        assert all(s == "odd" and c == "router" for s, c, _v in got[("odd", task)])
    assert all(ids == (odd_tasks[n % 3],) for n, ids in got["direct_ids"]), "need_task_ids mismatch"
    evens = sorted(range(0, 60, 2))
    for task in local.plan.components["everyone"].tasks:
        assert sorted(v for _s, _c, v in got[("everyone", task)]) == evens, "all grouping missed a task"
    lowest = local.plan.components["lowest"].tasks
    assert sorted(v for _s, _c, v in got[("lowest", min(lowest))]) == evens
    assert all(not got[("lowest", t)] for t in lowest if t != min(lowest)), "global grouping used a higher task"


# ---------------------------------------------------------------- ticks

class TickCounter(Bolt):
    outputs: list[str] = []

    def process(self, tup: Any) -> None:
        pass

    def process_tick(self, tup: Any) -> None:
        assert tup.stream == "__tick" and tup.component == "__system" and tup.is_tick_tuple()
        record("ticks", time.monotonic())


class TickTopology(Topology):
    spout = CountingSpout.spec()
    ticker = TickCounter.spec(inputs=[spout], config={"topology.tick.tuple.freq.secs": 0.2})


def test_tick_tuples_arrive_at_the_configured_rate(local_topology: Any, waiter: Any) -> None:
    reset(count=0)
    started = time.monotonic()
    local_topology(TickTopology)
    waiter(lambda: len(STATE["got"]["ticks"]) >= 4, 20, "four tick tuples")
    elapsed = time.monotonic() - started
    # Ticks are never early: at most one per 0.2 s since start (plus one for rounding).
    assert len(STATE["got"]["ticks"]) <= elapsed / 0.2 + 1


# ---------------------------------------------------------------- batching bolts

class SizeBatcher(BatchingBolt):
    outputs = ["size"]
    secs_between_batches = 60
    batch_size = 10

    def process_batch(self, key: Any, tups: list[Any]) -> None:
        record("batches", [t.values.n for t in tups])
        self.emit([len(tups)])  # anchored to the whole batch


class KeyBatcher(TicklessBatchingBolt):
    outputs: list[str] = []
    secs_between_batches = 0.1

    def group_key(self, tup: Any) -> Any:
        return tup.values.n % 3

    def process_batch(self, key: Any, tups: list[Any]) -> None:
        record("keyed", (key, [t.values.n for t in tups]))


class SizeRecorder(Bolt):
    outputs: list[str] = []

    def process(self, tup: Any) -> None:
        record("sizes", tup.values.size)


class BatchTopology(Topology):
    spout = CountingSpout.spec()
    sized = SizeBatcher.spec(inputs=[spout])
    sizes = SizeRecorder.spec(inputs=[sized])
    keyed = KeyBatcher.spec(inputs=[spout])


def test_batching_bolts_batch_by_size_time_key_and_flush_at_shutdown(local_topology: Any, waiter: Any) -> None:
    reset(count=95)
    local = local_topology(BatchTopology)
    waiter(lambda: len(STATE["got"]["batches"]) >= 9, 30, "nine full batches")
    assert all(len(b) == 10 for b in STATE["got"]["batches"])
    waiter(lambda: sum(len(v) for _k, v in STATE["got"]["keyed"]) == 95, 30, "time-driven keyed batches")
    assert all(all(n % 3 == key for n in ns) for key, ns in STATE["got"]["keyed"])
    waiter(lambda: len(STATE["acked"]) == 90, 30, "the 90 tuples of full batches acked")
    assert set(STATE["acked"]).isdisjoint(range(90, 95)), "tuples of the unflushed batch must not be acked yet"
    local.stop(drain_secs=20)
    assert sorted(n for b in STATE["got"]["batches"] for n in b) == list(range(95))
    assert sorted(STATE["acked"]) == list(range(95)), "every tuple acked once its batch ran"
    assert sorted(STATE["got"]["sizes"]) == [5] + [10] * 9


class FailingBatcher(BatchingBolt):
    outputs: list[str] = []
    secs_between_batches = 0.1

    def process_batch(self, key: Any, tups: list[Any]) -> None:
        if STATE.setdefault("batch_failures", 0) < 1:
            STATE["batch_failures"] += 1
            raise RuntimeError("batch write failed")
        record("written", [t.values.n for t in tups])


class FailingBatchTopology(Topology):
    spout = CountingSpout.spec()
    batcher = FailingBatcher.spec(inputs=[spout])


def test_failing_batch_fails_its_tuples_and_reports(local_topology: Any, waiter: Any) -> None:
    reset(count=20)
    local = local_topology(FailingBatchTopology, **{"topology.max.spout.pending": 20})
    waiter(lambda: sorted(STATE["acked"]) == list(range(20)), 30, "all 20 acked after the replay")
    assert STATE["failed"], "the failed batch's tuples must reach fail()"
    errors = local.reporter.errors.get("batcher")
    assert errors and "batch write failed" in errors[0][2]


# ---------------------------------------------------------------- errors in user code

class Crashy(Bolt):
    """Raises once on 13 in process and once in initialize of its first re-creation."""

    outputs = ["n"]

    def initialize(self, stormconf: Any, context: Any) -> None:
        STATE["inits"] = STATE.get("inits", 0) + 1
        if STATE["inits"] == 2:
            raise ValueError("initialize exploded")

    def process(self, tup: Any) -> None:
        if tup.values.n == 13 and not STATE.get("crashed"):
            STATE["crashed"] = True
            raise RuntimeError("boom on 13")
        record("crashy", tup.values.n)


class Steady(Bolt):
    outputs: list[str] = []

    def process(self, tup: Any) -> None:
        record("steady", tup.values.n)


class CrashTopology(Topology):
    spout = CountingSpout.spec()
    crashy = Crashy.spec(inputs=[spout])
    steady = Steady.spec(inputs=[spout])


def test_exception_in_user_code_restarts_the_task_and_replays(local_topology: Any, waiter: Any) -> None:
    reset(count=50)
    local = local_topology(CrashTopology, **{"topology.task.restart.backoff.secs": 0.1})
    waiter(lambda: sorted(STATE["acked"]) == list(range(50)), 60, "all 50 tuples acked after restarts")
    assert 13 in STATE["failed"], "the tuple in hand when process raised must fail"
    assert STATE["inits"] >= 3, "the task should be re-created after both errors"
    assert sorted(set(STATE["got"]["steady"])) == list(range(50))
    texts = [text for _t, _task, text in local.reporter.errors["crashy"]]
    assert any("boom on 13" in t for t in texts) and any("initialize exploded" in t for t in texts)


class Opaque:
    def __init__(self, value: int) -> None:
        self.value = value


class OpaqueSerializer:
    def serialize(self, obj: Opaque) -> bytes:
        return msgpack.packb(obj.value)

    def deserialize(self, data: bytes) -> Opaque:
        return Opaque(msgpack.unpackb(data))


class OpaqueBolt(Bolt):
    outputs = ["thing"]

    def process(self, tup: Any) -> None:
        self.emit([Opaque(tup.values.n)])


class ThingSink(Bolt):
    outputs: list[str] = []

    def process(self, tup: Any) -> None:
        record("things", tup.values.thing.value)


class OpaqueTopology(Topology):
    spout = CountingSpout.spec()
    maker = OpaqueBolt.spec(inputs=[spout])
    sink = ThingSink.spec(inputs=[maker])


def test_unserializable_value_is_a_reported_error_naming_its_type(local_topology: Any, waiter: Any) -> None:
    reset(count=3)
    local = local_topology(OpaqueTopology, **{"topology.task.restart.backoff.secs": 0.1,
                                              "topology.message.timeout.secs": 60})
    waiter(lambda: local.reporter.errors.get("maker"), 20, "the serialization error report")
    assert "Opaque" in local.reporter.errors["maker"][0][2]
    assert STATE["got"]["things"] == []


def edge_int(n: int) -> int:
    """The msgpack integer limits for n < 2, one past them for n == 2 and 3."""
    return (INT_MIN, INT_MAX, INT_MAX + 1, INT_MIN - 1)[n]


class EdgeOne(Bolt):
    outputs = ["edge"]

    def process(self, tup: Any) -> None:
        self.emit([edge_int(tup.values.n)])


class EdgePair(Bolt):
    outputs = ["word", "edge"]

    def process(self, tup: Any) -> None:
        self.emit(["w", edge_int(tup.values.n)])


class EdgeSink(Bolt):
    outputs: list[str] = []

    def process(self, tup: Any) -> None:
        record(tup.component, tup.values.edge)


class EdgeTopology(Topology):
    spout = CountingSpout.spec()
    one = EdgeOne.spec(inputs=[spout])
    pair = EdgePair.spec(inputs=[spout])
    sink = EdgeSink.spec(inputs=[one, pair])


def test_ints_travel_to_the_msgpack_limits_and_one_past_is_a_reported_error(local_topology: Any,
                                                                          waiter: Any) -> None:
    """The emits check an int against the limits inline (one value, and one of several), not
    through the serializer's call: the limits travel, one past them is the component's error."""
    reset(count=4)
    local = local_topology(EdgeTopology, **{"topology.task.restart.backoff.secs": 0.1,
                                            "topology.message.timeout.secs": 60})
    for bolt in ("one", "pair"):
        waiter(lambda: len(local.reporter.errors.get(bolt, [])) >= 2, 30, f"{bolt}: two integer errors reported")
        # a set: the crashes on 2 and 3 may replay 0 and 1 as well (at least once)
        waiter(lambda: set(STATE["got"][bolt]) == {INT_MIN, INT_MAX}, 30, f"{bolt}: the limits received")
        texts = [text for _t, _task, text in local.reporter.errors[bolt]]
        assert all("does not fit in 64 bits" in t for t in texts), texts
    assert set(STATE["got"]["one"]) == set(STATE["got"]["pair"]) == {INT_MIN, INT_MAX}, "one past a limit never travels"


def test_registered_serializer_lets_the_value_through(local_topology: Any, waiter: Any) -> None:
    reset(count=5)
    serializers = {"Opaque": f"{__name__}:OpaqueSerializer"}
    local = local_topology(OpaqueTopology, **{"topology.serializers": serializers})
    waiter(lambda: sorted(STATE["acked"]) == list(range(5)), 20, "five acked tuples")
    assert sorted(STATE["got"]["things"]) == list(range(5))
    assert not local.reporter.errors


def test_user_config_keys_reach_stormconf_and_stats_convert_to_thrift(local_topology: Any, waiter: Any) -> None:
    reset(count=10)
    local = local_topology(TickTopology, **{"my.own.key": [1, 2]})
    waiter(lambda: len(STATE["acked"]) == 10, 20, "ten acked tuples")
    assert STATE["spout_conf"]["my.own.key"] == [1, 2]
    import os
    spout_task = local.plan.components["spout"].tasks[0]
    assert STATE["spout_attrs"] == ("spout", spout_task, "test", os.getpid()), "pystorm handshake attributes"
    stats = local.runtime.thrift_stats()
    assert len(stats) == len(local.plan.executors())
    for info, executor_stats in stats.items():
        again = deserialize(storm.ExecutorStats, serialize(executor_stats))
        assert set(again.emitted) == {"600", "10800", "86400", ":all-time"}
    spout_entry = next(v for v in local.runtime.stats().values() if v["component"] == "spout")
    assert spout_entry["acked"]["default"] == 10
    assert spout_entry["complete_ms_avg"]["default"] >= 0


class CrashySpout(CountingSpout):
    """Raises once in next_tuple after emitting 10 tuples; the re-created instance starts over."""

    def next_tuple(self) -> None:
        if self.next_id == 10 and not STATE.get("spout_crashed"):
            STATE["spout_crashed"] = True
            raise RuntimeError("spout broke")
        super().next_tuple()


class SpoutCrashTopology(Topology):
    spout = CrashySpout.spec()
    steady = Steady.spec(inputs=[spout])


def test_spout_exception_restarts_the_spout(local_topology: Any, waiter: Any) -> None:
    reset(count=30)
    local = local_topology(SpoutCrashTopology, **{"topology.task.restart.backoff.secs": 0.1})
    waiter(lambda: set(STATE["acked"]) == set(range(30)), 30, "the restarted spout's 30 tuples acked")
    assert any("spout broke" in text for _t, _task, text in local.reporter.errors["spout"])


class ManualAcker(Bolt):
    """pystorm style: explicit anchors and acks, some of them by tuple id."""

    outputs = ["n"]
    auto_ack = False
    auto_anchor = False

    def process(self, tup: Any) -> None:
        self.emit([tup.values.n], anchors=[tup.id] if tup.values.n % 2 else [tup])
        if tup.values.n % 3:
            self.ack(tup.id)
        else:
            self.ack(tup)


class FailFirstFifth(Bolt):
    """Fails every fifth value the first time it sees it: proves the upstream anchored it."""

    outputs: list[str] = []

    def process(self, tup: Any) -> None:
        n = tup.values.n
        seen = STATE.setdefault("seen", set())
        if n % 5 == 0 and n not in seen:
            seen.add(n)
            self.fail(tup)
            return
        record("steady", n)


class Echo(Bolt):
    """streamparse habit: re-emit the input's values object as it is."""

    outputs = ["n"]

    def process(self, tup: Any) -> None:
        self.emit(tup.values)
        self.emit([tup.values])  # a namedtuple nested in the values is fine too


class EchoTopology(Topology):
    spout = CountingSpout.spec()
    echo = Echo.spec(inputs=[spout])
    steady = Steady.spec(inputs={echo: Grouping.SHUFFLE})


def test_reemitting_tup_values_works() -> None:
    reset(count=0)
    result = complete_topology(EchoTopology, {"spout": [[n] for n in range(10)]})
    assert result.acked["spout"] == 10 and not result.errors
    echoed = result.emitted("echo")
    assert sorted(v[0] for v in echoed if isinstance(v[0], int)) == list(range(10))
    assert sorted(v[0][0] for v in echoed if not isinstance(v[0], int)) == list(range(10))


class ManualTopology(Topology):
    spout = CountingSpout.spec()
    manual = ManualAcker.spec(inputs=[spout])
    steady = FailFirstFifth.spec(inputs=[manual])


def test_explicit_anchors_and_acks_by_tuple_or_id(local_topology: Any, waiter: Any) -> None:
    reset(count=30)
    local_topology(ManualTopology)
    waiter(lambda: sorted(STATE["acked"]) == list(range(30)), 20, "30 acked tuples")
    assert sorted(STATE["got"]["steady"]) == list(range(30))
    assert sorted(STATE["failed"]) == list(range(0, 30, 5)), "downstream fails must reach the spout"


class ModGrouping:
    """Custom grouping: value n goes to targets[n % len(targets)]."""

    def prepare(self, context: Any, stream: Any, targets: list[int]) -> None:
        self.targets = sorted(targets)
        record("prepared", (context.component_id, stream.componentId, stream.streamId))

    def choose_tasks(self, task_id: int, values: list[Any]) -> list[int]:
        return [self.targets[values[0] % len(self.targets)]]


class GroupingsTopology(Topology):
    spout = CountingSpout.spec()
    custom = Recorder.spec(inputs={spout: Grouping.custom(ModGrouping())}, par=3)
    partial = Recorder.spec(inputs={spout: Grouping.partial_key("n")}, par=2)
    local = Recorder.spec(inputs={spout: Grouping.LOCAL_OR_SHUFFLE}, par=2)
    nothing = Recorder.spec(inputs={spout: Grouping.NONE}, par=2)


def test_custom_partial_key_local_or_shuffle_and_none_groupings_end_to_end(local_topology: Any,
                                                                           waiter: Any) -> None:
    reset(count=40)
    local = local_topology(GroupingsTopology)
    waiter(lambda: len(STATE["acked"]) == 40, 20, "40 acked tuples")
    got = STATE["got"]
    assert got["prepared"] == [("spout", "spout", "default")]
    custom_tasks = sorted(local.plan.components["custom"].tasks)
    for task in custom_tasks:
        assert all(custom_tasks[v % 3] == task for _s, _c, v in got[("custom", task)])
    for name in ("partial", "local", "nothing"):
        seen = sorted(v for t in local.plan.components[name].tasks for _s, _c, v in got[(name, t)])
        assert seen == list(range(40)), f"{name} grouping lost or duplicated tuples"
