"""OpaqueKafkaSpout / TransactionalKafkaSpout -> split -> Trident count into SqliteMapState.

Config keys (``-c`` at submit): ``kwc.bootstrap``, ``kwc.topic``, ``kwc.db`` (the SqliteMapState
file every worker of this host shares), ``kwc.kind`` (``opaque`` or ``transactional``),
``kwc.spout.par``. Records are lines of words; the test checks every word's count is exact.
"""
from __future__ import annotations

from typing import Any

from stormpy.trident import Count, Function, OpaqueKafkaSpout, SqliteMapState, TransactionalKafkaSpout, TridentTopology


class Split(Function):
    def execute(self, tup: Any, collector: Any) -> None:
        for word in tup["value"].split():
            collector.emit([word])


class TridentKafkaCounts(TridentTopology):
    config = {"topology.trident.batch.emit.interval.millis": 100, "topology.message.timeout.secs": 10,
              "topology.max.spout.pending": 3}

    def build(self, conf: Any) -> None:
        kind = conf.get("kwc.kind", "opaque")
        cls = OpaqueKafkaSpout if kind == "opaque" else TransactionalKafkaSpout
        spout = cls(conf["kwc.bootstrap"], [conf["kwc.topic"]], max_batch_size=50)
        state = (SqliteMapState.opaque if kind == "opaque" else SqliteMapState.transactional)(conf["kwc.db"])
        (self.new_stream("kafka", spout, par=int(conf.get("kwc.spout.par", 2)))
             .each(["value"], Split(), ["word"])
             .group_by(["word"])
             .persistent_aggregate(state, Count(), ["count"]).parallelism_hint(2))
