"""Issue 26 on a real process cluster: a topology whose serializer raises KeyError keeps
flowing (item 7), a foreign backpressure frame stops nothing (item 4), config files holding
credentials are private (item 8). One supervisor with two worker ports, so tuples cross workers
and go through the serializer."""
from __future__ import annotations

import json
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from stormpy.testing import wait_until

CLUSTER_SUPERVISORS = 1
CLUSTER_PORTS = 2

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def ids(out: Path, kind: str) -> list[int]:
    found: list[int] = []
    for path in out.glob(f"{kind}-*.txt"):
        found.extend(int(x) for x in path.read_text().split())
    return found


_SPAM = """
import sys, time, msgpack, zmq
ports = [int(p) for p in sys.argv[1].split(",")]
ctx = zmq.Context()
socks = []
for port in ports:
    s = ctx.socket(zmq.PUSH); s.setsockopt(zmq.LINGER, 0); s.connect(f"tcp://127.0.0.1:{port}"); socks.append(s)
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    for s, port in zip(socks, ports):
        for other in ports:   # claim to be each worker of the topology, without its token
            try:
                s.send(msgpack.packb([[-1, [["backpressure", "127.0.0.1", other, True]]]]), zmq.NOBLOCK)
                s.send(msgpack.packb([[-1, [["backpressure", "127.0.0.1", other, True, "guess"]]]]), zmq.NOBLOCK)
            except zmq.Again:
                pass
    time.sleep(0.05)
ctx.destroy(linger=0)
"""


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_serializer_keyerror_fails_and_replays_those_tuples_and_nothing_stalls(cluster, tmp_path):
    out = tmp_path / "out"
    name = f"serr-{uuid.uuid4().hex[:6]}"
    topology_id = cluster.submit("serializer_keyerror.py", name, workers=2, conf={"test.out.dir": str(out)})
    try:
        pids = cluster.wait_workers(topology_id, 2)
        first = set(range(300))
        wait_until(lambda: first <= set(ids(out, "acked")), 120,
                   "the first 300 ids acked, those ending in 3 or 8 after a fail and a replay")
        failed = set(ids(out, "failed"))
        assert failed, "some poisoned tuples crossed workers and were failed"
        assert all(i % 5 == 3 for i in failed), f"only poisoned ids fail: {sorted(failed)[:20]}"

        def keyerrors() -> list[str]:
            errors = (cluster.topology_info(topology_id).errors or {}).get("amounts", [])
            return [e.error for e in errors if "KeyError" in e.error]
        wait_until(keyerrors, 30, "the KeyError reported as an error of the spout component")
        listed = cluster.cli("errors", name).stdout
        assert "amounts" in listed and "KeyError" in listed and "cannot serialize" in listed

        # item 4: a process outside the topology spams the workers' ports with backpressure ON
        executors = cluster.topology_info(topology_id).executors
        ports = sorted({e.port for e in executors})
        assert len(ports) == 2
        before = len(ids(out, "acked"))
        spam = subprocess.Popen([sys.executable, "-c", _SPAM, ",".join(map(str, ports)), "8"])
        try:
            time.sleep(5)   # past the 4 s a real peer's signal would last
            during = len(ids(out, "acked"))
            assert during > before + 50, f"spouts stopped by forged backpressure ({before} -> {during} acks)"
            time.sleep(2)
            assert len(ids(out, "acked")) > during + 20, "acks go on while forged frames keep coming"
        finally:
            spam.wait(30)
        assert cluster.worker_pids(topology_id) == pids, "no worker stalled, died or was restarted"

        # item 8: the files that can hold credentials are private; item 4: the control token
        nimbus_dist = next(Path(cluster.conf["storm.local.dir"]).rglob(f"stormdist/{topology_id}"))
        sup_local = Path(cluster.local_dirs()[0])
        sup_dist = sup_local / "supervisor" / "stormdist" / topology_id
        for dist in (nimbus_dist, sup_dist):
            assert mode(dist) == 0o700 and mode(dist / "stormconf.json") == 0o600, dist
        token = json.loads((sup_dist / "stormconf.json").read_text())["topology.worker.control.token"]
        assert len(token) == 32
        worker_confs = list((sup_local / "workers").glob("*/supervisor-conf.json"))
        assert len(worker_confs) == 2
        assert all(mode(p) == 0o600 and mode(p.parent) == 0o700 for p in worker_confs)

        # item 4: what listens beyond loopback with security off says so once; loopback does not
        def security_lines(proc) -> list[str]:
            return [line for line in proc.output().splitlines() if "SECURITY:" in line]
        assert [line.split("SECURITY: ")[1][:24] for line in security_lines(cluster.supervisors[0])] \
            == ["log viewer listens on ev"]
        assert len(security_lines(cluster.zookeeper)) == 1 and "dev ZooKeeper" in security_lines(cluster.zookeeper)[0]
        assert security_lines(cluster.nimbus) == [] and security_lines(cluster.ui) == []   # 127.0.0.1
    finally:
        if cluster.topology_id(name) is not None:
            cluster.kill_topology(name, wait_secs=0)
        wait_until(lambda: not cluster.worker_pids(topology_id), 60, "the workers to exit after kill")


def test_a_thread_ended_by_sys_exit_ends_the_worker_with_code_3_and_it_is_restarted(cluster, tmp_path):
    out = tmp_path / "out"
    name = f"exit-{uuid.uuid4().hex[:6]}"
    topology_id = cluster.submit("exiting_bolt.py", name, workers=1, conf={"test.out.dir": str(out)})
    try:
        wait_until(lambda: (out / "exited-once").exists(), 90, "the bolt to call sys.exit()")

        def system_errors() -> list[str]:
            errors = (cluster.topology_info(topology_id).errors or {}).get("__system", [])
            return [e.error for e in errors]
        errors = wait_until(lambda: [e for e in system_errors() if "SystemExit" in e], 60,
                            "the ended executor thread reported as a __system error")
        assert "the bolt called sys.exit()" in errors[0]
        logs = Path(cluster.local_dirs()[0]).parent / "logs"
        worker_log = next(logs.glob(f"workers-artifacts/{topology_id}/*/worker.log"))
        # the executor's own thread, or the scheduler thread its executor shares
        # (topology.executor.threads: auto runs one per worker)
        wait_until(lambda: any(f"worker ends: thread executor-{thread}" in worker_log.read_text()
                               for thread in ("exiting", "loop")), 30, "the worker to end itself")
        supervisor = cluster.supervisors[0]
        wait_until(lambda: "exited with code 3" in supervisor.output() or
                   supervisor.output().count(f"launched worker") >= 2, 60, "the supervisor to see it exit")
        cluster.wait_workers(topology_id, 1)
        acked = (out / "acked.txt")
        wait_until(lambda: acked.exists() and len(acked.read_text().split()) > 100, 90,
                   "tuples acked by the restarted worker")
        assert any(line.startswith(f"{name} ") and "ACTIVE" in line for line in cluster.cli("list").stdout.splitlines())
    finally:
        if cluster.topology_id(name) is not None:
            cluster.kill_topology(name, wait_secs=0)
        wait_until(lambda: not cluster.worker_pids(topology_id), 60, "the workers to exit after kill")
