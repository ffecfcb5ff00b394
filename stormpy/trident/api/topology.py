"""The Trident user API (DESIGN 7.1): TridentTopology, Stream, GroupedStream, TridentState.

Calls only record nodes in a :class:`~stormpy.trident.planner.graph.Graph`; nothing runs here and
nothing is checked eagerly: :func:`stormpy.trident.planner.validate.validate_graph` checks the whole
graph at compile time and names the stream and field at fault. Output fields are appended to
the input fields, as in Trident (``each``, ``state_query``); aggregations replace them
(group fields + output fields).

A TridentTopology is a Topology subclass so ``stormpy local`` / ``stormpy submit`` load it
from a file like any topology; ``compile_storm_topology`` (called by
``stormpy.api.compile.compile_topology``) runs ``build(conf)`` and compiles the graph.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from stormpy.api.dsl import Topology
from stormpy.trident.runtime import operations as ops
from stormpy.trident.planner.graph import Graph, Node

log = logging.getLogger(__name__)


def _fields(names: Any) -> tuple[str, ...]:
    if names is None:
        return ()
    if isinstance(names, str):
        return (names,)
    return tuple(str(n) for n in names)


class Stream:
    """A stream of batches; every method returns a new Stream (or a TridentState)."""

    def __init__(self, topology: "TridentTopology", node: Node) -> None:
        self._topology = topology
        self._node = node

    @property
    def fields(self) -> tuple[str, ...]:
        return self._node.fields

    def _add(self, node_kind: str, node_fields: Sequence[str], **spec: Any) -> "Stream":
        node = self._topology._graph.add(node_kind, [self._node], tuple(node_fields), **spec)
        return Stream(self._topology, node)

    # ------------------------------------------------------------ per tuple
    def each(self, fields: Any, operation: Any, out_fields: Any = None) -> "Stream":
        """``each(fields, function, out_fields)`` or ``each(fields, filter)``.

        A Filter instance, or a plain callable without ``out_fields``, filters; a Function,
        or a callable with ``out_fields``, emits values appended to the input tuple.
        """
        inputs = _fields(fields)
        if ops.is_filter(operation) or (out_fields is None and not isinstance(operation, ops.Function)):
            return self._add("filter", self.fields, input_fields=inputs, op=operation)
        outs = _fields(out_fields)
        return self._add("each", self.fields + outs, input_fields=inputs, op=operation, out_fields=outs)

    def project(self, fields: Any) -> "Stream":
        keep = _fields(fields)
        return self._add("project", keep, keep=keep, input_fields=keep)

    # ------------------------------------------------------------ repartitioning
    def _repartition(self, kind: str, fields: tuple[str, ...] = (), via: str = "") -> "Stream":
        return self._add("repartition", self.fields, kind=kind, fields=fields, via=via or None)

    def shuffle(self) -> "Stream":
        return self._repartition("shuffle")

    def partition_by(self, fields: Any) -> "Stream":
        return self._repartition("fields", _fields(fields))

    def broadcast(self) -> "Stream":
        return self._repartition("all")

    def global_(self) -> "Stream":
        return self._repartition("global")

    def batch_global(self) -> "Stream":
        return self._repartition("batch_global")

    # ------------------------------------------------------------ aggregation
    def group_by(self, fields: Any) -> "GroupedStream":
        return GroupedStream(self, _fields(fields))

    def partition_aggregate(self, *args: Any) -> "Stream":
        """``partition_aggregate(agg, out_fields)`` or ``(input_fields, agg, out_fields)``."""
        inputs, agg, outs = _agg_args(args, self.fields)
        return self._add("aggregate", outs, input_fields=inputs, agg=agg, out_fields=outs, group_fields=())

    def aggregate(self, *args: Any) -> "Stream":
        """Whole-batch aggregation: ``aggregate(agg, out_fields)`` or ``(input_fields, agg, out_fields)``.

        A CombinerAggregator is pre-combined in every partition, then combined globally (as
        Trident does); other aggregators see the whole batch on one task.
        """
        inputs, agg, outs = _agg_args(args, self.fields)
        if isinstance(agg, ops.CombinerAggregator):
            partial = self._add("aggregate", ("$partial",), input_fields=inputs, agg=agg,
                                out_fields=("$partial",), group_fields=())
            return partial.batch_global()._add(
                "aggregate", outs, input_fields=("$partial",), agg=ops.CombinerPartialCombine(agg),
                out_fields=outs, group_fields=())
        return self.batch_global()._add("aggregate", outs, input_fields=inputs, agg=agg,
                                        out_fields=outs, group_fields=())

    def persistent_aggregate(self, state_factory: Any, *args: Any, input_fields: Any = None) -> "TridentState":
        """The whole stream aggregated into one value of ``state_factory``'s map (key ``()``)."""
        return GroupedStream(self, ())._persist(state_factory, args, input_fields)

    # ------------------------------------------------------------ state
    def partition_persist(self, state_factory: Any, input_fields: Any, updater: Any,
                          out_fields: Any = None) -> "TridentState":
        state = TridentState(self._topology, None, state_factory)
        outs = _fields(out_fields)
        node = self._topology._graph.add("persist", [self._node], outs, input_fields=_fields(input_fields),
                                         updater=updater, state=state, out_fields=outs)
        state._node = node
        return state

    def state_query(self, state: "TridentState", input_fields: Any, query: Any, out_fields: Any) -> "Stream":
        outs = _fields(out_fields)
        return self._add("state_query", self.fields + outs, input_fields=_fields(input_fields),
                         query=query, state=state, out_fields=outs)

    # ------------------------------------------------------------ hints
    def parallelism_hint(self, n: int) -> "Stream":
        """Tasks of the operations since the previous repartition."""
        self._node.parallelism = int(n)
        return self

    def name(self, name: str) -> "Stream":
        """Labels the bolt that runs this operation (``b-<n>-<name>``)."""
        self._node.name = str(name)
        return self

    def __repr__(self) -> str:
        return f"<trident Stream {self._node.stream!r} {self._node.describe()} fields={list(self.fields)}>"


def _agg_args(args: tuple[Any, ...], default_inputs: tuple[str, ...]) -> tuple[tuple[str, ...], Any, tuple[str, ...]]:
    if len(args) == 2:
        agg, outs = args
        return default_inputs, agg, _fields(outs)
    if len(args) == 3:
        inputs, agg, outs = args
        return _fields(inputs), agg, _fields(outs)
    raise TypeError("expected (aggregator, out_fields) or (input_fields, aggregator, out_fields)")


class GroupedStream:
    """``stream.group_by(fields)``: aggregations per group (output: group fields + outputs)."""

    def __init__(self, stream: Stream, group_fields: tuple[str, ...]) -> None:
        self._stream = stream
        self._group_fields = group_fields

    def aggregate(self, *args: Any) -> Stream:
        inputs, agg, outs = _agg_args(args, self._stream.fields)
        group = self._group_fields
        return self._stream._repartition("fields", group, via="group_by")._add(
            "aggregate", group + outs, input_fields=inputs, agg=agg, out_fields=outs, group_fields=group)

    def partition_aggregate(self, *args: Any) -> Stream:
        inputs, agg, outs = _agg_args(args, self._stream.fields)
        group = self._group_fields
        return self._stream._add("aggregate", group + outs, input_fields=inputs, agg=agg,
                                 out_fields=outs, group_fields=group)

    def persistent_aggregate(self, state_factory: Any, *args: Any, input_fields: Any = None) -> "TridentState":
        """``persistent_aggregate(factory, agg, out_fields)`` (or with ``input_fields`` first)."""
        return self._persist(state_factory, args, input_fields)

    def _persist(self, state_factory: Any, args: tuple[Any, ...], input_fields: Any) -> "TridentState":
        from stormpy.trident.api.updaters import MapCombinerUpdater, MapReducerUpdater

        if len(args) == 3:
            input_fields, args = args[0], args[1:]
        if len(args) != 2:
            raise TypeError("persistent_aggregate(state_factory, aggregator, out_fields)")
        agg, outs = args[0], _fields(args[1])
        group = self._group_fields
        stream = self._stream
        # By default an aggregator sees the fields that are not grouped on (Sum sums the first).
        inputs = _fields(input_fields) if input_fields is not None else tuple(f for f in stream.fields if f not in group)
        if isinstance(agg, ops.CombinerAggregator):
            # Pre-combine per partition (fewer tuples cross the repartition), then one
            # combine per key against the state.
            partial = stream._add("aggregate", group + ("$partial",), input_fields=inputs, agg=agg,
                                  out_fields=("$partial",), group_fields=group, via="group_by")
            routed = partial._repartition("fields", group, via="group_by") if group else partial.global_()
            updater = MapCombinerUpdater(agg, len(group))
            persist_inputs = group + ("$partial",)
        elif isinstance(agg, ops.ReducerAggregator):
            routed = stream._repartition("fields", group, via="group_by") if group else stream.global_()
            updater = MapReducerUpdater(agg, len(group))
            persist_inputs = group + inputs
        else:
            raise TypeError(f"persistent_aggregate needs a CombinerAggregator or ReducerAggregator, got {agg!r}")
        state = routed.partition_persist(state_factory, persist_inputs, updater, group + outs)
        return state


class TridentState:
    """A state a stream writes (``persistent_aggregate`` / ``partition_persist``)."""

    def __init__(self, topology: "TridentTopology", node: Node | None, factory: Any) -> None:
        self._topology = topology
        self._node = node
        self.factory = factory

    def new_values_stream(self) -> Stream:
        """The values the updater emitted (for map states: group fields + new value)."""
        return Stream(self._topology, self._node)

    def parallelism_hint(self, n: int) -> "TridentState":
        self._node.parallelism = int(n)
        return self

    def name(self, name: str) -> "TridentState":
        self._node.name = str(name)
        return self


class TridentTopology(Topology):
    """Base of Trident topologies: define ``build(self, conf)`` using ``self.new_stream(...)``."""

    _base_topology_class = True
    config: dict[str, Any] = {}

    def __init__(self) -> None:
        self._graph = Graph()

    def build(self, conf: Mapping[str, Any]) -> None:
        """Describe the streams (called at compile time, possibly more than once)."""
        raise NotImplementedError(f"{type(self).__name__} must define build(self, conf)")

    def new_stream(self, name: str, spout: Any, par: int | None = None) -> Stream:
        """A stream of batches from ``spout`` (BatchSpout, PartitionedSpout or OpaquePartitionedSpout)."""
        from stormpy.trident.runtime.spouts import spout_kind

        outputs = getattr(spout, "outputs", None)
        fields = _fields(outputs) if outputs else ()
        node = self._graph.add("spout", [], fields, stream=str(name), name=str(name), spout=spout,
                               spout_kind=spout_kind(spout))
        node.parallelism = int(par) if par else None
        return Stream(self, node)

    def merge(self, *streams: Stream) -> Stream:
        if len(streams) == 1 and isinstance(streams[0], (list, tuple)):
            streams = tuple(streams[0])
        nodes = [s._node for s in streams]
        node = self._graph.add("merge", nodes, nodes[0].fields if nodes else ())
        return Stream(self, node)

    def join(self, a: Stream, a_fields: Any, b: Stream, b_fields: Any, out_fields: Any) -> Stream:
        """Inner join of one batch of ``a`` and ``b``: out = keys, a's other fields, b's other fields."""
        outs = _fields(out_fields)
        node = self._graph.add("join", [a._node, b._node], outs, a_fields=_fields(a_fields),
                               b_fields=_fields(b_fields), out_fields=outs)
        return Stream(self, node)

    @classmethod
    def compile_storm_topology(cls, conf: Mapping[str, Any]) -> Any:
        """Run ``build(conf)`` and compile the graph into a StormTopology of framework components."""
        from stormpy.trident.planner.compile import compile_trident

        return compile_trident(cls, conf)
