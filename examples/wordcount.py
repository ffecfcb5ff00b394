"""The canonical streamparse word count, runnable with ``stormpy local examples/wordcount.py``.

A replaying spout reads the bundled text (examples/data/sentences.txt) line by line and
keeps every emitted sentence until it is acked, re-emitting it when it fails or times
out. A bolt splits sentences into words; a fields grouping on ``word`` sends every word to
the same counting task, which prints its top words when the topology stops.
"""
from __future__ import annotations

import itertools
import re
import sys
from collections import Counter
from pathlib import Path

from stormpy import Bolt, Grouping, Spout, Topology

DATA = Path(__file__).resolve().parent / "data" / "sentences.txt"
_WORD = re.compile(r"[a-z']+")


class SentenceSpout(Spout):
    """Emits the text's sentences forever (cycling), tracking each one until it is acked."""

    outputs = ["sentence"]

    def initialize(self, stormconf, context):
        path = Path(stormconf.get("wordcount.text") or DATA)
        lines = [line.strip() for line in path.read_text().splitlines() if line.strip()]
        self.sentences = itertools.cycle(lines)
        self.ids = itertools.count()
        self.pending = {}
        self.replays = []

    def next_tuple(self):
        if self.replays:
            tup_id = self.replays.pop()
        else:
            tup_id = next(self.ids)
            self.pending[tup_id] = next(self.sentences)
        self.emit([self.pending[tup_id]], tup_id=tup_id)

    def ack(self, tup_id):
        self.pending.pop(tup_id, None)

    def fail(self, tup_id):
        if tup_id in self.pending:
            self.replays.append(tup_id)


class SplitBolt(Bolt):
    outputs = ["word"]

    def process(self, tup):
        for word in _WORD.findall(tup.values.sentence.lower()):
            self.emit([word])


class CountBolt(Bolt):
    outputs = ["word", "count"]

    def initialize(self, stormconf, context):
        self.counts = Counter()
        self.task_id = context.task_id
        self.top = int(stormconf.get("wordcount.top", 10))

    def process(self, tup):
        word = tup.values.word
        self.counts[word] += 1
        self.emit([word, self.counts[word]])

    def close(self):
        total = sum(self.counts.values())
        top = ", ".join(f"{w}={n}" for w, n in self.counts.most_common(self.top))
        # One write call: tasks close on different threads at the same time.
        sys.stdout.write(f"count task {self.task_id}: {total} words, {len(self.counts)} distinct; top: {top}\n")
        sys.stdout.flush()


class WordCount(Topology):
    config = {"topology.max.spout.pending": 2000}
    sentences = SentenceSpout.spec(par=1)
    split = SplitBolt.spec(inputs={sentences: Grouping.SHUFFLE}, par=2)
    count = CountBolt.spec(inputs={split: Grouping.fields("word")}, par=2)
