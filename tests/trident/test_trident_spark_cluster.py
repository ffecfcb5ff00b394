"""Exactly-once into Redis and Spark on a REAL process cluster under faults (issue 14, item 4).

ZooKeeper, Nimbus, 2 supervisors x 2 ports and their workers (tests/cluster/process_cluster.py),
one cluster and one real redis-server for the module, local Spark in each worker. The topology
(``topologies/trident_spark_cluster.py``) writes numbered input lines into SparkState (Parquet)
and their word counts into RedisMapState.opaque. Each test waits until both outputs are
complete, then checks: every word count equal (never more: a replay counted twice; never less),
and every (partition, step) line in the Spark output exactly once, read back with Spark.
"""
from __future__ import annotations

import json
import os
import signal
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
from stormpy.trident import RedisMapState

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "cluster"))
sys.path.insert(0, str(HERE / "topologies"))
from process_cluster import ProcessCluster, module_cluster  # noqa: E402
from trident_wc_cluster import PARTITIONS, expected_counts, lines_of  # noqa: E402

TOPOLOGY = HERE / "topologies" / "trident_spark_cluster.py"

# a hang guard, not a speed check: the standalone test took 172 s beside two other modules
pytestmark = pytest.mark.timeout(480)


@pytest.fixture(scope="module")
def scluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    with module_cluster(request, tmp_path_factory.mktemp("scluster"), 2, 2) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from stormpy.spark import session
    spark = session.acquire_session({"spark.master": "local[1]", "spark.ui.enabled": False,
                                     "spark.sql.shuffle.partitions": 1})
    try:
        yield spark
    finally:
        session.release_session("cluster Spark tests finished")


class Run:
    def __init__(self, cluster: ProcessCluster, tmp_path: Path, redis_url: str, prefix: str, lines: int,
                 per_batch: int, extra: dict[str, Any] | None = None) -> None:
        self.cluster = cluster
        self.name = f"tspark-{uuid.uuid4().hex[:6]}"
        self.output = tmp_path / "lines"
        self.lines = lines
        self.expected = expected_counts(lines)
        self.total = sum(self.expected.values())
        conf = {"tspark.output": str(self.output), "tspark.redis.url": redis_url, "tspark.redis.prefix": prefix,
                "tspark.lines": lines, "tspark.per.batch": per_batch, **(extra or {})}
        args = ["submit", str(TOPOLOGY), "--name", self.name, "--workers", "2"]
        for key, value in conf.items():
            args += ["-c", f"{key}={json.dumps(value)}"]
        self.started = time.monotonic()
        cluster.cli(*args)
        self.id = wait_until(lambda: cluster.topology_id(self.name), 30, f"topology {self.name} to be listed")
        self.counts_map = RedisMapState.opaque(redis_url, prefix).open_map()

    def counts(self) -> Counter:
        try:
            return Counter({key[0]: value for key, value in self.counts_map.items()})
        except Exception:  # noqa: BLE001 - Redis may be down in the restart test
            return Counter()

    def counted(self) -> int:
        return sum(self.counts().values())

    def wait_counted(self, at_least: int, what: str, timeout: float = 120) -> int:
        return wait_until(lambda: (n := self.counted()) >= at_least and n, timeout,
                          f"{self.name}: {what} (Redis total >= {at_least} of {self.total})")

    def spark_files(self) -> int:
        return len(list(self.output.glob("part-*"))) if self.output.exists() else 0

    def assert_exact(self, spark: Any, timeout: float = 180) -> None:
        self.wait_counted(self.total, "every word counted in Redis", timeout)
        wanted = self.lines * PARTITIONS
        wait_until(lambda: self.spark_rows(spark) >= wanted, timeout,
                   f"{self.name}: every line in the Spark output ({wanted})")
        time.sleep(1.0)   # a replay applied twice would show up as more than the total
        counts = self.counts()
        diff = {w: (counts.get(w, 0), n) for w, n in self.expected.items() if counts.get(w, 0) != n}
        assert not diff and not set(counts) - set(self.expected), f"Redis counts (got, expected) differ: {diff}"
        df = spark.read.parquet(str(self.output))
        rows = df.collect()
        seen = Counter((r["partition"], r["step"]) for r in rows)
        dupes = {k: n for k, n in seen.items() if n > 1}
        missing = {(p, s) for p in range(PARTITIONS) for s in range(self.lines)} - set(seen)
        assert not dupes and not missing, f"Spark rows: duplicated {list(dupes)[:10]}, missing {sorted(missing)[:10]}"
        text = {p: lines_of(p, self.lines) for p in range(PARTITIONS)}
        wrong = [r for r in rows if text[r["partition"]][r["step"]] != r["sentence"]]
        assert not wrong, f"Spark rows with another sentence than the input: {wrong[:3]}"
        print(f"{self.name}: exact Redis counts of {self.total} words and {len(rows)} Spark rows once each "
              f"after {time.monotonic() - self.started:.0f} s")

    def spark_rows(self, spark: Any) -> int:
        if not self.spark_files():
            return 0
        return spark.read.parquet(str(self.output)).count()

    def finish(self) -> None:
        if self.cluster.topology_id(self.name) is not None:
            self.cluster.kill_topology(self.name, wait_secs=0)
        wait_until(lambda: not self.cluster.worker_pids(self.id), 60, f"every worker of {self.id} to exit after kill")


@pytest.fixture
def runs(scluster: ProcessCluster) -> Iterator[list[Run]]:
    made: list[Run] = []
    yield made
    for run in made:
        run.finish()


@pytest.mark.slow
def test_spark_rows_once_and_exact_redis_counts_after_worker_sigkills(scluster, runs, spark, redis_server,
                                                                      redis_prefix, tmp_path):
    die_txid = 6
    run = Run(scluster, tmp_path, redis_server.url, redis_prefix, lines=300, per_batch=10,
              extra={"spark.state.test.die.after.write": die_txid})
    runs.append(run)
    pids = scluster.wait_workers(run.id, 2)
    marker = run.output / "_stormpy_state" / f"test-died-{run.name}-t{die_txid}"
    wait_until(marker.exists, 150, f"the test hook to SIGKILL a worker after publishing txid {die_txid}")
    died = int(marker.read_text().split("pid ")[1])   # whole once it exists (the hook links it in)
    assert died in pids, "the hook killed one of the topology's workers"
    wait_until(lambda: (now := scluster.worker_pids(run.id)) and len(now) == 2 and died not in now, 90,
               "the supervisor to restart the worker the hook killed")
    before = run.counted()
    run.wait_counted(before + 1, "progress after the restart")
    survivor = next(p for p in scluster.worker_pids(run.id))
    if run.counted() < run.total:
        os.kill(survivor, signal.SIGKILL)
        wait_until(lambda: (now := scluster.worker_pids(run.id)) and len(now) == 2 and survivor not in now, 90,
                   f"the supervisor to restart SIGKILLed worker {survivor}")
    run.assert_exact(spark)


@pytest.mark.slow
def test_opaque_spout_exact_after_worker_sigkills_mid_commit(scluster, runs, spark, redis_server, redis_prefix,
                                                             tmp_path):
    """An opaque spout's replay carries other lines than the attempt whose commit already landed in
    some partitions: Redis must revert what only that attempt wrote, Spark replace its files."""
    run = Run(scluster, tmp_path, redis_server.url, redis_prefix, lines=300, per_batch=12,
              extra={"tspark.kind": "opaque"})
    runs.append(run)
    scluster.wait_workers(run.id, 2)
    for share in (4, 2):
        run.wait_counted(run.total // share, f"1/{share} counted before a SIGKILL")
        victim = scluster.worker_pids(run.id)[0]
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: (now := scluster.worker_pids(run.id)) and len(now) == 2 and victim not in now, 90,
                   f"the supervisor to restart SIGKILLed worker {victim}")
    run.assert_exact(spark)


def test_exact_redis_counts_after_a_redis_restart_mid_run(scluster, runs, spark, redis_server, redis_prefix,
                                                          tmp_path):
    run = Run(scluster, tmp_path, redis_server.url, redis_prefix, lines=300, per_batch=10)
    runs.append(run)
    try:
        scluster.wait_workers(run.id, 2)
        run.wait_counted(run.total // 5, "20% counted before Redis goes down")
        redis_server.kill()
        time.sleep(4.0)    # commits fail while it is down; batches are replayed
        redis_server.start()
        before = run.counted()
        run.wait_counted(before + 1, "commits again after the Redis restart")
        run.assert_exact(spark)
    finally:
        if not redis_server.is_alive():
            redis_server.start()


# ---------------------------------------------------------------- on a real Spark cluster (issue 23)

class _StartedEarly:
    """A Spark deployment started on a thread when the module begins, so that its JVMs start while
    the stormpy cluster and the earlier tests run; the fixture that needs it joins the thread."""

    def __init__(self, daemons: Any) -> None:
        self.daemons = daemons
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._start, name=f"start-{type(daemons).__name__}", daemon=True)
        self.thread.start()

    def _start(self) -> None:
        try:
            self.daemons.start()
        except BaseException as exc:  # noqa: BLE001 - raised in the test that needs it
            self.error = exc

    def ready(self, timeout: float = 240) -> Any:
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise TimeoutError(f"{type(self.daemons).__name__} not started after {timeout:g} s")
        if self.error is not None:
            raise self.error
        return self.daemons

    def stop(self, reason: str) -> None:
        self.thread.join(240)   # a start still under way would add processes after the stop
        self.daemons.stop(reason)


@pytest.fixture(scope="module", autouse=True)
def _spark_daemons(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """The Spark standalone master + 2 workers and the Spark Connect server of this module, each
    started once, concurrently, as the module begins (only if a selected test needs it), and
    stopped after its last test, also on failure."""
    from stormpy.testing.spark_cluster import SparkConnectServer, SparkStandalone

    needed = {name for item in request.session.items if item.module is request.module
              for name in ("spark_standalone", "spark_connect") if name in item.fixturenames}
    started: dict[str, _StartedEarly] = {}
    try:
        if "spark_standalone" in needed:
            started["spark_standalone"] = _StartedEarly(SparkStandalone(
                tmp_path_factory.mktemp("spark-standalone"), workers=2, cores=2, memory="2g"))
        if "spark_connect" in needed:
            started["spark_connect"] = _StartedEarly(SparkConnectServer(tmp_path_factory.mktemp("spark-connect"),
                                                                        master="local[1]"))
        yield started
    finally:
        for early in started.values():
            early.stop("Spark cluster tests finished")


@pytest.fixture(scope="module")
def spark_standalone(_spark_daemons: dict) -> Any:
    """A Spark standalone master and 2 workers from the pyspark wheel, for this module."""
    return _spark_daemons["spark_standalone"].ready()


@pytest.fixture(scope="module")
def spark_connect(_spark_daemons: dict) -> Any:
    """A Spark Connect server from the pyspark wheel, for this module."""
    return _spark_daemons["spark_connect"].ready()


DIE_TXID = 4


def _kill_every_worker_mid_commit(run: Run, cluster: ProcessCluster) -> None:
    """The test hook SIGKILLs the worker that publishes txid ``DIE_TXID`` first, after its renames
    and before the commit completes; the test SIGKILLs the other worker at the same moment. Both
    restart together (one restart, each a new Spark driver or Connect client, instead of two in a
    row), and every partition's open batches replay."""
    pids = cluster.wait_workers(run.id, 2)
    marker = run.output / "_stormpy_state" / f"test-died-{run.name}-t{DIE_TXID}"
    wait_until(marker.exists, 240, f"the test hook to SIGKILL a worker after publishing txid {DIE_TXID}")
    died = int(marker.read_text().split("pid ")[1])   # whole once it exists (the hook links it in)
    assert died in pids, "the hook killed one of the topology's workers"
    for other in (p for p in pids if p != died):
        os.kill(other, signal.SIGKILL)
    wait_until(lambda: (now := cluster.worker_pids(run.id)) and len(now) == 2 and not set(now) & set(pids), 120,
               f"the supervisors to restart the SIGKILLed workers {pids}")


@pytest.mark.slow
def test_spark_rows_once_on_a_standalone_spark_cluster_after_worker_sigkills(scluster, runs, spark, spark_standalone,
                                                                            redis_server, redis_prefix, tmp_path):
    """``spark.master: spark://...``: each stormpy worker is a Spark driver whose executors run on
    the standalone workers; the files land on a path both see, published exactly once."""
    run = Run(scluster, tmp_path, redis_server.url, redis_prefix, lines=120, per_batch=10,
              extra={"spark.master": spark_standalone.master_url, "spark.cores.max": 1,
                     "spark.executor.memory": "512m", "spark.executor.cores": 1,
                     "spark.state.test.die.after.write": DIE_TXID})
    runs.append(run)
    _kill_every_worker_mid_commit(run, scluster)
    run.assert_exact(spark, timeout=240)
    drivers = list((spark_standalone.base / "worker-0").glob("app-*")) + list(
        (spark_standalone.base / "worker-1").glob("app-*"))
    assert drivers, "the batches were written by executors on the standalone workers"


@pytest.mark.slow
def test_spark_rows_once_through_spark_connect_after_worker_sigkills(scluster, runs, spark, spark_connect,
                                                                    redis_server, redis_prefix, tmp_path):
    """``spark.remote: sc://...``: the workers hold thin Connect clients; Spark writes the staging
    files, the worker publishes them with renames on the shared path. With the settings the docs
    recommend for Connect, so the kill also lands among commit groups (several txids per job)."""
    run = Run(scluster, tmp_path, redis_server.url, redis_prefix, lines=120, per_batch=10,
              extra={"spark.remote": spark_connect.remote, "spark.state.test.die.after.write": DIE_TXID,
                     "topology.max.spout.pending": 16, "spark.sink.max.inflight.batches": 1,
                     "spark.state.max.batches.per.write": 8})
    runs.append(run)
    _kill_every_worker_mid_commit(run, scluster)
    run.assert_exact(spark, timeout=240)
