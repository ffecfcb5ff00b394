"""Validation of a Trident graph at compile time: one clear line naming the stream and field.

Raised as ``storm.InvalidTopologyException`` so ``stormpy local`` and ``stormpy submit`` print
it like any invalid topology. Checks: spouts (kind, outputs, unique names), every field an
operation reads exists in its input stream, group_by / partition_by fields exist, output
fields do not collide with input fields, merge arity, join arity, operation types, and the
combinations the runtime does not run (a stream mixing commit-time and batch-time inputs).
"""
from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from stormpy import config as cfg
from stormpy.thrift import storm
from stormpy.trident.runtime import operations as ops
from stormpy.trident.planner.graph import Graph, Group, Node, commit_phase_nodes

log = logging.getLogger(__name__)

_RESERVED_ID = re.compile(r"^(b-\d+.*|\$.*|__.*)$")


def invalid(msg: str) -> Exception:
    return storm.InvalidTopologyException(msg=msg)


def _field_list(fields: tuple[str, ...]) -> str:
    return ", ".join(fields) or "none"


def _check_fields(node: Node, wanted: tuple[str, ...], have: tuple[str, ...], what: str) -> None:
    for name in wanted:
        if name not in have:
            raise invalid(f"stream {node.stream!r}: {what} uses field {name!r}, which the stream does not "
                          f"have (fields: {_field_list(have)})")


def _check_spout(node: Node, names: set[str]) -> None:
    name = node.spec["name"]
    spout = node.spec["spout"]
    if not name or "/" in name or _RESERVED_ID.match(name):
        raise invalid(f"stream name {name!r} is not allowed (no '/', and not '$…', '__…' or 'b-<n>')")
    if name in names:
        raise invalid(f"stream name {name!r} is used by two new_stream calls")
    names.add(name)
    if node.spec["spout_kind"] is None:
        raise invalid(f"stream {name!r}: {type(spout).__name__} is not a BatchSpout, PartitionedSpout "
                      "or OpaquePartitionedSpout")
    if not node.fields:
        raise invalid(f"stream {name!r}: spout {type(spout).__name__} declares no outputs "
                      "(set outputs = [\"field\", ...])")


def _check_outputs(node: Node, parent_fields: tuple[str, ...], outs: tuple[str, ...], what: str) -> None:
    for name in outs:
        if name in parent_fields:
            raise invalid(f"stream {node.stream!r}: {what} outputs field {name!r}, which the stream already "
                          f"has (fields: {_field_list(parent_fields)})")
    if len(set(outs)) != len(outs):
        raise invalid(f"stream {node.stream!r}: {what} names an output field twice ({_field_list(outs)})")


def _check_node(node: Node) -> None:
    spec = node.spec
    have = node.parents[0].fields if node.parents else ()
    what = node.describe()
    for name in node.fields:
        if not isinstance(name, str) or not name:
            raise invalid(f"stream {node.stream!r}: {what} has an empty or non-string field name")
    if node.kind == "each":
        if not (isinstance(spec["op"], ops.Function) or callable(spec["op"])):
            raise invalid(f"stream {node.stream!r}: {what}: {spec['op']!r} is neither a Function nor callable")
        _check_fields(node, spec["input_fields"], have, what)
        _check_outputs(node, have, spec["out_fields"], what)
    elif node.kind == "filter":
        if not (isinstance(spec["op"], ops.Filter) or callable(spec["op"])):
            raise invalid(f"stream {node.stream!r}: {what}: {spec['op']!r} is neither a Filter nor callable "
                          "(a Function needs output fields)")
        _check_fields(node, spec["input_fields"], have, what)
    elif node.kind == "project":
        _check_fields(node, spec["keep"], have, what)
    elif node.kind == "repartition":
        label = "group_by" if spec.get("via") == "group_by" else what
        _check_fields(node, spec["fields"], have, label)
    elif node.kind == "aggregate":
        if not ops.is_aggregator(spec["agg"]):
            raise invalid(f"stream {node.stream!r}: {what}: {spec['agg']!r} is not an aggregator")
        if spec.get("via") == "group_by":
            _check_fields(node, spec["group_fields"], have, "group_by")
        _check_fields(node, spec["group_fields"], have, what)
        _check_fields(node, spec["input_fields"], have, what)
    elif node.kind == "persist":
        _check_fields(node, spec["input_fields"], have, what)
        if not hasattr(spec["state"].factory, "make_state"):
            raise invalid(f"stream {node.stream!r}: {what}: {spec['state'].factory!r} is not a StateFactory "
                          "(it needs make_state(conf, context, partition_index, num_partitions))")
    elif node.kind == "state_query":
        _check_fields(node, spec["input_fields"], have, what)
        _check_outputs(node, have, spec["out_fields"], what)
        if spec["state"]._node is None:
            raise invalid(f"stream {node.stream!r}: {what} queries a state that no stream persists")
    elif node.kind == "merge":
        if not node.parents:
            raise invalid("merge() needs at least one stream")
        arity = len(node.parents[0].fields)
        for parent in node.parents[1:]:
            if len(parent.fields) != arity:
                raise invalid(f"stream {node.stream!r}: merge of streams with {arity} and {len(parent.fields)} "
                              f"fields ({_field_list(node.parents[0].fields)} / {_field_list(parent.fields)})")
    elif node.kind == "join":
        a, b = node.parents
        _check_fields(node, spec["a_fields"], a.fields, "join")
        _check_fields(node, spec["b_fields"], b.fields, "join")
        if len(spec["a_fields"]) != len(spec["b_fields"]):
            raise invalid(f"stream {node.stream!r}: join on {len(spec['a_fields'])} and {len(spec['b_fields'])} fields")
        width = len(a.fields) + len(b.fields) - len(spec["b_fields"])
        if len(spec["out_fields"]) != width:
            raise invalid(f"stream {node.stream!r}: join outputs {len(spec['out_fields'])} fields but produces "
                          f"{width} (join fields, then {a.stream!r}'s other fields, then {b.stream!r}'s)")


def validate_graph(graph: Graph, conf: Mapping[str, Any] | None = None) -> None:
    """Raise InvalidTopologyException for the first problem found, in creation order."""
    if not graph.spouts():
        raise invalid("trident topology has no streams: build(conf) must call self.new_stream(name, spout)")
    names: set[str] = set()
    for node in graph.nodes:
        if node.kind == "spout":
            _check_spout(node, names)
        else:
            _check_node(node)
        user_fields = node.fields if node.kind == "spout" else node.spec.get("out_fields", ())
        for name in user_fields:
            if name.startswith("$") and user_fields != ("$partial",):
                raise invalid(f"stream {node.stream!r}: field name {name!r} is reserved (names starting with '$')")
    conf = conf or {}
    if conf.get(cfg.TOPOLOGY_ACKER_EXECUTORS.name) == 0:
        raise invalid("trident topologies need ackers: topology.acker.executors must not be 0")


def validate_groups(graph: Graph, groups: list[Group]) -> None:
    """Combinations of groups the runtime cannot run (yet)."""
    late = commit_phase_nodes(graph)
    for group in groups:
        phases = {gin.source_node.id in late for gin in group.inputs}
        if len(phases) > 1:
            raise invalid(f"bolt {group.id!r} (stream {group.nodes[0].stream!r}) mixes a state's new values "
                          "with ordinary batch input; that is not supported")
        if True in phases and group.has_persist:
            raise invalid(f"bolt {group.id!r} (stream {group.nodes[0].stream!r}) persists a state's new values "
                          "into another state after a repartition; that is not supported")
