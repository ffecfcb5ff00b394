"""Invalid Trident graphs are rejected at compile with one line naming the stream and field."""
from __future__ import annotations

import pytest

from stormpy.thrift import storm
from stormpy.trident import BatchSpout, Count, Function, PartitionedSpout, TridentTopology
from stormpy.trident.compile import compile_graph

from ._harness import memory_map


class Lines(PartitionedSpout):
    outputs = ["sentence"]

    def partitions(self):
        return [0]


class NoOutputs(BatchSpout):
    pass


class Split(Function):
    def execute(self, tup, collector):
        collector.emit([tup[0]])


def message(build) -> str:
    topo = TridentTopology()
    build(topo)
    with pytest.raises(storm.InvalidTopologyException) as info:
        compile_graph(topo._graph)
    text = info.value.msg
    assert "\n" not in text
    return text


def test_unknown_input_field():
    text = message(lambda t: t.new_stream("lines", Lines()).each(["sentnce"], Split(), ["word"]))
    assert "stream 'lines'" in text and "'sentnce'" in text and "fields: sentence" in text


def test_group_by_on_a_missing_field():
    state = memory_map("v")
    text = message(lambda t: t.new_stream("lines", Lines()).each(["sentence"], Split(), ["word"])
                   .group_by(["wrd"]).persistent_aggregate(state, Count(), ["count"]))
    assert text.startswith("stream 'lines': group_by uses field 'wrd'")
    text = message(lambda t: t.new_stream("lines", Lines()).group_by(["x"]).aggregate(Count(), ["c"]))
    assert "group_by uses field 'x'" in text


def test_spout_without_outputs():
    text = message(lambda t: t.new_stream("raw", NoOutputs()))
    assert text.startswith("stream 'raw': spout NoOutputs declares no outputs")


def test_no_streams_and_bad_spout_and_duplicate_names():
    assert "no streams" in message(lambda t: None)
    assert "is not a BatchSpout" in message(lambda t: t.new_stream("x", object()))

    def twice(t):
        t.new_stream("x", Lines())
        t.new_stream("x", Lines())
    assert "used by two new_stream" in message(twice)
    assert "not allowed" in message(lambda t: t.new_stream("$x", Lines()))


def test_output_field_collision_and_reserved_names():
    text = message(lambda t: t.new_stream("lines", Lines()).each(["sentence"], Split(), ["sentence"]))
    assert "outputs field 'sentence', which the stream already has" in text
    text = message(lambda t: t.new_stream("lines", Lines()).each(["sentence"], Split(), ["$w"]))
    assert "reserved" in text


def test_partition_by_project_and_join_fields():
    text = message(lambda t: t.new_stream("l", Lines()).partition_by(["nope"]))
    assert text.startswith("stream 'l': partition_by(['nope']) uses field 'nope'")
    assert "project(['nope'])" in message(lambda t: t.new_stream("l", Lines()).project(["nope"]))

    def join(t):
        a = t.new_stream("a", Lines())
        b = t.new_stream("b", Lines())
        t.join(a, ["sentence"], b, ["sentence"], ["s", "extra"])
    assert "join outputs 2 fields but produces 1" in message(join)

    def join_key(t):
        a = t.new_stream("a", Lines())
        b = t.new_stream("b", Lines())
        t.join(a, ["sentence"], b, ["nope"], ["s"])
    assert "join uses field 'nope'" in message(join_key)
