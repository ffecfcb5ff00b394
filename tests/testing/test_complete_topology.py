"""complete_topology: fixed spout input in, what each component emitted out (real executors, real acker)."""
from __future__ import annotations

import collections
import threading
import time
from typing import Any

import pytest

from stormpy import BatchingBolt, Bolt, Grouping, Spout, Stream, Topology
from stormpy.testing import FixedTuple, TopologyIncomplete, complete_topology


class EndlessSentences(Spout):
    """The real spout: never used by complete_topology (replaced by a feeder)."""

    outputs = ["sentence"]

    def next_tuple(self) -> None:
        raise AssertionError("the real spout must not run under complete_topology")


class Split(Bolt):
    outputs = [Stream(["word"]), Stream(["word", "length"], name="long")]

    def process(self, tup: Any) -> None:
        for word in tup.values.sentence.split():
            self.emit([word])
            if len(word) > 4:
                self.emit([word, len(word)], stream="long")


class Count(Bolt):
    outputs = ["word", "count"]

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.counts: collections.Counter[str] = collections.Counter()

    def process(self, tup: Any) -> None:
        self.counts[tup.values.word] += 1
        self.emit([tup.values.word, self.counts[tup.values.word]])


class WordCount(Topology):
    sentences = EndlessSentences.spec()
    split = Split.spec(inputs=[sentences], par=2)
    count = Count.spec(inputs={split: Grouping.fields("word")}, par=3)


def test_word_count_emits_per_component_and_stream() -> None:
    result = complete_topology(WordCount, {"sentences": [["the storm"], ["the quick storm"], ["a"]]})
    assert result.acked == {"sentences": 3} and result.failed == {"sentences": 0}
    assert result.emitted("sentences") == [["the storm"], ["the quick storm"], ["a"]]
    assert sorted(result.emitted("split")) == [["a"], ["quick"], ["storm"], ["storm"], ["the"], ["the"]]
    assert sorted(result.emitted("split", stream="long")) == [["quick", 5], ["storm", 5], ["storm", 5]]
    # Fields grouping: each word's counts come from one task, so the final counts are exact.
    final = {}
    for word, count in result.emitted("count"):
        final[word] = max(count, final.get(word, 0))
    assert final == {"the": 2, "storm": 2, "quick": 1, "a": 1}
    assert ("split", "long") in result.streams() and result.errors == {}


class TwoStreamSpout(Spout):
    outputs = [Stream(["n"]), Stream(["name"], name="names")]

    def next_tuple(self) -> None:
        time.sleep(0.01)


class Doubler(Bolt):
    outputs = ["n2"]

    def process(self, tup: Any) -> None:
        self.emit([tup.values.n * 2])


class Shouter(Bolt):
    outputs = ["loud"]

    def process(self, tup: Any) -> None:
        self.emit([tup.values.name.upper()])


class TwoStreams(Topology):
    source = TwoStreamSpout.spec()
    idle = TwoStreamSpout.spec()          # not fed: emits nothing
    double = Doubler.spec(inputs=[source])
    shout = Shouter.spec(inputs={source["names"]: Grouping.SHUFFLE})


def test_named_spout_streams_and_unfed_spouts() -> None:
    result = complete_topology(TwoStreams, {"source": [[1], FixedTuple(["ann"], stream="names"), [2]]})
    assert sorted(result.emitted("double")) == [[2], [4]]
    assert result.emitted("shout") == [["ANN"]]
    assert result.acked == {"source": 3, "idle": 0}


class FailOdd(Bolt):
    outputs = ["n"]
    auto_ack = False

    def process(self, tup: Any) -> None:
        if tup.values.n % 2:
            self.fail(tup)
        else:
            self.emit([tup.values.n], anchors=[tup])
            self.ack(tup)


class FailTopology(Topology):
    source = TwoStreamSpout.spec()
    odd = FailOdd.spec(inputs=[source])


def test_failed_trees_complete_as_failed() -> None:
    result = complete_topology(FailTopology, {"source": [[n] for n in range(6)]})
    assert result.acked == {"source": 3} and result.failed == {"source": 3}
    assert sorted(result.emitted("odd")) == [[0], [2], [4]]


class SumBatches(BatchingBolt):
    outputs = ["total"]
    ticks_between_batches = 1

    def process_batch(self, key: Any, tups: list[Any]) -> None:
        self.emit([sum(t.values.n for t in tups)])


class BatchTopology(Topology):
    config = {"topology.acker.executors": 0, "topology.tick.tuple.freq.secs": 0.2}
    source = TwoStreamSpout.spec()
    total = SumBatches.spec(inputs={source: Grouping.GLOBAL})


def test_batching_bolts_and_an_acker_even_when_the_topology_disables_it() -> None:
    result = complete_topology(BatchTopology, {"source": [[n] for n in range(1, 11)]})
    assert result.acked == {"source": 10}
    assert sum(total for (total,) in result.emitted("total")) == 55


class Swallow(Bolt):
    auto_ack = False

    def process(self, tup: Any) -> None:
        pass


class SwallowTopology(Topology):
    source = TwoStreamSpout.spec()
    swallow = Swallow.spec(inputs=[source])


def test_open_trees_time_out_with_a_clear_error() -> None:
    before = set(threading.enumerate())
    with pytest.raises(TopologyIncomplete, match=r"still open after 1s: spout 'source': 2 of 2.*neither ack nor fail"):
        complete_topology(SwallowTopology, {"source": [[1], [2]]}, timeout_secs=1)
    leaked = [t.name for t in threading.enumerate() if t not in before and t.name.startswith("executor-")]
    assert not leaked


def test_bad_inputs_are_clear_errors() -> None:
    with pytest.raises(ValueError, match=r"unknown spout\(s\) \['nope'\]; the spouts are \['sentences'\]"):
        complete_topology(WordCount, {"nope": [["x"]]})
    with pytest.raises(ValueError, match="has 2 values for the fields \\['sentence'\\]"):
        complete_topology(WordCount, {"sentences": [["x", "y"]]})
    with pytest.raises(ValueError, match="declares no stream 'side'"):
        complete_topology(WordCount, {"sentences": [FixedTuple(["x"], stream="side")]})
    with pytest.raises(TypeError, match="must be a list of values"):
        complete_topology(WordCount, {"sentences": ["just a string"]})


class Scale(Bolt):
    """Configured on the instance: complete_topology must run this object, not ``Scale()``."""

    outputs = ["n"]

    def __init__(self, factor: int = 1) -> None:
        self.factor = factor

    def process(self, tup: Any) -> None:
        self.emit([tup.values[0] * self.factor])


class ScaleTopology(Topology):
    source = TwoStreamSpout.spec()
    scale = Scale(3).spec(inputs=[source])


def test_a_bolt_given_as_an_instance_runs_as_that_instance() -> None:
    result = complete_topology(ScaleTopology, {"source": [[1], [2]]}, timeout_secs=30)
    assert sorted(result.emitted("scale")) == [[3], [6]]
