"""Redis Streams and directory spouts on a REAL process cluster (ZooKeeper, Nimbus, 2 supervisors
x 2 ports, worker processes), with worker SIGKILLs.

- RedisStreamSpout: a SIGKILLed worker's pending entries are claimed (XAUTOCLAIM) by a live task:
  every entry stored, nothing left pending in the group.
- OpaqueRedisStreamSpout into SqliteMapState: exact word counts through two SIGKILLs.
- DirectorySpout: a worker SIGKILLed in the middle of a file; its lock times out, the file is
  taken over at its progress sidecar; every line stored, every file in done/.
"""
from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from stormpy.testing import wait_until
from stormpy.testing.redis import RedisServer, RedisUnavailable
from stormpy.trident import SqliteMapState

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "cluster"))
from process_cluster import ProcessCluster, module_cluster, print_logs_if_failed  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"), appendfsync="always")
    try:
        server.start()
    except RedisUnavailable as exc:
        pytest.fail(f"cannot start the test Redis: {exc}")
    try:
        yield server
    finally:
        server.stop(reason="test module finished")


@pytest.fixture(scope="module")
def ccluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    with module_cluster(request, tmp_path_factory.mktemp("ccluster"), 2, 2) as cluster:
        yield cluster


@pytest.fixture
def cluster(ccluster: ProcessCluster, request: pytest.FixtureRequest) -> Iterator[ProcessCluster]:
    yield ccluster
    print_logs_if_failed(ccluster, request)


def submit(cluster: ProcessCluster, file: str, name: str, conf: dict[str, Any]) -> str:
    args = ["submit", str(HERE / "topologies" / file), "--name", name, "--workers", "2"]
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


def stored(db: Path) -> dict[str, int]:
    if not db.exists():
        return {}
    try:
        with sqlite3.connect(db, timeout=30) as conn:
            return dict(conn.execute("SELECT key, deliveries FROM records"))
    except sqlite3.OperationalError:
        return {}


def test_redis_stream_spout_reclaims_a_killed_workers_entries(cluster: ProcessCluster, redis_server: RedisServer,
                                                               tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    stream, group, name = f"events-{tag}", f"g-{tag}", f"rcore-{tag}"
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    for n in range(1500):
        client.xadd(stream, {"n": str(n)})
    db = tmp_path / "records.db"
    topology_id = submit(cluster, "redis_core.py", name, {"conn.url": redis_server.url, "conn.stream": stream,
                                                          "conn.group": group, "conn.db": str(db)})
    try:
        first, _ = cluster.wait_workers(topology_id, 2)
        wait_until(lambda: len(stored(db)) >= 200, 90, "200 entries stored before the SIGKILL")
        sigkill_and_wait_restart(cluster, topology_id, first)
        for n in range(1500, 2000):
            client.xadd(stream, {"n": str(n)})
        wait_until(lambda: len(stored(db)) == 2000, 150, "all 2000 entries stored, the killed worker's claimed")
        wait_until(lambda: client.xpending(stream, group)["pending"] == 0, 60, "nothing pending in the group")
    finally:
        finish(cluster, name, topology_id)
    assert set(stored(db)) == {str(n) for n in range(2000)}


def test_opaque_redis_stream_spout_exact_counts_through_sigkills(cluster: ProcessCluster, redis_server: RedisServer,
                                                                  tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    streams, name = [f"lines-{tag}-{i}" for i in range(3)], f"ropq-{tag}"
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    rnd = random.Random(5)
    words = "redis stream entry claim opaque trident exactly once".split()
    lines = [" ".join(rnd.choice(words) for _ in range(rnd.randint(1, 6))) for _ in range(2400)]
    expected = Counter(w for line in lines for w in line.split())
    for i, line in enumerate(lines[:1200]):
        client.xadd(streams[i % 3], {"line": line})
    db = tmp_path / "counts.db"
    factory = SqliteMapState.opaque(db)

    def counts() -> Counter:
        try:
            return Counter({k[0]: v for k, v in factory.open_map().items()})
        except Exception:  # noqa: BLE001 - not created yet
            return Counter()

    topology_id = submit(cluster, "redis_trident.py", name, {"conn.url": redis_server.url, "conn.streams": streams,
                                                             "conn.db": str(db)})
    try:
        first, second = cluster.wait_workers(topology_id, 2)
        wait_until(lambda: sum(counts().values()) >= 300, 90, "300 words counted before the first SIGKILL")
        sigkill_and_wait_restart(cluster, topology_id, first)
        for i, line in enumerate(lines[1200:]):
            client.xadd(streams[i % 3], {"line": line})
        before = sum(counts().values())
        wait_until(lambda: sum(counts().values()) > before, 90, "progress after the first restart")
        sigkill_and_wait_restart(cluster, topology_id, second)
        wait_until(lambda: sum(counts().values()) >= sum(expected.values()), 150, "every word counted")
        time.sleep(2.0)
        assert counts() == expected
    finally:
        finish(cluster, name, topology_id)


def test_directory_spout_through_a_worker_sigkill_mid_file(cluster: ProcessCluster, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    incoming, name = tmp_path / "incoming", f"files-{tag}"
    incoming.mkdir()
    every: list[str] = []
    for i in range(4):
        lines = [f"file{i}-line-{n:05d}" for n in range(1500)]
        every += lines
        (incoming / f"part-{i}.txt").write_text("".join(line + "\n" for line in lines))
    (incoming / "broken.txt").write_bytes(b"ok\n\xff\xfe\n")
    db = tmp_path / "records.db"
    topology_id = submit(cluster, "files_core.py", name, {"conn.dir": str(incoming), "conn.db": str(db)})
    try:
        first, _ = cluster.wait_workers(topology_id, 2)
        wait_until(lambda: len(stored(db)) >= 300, 90, "300 lines stored before the SIGKILL")
        sigkill_and_wait_restart(cluster, topology_id, first)
        wait_until(lambda: len(stored(db)) >= len(every) + 1, 180, "every line stored after the SIGKILL")
        wait_until(lambda: sorted(p.name for p in (incoming / "done").iterdir()) == [f"part-{i}.txt" for i in range(4)],
                   60, "every complete file moved to done/")
        assert (incoming / "bad" / "broken.txt").exists()
    finally:
        finish(cluster, name, topology_id)
    got = stored(db)
    assert set(every) <= set(got) and set(got) - set(every) == {"ok"}
