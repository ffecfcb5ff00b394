"""Fixtures for the Kafka connector tests: a mock Kafka cluster held by its own process.

``kafka_cluster`` (module scope) is librdkafka's mock cluster (3 brokers) in a child process
(``stormpy.testing.kafka``); tests reach it over TCP at ``kafka_cluster.bootstrap_servers``
and use a fresh topic and group per test (``kafka_names``).

Every test must leave no executor thread behind (``no_leftover_executor_threads``): a spout
thread still blocked in librdkafka after its topology stopped would fail a later test of the
same process (once its cluster is gone) and hides the test that leaked it.
"""
from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from stormpy.testing import WaitTimeout, wait_until
from stormpy.testing.kafka import MockKafkaCluster

_counter = itertools.count()


@pytest.fixture(scope="module")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MockKafkaCluster]:
    pytest.importorskip("confluent_kafka", reason="confluent-kafka is in the test extra")
    log_path = Path(tmp_path_factory.mktemp("kafka")) / "mock-kafka.log"
    cluster = MockKafkaCluster(brokers=3, log_path=log_path).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def kafka_names() -> tuple[str, str]:
    """A topic and a group id nobody else uses."""
    tag = f"{next(_counter)}-{uuid.uuid4().hex[:6]}"
    return f"topic-{tag}", f"group-{tag}"


@pytest.fixture(autouse=True)
def no_leftover_executor_threads() -> Iterator[None]:
    """Fails the test that leaves an ``executor-...`` thread running (a stopped topology joins them)."""
    before = set(threading.enumerate())
    yield

    def left() -> list[str]:
        return [t.name for t in threading.enumerate()
                if t not in before and t.is_alive() and t.name.startswith("executor-")]

    try:
        wait_until(lambda: not left(), 5.0, "the test's executor threads to end")
    except WaitTimeout:
        pytest.fail(f"executor threads still running after the test: {left()}")
