"""Benchmark: what KafkaSpout's own Python costs a record, beside reading the record bare.

    python benchmarks/kafka_spout_cost.py [--records 100000] [--rounds 7]

A word count over Kafka moves by a few percent between runs on a shared machine (the mock
cluster, librdkafka's threads and the topology share its cores), more than a change to the
spout's bookkeeping moves it. This takes the topology out: ``--records`` real records are
produced to librdkafka's mock cluster and consumed once, then handed, ``max_poll_records`` at a
time, to a KafkaSpout (at least once, the default translator) whose consumer returns them and
whose ``emit`` only keeps the tuple id; the ids are acked a hundred at a time. Timed: the
spout's ``next_tuple`` and ``ack`` for every record, against the bare read of the same messages
(topic, partition, offset, key and value decoded into a list: what any reader does).

Printed: ns a record, min and median over ``--rounds``, and their ratio. The consumer is
replaced through ``stormpy.kafka.spout.new_client``, so the file runs against a checkout that has
it (``PYTHONPATH=<checkout>``).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from typing import Any

import stormpy.kafka.spout as kafka_spout
from stormpy.kafka import KafkaSpout, KafkaSpoutConfig
from stormpy.testing.kafka import MOCK_PARTITIONS, MockKafkaCluster, produce

ACK_EVERY = 100


def consumed(records: int) -> list[Any]:
    """``records`` messages produced to a mock cluster and read back once with a real consumer."""
    from confluent_kafka import Consumer

    with MockKafkaCluster() as kafka:
        topic = f"cost-{uuid.uuid4().hex[:6]}"
        for part in range(MOCK_PARTITIONS):
            produce(kafka.bootstrap_servers, topic,
                    [f"the cow jumped over the moon {i}".encode() for i in range(part, records, MOCK_PARTITIONS)], part)
        consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": "cost",
                             "auto.offset.reset": "earliest", "enable.auto.commit": False})
        consumer.subscribe([topic])
        messages: list[Any] = []
        deadline = time.monotonic() + 120
        while len(messages) < records and time.monotonic() < deadline:
            messages += [m for m in consumer.consume(1000, timeout=1.0) if m.error() is None]
        consumer.close()
    if len(messages) < records:
        raise SystemExit(f"kafka_spout_cost.py: read {len(messages):,} of {records:,} records from the mock cluster")
    return messages[:records]   # each partition's first ones: a poll gives a partition's records in order


class HandingConsumer:
    """Gives the spout the consumed messages, ``n`` a poll; nothing else of a consumer is used."""

    def __init__(self, messages: list[Any]) -> None:
        self.messages, self.at = messages, 0

    def consume(self, n: int, timeout: float = 0) -> list[Any]:
        out = self.messages[self.at:self.at + n]
        self.at += n
        return out

    def assignment(self) -> list[Any]:
        return []

    def subscribe(self, *args: Any, **kwargs: Any) -> None:
        pass

    def commit(self, *args: Any, **kwargs: Any) -> None:
        pass


def spout_ns(messages: list[Any]) -> float:
    """ns a record for the spout's next_tuple and ack of every message."""
    kafka_spout.new_client = lambda kind, conf: HandingConsumer(messages)   # type: ignore[assignment]
    topic = messages[0].topic()
    spout = KafkaSpout(KafkaSpoutConfig(bootstrap_servers="unused:9092", topics=[topic], group_id="cost",
                                        offset_commit_period_ms=10**9))

    class Context:
        topology_id, task_id = "cost", 1

    spout.initialize({}, Context())
    for part in range(MOCK_PARTITIONS):
        spout.parts[(topic, part)] = kafka_spout.PartitionProgress(spout.generation, None)
    ids: list[Any] = []
    keep = ids.append
    spout.emit = lambda values, tup_id=None, stream=None: keep(tup_id)   # type: ignore[method-assign]
    next_tuple, ack = spout.next_tuple, spout.ack
    acked = 0
    started = time.perf_counter()
    for _ in range(len(messages) // ACK_EVERY):
        for _ in range(ACK_EVERY):
            next_tuple()
        for tup_id in ids:
            ack(tup_id)
        acked += len(ids)
        ids.clear()
    elapsed = time.perf_counter() - started
    ends = {}
    for m in messages:
        ends[(m.topic(), m.partition())] = m.offset() + 1
    done = all(not p.not_done and p.high == ends.get(key) for key, p in spout.parts.items())
    if acked != len(messages) or spout.in_flight or len(spout.buffer) or not done:
        raise SystemExit(f"kafka_spout_cost.py: the spout emitted and acked {acked:,} of {len(messages):,} records "
                         "(or left offsets not done): the figure would not be its work")
    return elapsed / len(messages) * 1e9


def bare_ns(messages: list[Any]) -> float:
    """ns a record for reading what the default translator emits, and nothing else."""
    out: list[Any] = []
    keep = out.append
    started = time.perf_counter()
    for m in messages:
        key, value = m.key(), m.value()
        keep([m.topic(), m.partition(), m.offset(), key if key is None else key.decode(),
              value if value is None else value.decode()])
    return (time.perf_counter() - started) / len(messages) * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    if args.records < ACK_EVERY or args.rounds < 1:
        parser.error(f"--records must be at least {ACK_EVERY} and --rounds at least 1")
    messages = consumed(args.records - args.records % ACK_EVERY)
    spout, bare = [], []
    for _ in range(args.rounds):
        spout.append(spout_ns(messages))
        bare.append(bare_ns(messages))
    print(f"KafkaSpout ({kafka_spout.__file__}), {len(messages):,} records, {args.rounds} rounds, ns a record:")
    print(f"  spout next_tuple + ack:   min {min(spout):,.0f}  median {statistics.median(spout):,.0f}")
    print(f"  bare read of the record:  min {min(bare):,.0f}  median {statistics.median(bare):,.0f}")
    print(f"  spout / bare read (min):  {min(spout) / min(bare):.1f}x")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
