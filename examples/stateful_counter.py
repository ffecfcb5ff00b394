"""A word counter whose counts survive crashes: ``stormpy local examples/stateful_counter.py --duration 15``.

- ``WordSpout`` emits words of the bundled text (examples/data/sentences.txt), each tracked by
  the acker and replayed when it fails.
- ``WordCounter`` is a ``StatefulBolt``: ``init_state(state)`` hands it a KeyValueState
  restored from the last committed checkpoint, and it keeps one count per word there. The
  checkpoint spout that stormpy adds to the topology commits the state every
  ``topology.state.checkpoint.interval.ms`` (1 s here); a word is acked only once the
  checkpoint holding its count committed, so a crash rolls the counts back to that commit
  and the words since then are replayed: no count is lost.
- ``Printer`` prints the running count of a few words now and then.

The state lives in SQLite (``topology.state.provider: sqlite``, the default) under
``storm.local.dir``: run the example twice and the second run continues the first one's
counts. ``-c topology.state.provider=memory`` keeps it in memory; for Redis:
``-c topology.state.provider=redis -c 'topology.state.provider.config={"url": "redis://host:6379/0"}'``.
"""
from __future__ import annotations

import itertools
import random
import re
import sys
import time
from pathlib import Path

from stormpy import Bolt, Grouping, Spout, StatefulBolt, Topology

DATA = Path(__file__).resolve().parent / "data" / "sentences.txt"
_WORD = re.compile(r"[a-z']+")
WATCHED = ("the", "and", "storm", "to")


class WordSpout(Spout):
    """Random words of the text, replayed when they fail."""

    outputs = ["word"]

    def initialize(self, stormconf, context):
        self.words = _WORD.findall(DATA.read_text().lower())
        self.random = random.Random(context.task_id)
        self.ids = itertools.count()
        self.pending = {}
        self.replays = []

    def next_tuple(self):
        if self.replays:
            tup_id = self.replays.pop()
        else:
            tup_id = next(self.ids)
            self.pending[tup_id] = self.random.choice(self.words)
            time.sleep(0.002)
        self.emit([self.pending[tup_id]], tup_id=tup_id)

    def ack(self, tup_id):
        self.pending.pop(tup_id, None)

    def fail(self, tup_id):
        if tup_id in self.pending:
            self.replays.append(tup_id)


class WordCounter(StatefulBolt):
    """Counts per word in a checkpointed KeyValueState."""

    outputs = ["word", "count"]

    def init_state(self, state):
        self.counts = state
        restored = sum(state.get(word, 0) for word in state)
        self.logger.info("state restored from the last checkpoint: %d words counted so far", restored)
        print(f"{self.component_name} task {self.task_id}: restored {restored} counted words "
              f"({len(state)} distinct)", flush=True)

    def process(self, tup):
        word = tup.values.word
        count = self.counts.get(word, 0) + 1
        self.counts.put(word, count)
        self.emit([word, count])

    def pre_commit(self, txid):
        self.logger.debug("committing checkpoint %d", txid)


class Printer(Bolt):
    """Prints the watched words' counts at most every 2 seconds."""

    outputs = []

    def initialize(self, stormconf, context):
        self.latest = {}
        self.last = 0.0

    def process(self, tup):
        word, count = tup.values
        if word in WATCHED:
            self.latest[word] = count
        now = time.monotonic()
        if self.latest and now - self.last >= 2:
            self.last = now
            print("counts: " + ", ".join(f"{w}={c}" for w, c in sorted(self.latest.items())), flush=True)


class StatefulWordCount(Topology):
    config = {"topology.state.checkpoint.interval.ms": 1000, "topology.max.spout.pending": 1000}
    words = WordSpout.spec(par=1)
    counter = WordCounter.spec(inputs={words: Grouping.fields("word")}, par=2)
    printer = Printer.spec(inputs={counter: Grouping.GLOBAL}, par=1)


if __name__ == "__main__":
    print("run me with: stormpy local examples/stateful_counter.py --duration 15", file=sys.stderr)
