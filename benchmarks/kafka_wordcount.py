"""Benchmark: what reading from Kafka costs a word count, against the same topology fed from memory.

    python benchmarks/kafka_wordcount.py [--records 200000] [--batch 2000] [--runs 3]

librdkafka's mock cluster keeps at most 100,000 records (and 5 MB) per partition and drops the
oldest beyond that, so a topic of 1M records (the figure a real broker would be measured with)
cannot be read back whole here: the default is 200,000 over its 4 partitions.

A topic of ``--records`` short sentences (the bundled text, cycled) is written to librdkafka's
mock cluster (3 brokers, a separate process, over TCP: no real broker runs here). Printed, all
in one run, as records/s over the whole topic:

- the consumer alone (confluent-kafka, no stormpy): one consumer reading the whole topic, timed
  from its ``assign`` (connecting included), the best of three reads: the reference;
- core, acking on: KafkaSpout -> split -> count (fields grouping) under ``stormpy local``, and
  the same split/count fed by an in-memory spout emitting the same sentences; the ratio
  (target: Kafka costs at most 25%, ratio >= 0.75);
- Trident: OpaqueKafkaSpout -> split -> group_by + persistent_aggregate(Count) into
  MemoryMapState, and the same fed by an in-memory opaque spout with the same batch size
  (``--batch`` records per partition per batch); the ratio (target >= 0.85);
- for both, the in-memory spout once more emitting the five fields the Kafka spouts' default
  ``record_translator`` emits (``topic, partition, offset, key, value``) where the plain twin
  emits only ``value``: the ratio to it is what the read alone costs, the rest is carrying four
  more fields through the topology (which a ``record_translator`` emitting only the value saves).

Each topology runs until every record is acked (core) or every word is committed (Trident),
``--runs`` times (each run a new topology; the order turns from run to run), and the medians
and their ratios are printed: one run of a topology takes under a second here, and two runs of
one topology differed by up to 25%.
"""
from __future__ import annotations

import argparse
import itertools
import logging
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from stormpy import Bolt, Grouping, Spout, Topology
from stormpy.kafka import KafkaSpout, KafkaSpoutConfig
from stormpy.kafka.config import RecordTranslator
from stormpy.local.runner import LocalTopology
from stormpy.testing.kafka import MOCK_PARTITIONS, MockKafkaCluster, produce
from stormpy.trident import Count, Function, MemoryMapState, OpaqueKafkaSpout, OpaquePartitionedSpout, TridentTopology

#: What KafkaSpout's and OpaqueKafkaSpout's default record_translator emits.
KAFKA_FIELDS = RecordTranslator.fields
DATA = Path(__file__).resolve().parent.parent / "examples" / "data" / "sentences.txt"
SENTENCES = [line.strip().lower().rstrip(".") for line in DATA.read_text().splitlines() if line.strip()]


def records(n: int) -> list[str]:
    return [s for s, _ in zip(itertools.cycle(SENTENCES), range(n))]


class MemorySpout(Spout):
    """The in-memory twin of KafkaSpout: the same sentences, tracked by id, the same field name."""

    outputs = ["value"]

    def __init__(self, n: int) -> None:
        self.n = n

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.lines = records(self.n)
        self.i = 0

    def next_tuple(self) -> None:
        if self.i < self.n:
            self.emit([self.lines[self.i]], tup_id=self.i)
            self.i += 1
        else:
            time.sleep(0.001)


class MemorySpoutFive(MemorySpout):
    """MemorySpout emitting what KafkaSpout's default ``record_translator`` emits: the topology
    then carries the same five fields, so the ratio to it is what the read alone costs."""

    outputs = list(KAFKA_FIELDS)

    def next_tuple(self) -> None:
        if self.i < self.n:
            self.emit(["bench", 0, self.i, None, self.lines[self.i]], tup_id=self.i)
            self.i += 1
        else:
            time.sleep(0.001)


class Split(Bolt):
    outputs = ["word"]

    def process(self, tup: Any) -> None:
        for word in tup.values.value.split():
            self.emit([word])


class Counter(Bolt):
    outputs: list[str] = []

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.counts: dict[str, int] = {}

    def process(self, tup: Any) -> None:
        word = tup.values[0]
        self.counts[word] = self.counts.get(word, 0) + 1


def spout_acked(local: LocalTopology) -> int:
    return sum(sum(dict(e.stats.acked).values()) for e in local.runtime.executors.values() if e.kind == "spout")


def run_core(spout: Any, n: int) -> float:
    class Core(Topology):
        source = spout.spec(par=1)
        split = Split.spec(inputs={source: Grouping.SHUFFLE})
        count = Counter.spec(inputs={split: Grouping.fields("word")})

    local = LocalTopology(Core, f"bench-core-{uuid.uuid4().hex[:4]}",
                          user_overrides={"topology.max.spout.pending": 2000, "topology.message.timeout.secs": 120})
    local.start()
    try:
        while spout_acked(local) == 0:   # a consumer group join is set-up, not throughput
            time.sleep(0.01)
        t0, first = time.perf_counter(), spout_acked(local)
        if first >= n:
            raise SystemExit(f"all {n:,} records were acked at the first look: too few --records to time")
        while (done := spout_acked(local)) < n:
            time.sleep(0.02)
        return (done - first) / (time.perf_counter() - t0)
    finally:
        local.stop(drain_secs=0)


class MemoryOpaqueSpout(OpaquePartitionedSpout):
    """The in-memory twin of OpaqueKafkaSpout: MOCK_PARTITIONS partitions, ``batch`` records each per batch."""

    outputs = ["value"]

    def __init__(self, n: int, batch: int) -> None:
        self.n = n
        self.batch = batch

    def initialize(self, stormconf: Any, context: Any) -> None:
        lines = records(self.n)
        self.parts = {p: lines[p::MOCK_PARTITIONS] for p in range(MOCK_PARTITIONS)}

    def partitions(self) -> list[int]:
        return list(range(MOCK_PARTITIONS))

    def emit_batch(self, txid: int, collector: Any, partition: Any, last_meta: Any) -> Any:
        start = last_meta["next"] if last_meta else 0
        end = min(start + self.batch, len(self.parts[partition]))
        for line in self.parts[partition][start:end]:
            collector.emit([line])
        return {"next": end}


class MemoryOpaqueSpoutFive(MemoryOpaqueSpout):
    """MemoryOpaqueSpout emitting the OpaqueKafkaSpout's five default fields (see MemorySpoutFive)."""

    outputs = list(KAFKA_FIELDS)

    def emit_batch(self, txid: int, collector: Any, partition: Any, last_meta: Any) -> Any:
        start = last_meta["next"] if last_meta else 0
        end = min(start + self.batch, len(self.parts[partition]))
        for offset, line in enumerate(self.parts[partition][start:end], start):
            collector.emit(["bench", partition, offset, None, line])
        return {"next": end}


class TSplit(Function):
    def execute(self, tup: Any, collector: Any) -> None:
        for word in tup["value"].split():
            collector.emit([word])


def run_trident(spout: Any, words: int) -> float:
    state = MemoryMapState.opaque(f"bench-{uuid.uuid4().hex[:6]}")

    class Tri(TridentTopology):
        config = {"topology.trident.batch.emit.interval.millis": 0, "topology.max.spout.pending": 4}

        def build(self, conf: Any) -> None:
            (self.new_stream("s", spout, par=1).each(["value"], TSplit(), ["word"])
                 .group_by(["word"]).persistent_aggregate(state, Count(), ["count"]))

    def committed() -> int:
        return sum(v for _k, v in state.open_map().items())

    local = LocalTopology(Tri, f"bench-tri-{uuid.uuid4().hex[:4]}")
    local.start()
    try:
        # polled every 5 ms: a run takes about half a second, and polls 50 ms apart (until
        # 2026-11-28) measured it in steps of a tenth (488,000 or 430,000 records/s, nothing between)
        while committed() == 0:
            time.sleep(0.005)
        t0, first = time.perf_counter(), committed()
        if first >= words:
            raise SystemExit(f"the first commit held all {words:,} words: too few --records to time")
        while (done := committed()) < words:
            time.sleep(0.005)
        return (done - first) / (time.perf_counter() - t0)    # words/s
    finally:
        local.stop(drain_secs=0)


def consumer_alone(bootstrap: str, topic: str, n: int, reads: int = 3) -> float:
    """The best of ``reads`` reads of the whole topic by a bare consumer (:func:`read_alone`).

    The mock cluster serves some topics at about 320,000 records/s and others at about 125,000
    (every read of one topic alike; the whole topic about a second slower), so the reference
    moves between runs by 2.5x; the Kafka/in-memory ratios, the benchmark's figures, do not
    depend on it."""
    return max(read_alone(bootstrap, topic, n, f"bench-ref-{i}") for i in range(reads))


def read_alone(bootstrap: str, topic: str, n: int, group: str) -> float:
    """Records/s of one bare confluent-kafka consumer reading the whole topic in ``consume(1000)``
    calls, timed from its ``assign`` (connecting to the brokers included) to its ``n``-th record.

    Why from ``assign``: librdkafka fetches up to 1 MB per partition a request (10,000-20,000
    of these records), in threads of its own, so a clock started at the first record starts
    after a fifth to a third of the topic has arrived, or after all of it if the first call
    happened to wait: one read in a few printed millions of records/s. And a first
    ``consume(1)`` (this reference until 2026-11-28) left every later call of 1,000 waiting on
    a fetch for its last few records: 95,000-97,000 records/s against 184,000-188,000."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 3})
    t0 = time.perf_counter()
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(MOCK_PARTITIONS)])
    got = 0
    idle_since = time.monotonic()
    while got < n:
        read = len([m for m in consumer.consume(1000, timeout=1.0) if m.error() is None])
        got += read
        if read:
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since > 30:   # the topic holds fewer records than were written
            consumer.close()
            raise SystemExit(f"the consumer read {got:,} of {n:,} records and then nothing for 30 s: "
                             "the mock cluster did not keep every record (try fewer --records)")
    rate = got / (time.perf_counter() - t0)
    consumer.close()
    return rate


#: the topologies measured, with their short names for the per-run lines
SETS = {"core, KafkaSpout -> split -> count (acked)": "core Kafka",
        "core, in-memory spout, same topology": "memory",
        "core, in-memory spout, Kafka's five fields": "memory (5 fields)",
        "Trident, OpaqueKafkaSpout -> count": "Trident Kafka",
        "Trident, in-memory opaque spout, same": "memory",
        "Trident, in-memory, Kafka's five fields": "memory (5 fields)"}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000)   # mock cluster: <= 100k per partition
    parser.add_argument("--batch", type=int, default=2000, help="Trident records per partition per batch")
    parser.add_argument("--runs", type=int, default=3, help="runs of each topology (medians are printed)")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.records < 1 or args.batch < 1:
        parser.error("--runs, --records and --batch must be positive")
    logging.basicConfig(level=logging.WARNING)
    n = args.records
    lines = records(n)
    words = sum(len(line.split()) for line in lines)
    with MockKafkaCluster() as kafka:
        topic = f"bench-{uuid.uuid4().hex[:6]}"
        t0 = time.perf_counter()
        for part in range(MOCK_PARTITIONS):   # equal partitions (the in-memory twins' split): the
            # mock cluster drops the oldest records of a partition beyond its size cap, and the
            # producer's own spread gave one partition more than the cap once in a few runs
            produce(kafka.bootstrap_servers, topic, [line.encode() for line in lines[part::MOCK_PARTITIONS]], part)
        print(f"topic {topic}: {n} records written in {time.perf_counter() - t0:.1f} s (mock cluster, 3 brokers)")
        ref = consumer_alone(kafka.bootstrap_servers, topic, n)
        print(f"confluent-kafka consumer alone (reference, from assign, best of 3 reads): {ref:,.0f} records/s")
        runs: dict[str, list[float]] = {name: [] for name in SETS}
        for i in range(args.runs):
            # each run a new group and new topologies; the order turns, so drift falls on every set
            sets = {
                "core, KafkaSpout -> split -> count (acked)": lambda: run_core(KafkaSpout(KafkaSpoutConfig(
                    bootstrap_servers=kafka.bootstrap_servers, topics=[topic], group_id=f"bench-{topic}-{i}",
                    offset_commit_period_ms=1000)), n),
                "core, in-memory spout, same topology": lambda: run_core(MemorySpout(n), n),
                "core, in-memory spout, Kafka's five fields": lambda: run_core(MemorySpoutFive(n), n),
                "Trident, OpaqueKafkaSpout -> count": lambda: run_trident(OpaqueKafkaSpout(
                    kafka.bootstrap_servers, [topic], max_batch_size=args.batch), words) * n / words,
                "Trident, in-memory opaque spout, same": lambda: run_trident(
                    MemoryOpaqueSpout(n, args.batch), words) * n / words,
                "Trident, in-memory, Kafka's five fields": lambda: run_trident(
                    MemoryOpaqueSpoutFive(n, args.batch), words) * n / words,
            }
            names = list(sets)[i % len(sets):] + list(sets)[:i % len(sets)]
            for name in names:
                runs[name].append(sets[name]())
            print(f"run {i + 1}/{args.runs}: " + "; ".join(f"{SETS[name]} {runs[name][-1]:,.0f}" for name in sets),
                  flush=True)
        med = {name: statistics.median(rates) for name, rates in runs.items()}
        print(f"medians of {args.runs} runs, records/s:")
        for name, rate in med.items():
            print(f"  {name + ':':45s} {rate:12,.0f}")
        core_k, core_m, core_5, tri_k, tri_m, tri_5 = med.values()
        print(f"  core Kafka/in-memory: {core_k / core_m:.2f}x (target >= 0.75); "
              f"against the five-field twin (the read alone): {core_k / core_5:.2f}x")
        print(f"  Trident Kafka/in-memory: {tri_k / tri_m:.2f}x (target >= 0.85); "
              f"against the five-field twin (the read alone): {tri_k / tri_5:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
