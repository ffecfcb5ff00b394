"""A supervisor's code downloads against a real Nimbus and ZooKeeper (issue 26 items 3 and 8).

- A code archive that fails its checks (here: altered on Nimbus's disk after the submit, so its
  SHA-256 no longer matches the digest recorded at submit) is reported once as a topology error
  (``stormpy errors``/UI) and in ``stormpy list``; the supervisor backs off (1 s doubling) instead
  of downloading it again every second, and clears the report once a download works.
- A Nimbus restarted with an empty ``storm.local.dir`` keeps the topology, says CODE MISSING, and
  takes the code back from the supervisor that holds it; bytes that do not match are not taken.

The supervisor side is the real ``Syncer`` run in the test process with a fake clock (so the
backoff is observable without waiting); Nimbus and ZooKeeper are real.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nimbus"))
from nimbus_helpers import call, client_for, code_zip, simple_topology, submit, upload  # noqa: E402
from stormpy.client.nimbus_client import connect, open_peer
from stormpy.cluster_state import ClusterState
from stormpy.supervisor import localstate
from stormpy.supervisor.sync import ERROR_COMPONENT, Syncer
from stormpy.testing import wait_for_leader, wait_until
from stormpy.thrift import storm

REPO = Path(__file__).resolve().parents[2]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def start_nimbus(daemons: Any, conf: dict[str, Any]) -> Any:
    nimbus = daemons.start("nimbus", conf, ready_port=conf["nimbus.thrift.port"], timeout=60)
    wait_for_leader(conf, 60)
    return nimbus


def stormdist(conf: dict[str, Any], topology_id: str) -> Path:
    return Path(conf["storm.local.dir"]) / "nimbus" / "stormdist" / topology_id


def summary(conf: dict[str, Any], topology_id: str) -> Any:
    return next(t for t in call(conf, "getClusterInfo").topologies if t.id == topology_id)


def stormpy_list(conf: dict[str, Any], tmp_path: Path) -> str:
    conf_file = tmp_path / "client.json"
    conf_file.write_text(json.dumps({k: conf[k] for k in ("storm.zookeeper.servers", "storm.zookeeper.port",
                                                          "storm.zookeeper.root", "nimbus.seeds",
                                                          "nimbus.thrift.port")}))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    result = subprocess.run([sys.executable, "-m", "stormpy.cli", "list", "--config", str(conf_file)],
                            capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture
def supervisor(cluster_conf: dict[str, Any], tmp_path: Path):
    """A supervisor's ZooKeeper registration and Syncer (node "sup-a", port 6001), fake clock."""
    conf = {**cluster_conf, "storm.local.dir": str(tmp_path / "supervisor-local")}
    state = ClusterState(conf)
    state.set_supervisor_info("sup-a", storm.SupervisorInfo(time_secs=int(time.time()), hostname="host-a",
                                                            meta=[6001], used_ports=[], uptime_secs=1))
    clock = Clock()
    syncer = Syncer(conf, state, "sup-a", [6001], localstate.LocalState(conf["storm.local.dir"]),
                    lambda: connect(conf, leader_wait_secs=0), hostname="host-a",
                    open_nimbus=lambda host, port: open_peer(conf, host, port), clock=clock)
    try:
        yield syncer, clock
    finally:
        state.close()


def test_failed_archive_is_reported_once_and_backed_off(daemons, cluster_conf, supervisor, tmp_path) -> None:
    syncer, clock = supervisor
    start_nimbus(daemons, cluster_conf)
    topology_id = submit(cluster_conf, "bad-code", simple_topology(), {"topology.acker.executors": 0})
    archive = stormdist(cluster_conf, topology_id) / "stormcode.zip"
    good = archive.read_bytes()
    archive.write_bytes(code_zip({"t.py": "# altered after the submit\n"}))   # still a valid zip

    syncer.sync_once([])
    assert not syncer.code_ready(topology_id)
    errors = call(cluster_conf, "getTopologyInfo", topology_id).errors
    [error] = errors[ERROR_COMPONENT]
    assert "fails its checks" in error.error and "SHA-256" in error.error and error.host == "host-a"
    assert "fails its checks" in summary(cluster_conf, topology_id).sched_status
    assert f"WARNING bad-code: code archive of {topology_id} fails its checks" in stormpy_list(cluster_conf, tmp_path)

    # Backoff: nothing is fetched again before 1 s, then 2 s, then 4 s have passed.
    attempts = []
    for advance in (0.0, 0.5, 0.6, 1.0, 1.0, 3.9, 0.2):
        clock.now += advance
        syncer.sync_once([])
        attempts.append(syncer._failed_downloads[topology_id].count)
    assert attempts == [1, 1, 2, 2, 3, 3, 4]
    assert syncer.next_retry_in([topology_id]) == pytest.approx(8.0)
    assert len(call(cluster_conf, "getTopologyInfo", topology_id).errors[ERROR_COMPONENT]) == 1, "reported once"

    archive.write_bytes(good)                    # the operator repairs it
    clock.now += 8.0
    syncer.sync_once([])
    assert syncer.code_ready(topology_id)
    wait_until(lambda: summary(cluster_conf, topology_id).sched_status is None, 10, "the report to be cleared")
    assert "WARNING" not in stormpy_list(cluster_conf, tmp_path)


def test_nimbus_with_an_empty_local_dir_keeps_the_topology_and_takes_the_code_back(
        daemons, cluster_conf, supervisor, tmp_path) -> None:
    syncer, clock = supervisor
    nimbus = start_nimbus(daemons, cluster_conf)
    topology_id = submit(cluster_conf, "kept", simple_topology(), {"topology.acker.executors": 0})
    syncer.sync_once([])
    assert syncer.code_ready(topology_id)
    original = {name: (stormdist(cluster_conf, topology_id) / name).read_bytes()
                for name in ("stormcode.zip", "stormtopology.ser", "stormconf.json")}

    nimbus.stop(reason="disk replaced")
    shutil.rmtree(cluster_conf["storm.local.dir"])
    start_nimbus(daemons, cluster_conf)
    kept = summary(cluster_conf, topology_id)
    assert (kept.name, kept.status) == ("kept", "ACTIVE"), "the topology is kept"
    assert kept.sched_status.startswith("CODE MISSING"), kept.sched_status
    assert "WARNING kept: CODE MISSING" in stormpy_list(cluster_conf, tmp_path)
    with ClusterState(cluster_conf) as state:
        assert state.assignment(topology_id) is not None, "its assignment (its workers) untouched"
        wait_until(lambda: topology_id in state.code_requests().get(f"127.0.0.1:{cluster_conf['nimbus.thrift.port']}", []),
                   10, "the Nimbus to ask the supervisors for the code")
    # Anybody may upload while the code is missing, but only bytes matching the digests are taken.
    client = client_for(cluster_conf)
    try:
        upload(client, code_zip({"t.py": "import os  # not the submitted code\n"}))
    finally:
        client.close()
    assert not stormdist(cluster_conf, topology_id).exists()

    clock.now += 1
    syncer.sync_once([])                               # sees the request and uploads its copy
    wait_until(lambda: summary(cluster_conf, topology_id).sched_status is None, 10, "the code to be recovered")
    assert {name: (stormdist(cluster_conf, topology_id) / name).read_bytes() for name in original} == original
    assert call(cluster_conf, "getTopology", topology_id) == simple_topology()
    call(cluster_conf, "killTopologyWithOpts", "kept", storm.KillOptions(wait_secs=0))
    wait_until(lambda: not call(cluster_conf, "getClusterInfo").topologies, 30, "the kill")
