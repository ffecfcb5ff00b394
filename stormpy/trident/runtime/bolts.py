"""Thin adapters from today's Bolt API to the Trident runtime (``batch.BatchCore``).

- :class:`SpoutCoordinatorBolt` (``$spoutcoord-<stream>``, one task): forwards each ``$batch``
  from the master coordinator to every task of the spout executor, anchored (Storm's
  TridentSpoutCoordinator; metas are kept by the executor tasks themselves).
- :class:`TridentBolt`: a spout executor bolt or a processing bolt; one instance per task,
  built by unpickling the component shipped in the topology (``PythonObject.serialized``).
  It dispatches every input stream to the BatchCore through one table and is the core's Port.

Both run on their executor's thread. TridentBolt acks and fails explicitly (``auto_ack`` off)
and never anchors data tuples; the batch's tuple tree is carried by coordination tuples.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from stormpy.api.component import Bolt
from stormpy.trident.runtime.batch import BatchCore
from stormpy.trident.runtime.coordinator import BATCH_STREAM, COMMIT_STREAM, COORD_PREFIX, SUCCESS_STREAM, coord_stream
from stormpy.trident.runtime.processors import GroupRuntime, GroupSpec
from stormpy.trident.runtime.spouts import make_source
from stormpy.trident.runtime.stats import REPUBLISH_SECS
from stormpy.trident.state import txstate

log = logging.getLogger(__name__)


class SpoutCoordinatorBolt(Bolt):
    """``$spoutcoord-<stream>``: ``$batch`` in, ``$batch`` out to all spout executor tasks."""

    def process(self, tup: Any) -> None:
        if tup.stream == BATCH_STREAM:
            self.emit([tup.values[0]], stream=BATCH_STREAM)  # auto-anchored to tup, then auto-acked


class TridentBolt(Bolt):
    """Runs one fused group (optionally with its spout) for one task."""

    auto_ack = False
    auto_anchor = False
    timer_interval_secs = REPUBLISH_SECS   # on_timer: latencies the publish throttle held back

    def __init__(self, spec: GroupSpec, inputs: list[tuple[str, str]],
                 outputs: list[tuple[str, bool]]) -> None:
        self.spec = spec
        self.inputs = inputs          # (source component, data stream) of every input
        self.spec_outputs = outputs   # (data stream, produced at commit time?) of every output
        self.core: BatchCore | None = None
        self.runtime: GroupRuntime | None = None
        self.source: Any = None

    def initialize(self, stormconf: Mapping[str, Any], context: Any) -> None:
        conf = dict(stormconf)
        index, count = context.task_index, len(context.component_tasks)
        expected = sum(len(context.get_component_tasks(source)) for source, _stream in self.inputs)
        out_coord = []
        for stream, late in self.spec_outputs:
            coord = coord_stream(stream)
            tasks = sorted({t for target, _g in context.get_targets(coord) for t in context.get_component_tasks(target)})
            out_coord.append((stream, coord, tasks, late))
        spec = self.spec
        if spec.spout is not None:
            self.source = make_source(spec.spout, spec.spout_kind, spec.spout_stream)
            self.source.prepare(conf, context, txstate.transactional_state(context, conf), index, count)
        self.core = BatchCore(None, _BoltPort(self), expected, out_coord, spec.defer_finish, self.source,
                              name=spec.id)
        self.runtime = GroupRuntime(spec, self.core.send)
        self.core.runtime = self.runtime
        self.core.publish = self._publish
        self.runtime.prepare(conf, context, index, count)
        core = self.core
        self._handlers = {BATCH_STREAM: lambda t: core.on_batch(t.values[0], t),
                          COMMIT_STREAM: lambda t: core.on_commit(t.values[0], t),
                          SUCCESS_STREAM: self._on_success}

    def _on_success(self, tup: Any) -> None:
        self.core.on_success(tup.values[0], tup)

    def _publish(self) -> None:
        """This task's Trident figures, in its executor's stats (heartbeats, UI, /metrics)."""
        core, metrics = self.core, self.metrics
        metrics.set("trident.txid", core.last_txid)
        metrics.set("trident.batches.finished", core.stats["batches.finished"])
        metrics.set("trident.batches.committed", core.stats["batches.committed"])
        metrics.set("trident.batches.failed", core.stats["batches.failed"])
        core.latency.publish(metrics, "trident.batch.latency")

    def on_timer(self) -> None:
        if self.core is not None:
            self._publish()

    def process(self, tup: Any) -> None:
        stream = tup.stream
        handler = self._handlers.get(stream)
        if handler is not None:
            handler(tup)
        elif stream.startswith(COORD_PREFIX):
            self.core.on_coord(tup.values[0], tup.values[1], tup)
        else:
            values = tup.values
            self.core.on_data(stream, values[0], list(values[1:]), tup)

    def close(self) -> None:
        if self.runtime is not None:
            self.runtime.cleanup()
        if self.source is not None:
            try:
                self.source.close()
            except Exception:
                log.exception("trident %s: spout close failed", self.spec.id)



class _BoltPort:
    """BatchCore's Port over the bolt's collector (``stormpy.api.contract.BoltOutputCollector``):
    unanchored data, anchored direct coordination."""

    def __init__(self, bolt: TridentBolt) -> None:
        self.bolt = bolt

    def emit(self, stream: str, values: list) -> list[int]:
        return self.bolt._stormpy_collector.emit(values, stream=stream, need_task_ids=True) or []

    def emit_coord(self, stream: str, task: int, values: list, anchors: list) -> None:
        self.bolt._stormpy_collector.emit(values, stream=stream, anchors=anchors, direct_task=task)

    def ack(self, handle: Any) -> None:
        self.bolt._stormpy_collector.ack(handle)

    def fail(self, handle: Any) -> None:
        self.bolt._stormpy_collector.fail(handle)

    def report_error(self, text: str) -> None:
        self.bolt._stormpy_collector.report_error(text)
