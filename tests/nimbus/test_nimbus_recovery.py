"""Nimbus restarts: SIGKILL mid-kill and mid-rebalance, orphan cleanup at startup, inbox expiry.

Each test runs its own Nimbus (it gets killed) in its own ZooKeeper chroot.
"""
from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from nimbus_helpers import FakeSupervisors, by_slot, call, client_for, simple_topology, submit
from stormpy.cluster_state import ClusterState
from stormpy.testing import DaemonProcess, wait_for_leader, wait_until
from stormpy.thrift import storm


def start_nimbus(daemons: Any, conf: dict[str, Any]) -> DaemonProcess:
    # A restarted Nimbus serves as a standby until its killed predecessor's session (4 s here)
    # releases the lock; leader-only calls need it to lead.
    nimbus = daemons.start("nimbus", conf, ready_port=conf["nimbus.thrift.port"], timeout=60)
    wait_for_leader(conf, 60)
    return nimbus


def stormdist(conf: dict[str, Any]) -> Path:
    return Path(conf["storm.local.dir"]) / "nimbus" / "stormdist"


def test_sigkill_during_kill_wait_then_restart_completes_the_kill(daemons: Any, cluster_conf: dict[str, Any]) -> None:
    nimbus = start_nimbus(daemons, cluster_conf)
    topology_id = submit(cluster_conf, "doomed", simple_topology())
    nimbus.kill(signal.SIGKILL)
    nimbus = start_nimbus(daemons, cluster_conf)
    assert [t.id for t in call(cluster_conf, "getClusterInfo").topologies] == [topology_id], \
        "a restarted Nimbus keeps its topologies"
    call(cluster_conf, "killTopologyWithOpts", "doomed", storm.KillOptions(wait_secs=3))
    nimbus.kill(signal.SIGKILL)
    with ClusterState(cluster_conf) as state:
        assert state.storm_base(topology_id).status == storm.TopologyStatus.KILLED
        start_nimbus(daemons, cluster_conf)
        wait_until(lambda: state.storm_base(topology_id) is None, 60,
                   "the restarted Nimbus to finish the interrupted kill")
        assert state.assignment(topology_id) is None
    # The StormBase goes first, then the code (NimbusCore.remove_topology): a crash in between
    # leaves orphan code (removed at start-up), never a topology without code.
    wait_until(lambda: not (stormdist(cluster_conf) / topology_id).exists(), 10,
               "the killed topology's code to be removed after its state")


def test_sigkill_during_rebalance_then_restart_finishes_it(daemons: Any, cluster_conf: dict[str, Any]) -> None:
    nimbus = start_nimbus(daemons, cluster_conf)
    supervisors = FakeSupervisors(cluster_conf)
    try:
        supervisors.add("node1", [6001, 6002, 6003])
        topology_id = submit(cluster_conf, "grow", simple_topology(spout_par=3),
                             {"topology.workers": 1, "topology.acker.executors": 0})
        call(cluster_conf, "rebalance", "grow", storm.RebalanceOptions(wait_secs=3, num_workers=3))
        nimbus.kill(signal.SIGKILL)
        start_nimbus(daemons, cluster_conf)
        with ClusterState(cluster_conf) as state:
            wait_until(lambda: state.storm_base(topology_id).status == storm.TopologyStatus.ACTIVE, 60,
                       "the restarted Nimbus to finish the interrupted rebalance")
            assert state.storm_base(topology_id).num_workers == 3
            assert len(by_slot(state.assignment(topology_id))) == 3
    finally:
        supervisors.close()


def test_orphans_are_cleaned_at_startup(daemons: Any, cluster_conf: dict[str, Any]) -> None:
    # Code without a StormBase, a StormBase without code, and leftovers of a vanished topology.
    orphan_code = stormdist(cluster_conf) / "orphan-1-1"
    orphan_code.mkdir(parents=True)
    (orphan_code / "stormconf.json").write_text("{}")
    half_written = stormdist(cluster_conf) / ".tmp-x-1-1-abcd"
    half_written.mkdir()
    with ClusterState(cluster_conf) as state:
        state.set_storm_base("ghost-1-1", storm.StormBase(name="ghost", status=storm.TopologyStatus.ACTIVE,
                                                           num_workers=1, launch_time_secs=1))
        state.set_assignment("ghost-1-1", storm.Assignment(master_code_dir="/nowhere"))
        state.set_assignment("gone-1-1", storm.Assignment(master_code_dir="/nowhere"))
        state.setup_heartbeats("gone-1-1")
        state.report_error("gone-1-1", "bolt", storm.ErrorInfo(error="old", error_time_secs=1))
        start_nimbus(daemons, cluster_conf)
        assert not orphan_code.exists() and not half_written.exists()
        # A StormBase whose code is gone is never removed for that (issue 26): kept, assignment
        # untouched, the missing code reported.
        assert state.storm_base("ghost-1-1") is not None and state.assignment("ghost-1-1") is not None
        wait_until(lambda: not state.heartbeat_storms() and not state.error_topologies()
                   and state.assignment_ids() == ["ghost-1-1"], 30,
                   "the monitor to clean state of vanished topologies")
    [ghost] = call(cluster_conf, "getClusterInfo").topologies
    assert (ghost.id, ghost.status) == ("ghost-1-1", "ACTIVE")
    assert ghost.sched_status.startswith("CODE MISSING on Nimbus")


def test_inbox_uploads_expire(daemons: Any, cluster_conf: dict[str, Any]) -> None:
    conf = {**cluster_conf, "nimbus.cleanup.inbox.freq.secs": 1, "nimbus.inbox.jar.expiration.secs": 1}
    start_nimbus(daemons, conf)
    client = client_for(conf)
    try:
        location = client.beginFileUpload()
        client.uploadChunk(location, b"PK")
        client.finishFileUpload(location)
        wait_until(lambda: not Path(location).exists(), 30, f"the expired upload {location} to be deleted")
        with pytest.raises(storm.InvalidTopologyException, match="not a finished upload"):
            client.submitTopology("late", location, json.dumps({}), simple_topology())
    finally:
        client.close()


def test_nimbus_rides_out_a_zookeeper_restart(daemons: Any, cluster_conf: dict[str, Any], tmp_path: Path) -> None:
    """A private ZooKeeper is SIGKILLed and restarted on the same port: Nimbus pauses, then
    serves again with its topology intact (the session survives a short outage)."""
    from stormpy.testing import ZooKeeperServer

    server = ZooKeeperServer(tmp_path / "zk", tick_time_ms=500).start()
    try:
        conf = {**cluster_conf, **server.client_conf("/storm"), "storm.zookeeper.session.timeout": 10000}
        nimbus = start_nimbus(daemons, conf)
        topology_id = submit(conf, "steady", simple_topology())
        server.kill()
        server.start()
        wait_until(lambda: _listed(conf, "steady"), 60, "Nimbus to answer with its topology after the restart")
        # A restart slower than the session timeout (a loaded machine: 11 s once in CI) expires
        # the session; Nimbus answers reads at once and takes writes once it leads again.
        wait_until(lambda: _deactivated(conf, "steady"), 60, "Nimbus to lead again and deactivate the topology")
        with ClusterState(conf) as state:
            assert state.storm_base(topology_id).status == storm.TopologyStatus.INACTIVE
        assert nimbus.is_alive()
    finally:
        daemons.stop_all(reason="ZooKeeper restart test finished")
        server.stop(reason="test finished")


def _deactivated(conf: dict[str, Any], name: str) -> bool:
    try:
        call(conf, "deactivate", name)
    except Exception as exc:   # a standby refuses writes until it leads again
        if "not the leader" not in str(exc):
            raise
        return False
    return True


def _listed(conf: dict[str, Any], name: str) -> bool:
    try:
        return any(t.name == name for t in call(conf, "getClusterInfo").topologies)
    except Exception:   # Nimbus answers an internal error while ZooKeeper is still coming back
        return False
