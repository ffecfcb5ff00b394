"""The bolt executors of one scheduler loop settle into one dict (``tree.SharedAcks``): a tree
acked by several of them reaches the acker as one ``root, value`` pair, and an executor that
leaves the loop settles alone again without losing what was settled (issue 24, par 2 vs 1)."""
from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from stormpy import Bolt, Grouping, Spout, Topology
from stormpy.acker.ledger import Ledger
from stormpy.local.runner import LocalTopology
from stormpy.streams import ACK_ACK, ACKER_COMPONENT
from stormpy.task.tree import SharedAcks

STATE: dict[str, Any] = {}
SENTENCES = 2000


class SentenceSpout(Spout):
    outputs = ["sentence"]

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.n = 0

    def next_tuple(self) -> None:
        if self.n < SENTENCES:
            self.emit([f"w{self.n % 7} w{self.n % 5} w{self.n % 3} w{self.n % 11}"], tup_id=self.n)
            self.n += 1

    def ack(self, tup_id: Any) -> None:
        with STATE["lock"]:
            STATE["acked"] += 1

    def fail(self, tup_id: Any) -> None:
        with STATE["lock"]:
            STATE["failed"] += 1


class SplitBolt(Bolt):
    outputs = ["word"]

    def process(self, tup: Any) -> None:
        for word in tup.values[0].split():
            self.emit([word])


class CountBolt(Bolt):
    outputs: list[str] = []

    def process(self, tup: Any) -> None:
        with STATE["lock"]:
            STATE["words"] += 1


class WordCount(Topology):
    sentences = SentenceSpout.spec()
    split = SplitBolt.spec(inputs={sentences: Grouping.SHUFFLE}, par=2)
    count = CountBolt.spec(inputs={split: Grouping.fields("word")}, par=2)


def reset() -> None:
    STATE.clear()
    STATE.update(acked=0, failed=0, words=0, pairs=0, lock=threading.Lock())


def _bolts(local: LocalTopology) -> list[Any]:
    return [ex for ex in local.runtime.loop.executors if ex.kind == "bolt" and ex.component_id != ACKER_COMPONENT]


def _capturing_flushes(name: str) -> tuple[Any, list[Any], SharedAcks, list[tuple[int, list[Any]]]]:
    """A word count's loop (not started), its bolts, their shared acks, and the list that the
    shared acks' flushes go to instead of the transfer."""
    local = LocalTopology(WordCount, name, user_overrides={"topology.acker.executors": 1})
    loop = local.runtime.loop
    shared = loop._acks
    sent: list[tuple[int, list[Any]]] = []
    shared.send = lambda dest, messages: sent.append((dest, messages))
    return loop, _bolts(local), shared, sent


def test_the_bolts_of_a_loop_settle_into_one_dict_flushed_before_the_ackers_step() -> None:
    local = LocalTopology(WordCount, "shared", user_overrides={"topology.acker.executors": 1})
    loop = local.runtime.loop
    assert loop is not None
    bolts = _bolts(local)
    assert [ex.component_id for ex in bolts] == ["split", "split", "count", "count"]
    assert all(ex.trees.pending is bolts[0].trees.pending for ex in bolts)
    assert all(ex.trees.shared is loop._acks for ex in bolts)
    others = [ex for ex in loop.executors if ex not in bolts]
    assert all(ex.trees.shared is None and ex.trees.pending is not bolts[0].trees.pending for ex in others)
    assert loop._acks_before is not None and loop._acks_before.component_id == ACKER_COMPONENT


@pytest.mark.parametrize("threads, most_pairs_per_tree", [("one", 1.2), ("per-executor", None)])
def test_a_tree_acked_by_three_executors_reaches_the_acker_as_one_pair(
        local_topology: Any, waiter: Any, monkeypatch: pytest.MonkeyPatch, threads: str,
        most_pairs_per_tree: float | None) -> None:
    """Each sentence is acked by a split and by the counts its four words went to: one pair
    per tree with the shared dict, at least two without (the control)."""
    reset()
    apply_batch = Ledger.apply_batch

    def counting(self: Ledger, messages: list[Any], on_unknown: Any = None) -> Any:
        pairs = sum(len(m[2]) // 2 for m in messages if m[0] == ACK_ACK)
        with STATE["lock"]:
            STATE["pairs"] += pairs
        return apply_batch(self, messages, on_unknown)

    monkeypatch.setattr(Ledger, "apply_batch", counting)
    local_topology(WordCount, **{"topology.executor.threads": threads, "topology.acker.executors": 1,
                                 "topology.max.spout.pending": 50})
    waiter(lambda: STATE["acked"] == SENTENCES, 60, f"{SENTENCES} acks")
    assert STATE["failed"] == 0 and STATE["words"] == 4 * SENTENCES
    per_tree = STATE["pairs"] / SENTENCES
    if most_pairs_per_tree is None:
        assert per_tree >= 2.0
    else:
        assert per_tree <= most_pairs_per_tree


def test_an_executor_leaving_the_loop_takes_none_of_the_others_acks() -> None:
    """Moved to its own thread between steps: the shared acks are flushed first, and the one
    that left settles into a dict of its own."""
    loop, bolts, shared, sent = _capturing_flushes("leave")
    shared.pending[12345] = 99
    leaving = bolts[2]
    loop.executors = [ex for ex in loop.executors if ex is not leaving]
    loop._share_acks()
    assert sent and sent[0][1][0][:3] == (ACK_ACK, bolts[0].trees.src_task, [12345, 99])
    assert leaving.trees.shared is None and leaving.trees.pending == {}
    assert leaving.trees.pending is not shared.pending
    assert all(ex.trees.shared is shared for ex in bolts if ex is not leaving)


def test_unsharing_a_dict_of_its_own_keeps_what_it_holds() -> None:
    """A loop left with fewer than two sharers unshares each; one that never shared (a single
    bolt) keeps its unflushed acks instead of starting a new dict without them."""
    from stormpy.task.tree import TupleTrees

    trees = TupleTrees(type("O", (), {"batch_size": 100, "add": None})(), [7], 1)   # type: ignore[arg-type]
    trees.settle((10, 3))
    trees.settle_runs([(11, 4)], [])
    pending, runs = trees.pending, trees.runs
    trees.unshare()
    assert trees.pending is pending and trees.runs is runs and trees.settled() == {10: 3, 11: 4}


def test_an_executor_stuck_in_a_step_keeps_the_dict_it_may_be_writing_to() -> None:
    """The watchdog's case: the stuck step runs on the old thread, so the others get a new
    dict and the stuck one flushes the old one (with what the others settled into it)."""
    local = LocalTopology(WordCount, "stuck", user_overrides={"topology.acker.executors": 1})
    loop = local.runtime.loop
    bolts = _bolts(local)
    old = loop._acks
    old.pending[777] = 5
    stuck = bolts[1]
    loop.executors = [ex for ex in loop.executors if ex is not stuck]
    loop._share_acks(stuck=stuck)
    assert stuck.trees.shared is None and stuck.trees.pending is old.pending == {777: 5}
    assert stuck.trees.runs is old.runs, "the runs go along with the dict"
    rest = [ex for ex in bolts if ex is not stuck]
    assert loop._acks is not old and all(ex.trees.shared is loop._acks for ex in rest)
    assert all(ex.trees.pending is loop._acks.pending for ex in rest) and loop._acks.pending == {}
    assert stuck.trees.has_acks()    # its own flush sends the old dict now


def test_a_shared_flush_sends_one_ack_message_per_acker_and_drops_settled_zeros() -> None:
    sent: list[tuple[int, list[Any]]] = []
    acks = SharedAcks([10, 11], 3, lambda dest, messages: sent.append((dest, messages)))
    acks.pending.update({4: 7, 5: 0, 6: 9, 9: 1})
    acks.flush()
    assert sorted(sent) == [(10, [(ACK_ACK, 3, [4, 7, 6, 9], None)]), (11, [(ACK_ACK, 3, [9, 1], None)])]
    assert acks.pending == {}
    acks.flush()
    assert len(sent) == 2


class StuckOnceCountBolt(CountBolt):
    """Blocks in one ``process`` call for longer than the watchdog's ``STUCK_SECS``."""

    def process(self, tup: Any) -> None:
        if not STATE.get("stuck") and tup.values[0] == "w0":
            STATE["stuck"] = True
            time.sleep(1.6)
        super().process(tup)


class StuckWordCount(Topology):
    sentences = SentenceSpout.spec()
    split = SplitBolt.spec(inputs={sentences: Grouping.SHUFFLE}, par=2)
    count = StuckOnceCountBolt.spec(inputs={split: Grouping.fields("word")}, par=2)


def test_every_tree_completes_when_the_watchdog_takes_a_stuck_sharer(local_topology: Any, waiter: Any) -> None:
    """The stuck bolt keeps the shared dict (with what the others settled into it that round)
    and flushes it when its step returns; the others share a new one on the new loop thread."""
    reset()
    local = local_topology(StuckWordCount, **{"topology.acker.executors": 1, "topology.max.spout.pending": 50,
                                              "topology.message.timeout.secs": 120})
    loop = local.runtime.loop
    waiter(lambda: any(name.startswith("count") for name in loop.detached), 30, "the watchdog to move the bolt")
    waiter(lambda: STATE["acked"] == SENTENCES, 60, f"{SENTENCES} acks")
    assert STATE["failed"] == 0 and STATE["words"] == 4 * SENTENCES
    moved = next(ex for ex in local.runtime.executors.values() if ex.name in loop.detached)
    assert moved.trees.shared is None
    rest = _bolts(local)
    assert len(rest) == 3 and all(ex.trees.shared is loop._acks for ex in rest)


def test_sharing_ends_when_one_bolt_is_left() -> None:
    loop, bolts, shared, sent = _capturing_flushes("one-left")
    shared.pending[42] = 7
    loop.executors = [ex for ex in loop.executors if ex not in bolts[1:]]
    loop._share_acks()
    assert [dest for dest, _ in sent] == [bolts[0].trees.acker_tasks[0]]   # flushed first
    assert loop._acks is None and loop._acks_before is None
    assert all(ex.trees.shared is None for ex in bolts)
    assert len({id(ex.trees.pending) for ex in bolts}) == len(bolts)


def test_a_stuck_executor_that_does_not_share_leaves_the_dict_to_the_others() -> None:
    """A spout stuck in ``next_tuple`` never writes to the bolts' dict: they keep it (the new
    loop thread flushes it), and the acker point is found again."""
    local = LocalTopology(WordCount, "stuck-spout", user_overrides={"topology.acker.executors": 1})
    loop = local.runtime.loop
    old = loop._acks
    old.pending[9] = 3
    spout = next(ex for ex in loop.executors if ex.kind == "spout")
    loop.executors = [ex for ex in loop.executors if ex is not spout]
    loop._share_acks(stuck=spout)
    assert loop._acks is old and old.pending == {9: 3}
    assert all(ex.trees.shared is old for ex in _bolts(local))
    assert loop._acks_before is not None and loop._acks_before.component_id == ACKER_COMPONENT
