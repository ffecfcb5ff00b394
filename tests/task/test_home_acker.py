"""A spout's trees are acked in its own worker when that worker runs an acker task (issue 24):
the root ids it draws map to a local acker (``root % n``), so ``__ack_init`` and the acker's
answer never cross workers; they stay random 64-bit ids, the fast and the general emit path
draw the same ones, and a runtime with every acker (``stormpy local``) draws them as before."""
from __future__ import annotations

import random

from stormpy import Bolt, Grouping, Spout, Topology
from stormpy.api.compile import compile_topology
from stormpy.streams import ACK_INIT, DEFAULT_STREAM
from stormpy.task.runtime import WorkerRuntime
from stormpy.task.spout_executor import SpoutExecutor, SpoutTask
from stormpy.task.tree import TupleTrees, next_id, seed_ids
from stormpy.topology.plan import build_plan
from tests.task.test_tuple_tree import Recorder


class Sentences(Spout):
    outputs = ["sentence"]


class Split(Bolt):
    outputs: list[str] = []


class Two(Topology):
    spout = Sentences.spec(par=2)
    split = Split.spec(inputs={spout: Grouping.SHUFFLE}, par=2)


def _spout_inits(general: bool, seed: int, acker_here: int | None, ackers: int = 3) -> tuple[list[int], list[int], list[int]]:
    """(acker tasks, the acker tasks its inits went to, the roots) of 200 trees started by the
    first spout task of a worker running that spout's executor and ``acker_here`` (an index
    into the acker tasks; None: every executor, as ``stormpy local``)."""
    plan = build_plan(compile_topology(Two), {"topology.acker.executors": ackers}, "two-1", "two")
    spout_range = next(r for r in plan.executors() if plan.task_component[r[0]] == "spout")
    acker_tasks = list(plan.acker_tasks)
    if acker_here is None:
        ranges = list(plan.executors())
    else:
        ranges = [spout_range] + [r for r in plan.executors() if r[0] == acker_tasks[acker_here]]
    recorder = Recorder()
    runtime = WorkerRuntime(plan, ranges, recorder)
    ex: SpoutExecutor = next(e for e in runtime.executors.values() if e.component_id == "spout")
    task = SpoutTask(ex, ex.start_task)
    seed_ids(seed)
    for n in range(200):
        if general:
            task.emit([f"s{n}"], tup_id=n, stream=DEFAULT_STREAM)
        else:
            task.emit([f"s{n}"], tup_id=n)
    ex.flush()
    inits = [(dest, m) for dest, m in recorder.sent if m[0] == ACK_INIT]
    return acker_tasks, [dest for dest, _m in inits], [root for _d, m in inits for root in m[2][0::3]]


def test_a_spout_starts_its_trees_on_the_acker_of_its_worker() -> None:
    for here in (0, 2):
        acker_tasks, dests, roots = _spout_inits(general=False, seed=3, acker_here=here)
        assert set(dests) == {acker_tasks[here]}
        assert len(roots) == 200 and len(set(roots)) == 200
        assert all(root % len(acker_tasks) == here and 0 <= root < 2**64 for root in roots)
        assert max(roots) > 2**60, "still random 64-bit ids"


def test_both_emit_paths_draw_the_same_home_roots() -> None:
    assert _spout_inits(general=False, seed=9, acker_here=1) == _spout_inits(general=True, seed=9, acker_here=1)


def test_with_every_acker_in_the_process_roots_are_drawn_as_before() -> None:
    _ackers, dests, roots = _spout_inits(general=False, seed=4, acker_here=None)
    seed_ids(4)
    drawn = [next_id() for _ in range(400)]   # a root and an edge per tree
    assert sorted(roots) == sorted(drawn[0::2])
    assert len(set(dests)) > 1                       # spread over every acker task


def test_home_acker_keeps_roots_below_two_to_the_64() -> None:
    from stormpy.task.emit import Outbox

    for n in (1, 2, 3, 7, 64, 1000):
        trees = TupleTrees(Outbox(lambda target, messages: None, 100, "test"), list(range(n)), 1)
        trees.home_acker(n - 1)
        top = ((1 << trees.root_bits) - 1) * trees.root_mult + trees.root_home
        assert top < 2**64 and top % n == n - 1
