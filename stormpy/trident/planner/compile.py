"""A Trident graph -> a plain StormTopology of framework components (DESIGN 7.2).

Components (Nimbus never imports user code: every class named here is a stormpy class, and
the user's objects travel pickled with cloudpickle inside the component instance,
``PythonObject.serialized``):

- ``$mastercoord-bg0`` (spout, 1 task): streams ``$batch``, ``$commit``, ``$success``;
- ``$spoutcoord-<stream>`` (bolt, 1 task) per spout: forwards ``$batch`` to the spout executor;
- ``<stream>`` per spout: the spout executor bolt (the spout plus the operations fused after it);
- ``b-<n>`` processing bolts, one per fused group.

Every data stream ``s…`` carries ``[$tx, fields…]`` and has a direct ``$coord-s…`` twin.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import cloudpickle

from stormpy import streams
from stormpy.config import TOPOLOGY_TRIDENT_HOST_LOCAL_STATES
from stormpy.thrift import storm
from stormpy.trident.planner.graph import BATCH_FIELD, Graph, Group, commit_phase_nodes, plan_groups
from stormpy.trident.planner.placement import component_entries
from stormpy.trident.planner.validate import invalid, validate_graph, validate_groups
from stormpy.trident.runtime.bolts import SpoutCoordinatorBolt, TridentBolt
from stormpy.trident.runtime.coordinator import (BATCH_STREAM, COMMIT_STREAM, COORDINATOR_ID, SUCCESS_STREAM,
                                                 TX_FIELD, MasterBatchCoordinator, coord_stream)
from stormpy.trident.runtime.processors import GroupSpec, NodeSpec

log = logging.getLogger(__name__)

NULL = storm.NullStruct()


def spout_coordinator_id(stream: str) -> str:
    return streams.SPOUT_COORDINATOR_PREFIX + stream


def _class_name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _object(instance: Any, what: str) -> Any:
    try:
        data = cloudpickle.dumps(instance)
    except Exception as exc:
        raise invalid(f"{what} cannot be pickled (functions, spouts and state factories travel to "
                      f"workers with cloudpickle): {type(exc).__name__}: {exc}") from None
    return storm.ComponentObject(python_object=storm.PythonObject(class_name=_class_name(type(instance)),
                                                                  serialized=data))


def _grouping(kind: str, fields: tuple[str, ...]) -> Any:
    if kind == "fields":
        return storm.Grouping(fields=list(fields))
    if kind == "global":
        return storm.Grouping(fields=[])
    if kind == "batch_global":
        return storm.Grouping(fields=[BATCH_FIELD])   # a whole batch on one task, batches spread
    if kind == "all":
        return storm.Grouping(all=NULL)
    return storm.Grouping(shuffle=NULL)


def _gid(component: str, stream: str) -> Any:
    return storm.GlobalStreamId(componentId=component, streamId=stream)


def _common(inputs: dict[Any, Any], streams: dict[str, Any], par: int,
            comp_conf: dict[str, Any] | None = None) -> Any:
    return storm.ComponentCommon(inputs=inputs, streams=streams, parallelism_hint=par,
                                 json_conf=json.dumps(comp_conf or {}))


def _state_conf(group: Group) -> dict[str, Any]:
    """Component config naming the group's states kept on one host or in one process (Nimbus checks
    them against the cluster at submit: planner/placement.py)."""
    entries = component_entries([node.spec["state"].factory for node in group.nodes if "state" in node.spec])
    return {TOPOLOGY_TRIDENT_HOST_LOCAL_STATES.name: entries} if entries else {}


def runtime_spec(group: Group, late: set[int]) -> GroupSpec:
    """What the group's bolt needs at run time (and nothing of the rest of the graph)."""
    members = {node.id for node in group.nodes}
    exits: dict[int, list[str]] = {}
    for out in group.outputs:
        exits.setdefault(out.node.id, []).append(out.stream)
    nodes = []
    for node in group.nodes:
        spec = {k: v for k, v in node.spec.items() if k not in ("state", "spout")}
        if "state" in node.spec:
            spec["factory"] = node.spec["state"].factory
        children = [(child.id, i) for child, i in group.children(node) if child.id in members]
        nodes.append(NodeSpec(node.id, node.kind, node.fields, [p.fields for p in node.parents], spec,
                              children, exits.get(node.id, []), node.id in late))
    entries: dict[str, list[tuple[int, int]]] = {}
    for gin in group.inputs:
        entries.setdefault(gin.stream, []).extend((node.id, i) for node, i in gin.entries)
    spout = group.spout
    return GroupSpec(group.id, nodes, entries,
                     spout_key=spout.id if spout is not None else None,
                     spout=spout.spec["spout"] if spout is not None else None,
                     spout_kind=spout.spec["spout_kind"] if spout is not None else None,
                     spout_stream=spout.spec["name"] if spout is not None else "",
                     defer_finish=group.has_persist)


def _coordinator() -> Any:
    streams = {s: storm.StreamInfo(output_fields=[TX_FIELD], direct=False)
               for s in (BATCH_STREAM, COMMIT_STREAM, SUCCESS_STREAM)}
    return storm.SpoutSpec(spout_object=_object(MasterBatchCoordinator(), "the coordinator"),
                           common=_common({}, streams, 1))


def _group_bolt(group: Group, late: set[int]) -> Any:
    inputs: dict[Any, Any] = {}
    if group.spout is not None:
        inputs[_gid(spout_coordinator_id(group.id), BATCH_STREAM)] = storm.Grouping(all=NULL)
        inputs[_gid(COORDINATOR_ID, SUCCESS_STREAM)] = storm.Grouping(all=NULL)
    if group.is_committer:
        inputs[_gid(COORDINATOR_ID, COMMIT_STREAM)] = storm.Grouping(all=NULL)
    for gin in group.inputs:
        inputs[_gid(gin.source.id, gin.stream)] = _grouping(*gin.grouping)
        inputs[_gid(gin.source.id, coord_stream(gin.stream))] = storm.Grouping(direct=NULL)
    streams = {}
    for out in group.outputs:
        streams[out.stream] = storm.StreamInfo(output_fields=[BATCH_FIELD, *out.fields], direct=False)
        streams[coord_stream(out.stream)] = storm.StreamInfo(output_fields=[BATCH_FIELD, "count"], direct=True)
    bolt = TridentBolt(runtime_spec(group, late), [(gin.source.id, gin.stream) for gin in group.inputs],
                       [(out.stream, out.node.id in late) for out in group.outputs])
    what = f"stream {group.nodes[0].stream!r} (bolt {group.id!r})"
    return storm.Bolt(bolt_object=_object(bolt, what),
                      common=_common(inputs, streams, group.parallelism, _state_conf(group)))


def compile_graph(graph: Graph, conf: Mapping[str, Any] | None = None) -> Any:
    validate_graph(graph, conf)
    groups = plan_groups(graph)
    validate_groups(graph, groups)
    late = commit_phase_nodes(graph)
    bolts: dict[str, Any] = {}
    for group in groups:
        if group.spout is not None:
            inputs = {_gid(COORDINATOR_ID, BATCH_STREAM): storm.Grouping(fields=[]),
                      _gid(COORDINATOR_ID, SUCCESS_STREAM): storm.Grouping(fields=[])}
            streams = {BATCH_STREAM: storm.StreamInfo(output_fields=[TX_FIELD], direct=False)}
            bolts[spout_coordinator_id(group.id)] = storm.Bolt(
                bolt_object=_object(SpoutCoordinatorBolt(), "the spout coordinator"),
                common=_common(inputs, streams, 1))
        bolts[group.id] = _group_bolt(group, late)
    return storm.StormTopology(spouts={COORDINATOR_ID: _coordinator()}, bolts=bolts, state_spouts={})


def compile_trident(topology_cls: type, conf: Mapping[str, Any]) -> Any:
    """Instantiate the TridentTopology class, run ``build(conf)``, compile its graph."""
    topology = topology_cls()
    topology.build(dict(conf))
    return compile_graph(topology._graph, conf)
