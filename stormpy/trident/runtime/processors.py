"""Running one fused processing group: the operations of a bolt, wired in-process.

:class:`GroupSpec` is what a processing bolt ships (pickled): the group's nodes in topological
order with their in-group children and exit streams, nothing of the rest of the graph.
:class:`GroupRuntime` builds one processor per node and passes values between them with plain
calls (no hop per ``each``). Tuples are lists of values; each processor knows the index of
the fields it reads. Per-batch state (aggregations, buffered persists, queries, joins) is
keyed by txid so several batches may be in flight in one task.

Everything runs on the bolt's executor thread; user code raising propagates to the caller
(the batch core), which fails the batch.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from stormpy.trident.runtime import operations as ops
from stormpy.trident.runtime.aggregate import AggregateProcessor
from stormpy.trident.runtime.operations import TridentTuple
from stormpy.trident.runtime.processor import Processor, _Collector, _index, _unwired

log = logging.getLogger(__name__)


@dataclass
class NodeSpec:
    key: int
    kind: str
    fields: tuple[str, ...]
    parent_fields: list[tuple[str, ...]]
    spec: dict[str, Any]
    children: list[tuple[int, int]] = field(default_factory=list)   # (node key, parent index)
    exits: list[str] = field(default_factory=list)                  # streams to other groups
    commit_phase: bool = False     # a persist or after one: finishes at $commit, not at completion


@dataclass
class GroupSpec:
    id: str
    nodes: list[NodeSpec]
    entries: dict[str, list[tuple[int, int]]]   # input stream -> [(node key, parent index)]
    spout_key: int | None = None
    spout: Any = None
    spout_kind: str | None = None
    spout_stream: str = ""
    defer_finish: bool = False                  # holds state: finishes batches at $commit


class EachProcessor(Processor):
    def __init__(self, node: NodeSpec) -> None:
        super().__init__(node)
        self.fn = ops.as_function(node.spec["op"])
        self.collector = _Collector(self.out)

    def wire(self, out: Callable[[Any, list], None]) -> None:
        self.out = self.collector.out = out

    def prepare(self, conf: Mapping[str, Any], context: Any, index: int, count: int) -> None:
        self.fn.prepare(conf, context)

    def bind(self, inline: Any = None) -> None:
        """``inline``: the child's collector that aggregates what the function emits on the spot
        (``AggregateProcessor.inline_collector``): one call per emitted tuple, no list built."""
        execute, project = self.fn.execute, self.project
        if inline is not None and self.whole_input:
            begin, index = inline.begin, self.sel_index

            def accept_whole(batch: Any, values: list) -> None:
                if batch is not inline.batch:   # reset when the aggregate finishes or drops a batch
                    begin(batch)
                execute(TridentTuple(values, index), inline)
            self.accept = accept_whole  # type: ignore[method-assign]
            return
        if inline is not None:
            begin = inline.begin

            def accept_inline(batch: Any, values: list) -> None:
                if batch is not inline.batch:
                    begin(batch)
                execute(project(values), inline)
            self.accept = accept_inline  # type: ignore[method-assign]
            return
        collector = self.collector

        def accept(batch: Any, values: list) -> None:
            collector.batch = batch
            collector.prefix = values
            execute(project(values), collector)
        self.accept = accept  # type: ignore[method-assign]

    def accept(self, batch: Any, values: list) -> None:
        collector = self.collector
        collector.batch = batch
        collector.prefix = values
        self.fn.execute(self.project(values), collector)

    def cleanup(self) -> None:
        self.fn.cleanup()


class FilterProcessor(Processor):
    def __init__(self, node: NodeSpec) -> None:
        super().__init__(node)
        self.fn = ops.as_filter(node.spec["op"])

    def prepare(self, conf: Mapping[str, Any], context: Any, index: int, count: int) -> None:
        self.fn.prepare(conf, context)

    def accept(self, batch: Any, values: list) -> None:
        if self.fn.is_keep(self.project(values)):
            self.out(batch, values)

    def cleanup(self) -> None:
        self.fn.cleanup()


class ProjectProcessor(Processor):
    def accept(self, batch: Any, values: list) -> None:
        self.out(batch, [values[i] for i in self.select])


class PassProcessor(Processor):
    """merge: every parent's tuples go on unchanged."""

    def accept(self, batch: Any, values: list) -> None:
        self.out(batch, values)


class PersistProcessor(Processor):
    """Buffers a batch's tuples; at finish (commit time) applies them to the state."""

    def __init__(self, node: NodeSpec) -> None:
        super().__init__(node)
        self.factory = node.spec["factory"]
        self.updater = node.spec["updater"]
        self.state: Any = None
        self.collector = _Collector(self.out)
        self.inputs_at_commit = False   # set by GroupRuntime: a parent in the group is commit-phase

    def prepare(self, conf: Mapping[str, Any], context: Any, index: int, count: int) -> None:
        self.state = self.factory.make_state(conf, context, index, count)
        prepare = getattr(self.updater, "prepare", None)
        if prepare is not None:
            prepare(conf, context)

    def wire(self, out: Callable[[Any, list], None]) -> None:
        self.out = self.collector.out = out

    def accept(self, batch: Any, values: list) -> None:
        self.batches.setdefault(batch.txid, []).append(self.project(values))

    def complete(self, batch: Any) -> None:
        """Every tuple of the batch is here, its commit is still to come: an updater with
        ``batch_complete(state, txid, tuples)`` may start slow work now (SparkState writes the
        batch in the background) and finish it in ``update_state`` at the commit. Only when the
        persist's inputs come from the batch phase (else more tuples arrive at the commit)."""
        hook = getattr(self.updater, "batch_complete", None)
        if hook is not None and not self.inputs_at_commit:
            hook(self.state, batch.txid, self.batches.setdefault(batch.txid, []))

    def finish(self, batch: Any) -> None:
        tuples = self.batches.pop(batch.txid, [])
        collector = self.collector
        collector.batch, collector.prefix = batch, []
        self.state.begin_commit(batch.txid)
        self.updater.update_state(self.state, tuples, collector)
        self.state.commit(batch.txid)

    def cleanup(self) -> None:
        cleanup = getattr(self.updater, "cleanup", None)
        if cleanup is not None:
            cleanup()
        close = getattr(self.state, "close", None)
        if close is not None:
            close()


class StateQueryProcessor(Processor):
    """Buffers a batch's tuples; at finish asks the state once and emits per tuple."""

    def __init__(self, node: NodeSpec) -> None:
        super().__init__(node)
        self.factory = node.spec["factory"]
        self.query = node.spec["query"]
        self.state: Any = None
        self.collector = _Collector(self.out)

    def wire(self, out: Callable[[Any, list], None]) -> None:
        self.out = self.collector.out = out

    def prepare(self, conf: Mapping[str, Any], context: Any, index: int, count: int) -> None:
        self.state = self.factory.make_state(conf, context, index, count)
        self.query.prepare(conf, context)

    def accept(self, batch: Any, values: list) -> None:
        self.batches.setdefault(batch.txid, []).append(values)

    def finish(self, batch: Any) -> None:
        rows = self.batches.pop(batch.txid, [])
        if not rows:
            return
        tuples = [self.project(v) for v in rows]
        results = self.query.batch_retrieve(self.state, tuples)
        collector = self.collector
        collector.batch = batch
        for values, tup, result in zip(rows, tuples, results):
            collector.prefix = values
            self.query.execute(tup, result, collector)

    def cleanup(self) -> None:
        self.query.cleanup()


class JoinProcessor(Processor):
    """Inner join of the batch's two sides on their key fields; emits at finish."""

    def __init__(self, node: NodeSpec) -> None:
        super().__init__(node)
        keys = (node.spec["a_fields"], node.spec["b_fields"])
        self.keys = [[_index(pf)[f] for f in k] for pf, k in zip(node.parent_fields, keys)]
        self.rest = [[i for i in range(len(pf)) if i not in set(k)] for pf, k in zip(node.parent_fields, self.keys)]

    def accept(self, batch: Any, values: list) -> None:
        self.execute(batch, 0, values)

    def execute(self, batch: Any, parent: int, values: list) -> None:
        sides = self.batches.get(batch.txid)
        if sides is None:
            sides = self.batches[batch.txid] = ({}, {})
        key = tuple(values[i] for i in self.keys[parent])
        sides[parent].setdefault(key, []).append([values[i] for i in self.rest[parent]])

    def finish(self, batch: Any) -> None:
        left, right = self.batches.pop(batch.txid, ({}, {}))
        for key, rows in left.items():
            others = right.get(key)
            if not others:
                continue
            for a in rows:
                for b in others:
                    self.out(batch, [*key, *a, *b])


PROCESSORS: dict[str, type[Processor]] = {
    "each": EachProcessor, "filter": FilterProcessor, "project": ProjectProcessor,
    "merge": PassProcessor, "spout": PassProcessor, "aggregate": AggregateProcessor,
    "persist": PersistProcessor, "state_query": StateQueryProcessor, "join": JoinProcessor,
}


class GroupRuntime:
    """The processors of one group in one task; ``send(stream, batch, values)`` leaves the group."""

    def __init__(self, spec: GroupSpec, send: Callable[[str, Any, list], None]) -> None:
        self.spec = spec
        self.send = send
        self.processors: dict[int, Processor] = {}
        self.order: list[Processor] = []
        for node in spec.nodes:
            proc = PROCESSORS[node.kind](node)
            self.processors[node.key] = proc
            self.order.append(proc)
        for node in spec.nodes:
            if node.commit_phase:
                for key, _index_ in node.children:
                    if isinstance(self.processors[key], PersistProcessor):
                        self.processors[key].inputs_at_commit = True
        #: input stream -> the accept of every processor it enters
        self.entries: dict[str, list[Callable[[Any, list], None]]] = {}
        self.spout_proc = self.processors.get(spec.spout_key) if spec.spout_key is not None else None
        #: where a spout's tuples go: what the spout node routes to (it only passes them on)
        self.spout_entry: Callable[[Any, list], None] = _unwired
        self._wire()

    def _wire(self) -> None:
        """Bind every processor's fast path and route its output straight to its children's
        ``accept`` (children before parents: nodes are in topological order)."""
        for node in reversed(self.spec.nodes):
            proc = self.processors[node.key]
            proc.bind()
            proc.wire(self._router(node))
            if isinstance(proc, EachProcessor) and len(node.children) == 1 and not node.exits:
                child = self.processors[node.children[0][0]]
                if isinstance(child, AggregateProcessor):
                    inline = child.inline_collector(len(node.parent_fields[0]) if node.parent_fields else 0)
                    if inline is not None:
                        proc.bind(inline)
        self.entries = {stream: [self._target(k, i) for k, i in targets]
                        for stream, targets in self.spec.entries.items()}
        if self.spout_proc is not None:
            self.spout_entry = self.spout_proc.out

    def _target(self, key: int, index: int) -> Callable[[Any, list], None]:
        proc = self.processors[key]
        if isinstance(proc, JoinProcessor):
            execute = proc.execute
            return lambda batch, values: execute(batch, index, values)
        return proc.accept

    def _router(self, node: NodeSpec) -> Callable[[Any, list], None]:
        targets = [self._target(key, index) for key, index in node.children]
        send = self.send
        if len(targets) == 1 and not node.exits:
            return targets[0]
        if not targets and len(node.exits) == 1:
            (stream,) = node.exits
            return lambda batch, values: send(stream, batch, values)
        exits = node.exits

        def route(batch: Any, values: list) -> None:
            for target in targets:
                target(batch, values)
            for stream in exits:
                send(stream, batch, values)
        return route

    def prepare(self, conf: Mapping[str, Any], context: Any, index: int, count: int) -> None:
        for proc in self.order:
            proc.prepare(conf, context, index, count)
        self._wire()  # prepare may have changed the user objects the fast paths hold

    def feed(self, stream: str, batch: Any, values: list) -> None:
        for target in self.entries.get(stream, ()):
            target(batch, values)

    def emit_spout(self, batch: Any, values: list) -> None:
        self.spout_entry(batch, values)

    def finish(self, batch: Any, phase: str | None = None) -> None:
        """Finish the batch in every processor, or only those of ``phase`` ("batch" / "commit");
        at the end of the "batch" phase the commit-phase processors hear ``complete``."""
        for proc in self.order:
            if phase is None or proc.node.commit_phase == (phase == "commit"):
                proc.finish(batch)
        if phase == "batch":
            for proc in self.order:
                if proc.node.commit_phase:
                    proc.complete(batch)

    def discard(self, txid: int) -> None:
        for proc in self.order:
            proc.discard(txid)

    def cleanup(self) -> None:
        for proc in self.order:
            try:
                proc.cleanup()
            except Exception:
                log.exception("trident group %s: cleanup of %s failed", self.spec.id, proc.node.kind)
