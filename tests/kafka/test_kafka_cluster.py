"""Kafka connectors on a REAL process cluster (ZooKeeper, Nimbus, 2 supervisors x 2 ports, worker
processes) reading the mock Kafka cluster, which runs in yet another process, over TCP.

- KafkaSpout, at least once, with worker SIGKILLs: every record reaches the sink, and while the
  topology runs the group's committed offsets never pass a record the sink has not stored.
- ``stormpy rebalance -e records=1``: the spout's partitions move to the remaining task, nothing
  is lost.
- OpaqueKafkaSpout (and TransactionalKafkaSpout) into SqliteMapState with worker SIGKILLs:
  exact word counts.
"""
from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stormpy.testing import wait_until
from stormpy.testing.kafka import MockKafkaCluster, committed_offsets, produce
from stormpy.trident import SqliteMapState

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "cluster"))
from process_cluster import ProcessCluster, module_cluster, print_logs_if_failed  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def kcluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
             kafka_cluster: MockKafkaCluster) -> Iterator[ProcessCluster]:
    with module_cluster(request, tmp_path_factory.mktemp("kcluster"), 2, 2) as cluster:
        cluster.kafka = kafka_cluster    # type: ignore[attr-defined]
        yield cluster


@pytest.fixture
def cluster(kcluster: ProcessCluster, request: pytest.FixtureRequest) -> Iterator[ProcessCluster]:
    yield kcluster
    print_logs_if_failed(kcluster, request)


def submit(cluster: ProcessCluster, file: str, name: str, conf: dict[str, Any], workers: int = 2) -> str:
    args = ["submit", str(HERE / "topologies" / file), "--name", name, "--workers", str(workers)]
    for key, value in conf.items():
        args += ["-c", f"{key}={json.dumps(value)}"]
    cluster.cli(*args)
    return wait_until(lambda: cluster.topology_id(name), 30, f"topology {name} to be listed")


def finish(cluster: ProcessCluster, name: str, topology_id: str) -> None:
    if cluster.topology_id(name) is not None:
        cluster.kill_topology(name, wait_secs=0)
    wait_until(lambda: not cluster.worker_pids(topology_id), 60, f"every worker of {topology_id} to exit")


def sigkill_and_wait_restart(cluster: ProcessCluster, topology_id: str, victim: int) -> None:
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: (now := cluster.worker_pids(topology_id)) and len(now) == 2 and victim not in now, 90,
               f"the supervisor to restart SIGKILLed worker {victim}")


def high_watermark(bootstrap: str, topic: str, partition: int) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks", "log_level": 3})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=15)[1]
    finally:
        consumer.close()


def stored(db: Path) -> dict[tuple[int, int], str]:
    if not db.exists():
        return {}
    try:
        with sqlite3.connect(db, timeout=30) as conn:
            return {(p, o): v for p, o, v in conn.execute("SELECT partition, offset, value FROM records")}
    except sqlite3.OperationalError:   # the table is not there yet
        return {}


class CommitWatcher:
    """Samples the group's committed offsets and checks every offset below them is stored."""

    def __init__(self, bootstrap: str, group: str, topic: str, db: Path) -> None:
        self.args = (bootstrap, group, topic)
        self.db = db
        self.violations: list[str] = []
        self.bad: dict[tuple[int, int], str] = {}
        self.samples = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.is_set():
            committed = committed_offsets(*self.args)   # first: what is stored only grows
            done = stored(self.db)
            done.update(self.skipped())
            for partition, offset in committed.items():
                missing = [o for o in range(max(offset, 0)) if (partition, o) not in done]
                if missing:
                    self.violations.append(f"partition {partition} committed {offset}, not stored: {missing[:5]}")
            self.samples += 1
            self.stop.wait(0.3)

    def skipped(self) -> dict[tuple[int, int], str]:
        """The undecodable record: skipped by the spout, so never stored (where it is, from its offset)."""
        return self.bad

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)


def test_kafka_spout_at_least_once_through_worker_sigkills_and_a_rebalance(cluster: ProcessCluster,
                                                                            tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    topic, group, name = f"core-{tag}", f"core-{tag}", f"kcore-{tag}"
    db = tmp_path / "records.db"
    bootstrap = cluster.kafka.bootstrap_servers
    values = [f"r-{i}" for i in range(3000)]
    produce(bootstrap, topic, [v.encode() for v in values[:1500]])
    bad_at = (0, high_watermark(bootstrap, topic, 0))
    produce(bootstrap, topic, [b"\xff\xfe undecodable"], partition=0)
    topology_id = submit(cluster, "kafka_core.py", name, {"kwc.bootstrap": bootstrap, "kwc.topic": topic,
                                                          "kwc.group": group, "kwc.db": str(db)})
    watcher = CommitWatcher(bootstrap, group, topic, db)
    watcher.bad[bad_at] = "undecodable"
    try:
        first, second = cluster.wait_workers(topology_id, 2)
        wait_until(lambda: len(stored(db)) >= 200, 90, "200 records stored before the first SIGKILL")
        sigkill_and_wait_restart(cluster, topology_id, first)
        produce(bootstrap, topic, [v.encode() for v in values[1500:2500]])
        before = len(stored(db))
        wait_until(lambda: len(stored(db)) > before, 90, "progress after the first restart")
        sigkill_and_wait_restart(cluster, topology_id, second)
        wait_until(lambda: len(stored(db)) == 2500, 150, "all 2500 records stored after two SIGKILLs")
        # one spout task: its partitions move to the one left; nothing lost, nothing skipped
        cluster.cli("rebalance", name, "-w", "0", "-e", "records=1")
        produce(bootstrap, topic, [v.encode() for v in values[2500:]])
        wait_until(lambda: len(stored(db)) == 3000, 150, "all 3000 records stored after the rebalance")
        wait_until(lambda: sum(max(o, 0) for o in committed_offsets(bootstrap, group, topic).values()) == 3001,
                   60, "every partition committed to its end, past the undecodable record")
        errors = [e.error for e in (cluster.topology_info(topology_id).errors or {}).get("records", [])]
        assert any("could not be translated" in e for e in errors), f"the bad record is the spout's error: {errors}"
    finally:
        watcher.close()
        finish(cluster, name, topology_id)
    assert sorted(stored(db).values()) == sorted(values) and bad_at not in stored(db)
    assert watcher.samples > 10 and not watcher.violations, watcher.violations[:5]


@pytest.mark.parametrize("kind", ["opaque", "transactional"])
def test_trident_kafka_spout_exact_counts_through_worker_sigkills(cluster: ProcessCluster, tmp_path: Path,
                                                                 kind: str) -> None:
    tag = uuid.uuid4().hex[:6]
    topic, name = f"words-{tag}", f"k{kind[:3]}-{tag}"
    db = tmp_path / "counts.db"
    bootstrap = cluster.kafka.bootstrap_servers
    rnd = random.Random(7)
    words = "kafka storm trident opaque batch offset partition replay worker".split()
    lines = [" ".join(rnd.choice(words) for _ in range(rnd.randint(1, 7))) for _ in range(2400)]
    expected = Counter(w for line in lines for w in line.split())
    produce(bootstrap, topic, [line.encode() for line in lines[:1200]])
    topology_id = submit(cluster, "kafka_trident.py", name, {"kwc.bootstrap": bootstrap, "kwc.topic": topic,
                                                             "kwc.db": str(db), "kwc.kind": kind})
    factory = (SqliteMapState.opaque if kind == "opaque" else SqliteMapState.transactional)(db)

    def counts() -> Counter:
        try:
            return Counter({key[0]: value for key, value in factory.open_map().items()})
        except Exception:  # noqa: BLE001 - the table may not exist yet
            return Counter()

    try:
        first, second = cluster.wait_workers(topology_id, 2)
        wait_until(lambda: sum(counts().values()) >= 300, 90, "300 words counted before the first SIGKILL")
        sigkill_and_wait_restart(cluster, topology_id, first)
        produce(bootstrap, topic, [line.encode() for line in lines[1200:]])
        before = sum(counts().values())
        wait_until(lambda: sum(counts().values()) > before, 90, "progress after the first restart")
        sigkill_and_wait_restart(cluster, topology_id, second)
        wait_until(lambda: sum(counts().values()) >= sum(expected.values()), 150, "every word counted")
        time.sleep(2.0)   # a replayed batch applied twice would show up now
        assert counts() == expected
    finally:
        finish(cluster, name, topology_id)
