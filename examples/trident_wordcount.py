"""Exactly-once word count with Trident: ``stormpy local examples/trident_wordcount.py --duration 15``.

A transactional PartitionedSpout reads the bundled text (examples/data/sentences.txt) as four
partitions that cycle through the file; the meta of each batch is just the range of line
numbers it covers, so a replayed txid re-emits exactly the same lines. A Function splits the
lines into words and raises on a small share of its calls (``wc.fail.rate``) to show that a
failed batch is replayed without counting anything twice. ``group_by`` + ``persistent_aggregate``
count the words into SqliteMapState; the counts stored for txid n are exact whatever failed.

When the topology stops, spout task 0 reads the counts back from the state with ``open_map()``
(exactly as any other program would) and prints the top words, the txid and the total.

Config (``-c key=value``): ``wc.text`` (the input; on a cluster a path every worker can read), ``wc.db`` (the SQLite file; on a cluster give a path every worker
can reach), ``wc.lines.per.batch`` (per partition), ``wc.fail.rate``. Without ``wc.db`` the
state goes to a new file in the temp dir: ``stormpy local`` restarts txids at 1 on every run,
and a state that already holds later txids refuses them ("txids restarted").
"""
from __future__ import annotations

import os
import random
import re
import tempfile
import time
from pathlib import Path

from stormpy.trident import Count, Function, PartitionedSpout, SqliteMapState, TridentTopology

DATA = Path(__file__).resolve().parent / "data" / "sentences.txt"
PARTITIONS = 4
_WORD = re.compile(r"[a-z']+")
_DEFAULT_DB = os.path.join(tempfile.gettempdir(), f"stormpy-trident-wordcount-{os.getpid()}-{int(time.time())}.db")


class Lines(PartitionedSpout):
    """Partition p emits lines p, p+4, p+8, ... of the text, cycling; a meta is a range of steps."""

    outputs = ["sentence"]

    def __init__(self, per_batch: int, state: object) -> None:
        self.per_batch = per_batch
        self.state = state

    def initialize(self, stormconf, context):
        text = Path(stormconf.get("wc.text") or DATA)
        self.lines = [line.strip() for line in text.read_text().splitlines() if line.strip()]
        self.first_task = context.task_index == 0

    def partitions(self):
        return list(range(PARTITIONS))

    def emit_new_batch(self, txid, collector, partition, last_meta):
        start = last_meta["end"] if last_meta else 0
        meta = {"start": start, "end": start + self.per_batch}
        self.emit_batch(txid, collector, partition, meta)
        return meta

    def emit_batch(self, txid, collector, partition, meta):
        n = len(self.lines)
        for step in range(meta["start"], meta["end"]):
            collector.emit([self.lines[(step * PARTITIONS + partition) % n]])

    def close(self):
        if self.first_task:
            print_top_words(self.state)


class Split(Function):
    """Splits a line into lower-case words; raises on ``fail_rate`` of its calls (the batch replays)."""

    def __init__(self, fail_rate: float) -> None:
        self.fail_rate = fail_rate

    def execute(self, tup, collector):
        if random.random() < self.fail_rate:
            raise RuntimeError("injected failure: this batch is replayed, nothing is counted twice")
        for word in _WORD.findall(tup["sentence"].lower()):
            collector.emit([word])


def print_top_words(state, top: int = 10) -> None:
    """Read the committed counts back through ``open_map()`` and print the largest."""
    counts = sorted(((value, key[0]) for key, value in state.open_map().items()), reverse=True)
    total = sum(value for value, _word in counts)
    print(f"trident word count: {total} words counted exactly once, {len(counts)} distinct; top {top}:")
    for value, word in counts[:top]:
        print(f"  {word:<12} {value}")


class TridentWordCount(TridentTopology):
    config = {"topology.workers": 2, "topology.max.spout.pending": 4,
              "topology.trident.batch.emit.interval.millis": 50}

    def build(self, conf):
        state = SqliteMapState.transactional(conf.get("wc.db") or _DEFAULT_DB)
        spout = Lines(int(conf.get("wc.lines.per.batch", 25)), state)
        (self.new_stream("lines", spout, par=2)
             .each(["sentence"], Split(float(conf.get("wc.fail.rate", 0.002))), ["word"]).parallelism_hint(2)
             .group_by(["word"])
             .persistent_aggregate(state, Count(), ["count"]).parallelism_hint(2))
