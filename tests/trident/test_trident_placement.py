"""States kept on one host or in one process are refused at submit where the topology would outgrow
them (issue 26 item 8), by a real Nimbus process over a real ZooKeeper, through ``stormpy submit``.

The supervisors are stand-ins: SupervisorInfo nodes written into ZooKeeper (what a supervisor
registers), with distinct host names, so one machine shows Nimbus a cluster of several hosts.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stormpy.cluster_state import ClusterState
from stormpy.testing import DaemonProcess, free_port
from stormpy.thrift import storm
from stormpy.trident import Count, MemoryMapState, RedisMapState, SparkState, SqliteMapState, TridentTopology
from stormpy.trident.compile import compile_trident
from stormpy.topology.placement import check_host_local_states

from ._harness import FixedSpout

REPO = Path(__file__).resolve().parents[2]
TOPOLOGY = Path(__file__).resolve().parent / "topologies" / "trident_wc_cluster.py"


@pytest.fixture(scope="module")
def nimbus_conf(zookeeper: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    base = tmp_path_factory.mktemp("placement")
    conf = {**zookeeper.client_conf(f"/m/placement-{uuid.uuid4().hex[:8]}"),
            "storm.zookeeper.session.timeout": 4000, "storm.local.dir": str(base / "storm-local"),
            "storm.log.dir": str(base / "logs"), "storm.local.hostname": "127.0.0.1",
            "nimbus.seeds": ["127.0.0.1"], "nimbus.thrift.port": free_port()}
    daemon = DaemonProcess("nimbus", conf, base / "nimbus-logs")
    daemon.start()
    try:
        daemon.wait_for_port(conf["nimbus.thrift.port"], timeout=60)
        yield conf
    finally:
        daemon.stop(reason="module finished")


@pytest.fixture
def supervisors(nimbus_conf: dict[str, Any]) -> Iterator[Any]:
    """``supervisors(*hostnames)`` registers one stand-in supervisor per name (removed after the test)."""
    state = ClusterState(nimbus_conf)
    added: list[str] = []

    def register(*hostnames: str) -> None:
        for host in hostnames:
            sid = f"sup-{uuid.uuid4().hex[:6]}"
            state.set_supervisor_info(sid, storm.SupervisorInfo(time_secs=int(time.time()), hostname=host,
                                                                meta=[6700, 6701], used_ports=[], uptime_secs=1))
            added.append(sid)

    try:
        yield register
    finally:
        for sid in added:
            state.remove_supervisor_info(sid)
        state.close()


def submit(conf: dict[str, Any], tmp_path: Path, name: str, *extra: str) -> subprocess.CompletedProcess[str]:
    client_conf = tmp_path / "client.json"
    client_conf.write_text(json.dumps({k: conf[k] for k in ("storm.zookeeper.servers", "storm.zookeeper.port",
                                                            "storm.zookeeper.root", "nimbus.seeds",
                                                            "nimbus.thrift.port")}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    args = ["submit", str(TOPOLOGY), "--name", name, "--workers", "2",
            "-c", f"tcluster.db={json.dumps(str(tmp_path / 'wc.db'))}", *extra, "--config", str(client_conf)]
    return subprocess.run([sys.executable, "-m", "stormpy.cli", *args], capture_output=True, text=True,
                          timeout=120, env=env, cwd=str(tmp_path))


def kill(conf: dict[str, Any], tmp_path: Path, name: str) -> None:
    client_conf = tmp_path / "client.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    subprocess.run([sys.executable, "-m", "stormpy.cli", "kill", name, "-w", "0", "--config", str(client_conf)],
                   capture_output=True, text=True, timeout=60, env=env, cwd=str(tmp_path), check=True)


def test_sqlite_state_refused_on_two_hosts_unless_allowed(nimbus_conf, supervisors, tmp_path):
    supervisors("host-a.example", "host-b.example")
    refused = submit(nimbus_conf, tmp_path, "wc-two-hosts")
    assert refused.returncode != 0
    lines = [line for line in refused.stderr.splitlines() if line.startswith("stormpy: error:")]
    assert len(lines) == 1, refused.stderr          # one line says why
    assert "SqliteMapState(" in lines[0] and "lives on one host's disk, and the cluster has 2 supervisor hosts " \
        "(host-a.example, host-b.example)" in lines[0]
    assert "topology.trident.state.allow.host.local=true" in lines[0]
    allowed = submit(nimbus_conf, tmp_path, "wc-allowed", "-c", "topology.trident.state.allow.host.local=true")
    assert allowed.returncode == 0, allowed.stderr
    kill(nimbus_conf, tmp_path, "wc-allowed")


def test_sqlite_state_accepted_when_every_supervisor_is_on_one_host(nimbus_conf, supervisors, tmp_path):
    supervisors("host-a.example", "host-a.example")      # two supervisors, one machine
    accepted = submit(nimbus_conf, tmp_path, "wc-one-host")
    assert accepted.returncode == 0, accepted.stderr
    kill(nimbus_conf, tmp_path, "wc-one-host")


def compiled(factory: Any) -> Any:
    class Topo(TridentTopology):
        def build(self, conf):
            (self.new_stream("s", FixedSpout(["w"], [[["a"]]]))
                 .group_by(["w"]).persistent_aggregate(factory, Count(), ["n"]))
    return compile_trident(Topo, {})


def hosts(*names: str) -> dict[str, Any]:
    return {f"s{i}": storm.SupervisorInfo(time_secs=0, hostname=n, meta=[1], used_ports=[], uptime_secs=1)
            for i, n in enumerate(names)}


def test_which_states_are_refused_where(tmp_path):
    memory = compiled(MemoryMapState.transactional())
    sqlite = compiled(SqliteMapState.opaque(tmp_path / "x.db"))
    spark_local = compiled(SparkState(path=str(tmp_path / "out")))
    spark_hdfs = compiled(SparkState(path="hdfs://nn:8020/out"))
    redis_state = compiled(RedisMapState.transactional("redis://r:6379/0", "wc"))
    one, two = hosts("a"), hosts("a", "b")

    with pytest.raises(storm.InvalidTopologyException, match="lives in one worker's memory, and this topology runs 1"):
        check_host_local_states(memory, {"topology.workers": 1}, two)
    check_host_local_states(memory, {"topology.workers": 2}, one)   # one host: a test state, as the issue asks
    with pytest.raises(storm.InvalidTopologyException, match="lives on one host's disk"):
        check_host_local_states(sqlite, {"topology.workers": 1}, two)   # one worker still moves host
    check_host_local_states(sqlite, {"topology.workers": 4}, one)
    with pytest.raises(storm.InvalidTopologyException, match="state parquet at .* lives on one host's disk"):
        check_host_local_states(spark_local, {"topology.workers": 2}, two)
    for shared in (spark_hdfs, redis_state):
        check_host_local_states(shared, {"topology.workers": 8}, two)
    for topo in (memory, sqlite, spark_local):
        check_host_local_states(topo, {"topology.workers": 8, "topology.trident.state.allow.host.local": True}, two)
