"""The fast and the general emit path send the same tuple-tree traffic (``stormpy.task.tree``).

The fast paths inline the common case of the anchoring strategies for speed; here the same
emits go once through the fast path (``emit(values)``) and once through the general one
(``emit(values, stream="default")`` takes it), from the same random seed, on real executors
of a compiled plan whose outbox hands batches to a recording transfer (no threads). Every
message must be the same, acker traffic included, and the XOR arithmetic must balance in the
acker's ``Ledger`` as in ``tests/acker/test_acker_ledger.py``.
"""
from __future__ import annotations

import random
from typing import Any

import pytest

from stormpy import Bolt, Grouping, Spout, Topology, Tuple
from stormpy.acker.ledger import ACKED, Ledger
from stormpy.streams import ACK_ACK, ACK_INIT, DEFAULT_STREAM
from stormpy.task.bolt_executor import BoltExecutor, BoltTask
from stormpy.task.runtime import WorkerRuntime
from stormpy.task.spout_executor import SpoutExecutor, SpoutTask
from stormpy.task.tree import seed_ids
from stormpy.api.compile import compile_topology
from stormpy.topology.plan import build_plan

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "the", "lazy", "dog"]


class Sentences(Spout):
    outputs = ["sentence"]


class Words(Spout):
    outputs = ["word"]


class Split(Bolt):
    outputs = ["word"]


class Count(Bolt):
    outputs: list[str] = []


class WordCount(Topology):
    spout = Sentences.spec(par=1)
    split = Split.spec(inputs={spout: Grouping.SHUFFLE}, par=1)
    count = Count.spec(inputs={split: Grouping.fields("word")}, par=2)


class Recorder:
    """The transfer: keeps every ``(dest, message)`` in the order the outbox handed them over."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, Any]] = []

    def send(self, dest: int, messages: list[Any]) -> None:
        self.sent.extend((dest, m) for m in messages)


def _runtime(topology: type[Topology] = WordCount, **conf: Any) -> tuple[WorkerRuntime, Recorder]:
    plan = build_plan(compile_topology(topology), {"topology.acker.executors": 2, **conf}, "wc-1", "wc")
    recorder = Recorder()
    return WorkerRuntime(plan, plan.executors(), recorder), recorder


def _executor(runtime: WorkerRuntime, component: str) -> Any:
    return next(e for e in runtime.executors.values() if e.component_id == component)


def _received(component: str, src: int, values: list[Any], anchors: tuple[int, ...] | None) -> Tuple:
    """A tuple as the bolt executor builds it for a received message."""
    return Tuple(None, component, DEFAULT_STREAM, src, values, anchors, 0.0, (component, DEFAULT_STREAM))


def _spout_traffic(general: bool, seed: int) -> tuple[list[tuple[int, Any]], list[int]]:
    seed_ids(seed)
    runtime, recorder = _runtime()
    ex: SpoutExecutor = _executor(runtime, "spout")
    task = SpoutTask(ex, ex.start_task)
    for n, word in enumerate(WORDS):
        if general:
            task.emit([word], tup_id=n, stream=DEFAULT_STREAM)
        else:
            task.emit([word], tup_id=n)
    task.emit(["untracked"]) if not general else task.emit(["untracked"], stream=DEFAULT_STREAM)
    ex.flush()
    return recorder.sent, sorted(task.pending_live)


def _bolt_traffic(general: bool, seed: int) -> tuple[list[tuple[int, Any]], list[Tuple]]:
    seed_ids(seed)
    runtime, recorder = _runtime()
    ex: BoltExecutor = _executor(runtime, "split")
    task = BoltTask(ex, ex.start_task)
    spout_task = runtime.plan.components["spout"].tasks[0]
    inputs = [_received("spout", spout_task, ["a b"], (random.getrandbits(64), random.getrandbits(64))),
              _received("spout", spout_task, ["c d"], None),
              _received("spout", spout_task, ["e f"], (1, 2, 3, 4))]
    for tup in inputs:
        task.current = tup             # what drivers._deliver does per tuple
        task.hand.roots = tup._anchors
        for word in tup.values[0].split():
            if general:
                task.emit([word], stream=DEFAULT_STREAM)
            else:
                task.emit([word])
        task.ack(tup)   # folds the fast emit's edges (task.hand.edges) into the ack value
    task.current = None
    ex.flush()
    return recorder.sent, inputs


def test_a_spout_starts_the_same_trees_on_both_paths() -> None:
    fast, fast_roots = _spout_traffic(general=False, seed=21)
    general, general_roots = _spout_traffic(general=True, seed=21)
    assert fast == general
    assert fast_roots == general_roots and len(fast_roots) == len(WORDS)
    # one __ack_init per acker task per flush, carrying [root, value, spout task, ...]
    inits = [m for _dest, m in fast if m[0] == ACK_INIT]
    assert len(inits) <= 2 and all(len(m[2]) % 3 == 0 for m in inits)
    assert sorted(root for m in inits for root in m[2][0::3]) == fast_roots
    assert _spout_traffic(general=False, seed=22)[0] != fast, "the ids are random: the seed must matter"


def test_a_spout_tree_balances_in_the_acker_ledger() -> None:
    sent, _roots = _spout_traffic(general=False, seed=5)
    ledger = Ledger()
    data = [m for _dest, m in sent if m[0] == DEFAULT_STREAM and m[3] is not None]
    for _dest, m in sent:
        if m[0] == ACK_INIT:
            for i in range(0, len(m[2]), 3):
                root, value, spout_task = m[2][i:i + 3]
                assert ledger.init(root, value, spout_task) is None
    for m in data:   # the split bolt acks each tuple without emitting: every tree completes
        root, edge = m[3]
        assert ledger.ack(root, edge) == (ACKED, m[1])
    assert len(ledger) == 0


def _as_lists(sent: list[tuple[int, Any]]) -> list[tuple[int, Any]]:
    """The traffic with data messages' values as lists: a fields-grouped one-field ``str`` goes
    out of the fast emit as the receivers' values tuple (``tree.new_row``), of the general path
    as the list emitted; the same values either way."""
    return [(dest, (m[0], m[1], list(m[2]), m[3]) if m[0] == DEFAULT_STREAM else m) for dest, m in sent]


def test_a_bolt_extends_and_settles_the_same_trees_on_both_paths() -> None:
    fast, fast_inputs = _bolt_traffic(general=False, seed=3)
    general, _ = _bolt_traffic(general=True, seed=3)
    assert _as_lists(fast) == _as_lists(general)
    acks = [m for _dest, m in fast if m[0] == ACK_ACK]
    assert acks, "the anchored inputs' acks reach their ackers"
    words = [m for _dest, m in fast if m[0] == DEFAULT_STREAM]
    assert [m[2][0] for m in words] == ["a", "b", "c", "d", "e", "f"]
    assert [m[3] is None for m in words] == [False, False, True, True, False, False]


def test_a_bolt_tree_completes_only_when_the_emitted_tuples_are_acked() -> None:
    sent, inputs = _bolt_traffic(general=False, seed=9)
    first = inputs[0]
    assert first._anchors is not None
    root, edge = first._anchors
    ledger = Ledger()
    assert ledger.init(root, edge, spout_task=1) is None             # the spout's edge to "a b"
    for _dest, m in sent:
        if m[0] == ACK_ACK:
            pairs = dict(zip(m[2][::2], m[2][1::2]))
            if root in pairs:
                assert ledger.ack(root, pairs[root]) is None        # "a" and "b" still open
    children = [m for _dest, m in sent if m[0] == DEFAULT_STREAM and m[3] is not None and m[3][0] == root]
    assert [m[2][0] for m in children] == ["a", "b"]
    assert all(len(m[3]) == 2 for m in children)   # one (root, edge) pair each
    assert ledger.ack(root, children[0][3][1]) is None
    assert ledger.ack(root, children[1][3][1]) == (ACKED, 1)


def _settled_by(driver: bool, messages: list[Any]) -> dict[int, int]:
    """The combined acks of the count bolt after it acked ``messages``: through its driver
    (auto-ack, settled per batch in runs) or one ``ack`` call per tuple."""
    runtime, _recorder = _runtime()
    ex: BoltExecutor = _executor(runtime, "count")
    task = BoltTask(ex, ex.start_task)
    ex.tasks[task.task_id] = task
    ex._start_task(task)
    assert task.component is not None, "the Count bolt starts"
    if driver:
        task.driver.on_messages(messages)
    else:
        split_task = runtime.plan.components["split"].tasks[0]
        for stream, src, values, anchors in messages:
            assert src == split_task
            task.ack(_received("split", src, values, anchors))
    return ex.trees.settled()


def test_the_driver_settles_a_batch_as_acking_each_tuple_would() -> None:
    random.seed(1)
    runtime, _recorder = _runtime()
    src = runtime.plan.components["split"].tasks[0]
    roots = [random.getrandbits(64) for _ in range(4)]
    anchors: list[tuple[int, ...] | None] = []
    for root in roots[:3]:            # runs of one root (a sentence's words) ...
        anchors += [(root, random.getrandbits(64)) for _ in range(3)]
    anchors += [None, (roots[0], 5, roots[3], 6), (roots[1], 7), (roots[3], 8)]   # ... and the rest,
    anchors += [(roots[3], 9, roots[2], 10), (roots[2], 11)]   # a run going on into and out of two roots
    messages = [(DEFAULT_STREAM, src, [f"w{i}"], a) for i, a in enumerate(anchors)]
    by_driver = _settled_by(driver=True, messages=messages)
    assert by_driver == _settled_by(driver=False, messages=messages)
    assert set(by_driver) == set(roots)


class Splitting(Bolt):
    outputs = ["word"]

    def process(self, tup: Tuple) -> None:
        for word in tup.values[0].split():
            self.emit([word])


class SplittingCount(Topology):
    spout = Sentences.spec(par=1)
    split = Splitting.spec(inputs={spout: Grouping.SHUFFLE}, par=1)
    count = Count.spec(inputs={split: Grouping.fields("word")}, par=2)


def test_the_driver_settles_what_an_emitting_bolt_acks_with_its_children_edges() -> None:
    """An auto-acked tuple that emitted settles its edge XOR its children's edges: of one root
    folded into its run (``drivers._with_value``), of several roots per root (``valued``)."""
    random.seed(4)
    runtime, recorder = _runtime(SplittingCount)
    ex: BoltExecutor = _executor(runtime, "split")
    task = BoltTask(ex, ex.start_task)
    ex.tasks[task.task_id] = task
    ex._start_task(task)
    spout_task = runtime.plan.components["spout"].tasks[0]
    roots = [random.getrandbits(64) for _ in range(3)]
    inputs = [("a b c", (roots[0], 11)), ("d", (roots[0], 12)), ("e f", (roots[1], 13, roots[2], 14)),
              ("g", None), ("h i", (roots[2], 15))]
    task.driver.on_messages([(DEFAULT_STREAM, spout_task, [text], anchors) for text, anchors in inputs])
    expected = {roots[0]: 11 ^ 12, roots[1]: 13, roots[2]: 14 ^ 15}
    ex.outbox.flush()
    for _dest, m in recorder.sent:
        if m[0] == DEFAULT_STREAM and m[3] is not None:
            for root, edge in zip(m[3][0::2], m[3][1::2]):
                expected[root] ^= edge
    assert sum(1 for _dest, m in recorder.sent if m[0] == DEFAULT_STREAM) == 9
    assert ex.trees.settled() == expected


def test_ids_out_of_the_64_bit_range_settle_as_each_tuple_would() -> None:
    """Compiled, a run's XOR is a C 64-bit integer; a negative or too large id (a peer's bug)
    sends the rest of the batch, from that run on, through ``settle`` one tuple at a time:
    nothing is settled twice or lost. Interpreted it is the same arithmetic."""
    random.seed(5)
    roots = [random.getrandbits(64) for _ in range(3)]
    for bad in (-7, 2**70):
        anchors = [(roots[0], 1), (roots[0], 2), (roots[1], 3, roots[2], 4), (roots[1], 5),
                   (roots[1], bad), (roots[1], 6), (roots[2], 7, roots[0], 8), (roots[2], 9), (roots[0], 10)]
        vals = [0, 11, 0, 12, 0, 0, 13, 0, 0]
        in_runs = _executor(_runtime()[0], "count").trees
        in_runs.settle_runs(anchors, [(a, v) for a, v in zip(anchors, vals) if v])
        one_by_one = _executor(_runtime()[0], "count").trees
        for a, v in zip(anchors, vals):
            one_by_one.settle(a, v)
        assert in_runs.settled() == one_by_one.settled(), bad
        # later batches with runs of roots[1], whose combined value is outside 64 bits now: first,
        # after a run already settled, inside a run of several roots, last (after the loop)
        for later in ([(roots[1], 20), (roots[1], 21), (roots[0], 22)],
                      [(roots[0], 23), (roots[0], 24), (roots[1], 25), (roots[1], 26)],
                      [(roots[0], 1), (roots[1], 3), (roots[0], 2, roots[2], 6), (roots[1], 4)]):
            in_runs.settle_runs(later, [])
            for a in later:
                one_by_one.settle(a)
            assert in_runs.settled() == one_by_one.settled(), (bad, later)


def test_settling_in_runs_equals_settling_each_tuple_with_its_ack_value() -> None:
    """``settle_runs`` combines consecutive tuples of one root; with the ack values of tuples
    that emitted (nonzero) it must leave what one ``settle`` per tuple leaves."""
    random.seed(2)
    roots = [random.getrandbits(64) for _ in range(3)]
    anchors = [(roots[0], 1), (roots[0], 2), (roots[0], 3, roots[1], 4), (roots[1], 5),
               (roots[2], 6), (roots[1], 7, roots[2], 8), (roots[2], 9)]
    vals = [random.getrandbits(64) if i % 3 else 0 for i in range(len(anchors))]
    runtime, _recorder = _runtime()
    in_runs = _executor(runtime, "count").trees
    in_runs.settle_runs(anchors, [(a, v) for a, v in zip(anchors, vals) if v])
    one_by_one = _executor(_runtime()[0], "count").trees
    for a, v in zip(anchors, vals):
        one_by_one.settle(a, v)
    assert in_runs.settled() == one_by_one.settled() and set(in_runs.settled()) == set(roots)


def test_a_raw_batch_settles_to_what_settling_each_message_sends() -> None:
    """``settle_raw_batch`` (a written sink batch) sends each ``root, edge`` uncombined; per
    acker task the XOR per root must equal what one ``settle`` per message leaves, with one
    acker and with two (roots split by ``root % n``), trees of several roots included."""
    from stormpy.task.tree import TupleTrees

    random.seed(3)
    roots = [random.getrandbits(64) for _ in range(5)]
    anchors = [(r, random.getrandbits(64)) for r in roots for _ in range(3)]
    anchors.append((roots[0], 11, roots[3], 12))
    for ackers in ([7], [7, 8]):
        raw = TupleTrees(_recording_outbox(), ackers, 1)
        raw.settle_raw_batch(anchors)
        one_by_one = TupleTrees(_recording_outbox(), ackers, 1)
        for a in anchors:
            one_by_one.settle(a)
        for index in range(len(ackers)):
            combined: dict[int, int] = {}
            values = raw.acks[index]
            for root, edge in zip(values[0::2], values[1::2]):
                assert root % len(ackers) == index
                combined[root] = combined.get(root, 0) ^ edge
            expected = {r: v for r, v in one_by_one.pending.items() if r % len(ackers) == index}
            assert combined == expected and combined


def _recording_outbox() -> Any:
    """A real Outbox whose transfer must not be reached: settling sends nothing before the flush."""
    from stormpy.task.emit import Outbox

    def send(target: int, messages: list[Any]) -> None:
        raise AssertionError("settling must not send before the flush")
    return Outbox(send, 100, "test")


def test_a_failed_tree_takes_its_uncombined_raw_acks_with_it() -> None:
    """A tree failed after one of its raw batches was settled (a sink batch written, another of
    the same tree failing) must send no late ack after its fail: the acker would keep the root
    until it times out."""
    from stormpy.task.tree import TupleTrees

    sent: list[Any] = []
    from stormpy.task.emit import Outbox
    trees = TupleTrees(Outbox(lambda target, messages: sent.extend(messages), 1, "test"), [7, 8], 1)
    trees.settle_raw_batch([(10, 1), (11, 2), (10, 3), (12, 4)])
    trees.fail_roots((10, 5), task_id=1)
    assert trees.acks == [[12, 4], [11, 2]]
    trees.flush()
    trees.outbox.flush()
    assert all(10 not in m[2] for m in sent if m[0] != "__ack_fail")


class WordsBySplitTwo(Topology):
    """Two split tasks (two executors) feeding a count by fields, and a spout of words by fields."""
    spout = Sentences.spec(par=1)
    split = Split.spec(inputs={spout: Grouping.SHUFFLE}, par=2)
    count = Count.spec(inputs={split: Grouping.fields("word")}, par=2)
    words = Words.spec(par=1)
    tally = Count.spec(inputs={words: Grouping.fields("word")}, par=2)


def _values_class_at(runtime: WorkerRuntime, receiver: str, message: Any) -> type:
    """The values class the receiving executor names ``message``'s source's values with."""
    ex: BoltExecutor = _executor(runtime, receiver)
    info = ex.source_info(BoltTask(ex, ex.start_task), message)
    assert info is not None
    return info[1]


def _values_of(sent: list[tuple[int, Any]], value: Any) -> list[Any]:
    return [m[2] for _dest, m in sent if m[0] == DEFAULT_STREAM and m[2][0] == value]


def test_a_fields_grouped_word_goes_out_as_the_values_tuple_its_receiver_takes_as_it_is() -> None:
    """The fast emit of a one-field stream fields-grouped on that field sends, per string, one
    values tuple of the class the receiving executor names the source's values with, one per
    component and worker: the count side's receive loop takes it without a lookup
    (``drivers._deliver``)."""
    runtime, recorder = _runtime(WordsBySplitTwo)
    first, second = [e for e in runtime.executors.values() if e.component_id == "split"]
    task = BoltTask(first, first.start_task)
    for word in ["a", "b", "a", "x" * 500, "x" * 500]:
        task.emit([word])
    task.emit([7])
    BoltTask(second, second.start_task).emit(["b"])   # the component's other task
    assert second.start_task != first.start_task
    first.flush()
    second.flush()
    sent = recorder.sent
    a1, a2 = _values_of(sent, "a")
    b1, b2 = _values_of(sent, "b")
    long1, long2 = _values_of(sent, "x" * 500)
    cls = _values_class_at(runtime, "count", next(m for _dest, m in sent if m[0] == DEFAULT_STREAM))
    assert type(a1) is cls and type(long1) is cls and a1.word == "a" and a1 == ("a",)
    assert a2 is a1, "one tuple per string"
    assert b2 is b1, "the tasks of one component in a worker share the tuples"
    assert long1 == long2 and long1 is not long2, "long strings are not kept"
    assert _values_of(sent, 7) == [[7]] and type(_values_of(sent, 7)[0]) is list, \
        "only str values go out as a shared tuple"


@pytest.mark.parametrize("ackers", [2, 0])
def test_a_spout_sends_a_fields_grouped_word_as_the_shared_values_tuple(ackers: int) -> None:
    """The spout's fast emit does the same, tracked (a new tree) or, without ackers, through
    ``spout_place`` (acked at once)."""
    runtime, recorder = _runtime(WordsBySplitTwo, **{"topology.acker.executors": ackers})
    ex: SpoutExecutor = _executor(runtime, "words")
    task = SpoutTask(ex, ex.start_task)
    for n, word in enumerate(["a", "b", "a"]):
        task.emit([word], tup_id=n)
    ex.flush()
    (a1, a2), (b1,) = _values_of(recorder.sent, "a"), _values_of(recorder.sent, "b")
    cls = _values_class_at(runtime, "tally", next(m for _dest, m in recorder.sent if m[0] == DEFAULT_STREAM))
    assert type(a1) is cls and type(b1) is cls and a2 is a1
    data = [m for _dest, m in recorder.sent if m[0] == DEFAULT_STREAM]
    assert [m[3] is not None for m in data] == [bool(ackers)] * 3, "tracked only with ackers"
    assert len(task.pending_live) == (3 if ackers else 0) and len(task.ack_now) == (0 if ackers else 3)


def test_a_full_row_cache_starts_over_and_routes_every_word_as_the_grouping_does(monkeypatch: Any) -> None:
    import stormpy.task.tree as tree
    monkeypatch.setattr(tree, "SHARE_MAX", 4)
    runtime, recorder = _runtime(WordsBySplitTwo)
    ex: BoltExecutor = _executor(runtime, "split")
    task = BoltTask(ex, ex.start_task)
    words = [f"w{i}" for i in range(11)] * 2
    for word in words:
        task.emit([word])
    ex.flush()
    rows = runtime.emit_rows[("split", DEFAULT_STREAM)]
    assert 0 < len(rows) <= 4
    select = task.routes[DEFAULT_STREAM].select
    routed = {(dest, m[2][0]) for dest, m in recorder.sent if m[0] == DEFAULT_STREAM}
    assert routed == {(select([w])[0], w) for w in words}, "every word where the grouping sends it"
    assert len([1 for _dest, m in recorder.sent if m[0] == DEFAULT_STREAM]) == len(words)
