"""User code owns its attribute names (issue 20): one real local topology per base class.

Every component below assigns the names a user plausibly picks (``state``, ``context``,
``conf``, ``stormconf``, ``storm_conf``, ``collector``, ``window``, ``outputs``, ``name``,
``logger``, ``log``) to values of its own, in ``__init__``/``initialize`` and again while it
runs, then checks the values are still its own and the topology acks every tuple: the
framework must neither crash on such an assignment nor read or overwrite the user's values.
"""
from __future__ import annotations

import functools
import logging
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from stormpy import Bolt, Grouping, Spout, StatefulBolt, StatefulWindowedBolt, Topology, WindowedBolt
from stormpy.bolt import BatchingBolt, ShellBolt
from stormpy.local.runner import LocalTopology
from stormpy.spout import ReliableSpout
from stormpy.testing import wait_until

pytestmark = pytest.mark.timeout(120)

USER_NAMES = ("state", "context", "conf", "stormconf", "storm_conf", "collector", "window", "outputs", "name",
              "logger", "log")
STATE: dict[str, Any] = {}
wait = functools.partial(wait_until, interval=0.02)
MULTILANG = Path(__file__).resolve().parents[1] / "streamparse" / "fixtures" / "multilang"


def reset(**values: Any) -> None:
    STATE.clear()
    STATE.update(acked=[], failed=[], clobbered=[], seen=[], lock=threading.Lock(), **values)


def claim(obj: Any, where: str, skip: tuple[str, ...] = ()) -> None:
    """Assign every user name a value of the component's own (``outputs`` keeps its fields)."""
    for name in USER_NAMES:
        if name in skip:
            continue
        if name == "outputs":
            obj.outputs = list(type(obj).outputs or [])
        elif name == "logger":
            obj.logger = logging.getLogger(f"user.{type(obj).__name__}")
        elif name == "log":
            obj.log = ["the user's own list"]
        else:
            setattr(obj, name, f"user {name} from {where}")
    obj._claimed_at = where


def check(obj: Any, skip: tuple[str, ...] = ()) -> None:
    """Record any name whose value is no longer the one the component assigned."""
    where = obj._claimed_at
    for name in USER_NAMES:
        if name in skip or name in ("outputs", "logger", "log"):
            continue
        if getattr(obj, name) != f"user {name} from {where}":
            STATE["clobbered"].append((type(obj).__name__, name, getattr(obj, name)))
    if not (isinstance(obj.logger, logging.Logger) and obj.logger.name.startswith("user.")):
        STATE["clobbered"].append((type(obj).__name__, "logger", obj.logger))
    if obj.log != ["the user's own list"]:
        STATE["clobbered"].append((type(obj).__name__, "log", obj.log))


@pytest.fixture
def local_topology() -> Iterator[Callable[..., LocalTopology]]:
    started: list[LocalTopology] = []

    def start(topology_cls: type, **conf: Any) -> LocalTopology:
        # a name of its own: the memory state provider keeps a task's state for the whole process
        local = LocalTopology(topology_cls, f"names-{uuid.uuid4().hex[:8]}", user_overrides={
            "topology.message.timeout.secs": 10, "topology.state.provider": "memory",
            "topology.state.checkpoint.interval.ms": 200, **conf})
        started.append(local)
        return local.start()

    yield start
    for local in started:
        local.stop(drain_secs=0)


class NamedSpout(Spout):
    """Emits ids 0..count-1 with tup_id; owns every user name."""

    outputs = ["n", "word"]

    def __init__(self) -> None:
        claim(self, "__init__")

    def initialize(self, stormconf: Any, context: Any) -> None:
        claim(self, "initialize")
        self.next_id = 0
        self.replays: list[int] = []

    def next_tuple(self) -> None:
        if self.replays:
            n = self.replays.pop(0)
        elif self.next_id < STATE["count"]:
            n = self.next_id
            self.next_id += 1
        else:
            return
        self.emit([n, ["apple", "pear", "fig"][n % 3]], tup_id=n)
        time.sleep(0.001)

    def ack(self, tup_id: Any) -> None:
        check(self)
        with STATE["lock"]:
            STATE["acked"].append(tup_id)

    def fail(self, tup_id: Any) -> None:
        with STATE["lock"]:
            STATE["failed"].append(tup_id)
        self.replays.append(tup_id)


class NamedReliableSpout(ReliableSpout):
    outputs = ["n", "word"]

    def initialize(self, stormconf: Any, context: Any) -> None:
        claim(self, "initialize")
        self.next_id = 0

    def next_tuple(self) -> None:
        if self.next_id < STATE["count"]:
            self.emit([self.next_id, "kiwi"], tup_id=self.next_id)
            self.next_id += 1

    def ack(self, tup_id: Any) -> None:
        super().ack(tup_id)
        check(self)
        with STATE["lock"]:
            STATE["acked"].append(tup_id)


class NamedBolt(Bolt):
    outputs = ["n"]

    def __init__(self) -> None:
        claim(self, "__init__")

    def initialize(self, stormconf: Any, context: Any) -> None:
        claim(self, "initialize")

    def process(self, tup: Any) -> None:
        check(self)
        claim(self, "process")
        self.emit([tup.values.n])


class NamedBatchingBolt(BatchingBolt):
    outputs = ["n"]
    secs_between_batches = 0.05

    def initialize(self, stormconf: Any, context: Any) -> None:
        claim(self, "initialize")
        self.timer_interval_secs = 0.05      # a read-only property before issue 20

    def process_batch(self, key: Any, tups: list[Any]) -> None:
        check(self)
        for tup in tups:
            self.emit([tup.values.n])


class NamedWindowedBolt(WindowedBolt):
    outputs = ["ns"]

    def initialize(self, stormconf: Any, context: Any) -> None:
        claim(self, "initialize")

    def process_window(self, window: Any) -> None:
        check(self, skip=("window",))
        if self.window is not None and not isinstance(self.window, str) and self.window is window:
            STATE["clobbered"].append(("NamedWindowedBolt", "window", "reused"))
        claim(self, "process_window", skip=("window",))
        self.window = window                 # Storm users keep the window around
        self.emit([[t.values.n for t in window.get()]])


class Sink(Bolt):
    outputs: list[str] = []

    def process(self, tup: Any) -> None:
        with STATE["lock"]:
            STATE["seen"].append(tup.values[0])


def _all_acked(count: int) -> None:
    wait(lambda: len(set(STATE["acked"])) >= count, timeout=40, what=f"all {count} tuples acked")
    assert sorted(set(STATE["acked"])) == list(range(count))
    assert STATE["clobbered"] == [], f"the framework changed user attributes: {STATE['clobbered'][:5]}"


def test_spout_and_bolt_own_every_user_name(local_topology: Any) -> None:
    reset(count=60)

    class Topo(Topology):
        numbers = NamedSpout.spec()
        more = NamedReliableSpout.spec()
        double = NamedBolt.spec(inputs=[numbers, more])
        sink = Sink.spec(inputs=[double])

    local_topology(Topo)
    _all_acked(60)


def test_batching_bolt_owns_every_user_name_and_its_timer(local_topology: Any) -> None:
    reset(count=40)

    class Topo(Topology):
        numbers = NamedSpout.spec()
        batches = NamedBatchingBolt.spec(inputs=[numbers])
        sink = Sink.spec(inputs=[batches])

    local_topology(Topo)
    _all_acked(40)


def test_windowed_bolt_owns_every_user_name(local_topology: Any) -> None:
    reset(count=50)

    class Topo(Topology):
        numbers = NamedSpout.spec()
        windows = NamedWindowedBolt().with_tumbling_window(WindowedBolt.Count(10)).spec(inputs=[numbers])
        sink = Sink.spec(inputs=[windows])

    local_topology(Topo)
    _all_acked(50)
    assert sorted(n for ns in STATE["seen"] for n in ns) == list(range(50))


class StateNamedCounter(StatefulBolt):
    """The natural way to write it (Storm's field name): ``self.state`` is the user's attribute."""

    outputs = ["word", "count"]

    def initialize(self, stormconf: Any, context: Any) -> None:
        claim(self, "initialize", skip=("state",))
        self.state = None

    def init_state(self, state: Any) -> None:
        self.state = state

    def process(self, tup: Any) -> None:
        check(self, skip=("state",))
        word = tup.values.word
        count = self.state.get(word, 0) + 1
        self.state.put(word, count)
        self.emit([word, count])


class StateNamedWindows(StatefulWindowedBolt):
    outputs = ["ns"]

    def initialize(self, stormconf: Any, context: Any) -> None:
        claim(self, "initialize", skip=("state", "window"))
        self.state = None
        self.window = None

    def init_state(self, state: Any) -> None:
        self.state = state

    def pre_commit(self, txid: int) -> None:
        with STATE["lock"]:
            STATE["commits"].append((time.monotonic(), len(STATE["processed"])))

    def process_window(self, window: Any) -> None:
        check(self, skip=("state", "window"))
        self.window = window
        ns = [t.values.n for t in window.get()]
        self.state.put("windows", self.state.get("windows", 0) + 1)
        with STATE["lock"]:
            STATE["processed"].extend(ns)
        self.emit([ns])


def test_stateful_bolt_user_may_name_its_field_state(local_topology: Any) -> None:
    reset(count=60)

    class Topo(Topology):
        numbers = NamedSpout.spec()
        counter = StateNamedCounter.spec(inputs={numbers: Grouping.fields("word")}, par=2)
        sink = Sink.spec(inputs=[counter])

    local = local_topology(Topo)
    _all_acked(60)
    counters = [t.component for ex in local.runtime.executors.values() if ex.component_id == "counter"
                for t in ex.tasks.values()]
    totals = {w: c.state.get(w) for c in counters for w in ("apple", "pear", "fig") if c.state.get(w)}
    assert totals == {"apple": 20, "pear": 20, "fig": 20}
    assert sum(t.restarts for ex in local.runtime.executors.values() for t in ex.tasks.values()) == 0


def test_stateful_windowed_bolt_user_may_name_state_and_window(local_topology: Any) -> None:
    reset(count=50, commits=[], processed=[])

    class Topo(Topology):
        numbers = NamedSpout.spec()
        windows = StateNamedWindows().with_tumbling_window(WindowedBolt.Count(10)).spec(inputs=[numbers])
        sink = Sink.spec(inputs=[windows])

    local = local_topology(Topo)
    _all_acked(50)
    assert sorted(STATE["processed"]) == list(range(50))
    (bolt,) = [t.component for ex in local.runtime.executors.values() if ex.component_id == "windows"
               for t in ex.tasks.values()]
    assert bolt.state.get("windows") == 5 and len(bolt.window) == 10


def test_shell_bolt_subclass_may_declare_user_names(local_topology: Any, tmp_path: Path) -> None:
    if shutil.which("node") is None:
        pytest.skip("node is not installed (the multilang fixture bolt is Node.js)")
    reset(count=20)

    class Upper(ShellBolt):
        # class attributes a user could plausibly give the subclass
        state = context = conf = stormconf = storm_conf = collector = window = "user's"
        name = "upper-by-user"
        logger = logging.getLogger("user.upper")
        log = ["the user's own list"]

    class Topo(Topology):
        numbers = NamedSpout.spec()
        upper = Upper.spec(command="node", script=str(MULTILANG / "upper_bolt.js"),
                           inputs={numbers: Grouping.fields("word")}, outputs=["word", "length"])
        sink = Sink.spec(inputs=[upper])

    local_topology(Topo, **{"multilang.test.dir": str(tmp_path)})
    _all_acked(20)
    assert sorted(STATE["seen"], key=int) == [str(n) for n in range(20)]   # upper-cased n


class _TridentNames:
    """Trident operations: the framework keeps nothing on the user's object."""

    def prepare(self, conf: Any, context: Any) -> None:
        claim(self, "prepare")

    def cleanup(self) -> None:
        pass


def test_trident_operations_and_spouts_own_every_user_name() -> None:
    from stormpy.trident import (Aggregator, BatchSpout, CombinerAggregator, Filter, Function, ReducerAggregator,
                                 TridentTopology)

    from trident._harness import FAST, FixedSpout, record, run_until

    class Named(_TridentNames):
        outputs: list[str] = []

    class Double(Named, Function):
        def execute(self, tup: Any, collector: Any) -> None:
            check(self)
            self.collector = f"user collector from {self._claimed_at}"
            collector.emit([tup["n"] * 2])

    class Even(Named, Filter):
        def is_keep(self, tup: Any) -> bool:
            check(self)
            return tup[0] % 2 == 0

    class Total(Named, CombinerAggregator):
        def init(self, tup: Any) -> int:
            check(self)
            return tup[0]

        def combine(self, a: int, b: int) -> int:
            return a + b

        def zero(self) -> int:
            return 0

    class Listed(Named, ReducerAggregator):
        def init(self) -> list:
            return []

        def reduce(self, curr: list, tup: Any) -> list:
            check(self)
            return curr + [tup[0]]

    class Counted(Named, Aggregator):
        def init(self, batch_id: Any, collector: Any) -> dict:
            check(self)
            return {"n": 0}

        def aggregate(self, state: dict, tup: Any, collector: Any) -> None:
            state["n"] += 1

        def complete(self, state: dict, collector: Any) -> None:
            collector.emit([state["n"]])

    class NamedFixedSpout(FixedSpout):
        def __init__(self, fields: list[str], rows: list) -> None:
            super().__init__(fields, rows)
            claim(self, "__init__", skip=("outputs",))

        def initialize(self, stormconf: Any, context: Any) -> None:
            claim(self, "initialize", skip=("outputs",))

        def emit_batch(self, txid: Any, collector: Any, partition: Any, meta: Any) -> None:
            check(self)
            super().emit_batch(txid, collector, partition, meta)

    class NamedBatchSpout(BatchSpout):
        outputs = ["b"]

        def initialize(self, stormconf: Any, context: Any) -> None:
            claim(self, "initialize")

        def emit_batch(self, batch_id: Any, collector: Any) -> None:
            check(self)
            self.collector = f"user collector from {self._claimed_at}"
            if batch_id <= 3:
                collector.emit([100 + batch_id])

    reset()
    rows = [[[n] for n in range(0, 10)], [[n] for n in range(10, 20)]]
    recorders: dict[str, Any] = {}

    class Topo(TridentTopology):
        config = FAST

        def build(self, conf: Any) -> None:
            s = self.new_stream("named", NamedFixedSpout(["n"], rows), par=2)
            recorders["each"] = record(s.each(["n"], Double(), ["d"]).each(["d"], Even()).project(["d"]), "names-each", ["d"])
            recorders["sum"] = record(s.aggregate(["n"], Total(), ["total"]), "names-sum", ["total"])
            recorders["list"] = record(s.aggregate(["n"], Listed(), ["ns"]), "names-list", ["ns"])
            recorders["count"] = record(s.aggregate(["n"], Counted(), ["c"]), "names-count", ["c"])
            recorders["batch"] = record(self.new_stream("named-batches", NamedBatchSpout()), "names-batch", ["b"])

    def done() -> bool:
        return (bool(recorders) and sum(t for (t,) in recorders["sum"].rows()) == sum(range(20))
                and len(recorders["batch"].rows()) == 3)

    local = run_until(Topo, done, name="trident-names")
    assert not local.reporter.errors, dict(local.reporter.errors)
    assert sorted(d for (d,) in recorders["each"].rows()) == [2 * n for n in range(20)]
    assert sorted(n for (ns,) in recorders["list"].rows() for n in ns) == list(range(20))
    assert sum(c for (c,) in recorders["count"].rows()) == 20
    assert sorted(b for (b,) in recorders["batch"].rows()) == [101, 102, 103]
    assert STATE["clobbered"] == []


def test_assigning_a_read_only_framework_attribute_is_refused_at_start() -> None:
    """What cannot work is refused before anything runs, in one line naming the attribute."""
    from stormpy.errors import UserError
    from stormpy.spark.sink import SparkSinkBolt

    class MySink(SparkSinkBolt):
        def initialize(self, stormconf: Any, context: Any) -> None:
            super().initialize(stormconf, context)
            self.timer_interval_secs = 1          # SparkSinkBolt computes it (no setter)

    class Topo(Topology):
        numbers = NamedSpout.spec()
        sink = MySink.spec(inputs=[numbers])

    with pytest.raises(UserError) as err:
        LocalTopology(Topo, "read-only")
    message = str(err.value)
    assert "\n" not in message and "component 'sink'" in message
    assert "MySink.initialize assigns self.timer_interval_secs" in message and "SparkSinkBolt" in message


def test_docs_stateful_word_counter_runs_as_written(local_topology: Any) -> None:
    """The windows-and-state how-to's ``WordCounter`` (docs/snippets/stateful_word_counter.py), which
    names its field ``state``."""
    snippet = Path(__file__).resolve().parents[2] / "docs" / "snippets" / "stateful_word_counter.py"
    namespace: dict[str, Any] = {}
    exec(compile(snippet.read_text(), str(snippet), "exec"), namespace)
    word_counter = namespace["WordCounter"]
    reset(count=30)

    class Topo(Topology):
        numbers = NamedSpout.spec()
        counter = word_counter.spec(inputs={numbers: Grouping.fields("word")})

    local = local_topology(Topo)
    wait(lambda: len(set(STATE["acked"])) >= 30, timeout=40, what="all 30 words acked")
    (counter,) = [t.component for ex in local.runtime.executors.values() if ex.component_id == "counter"
                  for t in ex.tasks.values()]
    assert {w: counter.state.get(w) for w in ("apple", "pear", "fig")} == {"apple": 10, "pear": 10, "fig": 10}
