"""The even scheduler (Storm's EvenScheduler / DefaultScheduler), as pure functions.

Slots are (supervisor id, port) pairs of live supervisors, sorted so that consecutive slots
alternate between nodes; executors are dealt round-robin over the first ``num_workers`` of
them. The seed's example — 10 single-task executors, node1/node2 x ports 6001-6003 — comes
out as node1:6001={1,7}, node2:6001={2,8}, node1:6002={3,9}, node2:6002={4,10},
node1:6003={5}, node2:6003={6}.

A normal reassignment (the monitor) keeps every slot whose alive executors already form a
balanced share and re-deals only the rest: executors that are dead, on a dead supervisor, or
on a slot that holds more or fewer than a balanced worker should. A rebalance
(``scratch=True``) re-deals everything. Nothing here touches ZooKeeper or the clock.
"""
from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping

from stormpy.topology.plan import ExecutorRange

log = logging.getLogger(__name__)

Slot = tuple[str, int]           # (supervisor id, port)


def sort_slots(available: Mapping[str, Iterable[int]]) -> list[Slot]:
    """Slots interleaved by node: n1:p1, n2:p1, n1:p2, n2:p2, ... (nodes and ports sorted).

    Nodes with more free ports come first (Storm sorts by free-slot count), so interleaving
    spreads workers over as many machines as possible.
    """
    per_node = {node: sorted(set(int(p) for p in ports)) for node, ports in available.items()}
    nodes = sorted((n for n in per_node if per_node[n]), key=lambda n: (-len(per_node[n]), n))
    result: list[Slot] = []
    depth = max((len(per_node[n]) for n in nodes), default=0)
    for i in range(depth):
        for node in nodes:
            if i < len(per_node[node]):
                result.append((node, per_node[node][i]))
    return result


def integer_partition(total: int, parts: int) -> Counter[int]:
    """How many parts get which size when ``total`` items are split as evenly as possible.

    10 into 6 -> {2: 4, 1: 2}: four slots of two executors and two of one.
    """
    if parts <= 0:
        return Counter()
    base, extra = divmod(total, parts)
    sizes: Counter[int] = Counter()
    if extra:
        sizes[base + 1] = extra
    if parts - extra and base:
        sizes[base] = parts - extra
    return sizes


def deal(executors: Iterable[ExecutorRange], slots: list[Slot]) -> dict[ExecutorRange, Slot]:
    """Round-robin ``executors`` (in task order) over ``slots``."""
    result: dict[ExecutorRange, Slot] = {}
    if not slots:
        return result
    for i, executor in enumerate(sorted(executors)):
        result[executor] = slots[i % len(slots)]
    return result


def keeper_slots(slot_executors: Mapping[Slot, list[ExecutorRange]], order: list[Slot], num_executors: int,
                 num_workers: int) -> dict[Slot, list[ExecutorRange]]:
    """Slots whose current executors can stay: their count fits a still-open share of the partition.

    Visited in ``order`` (the interleaved slot order) so the result is deterministic.
    """
    shares = integer_partition(num_executors, num_workers)
    keepers: dict[Slot, list[ExecutorRange]] = {}
    for slot in order:
        executors = slot_executors.get(slot)
        if not executors:
            continue
        if shares[len(executors)] > 0:
            keepers[slot] = executors
            shares[len(executors)] -= 1
    return keepers


def schedule(executors: Iterable[ExecutorRange], available: Mapping[str, Iterable[int]], num_workers: int,
             existing: Mapping[ExecutorRange, Slot] | None = None, alive: Iterable[ExecutorRange] | None = None,
             scratch: bool = False) -> dict[ExecutorRange, Slot]:
    """The new executor -> slot map of one topology.

    ``available``: supervisor id -> ports this topology may use (free ones plus its own).
    ``existing``: the current assignment; ``alive``: executors whose heartbeats are fresh.
    With ``scratch`` (rebalance) the existing assignment is ignored.
    """
    wanted = sorted(set(executors))
    all_slots = sort_slots(available)
    num_slots = min(max(1, num_workers), len(all_slots))
    if not wanted or num_slots == 0:
        if wanted:
            log.warning("no free slots for %d executors", len(wanted))
        return {}
    alive_set = set(wanted if alive is None else alive)
    slot_set = set(all_slots)
    slot_executors: dict[Slot, list[ExecutorRange]] = defaultdict(list)
    if not scratch:
        for executor, slot in (existing or {}).items():
            if executor in alive_set and executor in wanted and slot in slot_set:
                slot_executors[slot].append(executor)
    keepers = keeper_slots(slot_executors, all_slots, len(wanted), num_slots)
    kept = {executor: slot for slot, group in keepers.items() for executor in group}
    free = [slot for slot in all_slots if slot not in keepers][:num_slots - len(keepers)]
    moved = [executor for executor in wanted if executor not in kept]
    result = dict(kept)
    result.update(deal(moved, free))
    return result


def group_by_slot(assignment: Mapping[ExecutorRange, Slot]) -> dict[Slot, list[ExecutorRange]]:
    """slot -> its executors (sorted); handy for tests and summaries."""
    groups: dict[Slot, list[ExecutorRange]] = defaultdict(list)
    for executor, slot in assignment.items():
        groups[slot].append(executor)
    return {slot: sorted(group) for slot, group in sorted(groups.items())}
