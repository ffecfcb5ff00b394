"""The Trident word count that ``benchmarks/trident_wordcount.py --cluster`` submits.

The same topology as the local part of that benchmark (transactional PartitionedSpout over the
bundled text, split Function, group_by + persistent_aggregate with Count), counting into
SqliteMapState on ``bench.db`` (one host: every worker reaches the file).
Config: ``bench.db``, ``bench.text``, ``bench.per.batch`` (lines per partition per batch).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from stormpy.trident import Count, Function, PartitionedSpout, SqliteMapState, TridentTopology

DATA = Path(__file__).resolve().parent.parent / "examples" / "data" / "sentences.txt"
PARTITIONS = 4


class BenchLines(PartitionedSpout):
    """Partition p cycles through the text; a meta is the [start, end) range of its steps."""

    outputs = ["sentence"]

    def __init__(self, per_batch: int) -> None:
        self.per_batch = per_batch

    def initialize(self, stormconf: Any, context: Any) -> None:
        text = Path(stormconf.get("bench.text") or DATA)     # a cluster's workers get the path in the conf
        self.sentences = [line.strip().lower().rstrip(".") for line in text.read_text().splitlines() if line.strip()]

    def partitions(self) -> list:
        return list(range(PARTITIONS))

    def emit_new_batch(self, txid: int, collector: Any, partition: Any, last_meta: Any) -> dict:
        start = last_meta["end"] if last_meta else 0
        meta = {"start": start, "end": start + self.per_batch}
        self.emit_batch(txid, collector, partition, meta)
        return meta

    def emit_batch(self, txid: int, collector: Any, partition: Any, meta: dict) -> None:
        sentences, n = self.sentences, len(self.sentences)
        for step in range(meta["start"], meta["end"]):
            collector.emit([sentences[(step * PARTITIONS + partition) % n]])


class Split(Function):
    def execute(self, tup: Any, collector: Any) -> None:
        for word in tup[0].split():
            collector.emit([word])


def build_word_count(topology: TridentTopology, state: Any, per_batch: int) -> None:
    (topology.new_stream("lines", BenchLines(per_batch), par=2)
         .each(["sentence"], Split(), ["word"]).parallelism_hint(2)
         .group_by(["word"])
         .persistent_aggregate(state, Count(), ["count"]).parallelism_hint(2))


class TridentBench(TridentTopology):
    config = {"topology.workers": 2, "topology.max.spout.pending": 3,
              "topology.trident.batch.emit.interval.millis": 0, "topology.message.timeout.secs": 60}

    def build(self, conf: Any) -> None:
        build_word_count(self, SqliteMapState.transactional(conf["bench.db"]), int(conf.get("bench.per.batch", 1000)))
