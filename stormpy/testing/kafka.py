"""A Kafka cluster for tests and benchmarks: librdkafka's built-in mock cluster, held by a process.

No Kafka broker runs on the test machines, but librdkafka (inside the ``confluent-kafka`` wheel)
ships a mock cluster: a client created with ``test.mock.num.brokers`` starts that many brokers
listening on 127.0.0.1, speaking the real wire protocol (produce, fetch, consumer groups,
committed offsets, idempotent producers and transactions). It lives as long as the client that
created it, so :class:`MockKafkaCluster` runs ``python -m stormpy.testing.kafka`` (which creates
that client, prints the bootstrap address and waits for its stdin to close); producers in the
test and stormpy workers in other processes reach the brokers over TCP.

Topics are created on first use with 4 partitions (the mock cluster's default, what a
produce or a metadata request for an unknown topic does). Called from one thread.
"""
from __future__ import annotations

import atexit
import logging
import subprocess
import sys
import time
import weakref
from pathlib import Path
from typing import Any

from stormpy.testing.processes import stop_process

log = logging.getLogger(__name__)

_RUNNING: "weakref.WeakSet[MockKafkaCluster]" = weakref.WeakSet()

#: partitions of a topic the mock cluster creates on first use
MOCK_PARTITIONS = 4


class KafkaUnavailable(RuntimeError):
    """confluent-kafka is missing or the mock cluster would not start; the message says why."""


class MockKafkaCluster:
    """``MockKafkaCluster(brokers=3).start()``; ``bootstrap_servers``; ``stop()``."""

    def __init__(self, brokers: int = 3, log_path: str | Path | None = None) -> None:
        self.brokers = brokers
        self.log_path = Path(log_path) if log_path else None
        self.bootstrap_servers = ""
        self.proc: subprocess.Popen[str] | None = None

    def start(self, timeout: float = 30.0) -> "MockKafkaCluster":
        try:
            import confluent_kafka  # noqa: F401
        except ImportError as exc:
            raise KafkaUnavailable("confluent-kafka is not installed (it is in stormpy's 'kafka' "
                                   "and 'test' extras)") from exc
        stderr: Any = open(self.log_path, "a") if self.log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen([sys.executable, "-m", "stormpy.testing.kafka", str(self.brokers)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True)
        if stderr is not subprocess.DEVNULL:
            stderr.close()
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        line = self.proc.stdout.readline().strip()   # the holder prints one line, or dies
        if not line.startswith("bootstrap ") or time.monotonic() > deadline:
            self.stop()
            raise KafkaUnavailable(f"the mock Kafka cluster did not start (said {line!r})")
        self.bootstrap_servers = line.split(" ", 1)[1]
        _RUNNING.add(self)
        log.info("mock Kafka cluster (%d brokers) at %s", self.brokers, self.bootstrap_servers)
        return self

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.stdin:
                proc.stdin.close()   # the holder exits when its stdin closes
        except OSError:
            pass
        stop_process(proc, "mock Kafka cluster", "test finished", grace_secs=5.0)
        _RUNNING.discard(self)

    def __enter__(self) -> "MockKafkaCluster":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def produce(bootstrap_servers: str, topic: str, records: list[tuple[Any, Any]] | list[Any],
            partition: int | None = None) -> None:
    """Write ``records`` (values, or (key, value) pairs) to ``topic`` and wait for every delivery."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap_servers, "linger.ms": 5, "log_level": 3})
    failed: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    for record in records:
        key, value = record if isinstance(record, tuple) else (None, record)
        kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": delivered}
        if partition is not None:
            kwargs["partition"] = partition
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    remaining = producer.flush(60)
    if remaining or failed:
        raise RuntimeError(f"{remaining} records not delivered to {topic}; errors: {failed[:3]}")


def committed_offsets(bootstrap_servers: str, group_id: str, topic: str,
                      partitions: int = MOCK_PARTITIONS) -> dict[int, int]:
    """partition -> the group's committed offset (-1001 when none), read without joining the group."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": group_id, "log_level": 3})
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=15)
        return {tp.partition: tp.offset for tp in got}
    finally:
        consumer.close()


@atexit.register
def _stop_all() -> None:
    for cluster in list(_RUNNING):
        cluster.stop()


def _hold(brokers: int) -> None:
    """The holder process: create the mock cluster, print its address, live until stdin closes."""
    from confluent_kafka import Producer

    client = Producer({"test.mock.num.brokers": brokers, "bootstrap.servers": "mock:0", "log_level": 3})
    metadata = client.list_topics(timeout=10)
    servers = ",".join(f"{b.host}:{b.port}" for b in sorted(metadata.brokers.values(), key=lambda b: b.id))
    print(f"bootstrap {servers}", flush=True)
    sys.stdin.read()   # EOF: the test is done (or died)


if __name__ == "__main__":
    _hold(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
