"""Trident into Redis and Spark for the real-cluster fault tests (test_trident_spark_cluster.py).

A transactional PartitionedSpout reads a fixed text (``trident_wc_cluster.lines_of``) and emits
``(sentence, partition, step)``; the lines go as they are into ``SparkState`` (Parquet at
``tspark.output``: each (partition, step) must be there exactly once) and, split into words,
into ``RedisMapState.opaque(tspark.redis.url, tspark.redis.prefix)`` (exact word counts).

Config keys (``-c`` at submit): ``tspark.output``, ``tspark.redis.url``, ``tspark.redis.prefix``,
``tspark.lines`` (lines per partition), ``tspark.per.batch`` (lines per partition per batch),
``tspark.kind`` (``opaque``: an OpaquePartitionedSpout whose batch sizes vary from call to call,
so a replayed txid carries other lines), and the test hook ``spark.state.test.die.after.write``.
"""
from __future__ import annotations

from trident_wc_cluster import PARTITIONS, lines_of

import random

from stormpy.trident import (Count, Function, OpaquePartitionedSpout, PartitionedSpout, RedisMapState, SparkState,
                             TridentTopology)


class NumberedLines(PartitionedSpout):
    outputs = ["sentence", "partition", "step"]

    def __init__(self, lines: int, per_batch: int) -> None:
        self.lines = lines
        self.per_batch = per_batch

    def initialize(self, stormconf, context):
        self.text = {p: lines_of(p, self.lines) for p in range(PARTITIONS)}

    def partitions(self):
        return list(range(PARTITIONS))

    def emit_new_batch(self, txid, collector, partition, last_meta):
        start = last_meta["end"] if last_meta else 0
        meta = {"start": start, "end": min(start + self.per_batch, self.lines)}
        self.emit_batch(txid, collector, partition, meta)
        return meta

    def emit_batch(self, txid, collector, partition, meta):
        for step in range(meta["start"], meta["end"]):
            collector.emit([self.text[partition][step], partition, step])


class OpaqueNumberedLines(OpaquePartitionedSpout):
    """Opaque: each call takes 1..per_batch lines, so a replay of a txid differs from its first attempt."""

    outputs = ["sentence", "partition", "step"]

    def __init__(self, lines: int, per_batch: int) -> None:
        self.lines = lines
        self.per_batch = per_batch

    def initialize(self, stormconf, context):
        self.text = {p: lines_of(p, self.lines) for p in range(PARTITIONS)}
        self.rnd = random.Random()

    def partitions(self):
        return list(range(PARTITIONS))

    def emit_batch(self, txid, collector, partition, last_meta):
        start = last_meta["end"] if last_meta else 0
        end = min(start + self.rnd.randint(1, self.per_batch), self.lines)
        for step in range(start, end):
            collector.emit([self.text[partition][step], partition, step])
        return {"start": start, "end": end}


class Split(Function):
    def execute(self, tup, collector):
        for word in tup["sentence"].split():
            collector.emit([word])


class SparkRedisCluster(TridentTopology):
    config = {"topology.trident.batch.emit.interval.millis": 100, "topology.message.timeout.secs": 20,
              "topology.max.spout.pending": 3, "spark.master": "local[1]", "spark.ui.enabled": False,
              "spark.sql.shuffle.partitions": 1}

    def build(self, conf):
        kind = OpaqueNumberedLines if conf.get("tspark.kind") == "opaque" else NumberedLines
        spout = kind(int(conf.get("tspark.lines", 300)), int(conf.get("tspark.per.batch", 10)))
        lines = self.new_stream("lines", spout, par=2)
        (lines.shuffle()
              .partition_persist(SparkState(path=conf["tspark.output"]), ["partition", "step", "sentence"],
                                 SparkState.updater())
              .parallelism_hint(2))
        (lines.each(["sentence"], Split(), ["word"])
              .group_by(["word"])
              .persistent_aggregate(RedisMapState.opaque(conf["tspark.redis.url"], conf["tspark.redis.prefix"]),
                                    Count(), ["count"])
              .parallelism_hint(2))
