"""A cluster of real hosts (issue 11): Linux network namespaces on a bridge, each with its own
address (``stormpy.testing.netns``). ZooKeeper and Nimbus run on host 0, a supervisor on each of
hosts 1 and 2; a word count spread over both supervisor hosts acks every tuple, and everything
advertises and binds its host's address, never 127.0.0.1. Needs root (skipped otherwise).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from stormpy.client.nimbus_client import connect
from stormpy.testing import wait_for_leader, wait_until
from stormpy.testing.netns import HostNetwork, leftovers, namespace_pids, skip_reason
from stormpy.testing.zookeeper import four_letter_word

sys.path.insert(0, str(Path(__file__).resolve().parent))
from process_cluster import FAST_TIMINGS, REPO, TOPOLOGIES  # noqa: E402
from test_cluster_faults import acked_ids, counts, run_conf  # noqa: E402

sys.path.insert(0, str(TOPOLOGIES))
from cluster_common import expected_counts  # noqa: E402

_SKIP = skip_reason()
pytestmark = [pytest.mark.skipif(_SKIP is not None, reason=_SKIP or ""), pytest.mark.timeout(300)]

ZK_PORT, NIMBUS_PORT, WORKER_PORTS = 2181, 6627, [6700, 6701]


def cli(conf: dict[str, Any], base: Path, *args: str) -> subprocess.CompletedProcess[str]:
    conf_file = base / "client.yaml"
    conf_file.write_text(json.dumps(conf))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    result = subprocess.run([sys.executable, "-m", "stormpy.cli", *args, "--config", str(conf_file)],
                            capture_output=True, text=True, timeout=120, env=env, cwd=str(base))
    assert result.returncode == 0, f"stormpy {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result


def listening(host: Any, port: int) -> list[str]:
    """Local addresses listening on ``port`` inside ``host`` (``ss -ltnH``)."""
    out = host.run("ss", "-ltnH", f"sport = :{port}").stdout
    return [line.split()[3].rpartition(":")[0] for line in out.splitlines() if line.strip()]


def test_wordcount_across_two_host_namespaces(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    net = HostNetwork(3)
    prefix = net.prefix
    try:
        net.create()
        zk_host, sup_hosts = net.hosts[0], net.hosts[1:]
        conf = {**FAST_TIMINGS, "storm.zookeeper.servers": [zk_host.address], "storm.zookeeper.port": ZK_PORT,
                "storm.zookeeper.root": "/storm", "nimbus.seeds": [zk_host.address], "nimbus.thrift.port": NIMBUS_PORT,
                "supervisor.slots.ports": WORKER_PORTS}
        del conf["storm.local.hostname"]   # each host sets its own below

        def host_conf(host: Any, role: str) -> dict[str, Any]:
            return host.conf(conf, **{"storm.local.dir": str(tmp_path / host.namespace / role / "local"),
                                      "storm.log.dir": str(tmp_path / host.namespace / role / "logs"),
                                      "dev.zookeeper.path": str(tmp_path / host.namespace / "zookeeper"),
                                      "logviewer.port": 8000})

        zk = net.daemon(zk_host, "dev-zookeeper", host_conf(zk_host, "zk"), logs, name="zookeeper").start()
        zk.wait_ready(lambda: four_letter_word(zk_host.address, ZK_PORT, "ruok") == "imok", 90, "ZooKeeper on host 0")
        nimbus = net.daemon(zk_host, "nimbus", host_conf(zk_host, "nimbus"), logs, name="nimbus").start()
        nimbus.wait_for_port(NIMBUS_PORT, host=zk_host.address, timeout=60)
        assert wait_for_leader(conf, 60) == f"{zk_host.address}:{NIMBUS_PORT}", "Nimbus advertises its host's address"
        for i, host in enumerate(sup_hosts):
            net.daemon(host, "supervisor", host_conf(host, "supervisor"), logs, name=f"supervisor-{i}").start()

        def supervisor_hosts() -> set[str]:
            with connect(conf) as client:
                return {s.host for s in client.getClusterInfo().supervisors}
        wait_until(lambda: supervisor_hosts() == {h.address for h in sup_hosts}, 60,
                   "both supervisors registered with their hosts' addresses")

        out = tmp_path / "out"
        out.mkdir()
        total = 1000
        args = ["submit", str(TOPOLOGIES / "wordcount.py"), "--name", "hosts-wc", "--workers", "2"]
        for key, value in run_conf(out, total).items():
            args += ["-c", f"{key}={json.dumps(value)}"]
        cli(conf, tmp_path, *args)
        wait_until(lambda: len(acked_ids(out)) == total, 180, f"all {total} sentences acked across the hosts")
        wait_until(lambda: counts(out) == expected_counts(total), 30, "the exact word counts")

        with connect(conf) as client:
            topology_id = next(t.id for t in client.getClusterInfo().topologies if t.name == "hosts-wc")
            executors = client.getTopologyInfo(topology_id).executors
        assert {e.host for e in executors} == {h.address for h in sup_hosts}, \
            "the workers run on both supervisor hosts and advertise their addresses"
        for host in sup_hosts:
            bound = {addr for port in WORKER_PORTS for addr in listening(host, port)}
            assert bound == {host.address}, f"workers on {host} bind its address only, not {bound}"
        assert listening(zk_host, NIMBUS_PORT) == [zk_host.address], "Nimbus binds its host's address"
        assert "hosts-wc" in cli(conf, tmp_path, "list").stdout
    finally:
        net.close()
    assert leftovers(prefix) == [], "the harness removes every namespace and link it made"
    assert all(not namespace_pids(f"{prefix}h{i}") for i in range(3))
