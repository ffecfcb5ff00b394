"""Fault tests on a real process cluster (issue 4, item 7): ZooKeeper, Nimbus, 2 supervisors x 3
ports, worker processes exchanging tuples over ZeroMQ. One cluster serves the whole module;
every test kills its own topology (and restarts what it broke) before the next one runs.

Topologies are in ``topologies/``; their spouts replay from a durable source and record acked
ids on disk, so "every id acked" is the at-least-once guarantee, seen from outside.
"""
from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

import sys

import psutil
import pytest

from stormpy.testing import wait_until

sys.path.insert(0, str(Path(__file__).resolve().parent / "topologies"))
from cluster_common import expected_counts  # noqa: E402

pytestmark = pytest.mark.timeout(240)


def acked_ids(out: Path) -> set[int]:
    ids: set[int] = set()
    for path in out.glob("acked-*.txt"):
        ids.update(int(x) for x in path.read_text().split())
    return ids


def counts(out: Path) -> Counter:
    total: Counter = Counter()
    for path in out.glob("counts-*.json"):
        try:
            total.update(json.loads(path.read_text()))
        except (OSError, ValueError):
            pass
    return total


def run_conf(out: Path, sentences: int, **extra: object) -> dict[str, object]:
    return {"test.out.dir": str(out), "test.sentences": sentences, **extra}


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def out_dir(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    return out


def finish(cluster, name: str, topology_id: str, timeout: float = 60) -> None:
    """Kill the topology and wait until all its workers are gone (also the `kill` test)."""
    if cluster.topology_id(name) is not None:
        cluster.kill_topology(name, wait_secs=0)
    wait_until(lambda: not cluster.worker_pids(topology_id), timeout,
               f"every worker of {topology_id} to exit after kill")
    wait_until(lambda: cluster.topology_id(name) is None, timeout, f"{name} to leave the topology list")


def wait_for_more_acks(out_dir, what: str, timeout: float = 60) -> None:
    """Wait until the spouts have acked 50 more tuples than now: the topology is flowing again."""
    before = len(acked_ids(out_dir))
    wait_until(lambda: len(acked_ids(out_dir)) > before + 50, timeout, what)


def test_wordcount_exact_counts_on_two_supervisors_three_workers_then_kill(cluster, out_dir):
    name = unique("wc")
    total = 500
    # exact counts: no tuple tree may time out and replay while a late worker starts (at least once counts twice)
    topology_id = cluster.submit("wordcount.py", name, workers=3,
                                 conf=run_conf(out_dir, total, **{"topology.message.timeout.secs": 120}))
    try:
        cluster.wait_workers(topology_id, 3)
        assert cluster.worker_pids(topology_id, supervisor=0) and cluster.worker_pids(topology_id, supervisor=1), \
            "the 3 workers must be spread over both supervisors"
        wait_until(lambda: len(acked_ids(out_dir)) == total, 120, f"all {total} sentences acked")
        wait_until(lambda: counts(out_dir) == expected_counts(total), 30, "the exact word counts")
        listed = cluster.cli("list").stdout
        assert name in listed
        with urllib.request.urlopen(f"http://127.0.0.1:{cluster.conf['ui.port']}/api/v1/topology/summary",
                                    timeout=30) as resp:
            assert name in resp.read().decode(), "the UI lists the running topology"
    finally:
        finish(cluster, name, topology_id)


def test_wordcount_exact_counts_with_one_executor_loop_per_worker(cluster, out_dir):
    """``topology.executor.threads: one`` in workers: each worker's executors share one loop
    thread, which hands a round's batches for the other worker to the send thread at once."""
    name = unique("wc-loop")
    total = 500
    topology_id = cluster.submit("wordcount.py", name, workers=2,
                                 conf=run_conf(out_dir, total, **{"topology.executor.threads": "one",
                                                                  "topology.message.timeout.secs": 120}))
    try:
        cluster.wait_workers(topology_id, 2)
        wait_until(lambda: len(acked_ids(out_dir)) == total, 120, f"all {total} sentences acked")
        wait_until(lambda: counts(out_dir) == expected_counts(total), 30, "the exact word counts")
        assert acked_ids(out_dir) == set(range(total))
    finally:
        finish(cluster, name, topology_id)


def test_sigkilled_worker_is_restarted_and_every_tuple_acked(cluster, out_dir):
    name = unique("wc-kill")
    total = 3000
    topology_id = cluster.submit("wordcount.py", name, workers=2,
                                 conf=run_conf(out_dir, total, **{"test.spout.per.call": 2}))
    try:
        pids = cluster.wait_workers(topology_id, 2)
        wait_until(lambda: len(acked_ids(out_dir)) >= 100, 90, "the first 100 acks")
        victim = pids[0]
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: (now := cluster.worker_pids(topology_id)) and len(now) == 2 and victim not in now,
                   90, "the supervisor to restart the SIGKILLed worker")
        wait_until(lambda: len(acked_ids(out_dir)) == total, 150,
                   f"all {total} sentences acked after the worker kill (at-least-once)")
        assert acked_ids(out_dir) == set(range(total))
    finally:
        finish(cluster, name, topology_id)


def test_bolt_error_reaches_topology_info_and_others_go_on(cluster, out_dir):
    name = unique("faulty")
    topology_id = cluster.submit("faulty.py", name, workers=1, conf=run_conf(out_dir, 0))
    try:
        cluster.wait_workers(topology_id, 1)

        def faulty_errors():
            info = cluster.topology_info(topology_id)
            return [e.error for e in (info.errors or {}).get("faulty", [])]

        errors = wait_until(faulty_errors, 60, "errors of the faulty bolt in getTopologyInfo")
        assert any("boom-from-faulty" in e for e in errors)
        assert len(errors) <= 10, "only the newest 10 errors per component are kept"
        first = sum(counts(out_dir).values())
        wait_until(lambda: sum(counts(out_dir).values()) > first + 50, 30, "the healthy count bolt to go on")
        assert "count" not in (cluster.topology_info(topology_id).errors or {})
    finally:
        finish(cluster, name, topology_id)


def test_rebalance_changes_worker_count(cluster, out_dir):
    name = unique("wc-rebalance")
    topology_id = cluster.submit("wordcount.py", name, workers=1,
                                 conf=run_conf(out_dir, 10**9, **{"test.spout.per.call": 1}))
    try:
        cluster.wait_workers(topology_id, 1)
        cluster.cli("rebalance", name, "-w", "1", "-n", "3")
        cluster.wait_workers(topology_id, 3, timeout=90)
        wait_for_more_acks(out_dir, "acks after the rebalance", timeout=60)
    finally:
        finish(cluster, name, topology_id)


def test_supervisor_sigkill_leaves_workers_and_restart_adopts_them(cluster, out_dir):
    name = unique("wc-adopt")
    topology_id = cluster.submit("wordcount.py", name, workers=2,
                                 conf=run_conf(out_dir, 10**9, **{"test.spout.per.call": 1}))
    try:
        cluster.wait_workers(topology_id, 2)
        mine = cluster.worker_pids(topology_id, supervisor=0)
        assert mine, "supervisor 0 must run one of the workers"
        cluster.supervisors[0].kill(signal.SIGKILL)
        time.sleep(2)   # a moment without the supervisor; no assertion on timing
        assert all(psutil.pid_exists(p) for p in mine), "workers must outlive their supervisor"
        cluster.restart_supervisor(0)
        wait_until(lambda: "adopted worker" in cluster.supervisors[0].output(), 60,
                   "the restarted supervisor to adopt its workers")
        wait_for_more_acks(out_dir, "acks after the supervisor restart", timeout=60)
        assert cluster.worker_pids(topology_id, supervisor=0) == mine, "adopted, not relaunched"
    finally:
        finish(cluster, name, topology_id)


def test_nimbus_sigkill_tuples_keep_flowing_and_restart_resumes(cluster, out_dir):
    name = unique("wc-nimbus")
    topology_id = cluster.submit("wordcount.py", name, workers=2,
                                 conf=run_conf(out_dir, 10**9, **{"test.spout.per.call": 1}))
    try:
        cluster.wait_workers(topology_id, 2)
        wait_until(lambda: len(acked_ids(out_dir)) > 20, 60, "first acks")
        cluster.nimbus.kill(signal.SIGKILL)
        acked = len(acked_ids(out_dir))
        wait_until(lambda: len(acked_ids(out_dir)) > acked + 100, 60, "acks while Nimbus is down")
        cluster.start_nimbus()
        info = wait_until(lambda: cluster.topology_info(topology_id), 60, "getTopologyInfo after the restart")
        assert info.status == "ACTIVE"
        cluster.cli("deactivate", name)

        def quiet() -> bool:      # spouts paused: once in-flight trees finish, acks stop
            before = len(acked_ids(out_dir))
            time.sleep(1.5)
            return len(acked_ids(out_dir)) == before

        wait_until(quiet, 60, "acks to stop while the topology is INACTIVE")
        cluster.cli("activate", name)
        wait_for_more_acks(out_dir, "acks after Nimbus came back", timeout=60)
    finally:
        finish(cluster, name, topology_id)


def test_zookeeper_restart_daemons_reconnect(cluster, out_dir):
    name = unique("wc-zk")
    topology_id = cluster.submit("wordcount.py", name, workers=2,
                                 conf=run_conf(out_dir, 10**9, **{"test.spout.per.call": 1}))
    try:
        pids = cluster.wait_workers(topology_id, 2)
        cluster.kill_zookeeper()
        time.sleep(1)
        cluster.start_zookeeper()
        wait_for_more_acks(out_dir, "acks after the ZooKeeper restart", timeout=90)
        wait_until(lambda: len(cluster.supervisor_summaries()) == 2, 60, "both supervisors registered again")
        assert cluster.worker_pids(topology_id) == pids
    finally:
        finish(cluster, name, topology_id)


def test_slow_bolt_keeps_worker_memory_bounded(cluster, out_dir):
    name = unique("slow")
    topology_id = cluster.submit("slow.py", name, workers=2, conf=run_conf(out_dir, 0))
    try:
        pids = cluster.wait_workers(topology_id, 2)

        def seen() -> int:
            return sum(json.loads(p.read_text())["seen"] for p in out_dir.glob("slow-*.json") if p.stat().st_size)

        wait_until(lambda: seen() > 500, 60, "the slow bolt to process tuples")
        time.sleep(3)
        early = {p: psutil.Process(p).memory_info().rss for p in pids}
        before = seen()
        time.sleep(12)
        late = {p: psutil.Process(p).memory_info().rss for p in pids}
        assert seen() > before, "the slow bolt kept processing"
        for pid in pids:
            growth = (late[pid] - early[pid]) / 2**20
            assert late[pid] < 300 * 2**20, f"worker {pid} uses {late[pid] / 2**20:.0f} MB"
            assert growth < 64, f"worker {pid} grew by {growth:.0f} MB in 12 s behind a slow bolt"
    finally:
        finish(cluster, name, topology_id)


def test_lost_supervisor_executors_move_to_the_other(cluster, out_dir):
    name = unique("wc-move")
    total = 2000
    topology_id = cluster.submit("wordcount.py", name, workers=2,
                                 conf=run_conf(out_dir, total, **{"test.spout.per.call": 1}))
    try:
        cluster.wait_workers(topology_id, 2)
        assert cluster.worker_pids(topology_id, supervisor=1)
        wait_until(lambda: len(acked_ids(out_dir)) > 50, 60, "first acks")
        cluster.supervisors[1].kill(signal.SIGKILL)
        for pid in cluster.worker_pids(supervisor=1):
            os.kill(pid, signal.SIGKILL)
        wait_until(lambda: len(cluster.worker_pids(topology_id, supervisor=0)) >= 1
                   and not cluster.worker_pids(topology_id, supervisor=1)
                   and len(cluster.worker_pids(topology_id)) == 2, 120,
                   "Nimbus to move the lost supervisor's executors to supervisor 0")
        wait_until(lambda: len(acked_ids(out_dir)) == total, 150, f"all {total} sentences acked")
    finally:
        finish(cluster, name, topology_id)
        cluster.restart_supervisor(1)
        wait_until(lambda: len(cluster.supervisor_summaries()) == 2, 60, "supervisor 1 back")


def test_streamparse_style_topology_acks_everything_despite_worker_kill(cluster, tmp_path):
    """Acceptance: replaying spout, explicitly failing bolt, fields-grouped ledger, a SIGKILL."""
    out = tmp_path / "ledger"
    total = 4000
    name = unique("ledger")
    topology_id = cluster.submit("ledger.py", name, workers=3,
                                 conf={"ledger.out.dir": str(out), "ledger.transfers": total})
    try:
        pids = cluster.wait_workers(topology_id, 3)
        wait_until(lambda: len(acked_ids(out)) >= 150, 90, "the first 150 acked transfers")
        os.kill(pids[-1], signal.SIGKILL)
        wait_until(lambda: len(acked_ids(out)) == total, 150, f"all {total} transfers acked after the kill")
        assert acked_ids(out) == set(range(total))
    finally:
        finish(cluster, name, topology_id)
