"""The even scheduler: the seed's two examples and the rules around them (pure, no I/O)."""
from __future__ import annotations

from stormpy.nimbus.scheduling import group_by_slot, integer_partition, schedule, sort_slots

NODES = {"node1": [6001, 6002, 6003], "node2": [6001, 6002, 6003]}
TEN = [(t, t) for t in range(1, 11)]

SEED_SPREAD = {
    ("node1", 6001): [(1, 1), (7, 7)],
    ("node1", 6002): [(3, 3), (9, 9)],
    ("node1", 6003): [(5, 5)],
    ("node2", 6001): [(2, 2), (8, 8)],
    ("node2", 6002): [(4, 4), (10, 10)],
    ("node2", 6003): [(6, 6)],
}


def test_slots_alternate_nodes() -> None:
    assert sort_slots(NODES) == [("node1", 6001), ("node2", 6001), ("node1", 6002), ("node2", 6002),
                                 ("node1", 6003), ("node2", 6003)]


def test_integer_partition() -> None:
    assert integer_partition(10, 6) == {2: 4, 1: 2}
    assert integer_partition(3, 6) == {1: 3}
    assert integer_partition(6, 3) == {2: 3}


def test_seed_example_fresh_spread() -> None:
    """Seed 000, 1.2.3 (1): 10 tasks over node1/node2 x 6001-6003 (a rebalance from scratch)."""
    assert group_by_slot(schedule(TEN, NODES, num_workers=6, scratch=True)) == SEED_SPREAD


def test_seed_example_tasks_1_and_6_timed_out() -> None:
    """Seed 000, 1.2.3 (2): tasks 1 and 6 time out. The balanced share of 10 executors over 6
    slots is 2,2,2,2,1,1. Every slot whose ALIVE executors still fit that share keeps them
    (node1:6001 now holds only 7, node1:6003 holds 5: the two one-executor shares; the three
    two-executor slots are kept too); only the dead executors move, onto the free slot.
    (The seed's prose also lists 4 and 10 as moved, which its own rule does not require:
    node2:6002={4,10} already is a balanced two-executor slot.)"""
    existing = {executor: slot for slot, group in SEED_SPREAD.items() for executor in group}
    alive = [e for e in TEN if e not in [(1, 1), (6, 6)]]
    result = schedule(TEN, NODES, num_workers=6, existing=existing, alive=alive)
    assert all(result[e] == existing[e] for e in alive), "alive executors on balanced slots stay put"
    assert result[(1, 1)] == result[(6, 6)] == ("node2", 6003)
    assert sorted(len(g) for g in group_by_slot(result).values()) == [1, 1, 2, 2, 2, 2]


def test_unbalanced_slot_is_redealt() -> None:
    """Alive executors piled on one slot are moved: only balanced shares are kept."""
    existing = {e: ("node1", 6001) for e in TEN[:4]} | {e: ("node2", 6001) for e in TEN[4:]}
    result = schedule(TEN[:4], NODES, num_workers=2, existing=existing)
    assert sorted(len(g) for g in group_by_slot(result).values()) == [2, 2]


def test_executors_on_dead_supervisor_move() -> None:
    existing = {executor: slot for slot, group in SEED_SPREAD.items() for executor in group}
    result = schedule(TEN, {"node1": [6001, 6002, 6003]}, num_workers=6, existing=existing)
    assert {slot[0] for slot in result.values()} == {"node1"}
    assert sorted(len(g) for g in group_by_slot(result).values()) == [3, 3, 4]


def test_fewer_workers_than_slots_and_no_slots() -> None:
    result = schedule(TEN, NODES, num_workers=2, scratch=True)
    assert set(result.values()) == {("node1", 6001), ("node2", 6001)}
    assert schedule(TEN, {}, num_workers=2) == {}
