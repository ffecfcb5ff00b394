"""The Trident graph (what ``build(conf)`` describes) and its plan of fused processing groups.

Pure data and functions; no runtime. :class:`Node` is one operation; ``repartition`` nodes mark
where tuples change task (shuffle, partition_by, broadcast, global, batch_global). Storm fuses
every operation between two repartitions into one bolt (its SubtopologyBolt), and so does
:func:`plan_groups`:

- a spout node starts a group (the spout executor bolt runs the spout and what follows it);
- the children of one repartition node share a new group;
- merge and join start a new group (each input edge becomes a stream into it; a join's
  inputs are partitioned by the join fields);
- any other node joins its parent's group.

``parallelism_hint`` is stored on the node it was called on; a group's parallelism is the
largest hint among its nodes (so a hint applies back to the previous repartition), 1 if none.

Every inter-group edge is a data stream ``s<edge>`` whose tuples are ``[tx, *fields]`` with a
companion direct stream ``$coord-s<edge>`` (the "I sent you N" counts).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

BATCH_FIELD = "$tx"
REPARTITION_KINDS = ("shuffle", "fields", "all", "global", "batch_global")


@dataclass(eq=False)
class Node:
    """One operation of the graph; ``fields`` are its output fields."""

    id: int
    kind: str
    parents: list["Node"]
    fields: tuple[str, ...]
    spec: dict[str, Any] = field(default_factory=dict)
    stream: str = ""              # the user's name for the stream (its spout's), for messages
    name: str | None = None       # .name(...)
    parallelism: int | None = None

    def describe(self) -> str:
        spec = self.spec
        if self.kind in ("each", "filter"):
            op = spec.get("op")
            return f"each({list(spec['input_fields'])}, {_op_name(op)})"
        if self.kind == "repartition":
            kind = {"fields": "partition_by", "all": "broadcast", "global": "global_"}.get(spec["kind"], spec["kind"])
            return f"{kind}({list(spec['fields'])})" if spec["fields"] else f"{kind}()"
        if self.kind == "aggregate":
            return f"{'group_by(...).' if spec.get('group_fields') else ''}aggregate({_op_name(spec['agg'])})"
        if self.kind == "persist":
            return f"partition_persist({_op_name(spec['updater'])})"
        if self.kind == "state_query":
            return f"state_query({_op_name(spec['query'])})"
        if self.kind == "project":
            return f"project({list(spec['keep'])})"
        return self.kind


def _op_name(op: Any) -> str:
    if op is None:
        return "None"
    name = getattr(op, "__name__", None) or type(op).__name__
    return "lambda" if name == "<lambda>" else name


@dataclass
class GroupInput:
    stream: str
    source: "Group"
    source_node: Node
    grouping: tuple[str, tuple[str, ...]]        # (repartition kind, fields)
    entries: list[tuple[Node, int]]               # (node, parent index) fed by this stream


@dataclass
class GroupOutput:
    stream: str
    node: Node
    fields: tuple[str, ...]                       # user fields (the wire adds BATCH_FIELD first)


@dataclass(eq=False)
class Group:
    """One processing bolt: fused nodes (topological order), its inputs and outputs."""

    index: int
    nodes: list[Node] = field(default_factory=list)
    spout: Node | None = None
    inputs: list[GroupInput] = field(default_factory=list)
    outputs: list[GroupOutput] = field(default_factory=list)
    parallelism: int = 1
    id: str = ""

    @property
    def has_persist(self) -> bool:
        return any(n.kind == "persist" for n in self.nodes)

    @property
    def is_opaque_spout(self) -> bool:
        return self.spout is not None and self.spout.spec.get("spout_kind") == "opaque"

    @property
    def is_committer(self) -> bool:
        """Subscribes to ``$commit``: it holds state, or is an opaque spout (metas at commit)."""
        return self.has_persist or self.is_opaque_spout

    def children(self, node: Node) -> list[tuple[Node, int]]:
        """Nodes of this group fed by ``node`` (with the parent index they read it at)."""
        result = []
        for other in self.nodes:
            for i, parent in enumerate(other.parents):
                if parent is node:
                    result.append((other, i))
        return result


class Graph:
    """The nodes a TridentTopology's ``build`` created, in creation (= topological) order."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []

    def add(self, node_kind: str, parents: list[Node], node_fields: tuple[str, ...], stream: str = "",
            **spec: Any) -> Node:
        if not stream:
            stream = "+".join(dict.fromkeys(p.stream for p in parents)) if parents else ""
        node = Node(len(self.nodes), node_kind, list(parents), tuple(node_fields), spec, stream)
        self.nodes.append(node)
        return node

    def spouts(self) -> list[Node]:
        return [n for n in self.nodes if n.kind == "spout"]


def _source_of(parent: Node) -> tuple[Node, tuple[str, tuple[str, ...]], Node | None]:
    """Walk up repartitions: (emitting node, nearest repartition (kind, fields), that repartition)."""
    if parent.kind != "repartition":
        return parent, ("shuffle", ()), None
    rep = parent
    src = parent
    while src.kind == "repartition":
        src = src.parents[0]
    return src, (rep.spec["kind"], tuple(rep.spec["fields"])), rep


def plan_groups(graph: Graph) -> list[Group]:
    """Fuse the graph into processing groups and wire their streams (see module docstring)."""
    groups: list[Group] = []
    group_of: dict[int, Group] = {}
    by_repartition: dict[int, Group] = {}

    def new_group() -> Group:
        group = Group(index=len(groups))
        groups.append(group)
        return group

    for node in graph.nodes:
        if node.kind == "repartition":
            continue
        if node.kind == "spout":
            group = new_group()
            group.spout = node
        elif node.kind in ("merge", "join"):
            group = new_group()
        else:
            parent = node.parents[0]
            if parent.kind == "repartition":
                group = by_repartition.get(parent.id)
                if group is None:
                    group = by_repartition[parent.id] = new_group()
            else:
                group = group_of[parent.id]
        group.nodes.append(node)
        group_of[node.id] = group
    _wire(graph, groups, group_of)
    _assign_parallelism(graph, groups, by_repartition)
    _assign_ids(groups)
    return groups


def _wire(graph: Graph, groups: list[Group], group_of: dict[int, Group]) -> None:
    inputs: dict[tuple[int, str], GroupInput] = {}
    for group in groups:
        for node in group.nodes:
            for i, parent in enumerate(node.parents):
                if parent.kind != "repartition" and group_of[parent.id] is group:
                    continue  # fused: an in-group edge
                src, grouping, rep = _source_of(parent)
                if node.kind == "join":
                    keys = node.spec["a_fields"] if i == 0 else node.spec["b_fields"]
                    grouping = ("fields", tuple(keys))
                    stream = f"s{node.id}-{i}"
                elif rep is not None:
                    stream = f"s{rep.id}"
                else:
                    stream = f"s{node.id}-{i}"
                source = group_of[src.id]
                key = (group.index, stream)
                gin = inputs.get(key)
                if gin is None:
                    gin = inputs[key] = GroupInput(stream, source, src, grouping, [])
                    group.inputs.append(gin)
                    if all(o.stream != stream for o in source.outputs):
                        source.outputs.append(GroupOutput(stream, src, src.fields))
                gin.entries.append((node, i))


def _assign_parallelism(graph: Graph, groups: list[Group], by_repartition: dict[int, Group]) -> None:
    hints: dict[int, int] = {}
    for group in groups:
        values = [n.parallelism for n in group.nodes if n.parallelism]
        if values:
            hints[group.index] = max(values)
    for rep_id, group in by_repartition.items():
        hint = graph.nodes[rep_id].parallelism
        if hint:
            hints[group.index] = max(hints.get(group.index, 1), hint)
    for group in groups:
        group.parallelism = hints.get(group.index, 1)


def _assign_ids(groups: list[Group]) -> None:
    n = 0
    for group in groups:
        if group.spout is not None:
            group.id = group.spout.spec["name"]
            continue
        names = [node.name for node in group.nodes if node.name]
        group.id = f"b-{n}" + (f"-{'-'.join(dict.fromkeys(names))}" if names else "")
        n += 1


def commit_phase_nodes(graph: Graph) -> set[int]:
    """Nodes whose output is produced at commit time (a persist or anything after one)."""
    result: set[int] = set()
    for node in graph.nodes:
        if node.kind == "persist" or any(p.id in result for p in node.parents):
            result.add(node.id)
    return result
