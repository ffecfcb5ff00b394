"""A bolt that raises on every tuple next to a healthy split -> count chain (unreliable spout)."""
from cluster_common import CountBolt, FaultyBolt, ReplayingSentenceSpout, SplitBolt

from stormpy import Grouping, Topology


class Faulty(Topology):
    config = {"test.reliable": False, "test.unbounded": True, "test.spout.per.call": 5,
              "topology.acker.executors": 0}
    sentences = ReplayingSentenceSpout.spec(par=1)
    split = SplitBolt.spec(inputs={sentences: Grouping.SHUFFLE}, par=1)
    count = CountBolt.spec(inputs={split: Grouping.fields("word")}, par=1)
    faulty = FaultyBolt.spec(inputs={sentences: Grouping.SHUFFLE}, par=1)
