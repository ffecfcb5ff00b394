"""A Trident word count for the real-cluster fault tests (tests/trident/test_trident_cluster.py).

A fixed text (``lines_of(partition, n)``: deterministic, so the test knows every word's count)
is read by a transactional PartitionedSpout or, with ``tcluster.kind: opaque``, by an
OpaquePartitionedSpout whose batch sizes vary from call to call (a replayed txid carries other
tuples); a Function raises on ``tcluster.fail.rate`` of its calls; group_by + persistent_aggregate
into SqliteMapState (``.transactional`` or ``.opaque``) on the file ``tcluster.db``, which every
worker of this host shares.

Config keys (``-c`` at submit): ``tcluster.db``, ``tcluster.kind``, ``tcluster.lines`` (lines per
partition), ``tcluster.per.batch`` (lines per partition per batch), ``tcluster.fail.rate``.
"""
from __future__ import annotations

import random
from collections import Counter

from stormpy.trident import Count, Function, OpaquePartitionedSpout, PartitionedSpout, TridentTopology
from stormpy.trident import SqliteMapState

PARTITIONS = 4
WORDS = ("storm trident batch txid commit spout state opaque partition replay worker nimbus "
         "supervisor zookeeper acker exactly once python").split()


def lines_of(partition: int, count: int) -> list[str]:
    """The fixed text of one partition: ``count`` lines of 3..9 words, the same on every call."""
    rnd = random.Random(1000 + partition)
    return [" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(3, 9))) for _ in range(count)]


def expected_counts(lines_per_partition: int) -> Counter:
    counts: Counter = Counter()
    for p in range(PARTITIONS):
        for line in lines_of(p, lines_per_partition):
            counts.update(line.split())
    return counts


class _Text:
    outputs = ["sentence"]

    def __init__(self, lines: int, per_batch: int) -> None:
        self.lines = lines
        self.per_batch = per_batch
        self.text: dict[int, list[str]] = {}

    def initialize(self, stormconf, context):
        self.text = {p: lines_of(p, self.lines) for p in range(PARTITIONS)}

    def partitions(self):
        return list(range(PARTITIONS))


class TextSpout(_Text, PartitionedSpout):
    """Transactional: a txid's (start, end) is stored before the batch leaves, so replays match."""

    def emit_new_batch(self, txid, collector, partition, last_meta):
        start = last_meta["end"] if last_meta else 0
        meta = {"start": start, "end": min(start + self.per_batch, self.lines)}
        self.emit_batch(txid, collector, partition, meta)
        return meta

    def emit_batch(self, txid, collector, partition, meta):
        for line in self.text[partition][meta["start"]:meta["end"]]:
            collector.emit([line])


class OpaqueTextSpout(_Text, OpaquePartitionedSpout):
    """Opaque: each call takes a random number of lines, so a replay of a txid differs."""

    def initialize(self, stormconf, context):
        super().initialize(stormconf, context)
        self.rnd = random.Random()

    def emit_batch(self, txid, collector, partition, last_meta):
        start = last_meta["end"] if last_meta else 0
        end = min(start + self.rnd.randint(max(1, self.per_batch // 2), self.per_batch), self.lines)
        for line in self.text[partition][start:end]:
            collector.emit([line])
        return {"start": start, "end": end}


class FlakySplit(Function):
    def __init__(self, fail_rate: float) -> None:
        self.fail_rate = fail_rate

    def prepare(self, conf, context):
        self.rnd = random.Random()

    def execute(self, tup, collector):
        if self.rnd.random() < self.fail_rate:
            raise RuntimeError("flaky split: injected failure")
        for word in tup["sentence"].split():
            collector.emit([word])


def state_factory(conf):
    kind = conf.get("tcluster.kind", "transactional")
    make = SqliteMapState.opaque if kind == "opaque" else SqliteMapState.transactional
    return make(conf["tcluster.db"])


class ClusterWordCount(TridentTopology):
    config = {"topology.trident.batch.emit.interval.millis": 100, "topology.message.timeout.secs": 10,
              "topology.max.spout.pending": 3}

    def build(self, conf):
        lines, per_batch = int(conf.get("tcluster.lines", 1000)), int(conf.get("tcluster.per.batch", 10))
        opaque = conf.get("tcluster.kind", "transactional") == "opaque"
        spout = (OpaqueTextSpout if opaque else TextSpout)(lines, per_batch)
        (self.new_stream("lines", spout, par=2)
             .each(["sentence"], FlakySplit(float(conf.get("tcluster.fail.rate", 0.02))), ["word"])
             .group_by(["word"])
             .persistent_aggregate(state_factory(conf), Count(), ["count"]).parallelism_hint(2))
