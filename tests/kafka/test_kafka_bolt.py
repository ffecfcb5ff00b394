"""KafkaBolt against the mock Kafka cluster: a tuple is acked only once its record is stored,
and a delivery failure fails the tuple (so the spout replays it)."""
from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from stormpy import Spout, Topology
from stormpy.kafka import KafkaBolt
from stormpy.local.runner import LocalTopology
from stormpy.testing import free_port, wait_until

LOCK = threading.Lock()
ACKED: set[int] = set()
FAILED: list[int] = []


class NumberSpout(Spout):
    """Emits key/message tuples 0..COUNT-1 once each, tracked; records acks and fails (no replay)."""

    outputs = ["key", "message"]
    count = 100

    def initialize(self, stormconf: Any, context: Any) -> None:
        self.n = 0

    def next_tuple(self) -> None:
        if self.n < self.count:
            self.emit([f"k{self.n}", f"value-{self.n}"], tup_id=self.n)
            self.n += 1
        else:
            time.sleep(0.01)

    def ack(self, tup_id: Any) -> None:
        with LOCK:
            ACKED.add(tup_id)

    def fail(self, tup_id: Any) -> None:
        with LOCK:
            FAILED.append(tup_id)


def read_topic(bootstrap: str, topic: str, expect: int) -> list[tuple[bytes, bytes]]:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader-" + topic,
                         "auto.offset.reset": "earliest", "log_level": 3})
    consumer.subscribe([topic])
    got: list[tuple[bytes, bytes]] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < expect and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append((msg.key(), msg.value()))
    finally:
        consumer.close()
    return got


def run(bolt: KafkaBolt, name: str) -> LocalTopology:
    class ToKafka(Topology):
        numbers = NumberSpout.spec()
        writer = bolt.spec(inputs=[numbers], par=2)

    return LocalTopology(ToKafka, name, user_overrides={"topology.message.timeout.secs": 60}).start()


def test_tuples_are_acked_after_the_broker_stored_them(kafka_cluster: Any, kafka_names: Any) -> None:
    topic, _ = kafka_names
    with LOCK:
        ACKED.clear(); FAILED.clear()
    local = run(KafkaBolt(kafka_cluster.bootstrap_servers, topic=topic), "kafka-bolt")
    try:
        wait_until(lambda: len(ACKED) == 100, 60, "100 tuples acked by the KafkaBolt")
    finally:
        local.stop(drain_secs=5)
    assert not FAILED
    stored = read_topic(kafka_cluster.bootstrap_servers, topic, 100)
    assert sorted(stored) == sorted((f"k{i}".encode(), f"value-{i}".encode()) for i in range(100))


def test_a_delivery_failure_fails_the_tuple() -> None:
    pytest.importorskip("confluent_kafka")
    with LOCK:
        ACKED.clear(); FAILED.clear()
    dead = f"127.0.0.1:{free_port()}"    # nothing listens: every delivery times out
    bolt = KafkaBolt(dead, topic=lambda tup: "t" if int(tup.values.key[1:]) % 2 else None,
                     kafka_conf={"message.timeout.ms": 1500})
    local = run(bolt, "kafka-bolt-dead")
    try:
        wait_until(lambda: len(ACKED) + len(FAILED) == 100, 60, "every tuple acked (skipped) or failed")
    finally:
        local.stop(drain_secs=2)
    assert sorted(FAILED) == list(range(1, 100, 2)), "the records sent to a dead broker failed"
    assert sorted(ACKED) == list(range(0, 100, 2)), "the ones the selector skipped were acked"


def test_bad_arguments_are_one_clear_error() -> None:
    with pytest.raises(ValueError, match="bootstrap_servers"):
        KafkaBolt("", topic="t")
    with pytest.raises(ValueError, match="topic must be"):
        KafkaBolt("localhost:9092", topic="")
