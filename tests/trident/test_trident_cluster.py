"""Exactly-once Trident word counts on a REAL process cluster under faults (issue 8, item 7).

ZooKeeper, Nimbus, 2 supervisors x 2 ports and their worker processes (``process_cluster.py`` of
tests/cluster), one cluster for the module. The topology (``topologies/trident_wc_cluster.py``)
reads a fixed text through a transactional (or opaque) partitioned spout, splits it with a
Function raising on 2% of its calls, and counts words with group_by + persistent_aggregate into
SqliteMapState on one file all workers share (every supervisor runs on this host). The
coordinator's txid and the spout metas live in ZooKeeper (``context.transactional_state``), so a
coordinator moved or restarted by a fault resumes where it was.

Each test waits until the state's totals reach the input's word total, then checks every word:
equal, never more (a replay counted twice) nor less (a batch lost).
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from stormpy.testing import wait_until
from stormpy.trident import SqliteMapState

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "cluster"))
sys.path.insert(0, str(HERE / "topologies"))
from process_cluster import ProcessCluster, module_cluster, print_logs_if_failed  # noqa: E402
from trident_wc_cluster import expected_counts  # noqa: E402

TOPOLOGY = HERE / "topologies" / "trident_wc_cluster.py"

pytestmark = pytest.mark.timeout(200)


@pytest.fixture(scope="module")
def tcluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    """ZooKeeper + Nimbus + 2 supervisors x 2 ports for this module; stopped (workers too) even on failure."""
    with module_cluster(request, tmp_path_factory.mktemp("tcluster"), 2, 2) as cluster:
        yield cluster


@pytest.fixture
def cluster(tcluster: ProcessCluster, request: pytest.FixtureRequest) -> Iterator[ProcessCluster]:
    yield tcluster
    print_logs_if_failed(tcluster, request)


class Run:
    """One submitted word count: its name, id, state file and expected counts."""

    def __init__(self, cluster: ProcessCluster, tmp_path: Path, kind: str, lines: int, per_batch: int,
                 workers: int = 2, db: Path | None = None) -> None:
        self.cluster = cluster
        self.kind = kind
        self.name = f"twc-{kind[:5]}-{uuid.uuid4().hex[:6]}"
        self.db = db or tmp_path / f"{self.name}.db"
        self.expected = expected_counts(lines)
        self.total = sum(self.expected.values())
        conf = {"tcluster.db": str(self.db), "tcluster.kind": kind, "tcluster.lines": lines,
                "tcluster.per.batch": per_batch, "tcluster.fail.rate": 0.02}
        args = ["submit", str(TOPOLOGY), "--name", self.name, "--workers", str(workers)]
        for key, value in conf.items():
            args += ["-c", f"{key}={json.dumps(value)}"]
        self.started = time.monotonic()
        cluster.cli(*args)
        self.id = wait_until(lambda: cluster.topology_id(self.name), 30, f"topology {self.name} to be listed")
        self.factory = (SqliteMapState.opaque if kind == "opaque" else SqliteMapState.transactional)(self.db)

    def counts(self) -> Counter:
        if not self.db.exists():
            return Counter()
        try:
            return Counter({key[0]: value for key, value in self.factory.open_map().items()})
        except Exception:  # noqa: BLE001 - the table may not exist yet
            return Counter()

    def counted(self) -> int:
        return sum(self.counts().values())

    def wait_counted(self, at_least: int, what: str, timeout: float = 90) -> int:
        return wait_until(lambda: (n := self.counted()) >= at_least and n, timeout,
                          f"{self.name}: {what} (state total >= {at_least} of {self.total})")

    def assert_exact(self, timeout: float = 120) -> None:
        self.wait_counted(self.total, "every word of the input counted", timeout)
        time.sleep(1.0)   # a replay applied twice would show up as more than the total
        counts = self.counts()
        diff = {w: (counts.get(w, 0), n) for w, n in self.expected.items() if counts.get(w, 0) != n}
        extra = set(counts) - set(self.expected)
        assert not diff and not extra, f"{self.name}: counts (got, expected) differ: {diff}, unexpected {extra}"
        print(f"{self.name}: exact counts of {self.total} words after {time.monotonic() - self.started:.0f} s")

    def errors(self, component: str | None = "lines") -> list[str]:
        info = self.cluster.topology_info(self.id)
        return [e.error for comp, errs in (info.errors or {}).items() if component in (None, comp) for e in errs]

    def finish(self) -> None:
        cluster = self.cluster
        if cluster.topology_id(self.name) is not None:
            cluster.kill_topology(self.name, wait_secs=0)
        wait_until(lambda: not cluster.worker_pids(self.id), 60, f"every worker of {self.id} to exit after kill")


@pytest.fixture
def runs(cluster: ProcessCluster) -> Iterator[list[Run]]:
    made: list[Run] = []
    yield made
    for run in made:
        run.finish()


def kill_worker_and_wait_restart(cluster: ProcessCluster, run: Run, victim: int) -> None:
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: (now := cluster.worker_pids(run.id)) and len(now) == 2 and victim not in now, 90,
               f"the supervisor to restart SIGKILLed worker {victim} of {run.name}")


@pytest.mark.parametrize("kind", ["transactional", "opaque"])
def test_exact_counts_after_two_worker_sigkills(cluster, runs, tmp_path, kind):
    run = Run(cluster, tmp_path, kind, lines=600, per_batch=10)
    runs.append(run)
    first, second = cluster.wait_workers(run.id, 2)
    run.wait_counted(run.total // 10, "10% counted before the first SIGKILL")
    kill_worker_and_wait_restart(cluster, run, first)
    before = run.counted()
    run.wait_counted(before + 1, "progress after the first restart")
    if run.counted() < run.total:
        kill_worker_and_wait_restart(cluster, run, second)
    run.assert_exact()
    assert any("injected failure" in e for e in run.errors()), "the flaky Function's errors were reported"
    logs = list(cluster.base.glob(f"supervisor-*/logs/workers-artifacts/{run.id}/*/worker.log"))
    assert any("(Trident's coordinators) run beside the executor loop" in log.read_text(errors="replace")
               for log in logs), f"a worker ran $mastercoord-bg0 on a thread of its own: {logs}"


def test_exact_counts_after_supervisor_sigkill(cluster, runs, tmp_path):
    run = Run(cluster, tmp_path, "transactional", lines=600, per_batch=10)
    runs.append(run)
    try:
        cluster.wait_workers(run.id, 2)
        run.wait_counted(run.total // 10, "10% counted before the supervisor SIGKILL")
        lost = 1 if cluster.worker_pids(run.id, supervisor=1) else 0
        cluster.supervisors[lost].kill(signal.SIGKILL)
        for pid in cluster.worker_pids(supervisor=lost):
            os.kill(pid, signal.SIGKILL)      # a host going down takes its workers with it
        wait_until(lambda: not cluster.worker_pids(run.id, supervisor=lost)
                   and len(cluster.worker_pids(run.id)) == 2, 120,
                   f"Nimbus to move supervisor {lost}'s executors of {run.name} to the other one")
        run.assert_exact()
    finally:
        for i, proc in enumerate(cluster.supervisors):
            if not proc.is_alive():
                cluster.restart_supervisor(i)
        wait_until(lambda: len(cluster.supervisor_summaries()) == 2, 60, "both supervisors registered again")


def test_exact_counts_after_nimbus_sigkill_and_restart(cluster, runs, tmp_path):
    run = Run(cluster, tmp_path, "transactional", lines=600, per_batch=10)
    runs.append(run)
    try:
        pids = cluster.wait_workers(run.id, 2)
        run.wait_counted(run.total // 10, "10% counted before the Nimbus SIGKILL")
        cluster.nimbus.kill(signal.SIGKILL)
        before = run.counted()
        run.wait_counted(before + 1, "commits while Nimbus is down")
        cluster.start_nimbus()
        wait_until(lambda: cluster.topology_info(run.id), 60, "getTopologyInfo after the Nimbus restart")
        run.assert_exact()
        assert cluster.worker_pids(run.id) == pids, "a Nimbus restart leaves the workers alone"
    finally:
        if not cluster.nimbus.is_alive():
            cluster.start_nimbus()


@pytest.mark.slow
def test_topology_resubmitted_under_another_name_onto_the_same_state_is_refused(cluster, runs, tmp_path):
    """Issue 26: the second topology's txids start at 1 again; its commits are refused with a clear
    error (shown as its component's error) and the first topology's counts stay exact."""
    first = Run(cluster, tmp_path, "transactional", lines=200, per_batch=10)
    runs.append(first)
    first.assert_exact()
    first.finish()
    second = Run(cluster, tmp_path, "transactional", lines=200, per_batch=10, db=first.db)
    runs.append(second)
    refusals = wait_until(lambda: [e for e in second.errors(None) if "StateFencedError" in e], 90,
                          f"{second.name}: its state to refuse it")
    assert any(f"belongs to topology '{first.name}'; topology '{second.name}' may not write it" in e
               for e in refusals), refusals
    assert second.counts() == Counter(first.expected), "the refused topology changed nothing"
