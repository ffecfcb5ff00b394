"""KafkaState (Trident partition_persist into a topic) against the mock Kafka cluster: each batch
is one Kafka transaction whose records carry their txid; an attempt that failed after writing
is aborted and its txid written again, and every input record is committed.

librdkafka's mock cluster does not hide aborted records from ``read_committed`` consumers (a
real broker does), so here the failed attempt's records are still read; the test checks that
they are exactly the records of the failed txid, which the ``stormpy.txid`` header names (the
spout is transactional, so the replay of that txid carries the same records)."""
from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from stormpy.kafka import KafkaState, KafkaStateUpdater, TransactionalKafkaSpout
from stormpy.local.runner import LocalTopology
from stormpy.testing import wait_until
from stormpy.testing.kafka import MOCK_PARTITIONS, produce
from stormpy.trident import Function, TridentTopology

FAILED: set[int] = set()
LOCK = threading.Lock()


class ToRecord(Function):
    def execute(self, tup: Any, collector: Any) -> None:
        collector.emit([str(tup["offset"]), tup["value"].upper()])


class FailOnceAfterWriting(KafkaStateUpdater):
    """Writes the batch, then fails the first attempt of the third txid that carries records."""

    def update_state(self, state: Any, tuples: list, collector: Any) -> None:
        super().update_state(state, tuples, collector)
        with LOCK:
            if tuples and len(FAILED) < 1 and state.txid not in FAILED and state.txid >= 3:
                FAILED.add(state.txid)
                raise RuntimeError("injected failure after the batch was written")


def read(bootstrap: str, topic: str, isolation: str, settle: float = 3.0) -> list[Any]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{isolation}-{time.time()}",
                         "auto.offset.reset": "earliest", "isolation.level": isolation, "log_level": 3})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(MOCK_PARTITIONS)])   # no group join
    got: list[bytes] = []
    quiet_since = time.monotonic()
    try:
        while time.monotonic() - quiet_since < settle:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                txid = dict(msg.headers() or []).get("stormpy.txid")
                got.append((msg.value(), int(txid) if txid else None))
                quiet_since = time.monotonic()
    finally:
        consumer.close()
    return got


def test_each_batch_is_one_transaction(kafka_cluster: Any, kafka_names: Any) -> None:
    topic, _ = kafka_names
    out = topic + "-out"
    bootstrap = kafka_cluster.bootstrap_servers
    produce(bootstrap, topic, [f"v{i}".encode() for i in range(200)])
    produce(bootstrap, out, [b"before"])      # creates the output topic
    FAILED.clear()

    class ToKafka(TridentTopology):
        config = {"topology.trident.batch.emit.interval.millis": 50, "topology.message.timeout.secs": 10}

        def build(self, conf: Any) -> None:
            (self.new_stream("in", TransactionalKafkaSpout(bootstrap, [topic], max_batch_size=20), par=1)
                 .each(["offset", "value"], ToRecord(), ["out_key", "message"])
                 .partition_persist(KafkaState.factory(bootstrap, out), ["out_key", "message"], FailOnceAfterWriting()))

    local = LocalTopology(ToKafka, "kafka-state").start()
    try:
        wait_until(lambda: FAILED, 60, "an attempt failing after its records were written")
        wait_until(lambda: len(read(bootstrap, out, "read_committed", settle=1.0)) >= 201, 90,
                   "every record committed")
    finally:
        local.stop(drain_secs=5)
    committed = read(bootstrap, out, "read_committed")
    values = [value for value, _ in committed]
    expected = [b"before"] + [f"V{i}".encode() for i in range(200)]
    assert set(values) == set(expected), "every input record committed"
    (failed,) = FAILED
    repeats = [(v, t) for v, t in committed if values.count(v) > 1]
    assert repeats and all(t == failed for _, t in repeats), f"only the failed txid {failed} repeats: {repeats[:4]}"
    assert all(t is not None for v, t in committed if v != b"before"), "every record names its txid"


def test_bad_arguments_are_one_clear_error() -> None:
    with pytest.raises(ValueError, match="topic is required"):
        KafkaState.factory("localhost:9092", "")
