"""A stateful bolt on a real process cluster (issue 13): ZooKeeper, Nimbus, 2 supervisors,
worker processes over ZeroMQ; the checkpoint spout keeps its txid in ZooKeeper and the
counter's KeyValueState lives in SQLite. SIGKILL the worker holding the state: the state must
come back from its last commit (not from zero), the tuples since then replay, and the final
committed state holds every input id; an id counted twice can only belong to the one
checkpoint the kill interrupted (Storm's at-least-once state).
"""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
import uuid
from pathlib import Path

import pytest

from stormpy.testing import wait_until

sys.path.insert(0, str(Path(__file__).resolve().parent / "topologies"))

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]


def acked_ids(out: Path) -> set[int]:
    ids: set[int] = set()
    for path in out.glob("acked-*.txt"):
        ids.update(int(x) for x in path.read_text().split())
    return ids


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.exists() else []


def committed(db: Path) -> dict[str, int]:
    conn = sqlite3.connect(str(db), timeout=10)
    try:
        return {json.loads(k): json.loads(v) for k, v in conn.execute("SELECT k, v FROM kv_state")}
    finally:
        conn.close()


def test_stateful_counter_survives_sigkill_of_its_worker(cluster, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    db = out / "state.db"
    total = 2000
    name = f"stateful-{uuid.uuid4().hex[:6]}"
    topology_id = cluster.submit("stateful_counter.py", name, workers=2, conf={
        "test.out.dir": str(out), "test.sentences": total, "test.spout.per.call": 2,
        "topology.state.provider": "sqlite", "topology.state.provider.config": {"path": str(db)}})
    try:
        cluster.wait_workers(topology_id, 2)
        wait_until(lambda: len(acked_ids(out)) >= 400, 90, "the first 400 ids acked (checkpoints committing)")
        (pid_file,) = out.glob("counter-pid-*.txt")   # the counter's one task wrote its pid
        victim = int(pid_file.read_text())
        assert victim in cluster.worker_pids(topology_id), "the counter runs in one of the topology's workers"
        committed_before = committed(db).get("total", 0)
        assert committed_before > 0
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: (now := cluster.worker_pids(topology_id)) and len(now) == 2 and victim not in now,
                   90, "the supervisor to restart the SIGKILLed worker")
        wait_until(lambda: len(acked_ids(out)) == total, 150, f"all {total} ids acked after the kill")
        assert acked_ids(out) == set(range(total))

        state = committed(db)
        counts = {int(k[1:]): v for k, v in state.items() if k.startswith("n")}
        missing = set(range(total)) - set(counts)
        assert not missing, f"{len(missing)} input ids missing from the final state, e.g. {sorted(missing)[:10]}"
        twice = sum(v - 1 for v in counts.values())
        assert state["total"] == sum(counts.values())

        inits = lines(out / "inits.jsonl")
        assert inits[0]["total"] == 0
        restored = [i for i in inits if i["pid"] != victim]
        assert restored and restored[-1]["total"] >= committed_before > 0, \
            f"the restarted counter must start from its last commit, got {inits}"
        per_checkpoint = max(c["tuples"] for c in lines(out / "checkpoints.jsonl"))
        assert twice <= per_checkpoint, (f"{twice} ids counted twice: more than one checkpoint's tuples "
                                         f"({per_checkpoint})")
        print(f"stateful kill: restored total {restored[-1]['total']} (committed before kill "
              f"{committed_before}), {twice} counted twice, largest checkpoint {per_checkpoint} tuples")
    finally:
        if cluster.topology_id(name) is not None:
            cluster.kill_topology(name, wait_secs=0)
        wait_until(lambda: not cluster.worker_pids(topology_id), 60, f"the workers of {topology_id} to exit")
