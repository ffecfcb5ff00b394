"""Named streams, direct grouping and tick tuples: ``stormpy local examples/streams_demo.py --duration 6``.

- ``numbers`` (spout) emits increasing integers, each tracked by the acker.
- ``router`` declares two named streams: ``even`` (a normal stream) and ``odd`` (a direct
  stream). Odd numbers go to the ``odd_sink`` task it picks itself with
  ``emit(..., stream="odd", direct_task=t)``; even numbers go to ``even_sink`` by fields
  grouping, and ``need_task_ids=True`` tells the router which task got each one.
- The sinks count what they get and, on every tick tuple (``topology.tick.tuple.freq.secs``
  set per component), log a one-line summary; ``close()`` prints the final counts.
"""
from __future__ import annotations

import itertools
import sys
from collections import Counter

from stormpy import Bolt, Grouping, Spout, Stream, Topology


class NumberSpout(Spout):
    outputs = ["n"]

    def initialize(self, stormconf, context):
        self.numbers = itertools.count()
        self.pending = {}

    def next_tuple(self):
        n = next(self.numbers)
        self.pending[n] = n
        self.emit([n], tup_id=n)

    def ack(self, tup_id):
        self.pending.pop(tup_id, None)

    def fail(self, tup_id):
        self.emit([self.pending[tup_id]], tup_id=tup_id)  # replay


class RouterBolt(Bolt):
    outputs = [Stream(["n"], name="even"), Stream(["n"], name="odd", direct=True)]

    def initialize(self, stormconf, context):
        self.odd_tasks = context.get_component_tasks("odd_sink")
        self.even_routes = Counter()

    def process(self, tup):
        n = tup.values.n
        if n % 2:
            self.emit([n], stream="odd", direct_task=self.odd_tasks[(n // 2) % len(self.odd_tasks)])
        else:
            for task in self.emit([n], stream="even", need_task_ids=True):
                self.even_routes[task] += 1

    def close(self):
        # One write call: tasks close on different threads at the same time.
        sys.stdout.write(f"router task: even numbers per even_sink task {dict(self.even_routes)}\n")
        sys.stdout.flush()


class SinkBolt(Bolt):
    outputs = []

    def initialize(self, stormconf, context):
        self.name = f"{context.component_id}[{context.task_id}]"
        self.count = 0
        self.ticks = 0

    def process(self, tup):
        self.count += 1

    def process_tick(self, tup):
        self.ticks += 1
        self.logger.info("%s: %d tuples after %d ticks", self.name, self.count, self.ticks)

    def close(self):
        # One write call: tasks close on different threads at the same time.
        sys.stdout.write(f"{self.name}: {self.count} tuples, {self.ticks} ticks\n")
        sys.stdout.flush()


class StreamsDemo(Topology):
    config = {"topology.max.spout.pending": 500}
    numbers = NumberSpout.spec()
    router = RouterBolt.spec(inputs=[numbers], par=2)
    even_sink = SinkBolt.spec(inputs={router["even"]: Grouping.fields("n")}, par=2,
                              config={"topology.tick.tuple.freq.secs": 1})
    odd_sink = SinkBolt.spec(inputs={router["odd"]: Grouping.DIRECT}, par=3,
                             config={"topology.tick.tuple.freq.secs": 2})
