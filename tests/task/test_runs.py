"""``runs.Runs``: the settled runs of a batch, beside ``pending``. Compiled, a table of C 64-bit
integers holding each root's int object; interpreted, a dict. Run interpreted by the suite and
compiled by ``.ci/run``'s compiled step."""
from __future__ import annotations

import random
import sys

import pytest

from stormpy.task import runs as runs_module
from stormpy.task.runs import Runs
from stormpy.task.tree import SharedAcks, TupleTrees


def _compiled() -> bool:
    return runs_module.__file__.endswith(".so")


def _drained(runs: Runs, ackers: int) -> list[dict[int, int]]:
    per_acker: list[list[int]] = [[] for _ in range(ackers)]
    runs.drain(per_acker)
    out = []
    for index, values in enumerate(per_acker):
        pairs = dict(zip(values[0::2], values[1::2]))
        assert len(pairs) * 2 == len(values), "one pair per root"
        assert all(root % ackers == index for root in pairs)
        out.append(pairs)
    return out


def test_runs_combine_per_root_and_drain_what_is_not_zero() -> None:
    random.seed(21)
    roots = [random.getrandbits(64) | 1 for _ in range(5)]
    runs = Runs()
    expected: dict[int, int] = {}
    for _ in range(40):
        root, val = random.choice(roots), random.getrandbits(64)
        runs.xor(root, val)
        expected[root] = expected.get(root, 0) ^ val
    runs.xor(roots[0], expected[roots[0]])   # back to 0: kept until the drain, not sent
    expected[roots[0]] = 0
    assert runs.snapshot() == {r: v for r, v in expected.items() if v} and len(runs) == len(expected) and runs
    per_acker = _drained(runs, 2)
    assert {r: v for r, v in expected.items() if v} == {**per_acker[0], **per_acker[1]}
    assert len(runs) == 0 and not runs and runs.snapshot() == {}
    assert _drained(runs, 2) == [{}, {}], "a drained table sends nothing again"


def test_a_table_grows_past_its_first_size_and_shrinks_when_drained() -> None:
    """Thousands of roots between two flushes (a burst) move into a larger table; the drain
    after a mostly empty flush gives it back."""
    random.seed(22)
    expected = {random.getrandbits(64) | 1: random.getrandbits(64) | 1 for _ in range(5000)}
    runs = Runs()
    for root, val in expected.items():
        runs.xor(root, val ^ 5)
        runs.xor(root, 5)
    assert runs.snapshot() == expected and len(runs) == 5000
    if _compiled():
        assert runs.size >= 2 * 5000, "at most half full"  # type: ignore[attr-defined]
    assert {k: v for d in _drained(runs, 3) for k, v in d.items()} == expected
    for root in list(expected)[:10]:
        runs.xor(root, 1)
    assert runs.snapshot() == {root: 1 for root in list(expected)[:10]}
    _drained(runs, 1)
    if _compiled():
        assert runs.size == 256, "runs._RUNS_MIN again"  # type: ignore[attr-defined]
    assert runs.snapshot() == {}


def test_pop_takes_a_roots_value_and_adds_no_root() -> None:
    """``fail_roots`` pops a failed root; a root never settled, or one no slot can hold, is
    not added (nothing left to flush)."""
    runs = Runs()
    runs.xor(11, 3)
    runs.xor(12, 4)
    assert runs.pop(11) == 3 and runs.pop(11) == 0
    held = len(runs)
    for absent in (13, 0, -5, 2**64, 2**70):
        assert runs.pop(absent) == 0
    assert len(runs) == held and runs.snapshot() == {12: 4}
    fresh = Runs()
    assert fresh.pop(13) == 0 and len(fresh) == 0
    assert _drained(runs, 1) == [{12: 4}]
    assert runs.pop(12) == 0 and len(runs) == 0


@pytest.mark.skipif(not _compiled(), reason="interpreted, Runs is a dict: any int fits")
def test_compiled_ids_outside_64_bits_and_the_root_0_are_refused() -> None:
    """``settle_runs`` then settles them into ``pending`` (test_tuple_tree's out-of-range test)."""
    runs = Runs()
    for root, val in ((-1, 1), (2**64, 1), (0, 1)):
        with pytest.raises(OverflowError):
            runs.xor(root, val)
    with pytest.raises(OverflowError):
        runs.xor(5, 2**64)
    assert len(runs) == 0 and runs.snapshot() == {}
    runs.xor(5, 1)
    with pytest.raises(OverflowError):
        runs.xor(5, -1)
    assert runs.snapshot() == {5: 1}, "a refused value leaves the root's as it was"


def test_a_drain_hands_over_the_roots_own_int_objects() -> None:
    """The spout's pending map and the acker's ledger are keyed by the root object the tree
    started with: the same object found again is found by identity, without comparing values.
    Compiled, the table holds a reference to each root until the drain."""
    root = int("123456789012345678901")  % 2**64   # a fresh object, not a cached small int
    before = sys.getrefcount(root)
    runs = Runs()
    runs.xor(root, 7)
    runs.xor(root, 1)
    per_acker: list[list[int]] = [[]]
    runs.drain(per_acker)
    assert per_acker[0] == [root, 6] and per_acker[0][0] is root
    del per_acker
    assert sys.getrefcount(root) == before, "no reference kept or lost"
    runs.xor(root, 1)
    del runs
    assert sys.getrefcount(root) == before, "a dropped table gives its references back"


def test_roots_held_through_growth_pop_and_flush_are_given_back() -> None:
    """Compiled, the table holds a reference to each root's int object: through a grow (more
    than 128 roots), a pop, a merge into ``pending`` and the drain (with its shrink) each is
    given back exactly once."""
    roots = [int(str(10**15 + i)) for i in range(600)]   # fresh objects
    before = [sys.getrefcount(r) for r in roots]
    runs = Runs()
    for i, root in enumerate(roots):
        runs.xor(root, i + 1)
    del root   # the loop's own reference
    assert runs.pop(roots[0]) == 1
    pending = {roots[1]: 5}
    runs.take_into(pending)
    assert pending == {roots[1]: 5 ^ 2}
    per_acker: list[list[int]] = [[], [], []]
    runs.drain(per_acker)
    assert sorted(v for values in per_acker for v in values[0::2]) == roots[2:]
    del per_acker, pending
    assert [sys.getrefcount(r) for r in roots] == before


def test_a_tree_flush_sends_pending_and_runs_to_their_ackers() -> None:
    """A root settled partly into ``pending`` (``settle``: a manual ack) and partly in runs
    (``settle_runs``) reaches its acker as both parts: the acker XORs them."""
    sent: list[tuple[int, list]] = []

    class Outbox:
        batch_size = 100

        def add(self, target: int, message: tuple) -> None:
            sent.append((target, message))

    trees = TupleTrees(Outbox(), [7, 8], 1)   # type: ignore[arg-type]
    trees.settle((10, 1))
    trees.settle_runs([(10, 2), (10, 4), (11, 8)], [])
    assert trees.settled() == {10: 7, 11: 8} and trees.has_acks()
    trees.flush()
    got: dict[int, int] = {}
    roots = [root for _t, m in sent for root in m[2][0::2]]
    assert sorted(roots) == [10, 11], "one pair a root"
    for target, (_stream, _src, values, _anchors) in sent:
        for root, val in zip(values[0::2], values[1::2]):
            assert target == [7, 8][root % 2]
            got[root] = got.get(root, 0) ^ val
    assert got == {10: 7, 11: 8}
    assert not trees.has_acks() and trees.settled() == {}


def test_a_root_split_between_pending_and_runs_reaches_its_acker_as_one_pair() -> None:
    """After an id outside 64 bits, ``settle_runs`` settles the batch's rest one tuple at a
    time into ``pending`` (edges only) while a tuple's ack value (its children's edges) still
    goes where runs go. Sent as two pairs, the edge first, the acker would see the tree
    complete while the child is out; the flush sends one pair a root (``Runs.take_into``)."""
    from stormpy.acker.ledger import Ledger

    sent: list[tuple[int, tuple]] = []

    class Outbox:
        batch_size = 100

        def add(self, target: int, message: tuple) -> None:
            sent.append((target, message))

    root, edge, child = 1234567, 5, 9
    trees = TupleTrees(Outbox(), [7], 1)   # type: ignore[arg-type]
    trees.settle_runs([(root, edge), (999, 2**64)], [((root, edge), child)])   # acked, having emitted `child`
    trees.flush()
    pairs = [v for _t, m in sent for v in zip(m[2][0::2], m[2][1::2])]
    assert pairs == [(root, edge ^ child)] or pairs == [(root, edge ^ child), (999, 2**64)]
    ledger = Ledger()
    done = ledger.apply_batch([("__ack_init", 3, [root, edge, 3], None)] + [m for _t, m in sent])
    assert [d for d in done if d[1] == root] == [], "not complete while the child is out"
    assert [d[:2] for d in ledger.apply_batch([("__ack_ack", 2, [root, child], None)])] == [("ack", root)]


def test_shared_acks_flush_their_runs() -> None:
    sent: list[tuple[int, list]] = []
    shared = SharedAcks([7], 1, lambda target, messages: sent.append((target, messages)))
    trees = TupleTrees(type("O", (), {"batch_size": 100, "add": None})(), [7], 1)  # type: ignore[arg-type]
    trees.share(shared)
    assert trees.runs is shared.runs and trees.pending is shared.pending
    trees.settle_runs([(10, 2), (10, 4)], [])
    assert not trees.has_acks(), "a shared table is its owner's to flush"
    shared.flush()
    assert [(t, m[0][2]) for t, m in sent] == [(7, [10, 6])]
    trees.unshare()
    assert trees.runs is not shared.runs and trees.pending is not shared.pending
