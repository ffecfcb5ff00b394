"""Reliable word count for the cluster tests: replaying spout -> split -> count (fields)."""
from cluster_common import CountBolt, ReplayingSentenceSpout, SplitBolt

from stormpy import Grouping, Topology


class WordCount(Topology):
    config = {"topology.max.spout.pending": 200, "topology.message.timeout.secs": 10}
    sentences = ReplayingSentenceSpout.spec(par=2)
    split = SplitBolt.spec(inputs={sentences: Grouping.SHUFFLE}, par=2)
    count = CountBolt.spec(inputs={split: Grouping.fields("word")}, par=3)
