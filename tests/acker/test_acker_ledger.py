"""Pure tests of the XOR ledger and the rotating map (no threads, no clock)."""
from __future__ import annotations

import random

from stormpy.acker.ledger import ACKED, FAILED, Ledger
from stormpy.rotating_map import RotatingMap


def test_seed_tree_example_completes_only_on_last_leaf() -> None:
    # seed 000, section 4.2: spout task 1 emits tuple 1 to bolt1 (task 2), which emits 11 and 12
    # to bolt11 (task 3) and bolt12 (task 4); with random ids instead of 1/11/12.
    ledger = Ledger()
    root, e1, e11, e12 = (random.getrandbits(64) for _ in range(4))
    assert ledger.init(root, e1, spout_task=1) is None            # acker holds 0 ^ e1
    assert ledger.ack(root, e1 ^ e11 ^ e12) is None              # bolt1 acks tuple 1, anchors 11 and 12
    assert ledger.ack(root, e11) is None                           # bolt11 acks: e12 still open
    assert ledger.ack(root, e12) == (ACKED, 1)                     # bolt12 acks: value is 0
    assert len(ledger) == 0


def test_acks_may_overtake_the_init() -> None:
    ledger = Ledger()
    root, e1, e2 = 7, 0xABC, 0x123
    assert ledger.ack(root, e1 ^ e2) is None
    assert ledger.ack(root, e2) is None
    assert ledger.init(root, e1, spout_task=5) == (ACKED, 5)


def test_explicit_fail_tells_the_spout_once_its_task_is_known() -> None:
    ledger = Ledger()
    assert ledger.fail(42) is None
    assert ledger.init(42, 99, spout_task=3) == (FAILED, 3)
    assert ledger.init(43, 99, spout_task=3) is None
    assert ledger.fail(43) == (FAILED, 3)
    assert len(ledger) == 0


def test_rotation_expires_open_trees_after_buckets_minus_one_rotations() -> None:
    ledger = Ledger(num_buckets=3)
    ledger.init(1, 5, spout_task=9)
    assert ledger.rotate() == []
    ledger.init(2, 5, spout_task=9)
    assert ledger.rotate() == []
    assert ledger.rotate() == [1]
    assert ledger.rotate() == [2]
    assert len(ledger) == 0


def test_rotating_map_updates_in_place_and_pops() -> None:
    rmap: RotatingMap[int, list[int]] = RotatingMap(2)
    rmap.put(1, [1])
    rmap.put(1, [2])
    assert rmap.get(1) == [2]
    assert rmap.rotate() == []
    assert rmap.rotate() == [(1, [2])]
    rmap.put(3, [3])
    assert rmap.pop(3) == [3]
    assert rmap.rotate() == [] and len(rmap) == 0


def test_many_random_trees_complete_in_any_order() -> None:
    rng = random.Random(1)
    ledger = Ledger()
    done = []
    for root in range(200):
        edges = [rng.getrandbits(64) for _ in range(rng.randint(1, 6))]
        init = 0
        for e in edges:
            init ^= e
        messages = [("init", init)] + [("ack", e) for e in edges]
        rng.shuffle(messages)
        for kind, value in messages:
            result = ledger.init(root, value, 1) if kind == "init" else ledger.ack(root, value)
            if result:
                done.append((root, result))
    assert [r for r, _ in done] == list(range(200))
    assert all(result == (ACKED, 1) for _, result in done)


def test_compact_keeps_live_keys_only() -> None:
    rmap: RotatingMap[int, int] = RotatingMap(3)
    for key in range(10):
        rmap.put(key, key)
    for key in range(0, 10, 2):
        rmap.pop(key)
    rmap.compact()
    assert sum(len(b) for b in rmap._buckets) == 5
    assert rmap.rotate() == [] and rmap.rotate() == []
    assert [k for k, _ in rmap.rotate()] == [1, 3, 5, 7, 9]


def test_apply_batch_matches_the_single_message_rules() -> None:
    rng = random.Random(9)
    batch_ledger, single_ledger = Ledger(), Ledger()
    messages = []
    for root in range(100):
        edges = [rng.getrandbits(64) for _ in range(3)]
        init = edges[0] ^ edges[1] ^ edges[2]
        tree = [("__ack_init", 1, [root, init, 7], None)] + [("__ack_ack", 2, [root, e], None) for e in edges]
        if root % 10 == 0:
            tree[-1] = ("__ack_fail", 2, [root], None)
        messages.extend(tree)
    rng.shuffle(messages)
    unknown = []
    got = batch_ledger.apply_batch(messages + [("__bogus", 3, [1], None)], unknown.append)
    expected = []
    for stream, _src, values, _anchors in messages:
        if stream == "__ack_init":
            result = single_ledger.init(*values)
        elif stream == "__ack_ack":
            result = single_ledger.ack(*values)
        else:
            result = single_ledger.fail(*values)
        if result:
            expected.append((result[0], values[0], result[1]))
    assert got == expected
    assert sorted(r for v, r, _t in got if v == FAILED) == list(range(0, 100, 10))
    assert len(got) == 100 and unknown == [("__bogus", 3, [1], None)]
    assert len(batch_ledger) == len(single_ledger)  # late acks of failed trees wait for expiry


def test_one_ack_message_may_carry_the_pairs_of_many_trees() -> None:
    # A bolt executor sends its combined acks of one flush as [root, value, root, value, ...].
    rng = random.Random(3)
    ledger = Ledger()
    inits, acks = [], []
    for root in range(1, 6):
        edge = rng.getrandbits(64)
        inits.append(("__ack_init", 1, [root, edge, 7], None))
        acks.extend([root, edge if root != 3 else edge ^ 1])  # tree 3 stays open
    early = ledger.apply_batch([("__ack_ack", 2, acks[:4], None)])  # trees 1 and 2 ack before init
    assert early == []
    got = ledger.apply_batch(inits[:3] + [("__ack_ack", 2, acks[4:], None)] + inits[3:])
    assert got == [(ACKED, 1, 7), (ACKED, 2, 7), (ACKED, 4, 7), (ACKED, 5, 7)]
    assert len(ledger) == 1  # tree 3


def test_one_ack_init_message_carries_many_trees() -> None:
    """Spout executors send the trees started since their last flush as one ``__ack_init``
    of ``[root, value, spout task, ...]`` triples; acks may come before or after it."""
    ledger = Ledger()
    early = ledger.apply_batch([("__ack_ack", 2, [1, 5], None)])           # overtakes its init
    assert early == []
    done = ledger.apply_batch([("__ack_init", 3, [1, 5, 7, 2, 6, 8, 3, 9, 7], None),
                               ("__ack_ack", 2, [2, 6], None)])
    assert sorted(done) == [("ack", 1, 7), ("ack", 2, 8)]
    assert len(ledger) == 1
    assert ledger.apply_batch([("__ack_fail", 4, [3], None)]) == [("fail", 3, 7)]
    assert len(ledger) == 0


def test_apply_batch_finds_trees_of_older_generations_and_keeps_new_ones_in_the_newest() -> None:
    ledger = Ledger(num_buckets=3)
    assert ledger.apply_batch([("__ack_init", 1, [1, 5, 7, 2, 6, 7], None), ("__ack_ack", 2, [3, 9], None)]) == []
    assert ledger.rotate() == []                # trees 1, 2 and the early ack of 3: one generation older
    got = ledger.apply_batch([
        ("__ack_init", 1, [4, 8, 7, 3, 9, 7], None),   # 4 new; 3's init finds its early ack: done
        ("__ack_ack", 2, [1, 5, 5, 11], None),          # 1 (older) completes; 5 acks before its init
        ("__ack_fail", 2, [2], None),                   # 2 (older) fails
    ])
    assert got == [(ACKED, 3, 7), (ACKED, 1, 7), (FAILED, 2, 7)]
    assert len(ledger) == 2                      # 4 and the early ack of 5, both in the newest generation
    assert ledger.rotate() == [] and ledger.rotate() == []
    assert sorted(ledger.rotate()) == [4, 5]


def test_rotating_map_moves_a_key_put_again_into_the_newest_generation() -> None:
    rmap: RotatingMap[int, str] = RotatingMap(3)
    rmap.put(1, "a")
    rmap.put(2, "b")
    assert rmap.rotate() == []
    assert rmap.older() == [{1: "a", 2: "b"}] and rmap.newest() == {}
    rmap.put(1, "c")                             # moved, not duplicated: it must not expire early
    assert len(rmap) == 2 and rmap.get(1) == "c" and 1 in rmap
    assert rmap.pop(2) == "b" and rmap.older() == [] and len(rmap) == 1
    assert rmap.rotate() == [] and rmap.rotate() == []   # the first put's generation is gone; this one is not
    assert rmap.rotate() == [(1, "c")] and len(rmap) == 0
