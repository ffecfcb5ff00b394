"""The bolt receive loop's shortcuts (issue 24) keep what user code and the stats see.

- Tuples are built without an ``__init__`` call: they are still ``Tuple`` objects with every
  field set, values by field name.
- One-field values holding a short ``str`` are shared between tuples of one (source, stream);
  other values (ints, bools, long strings, several fields) are built per tuple, so ``1`` and
  ``True`` never swap types.
- Executed and acked counts come from indexes per run of one stats key: they stay exact with
  tuples acked in ``process``, held ones, messages on unknown streams and two sources mixed.
- One-target emits are counted by a C counter folded into the stream counter before each
  batch is handed over and at each flush.

Real executors of a compiled plan whose outbox hands batches to a recording transfer, driven
on the test's thread.
"""
from __future__ import annotations

from typing import Any

from stormpy import Bolt, Grouping, Spout, Topology, Tuple
from stormpy.api.compile import compile_topology
from stormpy.streams import DEFAULT_STREAM
from stormpy.task.bolt_executor import BoltExecutor, BoltTask
from stormpy.task.runtime import WorkerRuntime
from stormpy.task.spout_executor import SpoutExecutor, SpoutTask
from stormpy.topology.plan import build_plan

SEEN: list[Any] = []


class Words(Spout):
    outputs = ["word"]


class Pairs(Spout):
    outputs = ["a", "b"]


class Record(Bolt):
    """Keeps every tuple; acks ``"ack-me"`` itself, holds ``"hold-me"`` (never acked)."""

    outputs: list[str] = []

    def process(self, tup: Any) -> None:
        SEEN.append(tup)
        if tup.values[0] == "ack-me":
            self.ack(tup)
        elif tup.values[0] == "hold-me":
            self.held_back = tup


class Graph(Topology):
    words = Words.spec(par=1)
    pairs = Pairs.spec(par=1)
    record = Record.spec(inputs={words: Grouping.SHUFFLE, pairs: Grouping.SHUFFLE}, par=1)


class Recorder:
    def __init__(self) -> None:
        self.sent: list[tuple[int, list[Any]]] = []

    def send(self, dest: int, messages: list[Any]) -> None:
        self.sent.append((dest, messages))


def _runtime(**conf: Any) -> tuple[WorkerRuntime, Recorder]:
    plan = build_plan(compile_topology(Graph), {"topology.acker.executors": 1, **conf}, "g-1", "g")
    recorder = Recorder()
    return WorkerRuntime(plan, plan.executors(), recorder), recorder


def _bolt(runtime: WorkerRuntime) -> tuple[BoltExecutor, BoltTask]:
    ex = next(e for e in runtime.executors.values() if e.component_id == "record")
    task = BoltTask(ex, ex.start_task)
    ex.tasks[task.task_id] = task
    ex._start_task(task)
    assert task.component is not None, "the bolt starts"
    return ex, task


def _src(runtime: WorkerRuntime, component: str) -> int:
    return int(runtime.plan.components[component].tasks[0])


def test_received_tuples_are_whole_tuples_and_short_strings_share_their_values() -> None:
    SEEN.clear()
    runtime, _ = _runtime()
    ex, task = _bolt(runtime)
    words, pairs = _src(runtime, "words"), _src(runtime, "pairs")
    long_text = "x" * 500
    info = ex.source_info(task, (DEFAULT_STREAM, words, ["storm"], None))
    assert info is not None
    emitted = info[1]._make(["flink"])   # a values tuple of the receiver's class (an emitter's new_row)
    task.driver.on_messages([(DEFAULT_STREAM, words, ["storm"], (11, 12)), (DEFAULT_STREAM, words, ["storm"], None),
                             (DEFAULT_STREAM, words, [1], None), (DEFAULT_STREAM, words, [True], None),
                             (DEFAULT_STREAM, words, [long_text], None), (DEFAULT_STREAM, words, [long_text], None),
                             (DEFAULT_STREAM, pairs, ["p", "q"], None), (DEFAULT_STREAM, pairs, ["p", "q"], None),
                             (DEFAULT_STREAM, words, emitted, None)])
    first, second, one, true, long1, long2, pair1, pair2, shared = SEEN
    assert shared.values is emitted, "a values tuple of the source's class is taken as it is"
    assert all(isinstance(t, Tuple) for t in SEEN)
    assert (first.component, first.stream, first.task, first._anchors, first.id) == ("words", DEFAULT_STREAM, words,
                                                                                    (11, 12), 12)
    assert first.values.word == "storm" and first.values == ("storm",) and first.values._fields == ("word",)
    assert second.values is first.values, "a repeated short string shares its values"
    assert second.id is None and second._ack_val == 0 and second._recv == 0.0
    assert type(one.values[0]) is int and type(true.values[0]) is bool
    assert long1.values == long2.values and long1.values is not long2.values, "long strings are not kept"
    assert pair1.values.b == "q" and pair1.values is not pair2.values
    assert repr(first).startswith(f"Tuple(id=12, component='words', stream='default', task={words}, values=")


class KeepSome(Bolt):
    """Keeps every third tuple it gets; notes what each one held while in ``process``."""

    outputs: list[str] = []

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.kept: list[tuple[Any, str]] = []
        self.objects: list[int] = []

    def process(self, tup: Any) -> None:
        self.objects.append(id(tup))
        if len(self.objects) % 3 == 1:
            self.kept.append((tup, tup.values.word))
        elif tup.values.word == "w5":   # kept, and no longer the tuple in hand (as after a
            self.kept.append((tup, "w5"))   # processing() block that raised inside process)
            self._task.current = None


class KeepGraph(Topology):
    words = Words.spec(par=1)
    keep = KeepSome.spec(inputs={words: Grouping.SHUFFLE}, par=1)


def test_a_tuple_process_kept_is_never_reused_and_one_it_did_not_is() -> None:
    """The receive loop reuses the last tuple object when nothing but the loop holds it; a
    tuple the bolt kept keeps its own fields, whatever came after it."""
    plan = build_plan(compile_topology(KeepGraph), {"topology.acker.executors": 1}, "k-1", "k")
    runtime = WorkerRuntime(plan, plan.executors(), Recorder())
    ex = next(e for e in runtime.executors.values() if e.component_id == "keep")
    task = BoltTask(ex, ex.start_task)
    ex.tasks[task.task_id] = task
    ex._start_task(task)
    words = int(plan.components["words"].tasks[0])
    names = [f"w{i}" for i in range(30)]
    task.driver.on_messages([(DEFAULT_STREAM, words, [name], (i + 1, i + 100)) for i, name in enumerate(names)])
    bolt = task.component
    expected = sorted(names[0::3] + ["w5"], key=names.index)
    assert [word for _tup, word in bolt.kept] == expected
    assert [(tup.values.word, tup.id) for tup, _word in bolt.kept] == [(n, names.index(n) + 100) for n in expected]
    assert all(tup._done for tup, _word in bolt.kept), "auto-acked"
    # a new tuple is made while the last one is still in hand: the same object twice in a row
    # is the reused one (the 2nd and 3rd tuples were not kept), never a kept one (the 1st)
    assert bolt.objects[2] == bolt.objects[1] != bolt.objects[0], "the tuple nobody kept was reused"


def test_a_batch_that_is_a_tuple_is_delivered_like_a_list() -> None:
    """A message envelope off the wire is decoded with ``use_list=False``: its batch is a tuple
    of messages, which the receive loop takes as it takes a list (compiled too: drivers.pxd
    leaves the batch untyped)."""
    SEEN.clear()
    runtime, _ = _runtime()
    ex, task = _bolt(runtime)
    words = _src(runtime, "words")
    task.driver.on_messages(((DEFAULT_STREAM, words, ("a",), (11, 12)), (DEFAULT_STREAM, words, ("b",), None)))
    assert [t.values.word for t in SEEN] == ["a", "b"] and SEEN[0].id == 12 and SEEN[1]._done


def test_executed_and_acked_are_exact_with_acks_in_process_unknown_streams_and_two_sources() -> None:
    SEEN.clear()
    runtime, _ = _runtime()
    ex, task = _bolt(runtime)
    words, pairs = _src(runtime, "words"), _src(runtime, "pairs")
    batch = [(DEFAULT_STREAM, words, ["a"], (1, 2)), (DEFAULT_STREAM, words, ["ack-me"], (3, 4)),
             ("nobody-subscribes", words, ["z"], None), (DEFAULT_STREAM, words, ["hold-me"], (5, 6)),
             (DEFAULT_STREAM, pairs, ["p", "q"], None), (DEFAULT_STREAM, pairs, ["ack-me", "q"], None),
             (DEFAULT_STREAM, words, ["b"], None)]
    task.driver.on_messages(batch)
    assert len(SEEN) == 6
    words_key, pairs_key = ("words", DEFAULT_STREAM), ("pairs", DEFAULT_STREAM)
    assert dict(ex.stats.executed) == {words_key: 4, pairs_key: 2}
    # "hold-me" is auto-acked too (Record acks every tuple it does not ack itself); the bolt's
    # own acks count once, in ack()
    assert dict(ex.stats.acked) == {words_key: 4, pairs_key: 2}
    assert all(t._done for t in SEEN)


def test_held_tuples_are_executed_but_not_acked() -> None:
    SEEN.clear()
    runtime, _ = _runtime()
    ex, task = _bolt(runtime)
    task.driver.auto_ack = False   # as for a bolt with ``auto_ack = False``
    words = _src(runtime, "words")
    task.driver.on_messages([(DEFAULT_STREAM, words, ["a"], (1, 2)), (DEFAULT_STREAM, words, ["ack-me"], (3, 4)),
                             (DEFAULT_STREAM, words, ["b"], None)])
    key = ("words", DEFAULT_STREAM)
    assert dict(ex.stats.executed) == {key: 3}
    assert dict(ex.stats.acked) == {key: 1}
    assert sorted(t.values[0] for t in task.held.values()) == ["a", "b"]


def test_a_crash_in_process_counts_the_tuples_before_it_and_keeps_the_rest() -> None:
    SEEN.clear()
    runtime, _ = _runtime()
    ex, task = _bolt(runtime)
    words = _src(runtime, "words")

    def boom(tup: Any) -> None:
        SEEN.append(tup)
        if tup.values[0] == "boom":
            raise RuntimeError("boom")

    task.driver.process = boom
    batch = [(DEFAULT_STREAM, words, [w], None) for w in ("a", "b", "boom", "c", "d")]
    try:
        task.driver.on_messages(batch)
    except RuntimeError:
        pass
    else:
        raise AssertionError("the driver lets the crash through to the executor")
    key = ("words", DEFAULT_STREAM)
    assert dict(ex.stats.executed) == {key: 2} and dict(ex.stats.acked) == {key: 2}
    assert task.current is not None and task.current.values[0] == "boom", "the crashed tuple stays in hand"
    assert task.backlog == [batch[3:]]


def test_a_crash_in_a_sampled_tuple_leaves_sampling_on() -> None:
    """``topology.stats.sample.rate`` 0.5: every second tuple is timed. One that raises in
    ``process`` must not leave the countdown at 0, where the next tuple would count past it
    and no tuple would be timed again."""
    SEEN.clear()
    runtime, _ = _runtime(**{"topology.stats.sample.rate": 0.5})
    ex, task = _bolt(runtime)
    words = _src(runtime, "words")
    assert ex.settings.sample_every == 2

    def boom(tup: Any) -> None:
        if tup.values[0] == "boom":
            raise RuntimeError("boom")

    task.driver.process = boom
    try:
        task.driver.on_messages([(DEFAULT_STREAM, words, [w], None) for w in ("a", "boom")])   # "boom" is sampled
    except RuntimeError:
        pass
    ex.stats.execute_ms.clear()
    task.driver.on_messages([(DEFAULT_STREAM, words, [w], None) for w in ("c", "d", "e", "f")])
    assert ex.stats.execute_ms, "tuples after the crash are timed again"


def test_one_target_emits_are_counted_before_each_batch_and_at_flush() -> None:
    runtime, recorder = _runtime(**{"topology.transfer.batch.size": 4})
    ex: SpoutExecutor = next(e for e in runtime.executors.values() if e.component_id == "words")
    task = SpoutTask(ex, ex.start_task)
    counter = ex.stats.stream_counter(DEFAULT_STREAM)
    for n in range(8):   # exactly two full batches: no flush needed to hand them over
        task.emit([f"w{n}"], tup_id=n)
    assert sum(len(m) for _dest, m in recorder.sent if m[0][0] == DEFAULT_STREAM) == 8
    assert counter == [8, 8], "counted before each batch is handed over"
    ex.flush()
    assert counter == [8, 8]
    task.emit(["w8"])
    ex.flush()
    assert counter == [9, 9]
    assert ex.stats.totals()["emitted"] == 9


def test_a_step_joins_queued_batches_for_one_task_in_order_and_keeps_control_calls_in_place() -> None:
    """Batches queued for one task reach its driver as one batch (issue 24: parallelism 2 sends
    more, smaller batches) while the joined one holds fewer than ``topology.transfer.batch.size``
    messages; a control call
    ends the join and runs between the batches around it. The first list of a join is extended
    in place (a received list is the executor's alone); the others are not changed."""
    SEEN.clear()
    runtime, _ = _runtime(**{"topology.transfer.batch.size": 5})
    ex, task = _bolt(runtime)
    words, pairs = _src(runtime, "words"), _src(runtime, "pairs")
    calls: list[list[Any]] = []
    deliver = ex._on_messages
    ex._on_messages = lambda t, messages: (calls.append(list(messages)), deliver(t, messages))  # type: ignore[method-assign]
    order: list[str] = []
    first = [(DEFAULT_STREAM, words, ["a"], (1, 2)), (DEFAULT_STREAM, words, ["b"], (1, 3))]
    second = [(DEFAULT_STREAM, pairs, ["c", "d"], None)]
    third = [(DEFAULT_STREAM, words, [w], None) for w in ("e", "f", "g")]
    fourth = [(DEFAULT_STREAM, words, ["h"], None)]
    last = [(DEFAULT_STREAM, words, ["i"], None)]
    for batch in (first, second, third, fourth):
        ex.enqueue(task.task_id, batch)
    ex.call_soon(lambda: order.append(f"control after {len(SEEN)} tuples"))
    ex.enqueue(task.task_id, last)
    assert ex.queued == 8
    assert ex.step() == 0.0
    assert [[m[2][0] for m in c] for c in calls] == [["a", "b", "c", "e", "f", "g"], ["h"], ["i"]]
    assert order == ["control after 7 tuples"]
    assert [t.values[0] for t in SEEN] == list("abcefghi")
    assert len(first) == 6 and len(second) == 1 and len(third) == 3, "the first list joined the others"
    assert ex.queued == 0 and ex.queue.empty()
    assert dict(ex.stats.executed) == {("words", DEFAULT_STREAM): 7, ("pairs", DEFAULT_STREAM): 1}


def test_a_join_starting_with_a_batch_off_the_wire_copies_its_tuple() -> None:
    """The wire may hand a batch over as a tuple (msgpack ``use_list=False``): a join starting
    with one copies it into a list, and a tuple joining a list is added to it."""
    SEEN.clear()
    runtime, _ = _runtime(**{"topology.transfer.batch.size": 50})
    ex, task = _bolt(runtime)
    words = _src(runtime, "words")
    off_wire = tuple((DEFAULT_STREAM, words, (w,), None) for w in ("a", "b"))
    ex.enqueue(task.task_id, off_wire)
    ex.enqueue(task.task_id, [(DEFAULT_STREAM, words, ["c"], None)])
    ex.enqueue(task.task_id, ((DEFAULT_STREAM, words, ("d",), None),))
    assert ex.step() == 0.0
    assert [t.values[0] for t in SEEN] == list("abcd")
    assert len(off_wire) == 2 and ex.queued == 0


def test_a_raw_batch_bolts_queued_batches_are_not_joined() -> None:
    """A raw-batch driver keeps nothing of a call that raised, so its queued batches reach it one
    by one (``Driver.joins``): a crash in the first loses none of the second, which the new
    instance gets."""
    from stormpy.task.drivers import RawBatchDriver

    runtime, _ = _runtime(**{"topology.transfer.batch.size": 50})
    ex, task = _bolt(runtime)
    words = _src(runtime, "words")
    calls: list[list[Any]] = []
    task.driver = RawBatchDriver(lambda messages: calls.append([m[2][0] for m in messages]))
    for batch in ([(DEFAULT_STREAM, words, ["a"], None)], [(DEFAULT_STREAM, words, ["b"], None)]):
        ex.enqueue(task.task_id, batch)
    assert ex.step() == 0.0
    assert calls == [["a"], ["b"]]
