"""The pystorm/streamparse component API that stormpy runs natively, each item in a real
in-process topology (real executors, real acker) where it has runtime behaviour.

Imports go through the streamparse/pystorm aliases, as a streamparse user's code would.
"""
from __future__ import annotations

import io
import threading
from collections import Counter, defaultdict
from typing import Any

import pytest

from stormpy.streamparse_compat import install_aliases

install_aliases()

from pystorm.component import Tuple as PystormTuple  # noqa: E402
from streamparse import (Bolt, BatchingBolt, Grouping, JavaBolt, ReliableSpout, Spout, Stream,  # noqa: E402
                         Topology, Tuple)
from streamparse.thrift import GlobalStreamId, storm_thrift  # noqa: E402

from stormpy.errors import UserError  # noqa: E402
from stormpy.local.runner import LocalTopology  # noqa: E402
from stormpy.testing import wait_until  # noqa: E402
from stormpy.api.compile import compile_topology  # noqa: E402
from stormpy.topology.plan import build_plan  # noqa: E402

pytestmark = pytest.mark.timeout(120)

SEEN: dict[str, Any] = defaultdict(list)
LOCK = threading.Lock()


def record(key: str, value: Any) -> None:
    with LOCK:
        SEEN[key].append(value)


def run(topology: type, until: Any, what: str, conf: dict[str, Any] | None = None, timeout: float = 30) -> LocalTopology:
    local = LocalTopology(topology, "t", user_overrides={"topology.message.timeout.secs": 5, **(conf or {})})
    with local:
        wait_until(lambda: until(local), timeout, what)
    return local


class Numbers(ReliableSpout):
    outputs = ["n"]
    count = 20

    def initialize(self, stormconf, context):
        self.next_n = 0

    def next_tuple(self):
        if self.next_n < self.count:
            self.emit([self.next_n], tup_id=self.next_n)
            self.next_n += 1

    def ack(self, tup_id):
        super().ack(tup_id)
        record("acked", tup_id)


# ---------------------------------------------------------------- spec defaults from class attributes

class ParBolt(Bolt):
    outputs = ["n"]
    par = 3
    config = {"my.setting": "from-class", "topology.tick.tuple.freq.secs": 7}


def test_class_attributes_par_and_config_are_spec_defaults() -> None:
    class T(Topology):
        numbers = Numbers.spec()
        bolt = ParBolt.spec(inputs=[numbers])
        explicit = ParBolt.spec(inputs=[numbers], par=2, config={"my.setting": "explicit"})

    plan = build_plan(compile_topology(T), {}, "t-1", "t")
    assert len(plan.components["bolt"].tasks) == 3
    assert plan.components["bolt"].conf["my.setting"] == "from-class"
    assert len(plan.components["explicit"].tasks) == 2
    assert plan.components["explicit"].conf["my.setting"] == "explicit"


def test_dict_par_needs_an_environment() -> None:
    class T(Topology):
        numbers = Numbers.spec(par={"prod": 4, "beta": 1})

    assert compile_topology(T, environment="prod").spouts["numbers"].common.parallelism_hint == 4
    with pytest.raises(Exception, match=r"parallelism per environment \(beta, prod\)"):
        compile_topology(T)
    with pytest.raises(UserError, match="choose one with -e/--environment"):
        LocalTopology(T, "t")


# ---------------------------------------------------------------- ReliableSpout

class FailTwice(Bolt):
    """Fails every tuple the first two times it sees it; n == 13 always fails."""

    def initialize(self, conf, ctx):
        self.seen = Counter()

    def process(self, tup):
        n = tup.values.n
        self.seen[n] += 1
        record("processed", n)
        if n == 13 or self.seen[n] <= 2:
            self.fail(tup)
        else:
            self.ack(tup)

    auto_ack = False


def test_reliable_spout_replays_failed_tuples_up_to_max_fails() -> None:
    SEEN.clear()

    class T(Topology):
        numbers = Numbers.spec()
        bolt = FailTwice.spec(inputs={numbers: Grouping.GLOBAL})

    run(T, lambda _: len(SEEN["acked"]) >= 20, "all 20 ids acked (13 after giving up)")
    processed = Counter(SEEN["processed"])
    assert sorted(SEEN["acked"]) == list(range(20))
    assert all(processed[n] == 3 for n in range(20) if n != 13)     # 2 fails, then acked
    assert processed[13] == 1 + Numbers.max_fails                    # first try + 3 replays, then given up


def test_reliable_spout_requires_a_tuple_id() -> None:
    class NoId(ReliableSpout):
        outputs = ["n"]

        def next_tuple(self):
            try:
                self.emit([1])
            except ValueError as exc:
                record("no-id", str(exc))

    SEEN.clear()

    class T(Topology):
        spout = NoId.spec()

    run(T, lambda _: SEEN["no-id"], "the spout's emit without tup_id to raise")
    assert "You must provide a tuple ID" in SEEN["no-id"][0]


# ---------------------------------------------------------------- Tuple, is_tick, report_metric, need_task_ids

def test_tuple_is_usable_as_pystorms_namedtuple() -> None:
    tup = Tuple(7, "spout", "default", 3, ["a", 1])
    tup_id, component, stream, task, values = tup
    assert (tup_id, component, stream, task, values) == (7, "spout", "default", 3, ["a", 1])
    assert tup[1] == "spout" and tup[-1] == ["a", 1] and tup[:2] == (7, "spout") and len(tup) == 5
    assert tup._asdict() == {"id": 7, "component": "spout", "stream": "default", "task": 3, "values": ["a", 1]}
    assert tup._fields == ("id", "component", "stream", "task", "values")
    assert PystormTuple is Tuple


def test_a_tuple_copies_pickles_and_subclasses_alike_compiled_or_not() -> None:
    """Compiled (``STORMPY_COMPILE=1``), Tuple is an extension type (``api/tuple.pxd``);
    what users do with one works as with the interpreted class (.ci/run runs this both ways)."""
    import copy
    import pickle

    tup = Tuple(7, "spout", "default", 3, ["a", 1], anchors=(11, 12))
    for other in (pickle.loads(pickle.dumps(tup)), copy.copy(tup), copy.deepcopy(tup)):
        assert other == tup and other is not tup and other.id == 7 and other.values == ["a", 1]

    # both builds pickle as stormpy.api.tuple._restore: a pickle made by one loads in the other
    assert tup.__reduce__()[0].__qualname__ == "_restore"

    class Marked(Tuple):
        __slots__ = ("mark",)

    marked = Marked(None, "spout", "default", 3, ["b"], anchors=(11, 12))
    marked.mark = "seen"
    assert isinstance(marked, Tuple) and marked.mark == "seen" and marked.id == 12   # the first edge
    for other in (copy.copy(marked), copy.deepcopy(marked)):
        assert type(other) is Marked and other.mark == "seen" and other == marked
    tup.values = ["c"]
    assert tuple(tup)[4] == ["c"]

    class Bare(Tuple):   # an __init__ that skips Tuple's: its pickle carries None for unset slots
        __slots__ = ()

        def __init__(self) -> None:
            pass

    from stormpy.api.tuple import _FIELDS, _restore
    fields = tuple({"component": "spout", "stream": "default", "task": 3, "values": ["d"]}.get(name)
                   for name in _FIELDS)
    bare = _restore(Bare, fields, {})   # what a pickle of an interpreted Bare() carries
    assert (bare._ack_val, bare._recv, bare._done, bare.values) == (0, 0.0, False, ["d"])
    with pytest.raises(AttributeError):
        tup.not_a_field = 1   # type: ignore[attr-defined]


class Inspector(Bolt):
    outputs = ["n"]

    def process(self, tup):
        record("unpacked", tuple(tup)[1:4])
        record("process-is-tick", self.is_tick(tup))
        tasks = self.emit([tup.values[0]], need_task_ids=True)
        record("task-ids", tasks)
        self.report_metric("last_n", tup.values.n)

    def process_tick(self, tup):
        record("tick-is-tick", Bolt.is_tick(tup))


class Sink(Bolt):
    def process(self, tup):
        record("sink-task", self.task_id)


class TaskIdSpout(Spout):
    outputs = ["n"]

    def initialize(self, conf, ctx):
        self.sent = 0

    def next_tuple(self):
        if self.sent < 5:
            record("spout-task-ids", self.emit([self.sent], tup_id=self.sent, need_task_ids=True))
            record("spout-none", self.emit([self.sent]))
            self.sent += 1


def test_is_tick_need_task_ids_report_metric_and_unpacking() -> None:
    SEEN.clear()

    class T(Topology):
        numbers = TaskIdSpout.spec()
        inspector = Inspector.spec(inputs=[numbers], config={"topology.tick.tuple.freq.secs": 1})
        sink = Sink.spec(inputs={inspector: Grouping.fields("n")}, par=2)

    local = run(T, lambda _: len(SEEN["sink-task"]) >= 10 and SEEN["tick-is-tick"], "10 tuples and a tick")
    assert set(SEEN["tick-is-tick"]) == {True} and set(SEEN["process-is-tick"]) == {False}
    assert set(SEEN["unpacked"]) == {("numbers", "default", local.plan.components["numbers"].tasks[0])}
    sink_tasks = set(local.plan.components["sink"].tasks)
    inspector_tasks = local.plan.components["inspector"].tasks
    assert all(ids == inspector_tasks for ids in SEEN["spout-task-ids"])
    assert set(SEEN["spout-none"]) == {None}
    for ids in SEEN["task-ids"]:
        assert len(ids) == 1 and ids[0] in sink_tasks
    assert {ids[0] for ids in SEEN["task-ids"]} == set(SEEN["sink-task"])
    metrics = [entry["metrics"] for entry in local.runtime.stats().values() if entry["component"] == "inspector"]
    assert metrics and "last_n" in metrics[0]


# ---------------------------------------------------------------- BatchingBolt.ticks_between_batches

class TickBatcher(BatchingBolt):
    ticks_between_batches = 2
    secs_between_batches = 1000      # ignored: ticks drive this bolt

    def process_batch(self, key, tups):
        record("batch", len(tups))


def test_batching_bolt_flushes_every_ticks_between_batches_ticks() -> None:
    SEEN.clear()

    class T(Topology):
        numbers = Numbers.spec()
        batcher = TickBatcher.spec(inputs=[numbers], config={"topology.tick.tuple.freq.secs": 1})

    run(T, lambda _: len(SEEN["acked"]) >= 20, "every number acked after its batch")
    assert sum(SEEN["batch"]) >= 20


# ---------------------------------------------------------------- DSL

class Words(Spout):
    outputs = ["word"]


class Counts(Bolt):
    outputs = [Stream(["word", "count"]), Stream(["word"], name="loop")]


def test_dsl_errors_at_class_definition() -> None:
    with pytest.raises(ValueError, match="at least one field"):
        Grouping.fields()
    with pytest.raises(ValueError, match="requires at least one input"):
        class NoInputs(Topology):
            words = Words.spec()
            counts = Counts.spec(inputs=[])

    class Silent(Spout):
        outputs = []

    with pytest.raises(ValueError, match="requires at least one output"):
        class NoOutputs(Topology):
            silent = Silent.spec()

    class StringOutputs(Spout):
        outputs = "foo"

    with pytest.raises(TypeError, match="not the string 'foo'"):
        StringOutputs.spec()
    with pytest.raises(TypeError, match="did you forget to call .spec"):
        class Forgot(Topology):
            words = Words()
    with pytest.raises(TypeError):
        Words.spec(par=5.4)
    with pytest.raises(TypeError):
        Words.spec(par={"prod": 5.5})
    with pytest.raises(TypeError):
        Counts.spec(inputs="words")
    with pytest.raises(TypeError):
        class BadConfig(Topology):
            config = '{"foo": "bar"}'


def test_global_stream_id_inputs_allow_cycles() -> None:
    class Loop(Topology):
        words = Words.spec()
        counts = Counts.spec(inputs={words: Grouping.fields("word"),
                                     GlobalStreamId(componentId="counts", streamId="loop"): Grouping.SHUFFLE})
        other = Counts.spec(inputs=[GlobalStreamId(componentId="counts", streamId="default")])

    topology = compile_topology(Loop)
    inputs = {(g.componentId, g.streamId) for g in topology.bolts["counts"].common.inputs}
    assert inputs == {("words", "default"), ("counts", "loop")}
    assert list(topology.bolts["other"].common.inputs)[0].componentId == "counts"


def test_thrift_groupings_and_topology_write() -> None:
    class T(Topology):
        words = Words.spec()
        counts = Counts.spec(inputs={words: storm_thrift.Grouping(fields=["word"])})

    assert T.thrift_topology.bolts["counts"].common.inputs[GlobalStreamId("words", "default")].fields == ["word"]
    out = io.BytesIO()
    T.write(out)
    assert len(out.getvalue()) > 20


def test_jvm_parts_are_accepted_by_the_dsl_and_refused_at_start() -> None:
    class WithJava(Topology):
        words = Words.spec()
        java = JavaBolt.spec(full_class_name="com.example.Counter", args_list=[], inputs=[words], outputs=["x"])

    with pytest.raises(UserError, match=r"'java' is a JavaBolt \(com.example.Counter\): JVM components cannot run"):
        LocalTopology(WithJava, "t")

    class JavaGrouping(Topology):
        words = Words.spec()
        counts = Counts.spec(inputs={words: Grouping.custom_object("com.example.Grouping", [])})

    with pytest.raises(UserError, match="needs a JVM"):
        LocalTopology(JavaGrouping, "t")

    class SerializedGrouping(Topology):
        words = Words.spec()
        counts = Counts.spec(inputs={words: Grouping.custom_serialized(b"\xac\xed")})

    with pytest.raises(UserError, match="needs a JVM"):
        LocalTopology(SerializedGrouping, "t")
