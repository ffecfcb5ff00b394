"""Task numbering, executors and subscriptions of the TopologyPlan."""
from __future__ import annotations

from stormpy import Bolt, Grouping, Spout, Stream, Topology
from stormpy.thrift import deserialize, serialize, storm
from stormpy.api.compile import compile_topology, resolve_class
from stormpy.topology.plan import ACKER_COMPONENT, build_plan, split_tasks


class Lines(Spout):
    outputs = ["line"]

    def next_tuple(self) -> None:
        self.emit(["x"])


class Split(Bolt):
    outputs = [Stream(["word"]), Stream(["n"], name="counts", direct=True)]

    def process(self, tup) -> None:
        pass


class Count(Bolt):
    def process(self, tup) -> None:
        pass


class Demo(Topology):
    config = {"topology.workers": 3}
    lines = Lines.spec(par=2)
    split = Split.spec(inputs=[lines], par=2)
    count = Count.spec(inputs={split: Grouping.fields("word"), split["counts"]: Grouping.DIRECT}, par=2,
                       config={"topology.tasks": 5})


def test_task_ids_follow_sorted_component_ids() -> None:
    plan = build_plan(compile_topology(Demo), Demo.config, "demo-1-1", "demo")
    # __acker (3 = one per worker), count (5 tasks), lines (2), split (2)
    assert plan.components[ACKER_COMPONENT].tasks == [1, 2, 3]
    assert plan.components["count"].tasks == [4, 5, 6, 7, 8]
    assert plan.components["lines"].tasks == [9, 10]
    assert plan.components["split"].tasks == [11, 12]
    assert plan.acker_tasks == [1, 2, 3]
    assert plan.task_component[6] == "count"


def test_executors_split_tasks_into_ranges() -> None:
    plan = build_plan(compile_topology(Demo), Demo.config, "demo-1-1", "demo")
    assert plan.component_executors("count") == [(4, 6), (7, 8)]
    assert split_tasks([1, 2, 3, 4, 5], 5) == [(1, 1), (2, 2), (3, 3), (4, 4), (5, 5)]
    assert split_tasks([1, 2], 7) == [(1, 1), (2, 2)]
    rebalanced = build_plan(compile_topology(Demo), Demo.config, "demo-1-1", "demo", {"count": 5})
    assert len(rebalanced.component_executors("count")) == 5


def test_subscribers_and_streams() -> None:
    plan = build_plan(compile_topology(Demo), Demo.config, "demo-1-1", "demo")
    (target, grouping), = plan.subscribers("split", "default")
    assert target == "count" and grouping.fields == ["word"]
    (target, grouping), = plan.subscribers("split", "counts")
    assert grouping.direct is not None
    assert plan.components["split"].streams["counts"].direct
    assert plan.components["count"].conf["topology.workers"] == 3


def test_no_ackers_when_disabled() -> None:
    plan = build_plan(compile_topology(Demo), {"topology.acker.executors": 0}, "d", "d")
    assert ACKER_COMPONENT not in plan.components and plan.acker_tasks == []


def test_topology_struct_round_trips_and_names_classes() -> None:
    topology = compile_topology(Demo)
    again = deserialize(storm.StormTopology, serialize(topology))
    assert again == topology
    name = topology.bolts["split"].bolt_object.python_object.class_name
    assert name.endswith(":Split") and resolve_class(name) is Split
