"""The topology of ``cluster_wordcount.py``: sentence spout -> split -> count, with acking.

The spout measures complete latency (emit -> ack, both on its own thread) of every tuple into
a cumulative histogram of 0.5 ms buckets; spouts and counters write small JSON progress files under
``bench.out.dir`` once a second, which the benchmark reads from outside. ``bench.rate``
(sentences/s per spout task, 0 = as fast as the cluster takes them) sets the offered load;
``bench.per_call`` how many sentences one ``next_tuple()`` call emits at full rate (50 by
default; 1 is how users usually write spouts, and measures the framework's cost per call).
"""
from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

from stormpy import Grouping, Topology
from stormpy.api.component import Bolt, Spout

WORDS = ("storm stream tuple bolt spout nimbus worker acker zookeeper supervisor executor task "
         "python zeromq thrift batch latency").split()
SENTENCE_WORDS = 8


def write_json(path: Path, value: object) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)


class SentenceSpout(Spout):
    outputs = ["sentence"]
    timer_interval_secs = 1.0

    def initialize(self, stormconf, context):
        self.out = Path(stormconf["bench.out.dir"])
        self.out.mkdir(parents=True, exist_ok=True)
        self.path = self.out / f"spout-{context.task_id}.json"
        self.rate = float(stormconf.get("bench.rate", 0))
        rnd = random.Random(context.task_id)
        self.sentences = [" ".join(rnd.choice(WORDS) for _ in range(SENTENCE_WORDS)) for _ in range(1000)]
        self.pending = {}
        self.next_id = 0
        self.acked = 0
        self.failed = 0
        self.hist = {}          # complete latency in 0.5 ms buckets, cumulative
        self.started = time.monotonic()
        self.per_call = int(stormconf.get("bench.per_call") or 50) if self.rate <= 0 else 10

    def next_tuple(self):
        if self.rate > 0:
            allowed = int((time.monotonic() - self.started) * self.rate) - self.next_id
            if allowed <= 0:
                time.sleep(0.001)
                return
            n = min(allowed, self.per_call)
        else:
            n = self.per_call
        now = time.monotonic()
        for _ in range(n):
            i = self.next_id
            self.next_id += 1
            self.pending[i] = now
            self.emit([self.sentences[i % 1000]], tup_id=i)

    def ack(self, tup_id):
        started = self.pending.pop(tup_id, None)
        self.acked += 1
        if started is not None:
            bucket = min(int((time.monotonic() - started) * 2000.0), 120000)
            self.hist[bucket] = self.hist.get(bucket, 0) + 1

    def fail(self, tup_id):
        self.pending.pop(tup_id, None)
        self.failed += 1

    def on_timer(self):
        write_json(self.path, {"time": time.time(), "acked": self.acked, "failed": self.failed,
                               "emitted": self.next_id, "hist_half_ms": self.hist})


class SplitBolt(Bolt):
    outputs = ["word"]

    def process(self, tup):
        for word in tup.values[0].split():
            self.emit([word])


class CountBolt(Bolt):
    outputs = ["word", "count"]
    timer_interval_secs = 0.5

    def initialize(self, stormconf, context):
        self.out = Path(stormconf["bench.out.dir"])
        self.path = self.out / f"count-{context.task_id}.json"
        self.counts = {}
        self.total = 0

    def process(self, tup):
        word = tup.values[0]
        self.counts[word] = self.counts.get(word, 0) + 1
        self.total += 1

    def on_timer(self):
        write_json(self.path, {"time": time.time(), "counted": self.total})


class BenchWordCount(Topology):
    config = {"topology.max.spout.pending": 2000, "topology.message.timeout.secs": 30}
    sentences = SentenceSpout.spec(par=2)
    split = SplitBolt.spec(inputs={sentences: Grouping.SHUFFLE}, par=2)
    count = CountBolt.spec(inputs={split: Grouping.fields("word")}, par=2)
