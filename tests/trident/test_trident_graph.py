"""Graph -> fused processing groups: what shares a bolt, streams between bolts, parallelism."""
from __future__ import annotations

from stormpy.trident import Count, Function, PartitionedSpout, Sum, TridentTopology
from stormpy.trident.compile import compile_graph
from stormpy.trident.graph import plan_groups

from ._harness import memory_map


class Words(PartitionedSpout):
    outputs = ["sentence"]

    def partitions(self):
        return [0]


class Split(Function):
    def execute(self, tup, collector):
        for w in tup[0].split():
            collector.emit([w])


def graph_of(build):
    topo = TridentTopology()
    build(topo)
    return topo._graph


def test_operations_between_repartitions_are_fused():
    def build(t):
        (t.new_stream("lines", Words(), par=2)
          .each(["sentence"], Split(), ["word"])
          .each(["word"], lambda tup: len(tup[0]) > 1)
          .shuffle()
          .each(["word"], lambda tup, c: c.emit([tup[0].upper()]), ["upper"]).parallelism_hint(3)
          .project(["upper"])
          .group_by(["upper"]).aggregate(Count(), ["n"]).parallelism_hint(4))

    groups = plan_groups(graph_of(build))
    assert [g.id for g in groups] == ["lines", "b-0", "b-1"]
    assert [n.kind for n in groups[0].nodes] == ["spout", "each", "filter"]
    assert [n.kind for n in groups[1].nodes] == ["each", "project"]
    assert [n.kind for n in groups[2].nodes] == ["aggregate"]
    assert [g.parallelism for g in groups] == [2, 3, 4]
    assert groups[1].inputs[0].grouping == ("shuffle", ())
    assert groups[2].inputs[0].grouping == ("fields", ("upper",))
    assert groups[1].inputs[0].source is groups[0]


def test_persistent_aggregate_pre_combines_before_the_repartition():
    state = memory_map("graph-pa")

    def build(t):
        (t.new_stream("lines", Words())
          .each(["sentence"], Split(), ["word"])
          .group_by(["word"]).persistent_aggregate(state, Count(), ["count"]).parallelism_hint(2))

    groups = plan_groups(graph_of(build))
    assert [n.kind for n in groups[0].nodes] == ["spout", "each", "aggregate"]
    assert [n.kind for n in groups[1].nodes] == ["persist"]
    assert groups[1].is_committer and groups[1].has_persist and not groups[0].is_committer
    assert groups[1].parallelism == 2
    assert groups[1].nodes[0].fields == ("word", "count")


def test_merge_and_join_start_groups_and_join_partitions_by_keys():
    def build(t):
        a = t.new_stream("a", Words()).each(["sentence"], Split(), ["word"])
        b = t.new_stream("b", Words()).each(["sentence"], Split(), ["w"])
        t.merge(a.project(["word"]), b.project(["w"]))
        t.join(a, ["word"], b, ["w"], ["word", "sa", "sb"]).name("joined")

    groups = plan_groups(graph_of(build))
    ids = [g.id for g in groups]
    assert ids == ["a", "b", "b-0", "b-1-joined"]
    merge, join = groups[2], groups[3]
    assert {gin.grouping for gin in merge.inputs} == {("shuffle", ())}
    assert [gin.grouping for gin in join.inputs] == [("fields", ("word",)), ("fields", ("w",))]


def test_compiled_topology_has_only_framework_components():
    state = memory_map("graph-compile")

    def build(t):
        (t.new_stream("lines", Words(), par=2).each(["sentence"], Split(), ["word"])
          .group_by(["word"]).persistent_aggregate(state, Sum(), ["n"], input_fields=["word"]))

    topology = compile_graph(graph_of(build))
    assert set(topology.spouts) == {"$mastercoord-bg0"}
    assert set(topology.bolts) == {"$spoutcoord-lines", "lines", "b-0"}
    for spec in [*topology.spouts.values(), *topology.bolts.values()]:
        obj = getattr(spec, "spout_object", None) or spec.bolt_object
        assert obj.python_object.class_name.startswith("stormpy.trident.")
        assert obj.python_object.serialized
    b0 = topology.bolts["b-0"].common
    streams = {(g.componentId, g.streamId) for g in b0.inputs}
    assert ("$mastercoord-bg0", "$commit") in streams
    data = [s for s in topology.bolts["lines"].common.streams if not s.startswith("$")]
    assert len(data) == 1
    assert topology.bolts["lines"].common.streams[data[0]].output_fields[0] == "$tx"
    assert topology.bolts["lines"].common.streams["$coord-" + data[0]].direct
