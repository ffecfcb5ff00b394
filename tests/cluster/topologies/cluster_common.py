"""Components shared by the cluster-test topologies (imported by module name inside workers).

The spout is a *replaying* spout over a durable source: sentence ``i`` for ``i`` in
``range(test.sentences)``, split among the spout tasks by ``i % tasks``. Acked ids are appended
to ``<test.out.dir>/acked-<task_index>.txt`` and skipped after a restart; failed ids are emitted
again. So "every id in an acked file" means every tuple tree completed at least once, also
when a worker was SIGKILLed. Counters write ``counts-<task_id>.json`` atomically every 0.3 s.
"""
from __future__ import annotations

import json
import os
import time
from collections import Counter, deque
from pathlib import Path

from stormpy.api.component import Bolt, Spout

SENTENCES = [
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
]


def expected_counts(total: int) -> Counter:
    counts: Counter = Counter()
    for i in range(total):
        counts.update(SENTENCES[i % len(SENTENCES)].split())
    return counts


def write_json(path: Path, value: object) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)


class ReplayingSentenceSpout(Spout):
    outputs = ["sentence"]

    def initialize(self, stormconf, context):
        self.out = Path(stormconf["test.out.dir"])
        self.out.mkdir(parents=True, exist_ok=True)
        total = int(stormconf.get("test.sentences", 1000))
        tasks = len(context.component_tasks)
        index = context.task_index
        self.acked_path = self.out / f"acked-{index}.txt"
        self.done = set()
        if self.acked_path.exists():
            self.done = {int(x) for x in self.acked_path.read_text().split()}
        self.total = total
        self.step = tasks
        self.next_new = index          # ids index, index + tasks, ... (lazily: totals may be huge)
        self.replay = deque()
        self.acked_file = open(self.acked_path, "a")
        self.per_call = int(stormconf.get("test.spout.per.call", 20))
        self.reliable = bool(stormconf.get("test.reliable", True))
        self.unbounded = bool(stormconf.get("test.unbounded", False))
        self.sleep_secs = float(stormconf.get("test.spout.sleep.ms", 0)) / 1000.0   # a run long enough to cut mid-way
        self.n = 0

    def next_tuple(self):
        if self.sleep_secs:
            time.sleep(self.sleep_secs)
        for _ in range(self.per_call):
            if self.unbounded:
                self.n += 1
                self.emit([SENTENCES[self.n % len(SENTENCES)]])
                continue
            i = self._next_id()
            if i is None:
                return
            self.emit([SENTENCES[i % len(SENTENCES)]], tup_id=i if self.reliable else None)

    def _next_id(self):
        if self.replay:
            return self.replay.popleft()
        while self.next_new < self.total:
            i = self.next_new
            self.next_new += self.step
            if i not in self.done:
                return i
        return None

    def ack(self, tup_id):
        self.acked_file.write(f"{tup_id}\n")
        self.acked_file.flush()

    def fail(self, tup_id):
        self.replay.append(tup_id)

    def close(self):
        self.acked_file.close()


class SplitBolt(Bolt):
    outputs = ["word"]

    def process(self, tup):
        for word in tup.values[0].split():
            self.emit([word])


class CountBolt(Bolt):
    outputs = ["word", "count"]
    timer_interval_secs = 0.3

    def initialize(self, stormconf, context):
        self.out = Path(stormconf["test.out.dir"])
        self.out.mkdir(parents=True, exist_ok=True)
        self.path = self.out / f"counts-{context.task_id}.json"
        self.counts: Counter = Counter()
        self.dirty = True

    def process(self, tup):
        self.counts[tup.values[0]] += 1
        self.dirty = True

    def on_timer(self):
        if self.dirty:
            write_json(self.path, dict(self.counts))
            self.dirty = False

    def close(self):
        write_json(self.path, dict(self.counts))


class FaultyBolt(Bolt):
    """Raises on every tuple: its errors must reach getTopologyInfo, others carry on."""

    def process(self, tup):
        raise ValueError(f"boom-from-faulty on {tup.values[0]!r}")


class SlowBolt(Bolt):
    """Takes ``test.slow.ms`` per tuple, so its queue fills and backpressure must slow the spout."""

    def initialize(self, stormconf, context):
        self.delay = float(stormconf.get("test.slow.ms", 2)) / 1000.0
        self.out = Path(stormconf["test.out.dir"])
        self.out.mkdir(parents=True, exist_ok=True)
        self.path = self.out / f"slow-{context.task_id}.json"
        self.seen = 0

        self.written = 0.0

    def process(self, tup):
        time.sleep(self.delay)
        self.seen += 1
        now = time.monotonic()
        if now - self.written > 0.5:      # from process: a busy executor may run timers late
            self.written = now
            write_json(self.path, {"seen": self.seen})
