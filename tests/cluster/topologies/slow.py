"""A fast unbounded spout feeding a slow bolt in another worker, with acking off: only
backpressure keeps the workers' memory bounded."""
from cluster_common import ReplayingSentenceSpout, SlowBolt

from stormpy import Grouping, Topology


class Slow(Topology):
    config = {"test.reliable": False, "test.unbounded": True, "test.spout.per.call": 100,
              "topology.acker.executors": 0, "test.slow.ms": 1}
    sentences = ReplayingSentenceSpout.spec(par=1)
    slow = SlowBolt.spec(inputs={sentences: Grouping.SHUFFLE}, par=1)
