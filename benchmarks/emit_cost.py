"""Benchmark: the cost of one ``emit`` call, in-process, in nanoseconds.

    python benchmarks/emit_cost.py [--rounds 15] [--emits 20000]

Two probes under ``stormpy local`` (one acker), each timing a burst of emits with the
emitting thread's own CPU clock (``time.thread_time_ns``, so time spent waiting for the GIL
while other executor threads run is not counted):

- bolt: ``process`` of one anchored input tuple emits ``--emits`` one-word tuples,
  auto-anchored, fields grouping on the word (the word count's split bolt);
- spout: one ``next_tuple`` call emits ``--emits`` tracked sentences, shuffle grouping (each
  starts a tuple tree: root id, edge, ``__ack_init``, pending entry).

Printed: min and median ns per emit over ``--rounds`` bursts. Only the public API is used,
so the same file runs against an older checkout (``PYTHONPATH=<checkout>``).
"""
from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from typing import Any

from stormpy import Bolt, Grouping, Spout, Topology
from stormpy.local.runner import LocalTopology

log = logging.getLogger(__name__)

WORDS = ["the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "storm", "python"]
SAMPLES: list[float] = []


class TriggerSpout(Spout):
    """``rounds`` tracked tuples, one per call, then nothing."""

    outputs = ["n"]

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.left = int(stormconf["bench.rounds"])

    def next_tuple(self) -> None:
        if self.left > 0:
            self.left -= 1
            self.emit([self.left], tup_id=self.left)
            time.sleep(0.02)


class BurstBolt(Bolt):
    """Emits a burst of anchored words per input tuple and records ns per emit."""

    outputs = ["word"]

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.n = int(stormconf["bench.emits"])

    def process(self, tup: Any) -> None:
        emit, words, n = self.emit, WORDS, self.n
        t0 = time.thread_time_ns()
        for i in range(n):
            emit([words[i % 10]])
        SAMPLES.append((time.thread_time_ns() - t0) / n)


class BurstSpout(Spout):
    """``rounds`` calls of ``next_tuple``, each emitting a burst of tracked sentences."""

    outputs = ["sentence"]

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.left = int(stormconf["bench.rounds"])
        self.n = int(stormconf["bench.emits"])
        self.ids = 0

    def next_tuple(self) -> None:
        if self.left <= 0:
            return
        self.left -= 1
        emit, words, n, base = self.emit, WORDS, self.n, self.ids
        t0 = time.thread_time_ns()
        for i in range(n):
            emit([words[i % 10]], tup_id=base + i)
        SAMPLES.append((time.thread_time_ns() - t0) / n)
        self.ids += n
        time.sleep(0.05)


class SinkBolt(Bolt):
    outputs: list[str] = []

    def process(self, tup: Any) -> None:
        pass


class BoltProbe(Topology):
    trigger = TriggerSpout.spec(par=1)
    burst = BurstBolt.spec(inputs={trigger: Grouping.SHUFFLE}, par=1)
    sink = SinkBolt.spec(inputs={burst: Grouping.fields("word")}, par=1)


class SpoutProbe(Topology):
    burst = BurstSpout.spec(par=1)
    sink = SinkBolt.spec(inputs={burst: Grouping.SHUFFLE}, par=1)


def probe(topology: type[Topology], rounds: int, emits: int) -> list[float]:
    SAMPLES.clear()
    overrides = {"topology.acker.executors": 1, "topology.max.spout.pending": None,
                 "topology.message.timeout.secs": 120, "bench.rounds": rounds, "bench.emits": emits}
    local = LocalTopology(topology, "emitcost", user_overrides=overrides)
    local.start()
    try:
        deadline = time.monotonic() + 120
        while len(SAMPLES) < rounds and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        local.stop(drain_secs=0)
    return list(SAMPLES)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="bursts timed per probe")
    parser.add_argument("--emits", type=int, default=20000, help="emits per burst")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    for label, topology in (("bolt emit, anchored, fields grouping", BoltProbe),
                            ("spout emit, tracked, shuffle", SpoutProbe)):
        samples = probe(topology, args.rounds, args.emits)
        if not samples:
            print(f"{label}: no samples (the probe did not run)", file=sys.stderr)
            return 1
        print(f"{label}: min {min(samples):,.0f} ns, median {statistics.median(samples):,.0f} ns per emit "
              f"({len(samples)} bursts of {args.emits})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
