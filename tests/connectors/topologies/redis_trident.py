"""OpaqueRedisStreamSpout -> split -> Trident count into SqliteMapState.opaque.
``-c``: conn.url, conn.streams (list), conn.db."""
from __future__ import annotations

from typing import Any

from stormpy.trident import Count, Function, OpaqueRedisStreamSpout, SqliteMapState, TridentTopology


class Split(Function):
    def execute(self, tup: Any, collector: Any) -> None:
        for word in tup["fields"]["line"].split():
            collector.emit([word])


class RedisWordCounts(TridentTopology):
    config = {"topology.trident.batch.emit.interval.millis": 100, "topology.message.timeout.secs": 10,
              "topology.max.spout.pending": 3}

    def build(self, conf: Any) -> None:
        spout = OpaqueRedisStreamSpout(conf["conn.url"], list(conf["conn.streams"]), max_batch_size=50)
        (self.new_stream("entries", spout, par=2)
             .each(["fields"], Split(), ["word"])
             .group_by(["word"])
             .persistent_aggregate(SqliteMapState.opaque(conf["conn.db"]), Count(), ["count"]).parallelism_hint(2))
