"""OpaqueKafkaSpout and TransactionalKafkaSpout on the local runner, from the mock Kafka cluster:
exact Trident word counts in SqliteMapState, with records arriving while the topology runs and
an undecodable record skipped."""
from __future__ import annotations

import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from stormpy.local.runner import LocalTopology
from stormpy.testing import wait_until
from stormpy.testing.kafka import produce
from stormpy.trident import SqliteMapState

sys.path.insert(0, str(Path(__file__).resolve().parent / "topologies"))
from kafka_trident import TridentKafkaCounts  # noqa: E402

WORDS = "kafka storm trident opaque batch offset partition replay".split()


def lines(seed: int, n: int) -> list[str]:
    rnd = random.Random(seed)
    return [" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(1, 6))) for _ in range(n)]


def counts(factory: Any) -> Counter:
    try:
        return Counter({key[0]: value for key, value in factory.open_map().items()})
    except Exception:  # noqa: BLE001 - the table may not exist yet
        return Counter()


@pytest.mark.parametrize("kind", ["opaque", "transactional"])
def test_trident_kafka_spout_counts_exactly(kafka_cluster: Any, kafka_names: Any, tmp_path: Path, kind: str) -> None:
    topic, _ = kafka_names
    first, second = lines(1, 300), lines(2, 200)
    produce(kafka_cluster.bootstrap_servers, topic, [line.encode() for line in first] + [b"\xff\xfe"])
    db = tmp_path / "counts.db"
    conf = {"kwc.bootstrap": kafka_cluster.bootstrap_servers, "kwc.topic": topic, "kwc.db": str(db), "kwc.kind": kind}
    local = LocalTopology(TridentKafkaCounts, f"kafka-trident-{kind}", user_overrides=conf).start()
    factory = (SqliteMapState.opaque if kind == "opaque" else SqliteMapState.transactional)(db)
    expected = Counter(w for line in first for w in line.split())
    try:
        wait_until(lambda: counts(factory) == expected, 90, "the first 300 lines counted")
        produce(kafka_cluster.bootstrap_servers, topic, [line.encode() for line in second])
        expected.update(w for line in second for w in line.split())
        wait_until(lambda: counts(factory) == expected, 90, "the 200 lines produced while running counted")
        time.sleep(1.0)   # a batch counted twice would show up now
        assert counts(factory) == expected
    finally:
        local.stop(drain_secs=5)


def test_bad_arguments_are_one_clear_error() -> None:
    from stormpy.kafka import OpaqueKafkaSpout
    with pytest.raises(ValueError, match="max_batch_size must be positive"):
        OpaqueKafkaSpout("localhost:9092", ["t"], max_batch_size=0)
    with pytest.raises(ValueError, match="topics must be"):
        OpaqueKafkaSpout("localhost:9092", [])
