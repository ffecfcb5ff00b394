"""The garbage collector's young generation is sized above the trees a process may hold in flight."""
from __future__ import annotations

import subprocess
import sys

import pytest


def _threshold_after(*calls: int) -> int:
    """gen-0 threshold after ``tune_gc(n)`` for each n, in a fresh interpreter (the setting is
    process-wide and ``gc.freeze`` cannot be undone in this one)."""
    code = ("import gc; from stormpy.task.runtime import tune_gc\n"
            + "".join(f"tune_gc({n})\n" for n in calls)
            + "print(gc.get_threshold()[0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


@pytest.mark.parametrize(("calls", "expected"), [
    ((0,), 50000),                 # nothing bounded in flight: the streaming default
    ((100_000,), 600_000),         # two 50k-row sink batches: 4 objects a tree, 1.5x room
    ((10_000_000,), 1_000_000),    # capped
    ((100_000, 0), 600_000),       # a later, smaller topology in the same process never lowers it
])
def test_gen0_threshold_follows_the_trees_in_flight(calls: tuple[int, ...], expected: int) -> None:
    assert _threshold_after(*calls) == expected


def test_a_runtime_sizes_it_from_its_spouts_max_spout_pending() -> None:
    code = """
import gc
from stormpy import Bolt, Spout, Topology
from stormpy.local.runner import LocalTopology

class Quiet(Spout):
    outputs = ["n"]
    def next_tuple(self):
        pass

class Drop(Bolt):
    def process(self, tup):
        pass

class Topo(Topology):
    src = Quiet.spec(par=2)
    sink = Drop.spec(inputs=[src])

local = LocalTopology(Topo, "gc-sizing", {"topology.max.spout.pending": 60000})
local.start(active=False)
try:
    print(gc.get_threshold()[0])
finally:
    local.stop(drain_secs=1)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert int(out.stdout.strip().splitlines()[-1]) == 720_000   # 2 tasks x 60k trees x 4 objects x 1.5
