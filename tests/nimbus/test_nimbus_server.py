"""A real Nimbus process (one per module) against the real session ZooKeeper.

Supervisors and workers are stood in for by nodes the tests write into ZooKeeper themselves
(nimbus_helpers.FakeSupervisors / HeartbeatWriter). Each test cleans up its topologies and
supervisors so the next one sees an empty cluster.
"""
from __future__ import annotations

import json
import os
import socket
import struct
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from nimbus_helpers import (
    FakeSupervisors,
    HeartbeatWriter,
    bolt,
    by_slot,
    call,
    client_for,
    code_zip,
    empty_stats,
    fields_grouping,
    shuffle,
    simple_topology,
    spout,
    submit,
    upload,
)
from stormpy.cluster_state import ClusterState
from stormpy.testing import DaemonProcess, free_port, wait_until
from stormpy.thrift import storm

SEED_SPREAD = {
    ("node1", 6001): [(1, 1), (7, 7)], ("node1", 6002): [(3, 3), (9, 9)], ("node1", 6003): [(5, 5)],
    ("node2", 6001): [(2, 2), (8, 8)], ("node2", 6002): [(4, 4), (10, 10)], ("node2", 6003): [(6, 6)],
}


@pytest.fixture(scope="module")
def nimbus_conf(zookeeper: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("nimbus-module")
    return {**zookeeper.client_conf(f"/m/nimbus-server-{uuid.uuid4().hex[:8]}"),
            "storm.zookeeper.session.timeout": 4000, "storm.zookeeper.retry.interval": 200,
            "storm.local.dir": str(base / "storm-local"), "storm.log.dir": str(base / "logs"),
            "storm.local.hostname": "127.0.0.1", "nimbus.seeds": ["127.0.0.1"], "nimbus.thrift.port": free_port(),
            "nimbus.monitor.freq.secs": 1, "nimbus.task.timeout.secs": 3, "nimbus.task.launch.secs": 3,
            "nimbus.thrift.max_buffer_size": 1048576}


@pytest.fixture(scope="module")
def nimbus(nimbus_conf: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    daemon = DaemonProcess("nimbus", nimbus_conf, tmp_path_factory.mktemp("nimbus-logs"))
    daemon.start()
    try:
        daemon.wait_for_port(nimbus_conf["nimbus.thrift.port"], timeout=60)
        yield daemon
    finally:
        daemon.stop(reason="module finished")


@pytest.fixture
def state(nimbus_conf: dict[str, Any]) -> Iterator[ClusterState]:
    st = ClusterState(nimbus_conf)
    try:
        yield st
    finally:
        st.close()


@pytest.fixture
def supervisors(nimbus_conf: dict[str, Any]) -> Iterator[FakeSupervisors]:
    sups = FakeSupervisors(nimbus_conf)
    try:
        yield sups
    finally:
        sups.close()


@pytest.fixture(autouse=True)
def clean_cluster(request: pytest.FixtureRequest, nimbus: DaemonProcess, nimbus_conf: dict[str, Any],
                  state: ClusterState) -> Iterator[None]:
    """After each test: kill every topology at once and wait until Nimbus removed them."""
    yield
    if getattr(request.node, "rep_call", None) is not None and request.node.rep_call.failed:
        print(f"\n--- nimbus output ---\n{nimbus.log_tail(80)}")
    for topology in call(nimbus_conf, "getClusterInfo").topologies:
        try:
            call(nimbus_conf, "killTopologyWithOpts", topology.name, storm.KillOptions(wait_secs=0))
        except storm.NotAliveException:
            pass
    wait_until(lambda: not state.active_storms(), 30, "Nimbus to remove the test's topologies")


def test_submit_writes_zookeeper_and_stormdist(nimbus_conf: dict[str, Any], state: ClusterState,
                                               supervisors: FakeSupervisors) -> None:
    supervisors.add("sup1", [6700, 6701])
    topology = simple_topology(spout_par=2, bolt_par=3)
    topology_id = submit(nimbus_conf, "wc", topology, {"topology.workers": 2, "my.key": "v"})
    name, counter, launch = topology_id.rsplit("-", 2)
    assert name == "wc" and counter.isdigit() and launch.isdigit()
    base = state.storm_base(topology_id)
    assert base.name == "wc" and base.status == storm.TopologyStatus.ACTIVE and base.num_workers == 2
    assert base.component_executors == {"spout": 2, "count": 3, "__acker": 2}
    assert topology_id in state.heartbeat_storms()
    assignment = state.assignment(topology_id)
    code_dir = Path(nimbus_conf["storm.local.dir"]).resolve() / "nimbus" / "stormdist" / topology_id
    assert assignment.master_code_dir == str(code_dir)
    assert sorted(os.listdir(code_dir)) == ["stormcode.zip", "stormconf.json", "stormtopology.ser"]
    assert assignment.node_host == {"sup1": "host-sup1"}
    assert set(by_slot(assignment)) == {("sup1", 6700), ("sup1", 6701)}
    assert sum(len(e) for e in by_slot(assignment).values()) == 7
    conf = json.loads(call(nimbus_conf, "getTopologyConf", topology_id))
    assert conf["my.key"] == "v" and conf["topology.name"] == "wc" and conf["topology.acker.executors"] == 2
    assert call(nimbus_conf, "getTopology", topology_id) == topology
    assert call(nimbus_conf, "getUserTopology", topology_id) == topology
    client = client_for(nimbus_conf)
    try:
        download = client.beginFileDownload(assignment.master_code_dir + "/stormcode.zip")
        data = b""
        while chunk := client.downloadChunk(download):
            data += chunk
        assert data == code_zip()
        for bad in (assignment.master_code_dir + "/../../../../etc/passwd", "/etc/passwd",
                    nimbus_conf["storm.local.dir"] + "/nimbus/inbox"):
            with pytest.raises(storm.IllegalStateException):
                client.beginFileDownload(bad)
    finally:
        client.close()


def test_inactive_submit_and_already_alive(nimbus_conf: dict[str, Any], state: ClusterState) -> None:
    topology_id = submit(nimbus_conf, "quiet", simple_topology(), inactive=True)
    assert state.storm_base(topology_id).status == storm.TopologyStatus.INACTIVE
    with pytest.raises(storm.AlreadyAliveException, match="already alive"):
        submit(nimbus_conf, "quiet", simple_topology())
    call(nimbus_conf, "activate", "quiet")
    assert state.storm_base(topology_id).status == storm.TopologyStatus.ACTIVE
    call(nimbus_conf, "deactivate", "quiet")
    assert state.storm_base(topology_id).status == storm.TopologyStatus.INACTIVE
    with pytest.raises(storm.NotAliveException, match="'nope' is not alive"):
        call(nimbus_conf, "activate", "nope")


def test_assignment_spreads_as_the_seed_example(nimbus_conf: dict[str, Any], state: ClusterState,
                                                supervisors: FakeSupervisors) -> None:
    supervisors.add("node1", [6001, 6002, 6003])
    supervisors.add("node2", [6001, 6002, 6003])
    topology_id = submit(nimbus_conf, "seed", simple_topology(spout_par=10),
                         {"topology.workers": 6, "topology.acker.executors": 0})
    assert by_slot(state.assignment(topology_id)) == SEED_SPREAD
    info = call(nimbus_conf, "getClusterInfo")
    assert {(s.supervisor_id, s.num_workers, s.num_used_workers) for s in info.supervisors} == \
        {("node1", 3, 3), ("node2", 3, 3)}
    [summary] = info.topologies
    assert (summary.num_workers, summary.num_executors, summary.num_tasks, summary.status) == (6, 10, 10, "ACTIVE")


def test_silent_executors_are_reassigned_after_task_timeout(nimbus_conf: dict[str, Any], state: ClusterState,
                                                            supervisors: FakeSupervisors) -> None:
    supervisors.add("node1", [6001, 6002])
    supervisors.add("node2", [6001, 6002])
    topology_id = submit(nimbus_conf, "beats", simple_topology(spout_par=4),
                         {"topology.workers": 2, "topology.acker.executors": 0})
    first = state.assignment(topology_id)
    assert set(by_slot(first)) == {("node1", 6001), ("node2", 6001)}
    writer = HeartbeatWriter(state, topology_id).start()
    try:
        writer.silence("node2", 6001)
        starts = {(i.task_start, i.task_end): t for i, t in first.executor_start_time_secs.items()}
        silent = by_slot(first)[("node2", 6001)]

        def restarted() -> bool:
            now = state.assignment(topology_id)
            new = {(i.task_start, i.task_end): t for i, t in now.executor_start_time_secs.items()}
            return all(new[e] > starts[e] for e in silent)
        wait_until(restarted, 30, "Nimbus to reassign the executors whose heartbeats stopped")
        now = state.assignment(topology_id)
        new_starts = {(i.task_start, i.task_end): t for i, t in now.executor_start_time_secs.items()}
        alive = by_slot(first)[("node1", 6001)]
        assert all(new_starts[e] == starts[e] for e in alive), "executors with fresh heartbeats stay untouched"
        assert by_slot(now)[("node1", 6001)] == alive

        supervisors.remove("node2")
        wait_until(lambda: {n for n, _ in by_slot(state.assignment(topology_id))} == {"node1"}, 30,
                   "executors of the vanished supervisor to move to node1")
        assert set(by_slot(state.assignment(topology_id))) == {("node1", 6001), ("node1", 6002)}
    finally:
        writer.stop()


def test_kill_with_wait_removes_after_the_wait(nimbus_conf: dict[str, Any], state: ClusterState) -> None:
    topology_id = submit(nimbus_conf, "victim", simple_topology())
    # 6 s: the checks below must run before the wait ends, also on a stalled machine
    call(nimbus_conf, "killTopologyWithOpts", "victim", storm.KillOptions(wait_secs=6))
    base = state.storm_base(topology_id)
    assert base.status == storm.TopologyStatus.KILLED and base.prev_status == storm.TopologyStatus.ACTIVE
    assert base.topology_action_options.kill_options.wait_secs == 6
    with pytest.raises(storm.NotAliveException, match="cannot activate topology 'victim': it is KILLED"):
        call(nimbus_conf, "activate", "victim")
    # remove_topology deletes assignment, StormBase, then heartbeats: wait for all three to be gone
    wait_until(lambda: state.storm_base(topology_id) is None and state.assignment(topology_id) is None
               and topology_id not in state.heartbeat_storms(), 60,
               "the killed topology's StormBase, assignment and heartbeats to be removed")
    code_dir = Path(nimbus_conf["storm.local.dir"]) / "nimbus" / "stormdist" / topology_id
    wait_until(lambda: not code_dir.exists(), 10, "the topology's stormdist directory to be deleted")


def test_rebalance_with_new_workers_and_parallelism(nimbus_conf: dict[str, Any], state: ClusterState,
                                                    supervisors: FakeSupervisors) -> None:
    supervisors.add("node1", [6001, 6002])
    supervisors.add("node2", [6001, 6002])
    topology_id = submit(nimbus_conf, "rb", simple_topology(spout_par=1, bolt_par=4),
                         {"topology.workers": 2, "topology.acker.executors": 0})
    assert len(by_slot(state.assignment(topology_id))) == 2
    for options, match in [(storm.RebalanceOptions(num_executors={"count": 9}), "1 to 4 executors"),
                           (storm.RebalanceOptions(num_executors={"nope": 1}), "no component 'nope'"),
                           (storm.RebalanceOptions(num_workers=0), "at least 1")]:
        with pytest.raises(storm.InvalidTopologyException, match=match):
            call(nimbus_conf, "rebalance", "rb", options)
    call(nimbus_conf, "rebalance", "rb", storm.RebalanceOptions(wait_secs=5, num_workers=3,   # outlasts the checks
                                                                num_executors={"count": 2}))
    assert state.storm_base(topology_id).status == storm.TopologyStatus.REBALANCING
    with pytest.raises(storm.NotAliveException, match="it is REBALANCING"):
        call(nimbus_conf, "deactivate", "rb")
    wait_until(lambda: state.storm_base(topology_id).status == storm.TopologyStatus.ACTIVE, 30,
               "the rebalance to finish")
    base = state.storm_base(topology_id)
    assert base.num_workers == 3 and base.component_executors["count"] == 2
    executors = [e for group in by_slot(state.assignment(topology_id)).values() for e in group]
    assert sorted(executors) == [(1, 2), (3, 4), (5, 5)]   # count: tasks 1-4 in 2 executors; spout: task 5
    assert len(by_slot(state.assignment(topology_id))) == 3


def test_topology_info_reports_executors_stats_and_errors(nimbus_conf: dict[str, Any], state: ClusterState,
                                                          supervisors: FakeSupervisors) -> None:
    supervisors.add("node1", [6001], hostname="worker-host")
    topology_id = submit(nimbus_conf, "info", simple_topology(spout_par=1, bolt_par=2),
                         {"topology.acker.executors": 0})
    stats = {storm.ExecutorInfo(task_start=t, task_end=t): empty_stats(emitted=t * 10) for t in (1, 2, 3)}
    state.set_worker_heartbeat(topology_id, "node1", 6001, storm.ClusterWorkerHeartbeat(
        storm_id=topology_id, executor_stats=stats, time_secs=1, uptime_secs=42))
    state.report_error(topology_id, "count", storm.ErrorInfo(error="ValueError: bad", error_time_secs=5,
                                                             host="worker-host", port=6001))
    info = call(nimbus_conf, "getTopologyInfo", topology_id)
    assert info.name == "info" and info.status == "ACTIVE"
    assert [(e.component_id, e.host, e.port, e.uptime_secs) for e in info.executors] == \
        [("count", "worker-host", 6001, 42), ("count", "worker-host", 6001, 42), ("spout", "worker-host", 6001, 42)]
    assert info.executors[2].stats.emitted[":all-time"]["default"] == 30
    assert [e.error for e in info.errors["count"]] == ["ValueError: bad"]
    with pytest.raises(storm.NotAliveException):
        call(nimbus_conf, "getTopologyInfo", "missing-1-1")


def _invalid_cases() -> list[tuple[str, Any, dict[str, Any], str]]:
    s = spout(1)
    dup = storm.StormTopology(spouts={"a": s}, bolts={"a": bolt(1, {("a", "default"): shuffle()})}, state_spouts={})
    return [
        ("duplicate-id", dup, {}, "duplicate component id 'a'"),
        ("reserved-id", storm.StormTopology(spouts={"__s": s}, bolts={}, state_spouts={}), {}, "__"),
        ("unknown-component", storm.StormTopology(spouts={"s": s}, bolts={"b": bolt(1, {("x", "default"): shuffle()})},
                                                  state_spouts={}), {}, "'x'"),
        ("unknown-stream", storm.StormTopology(spouts={"s": s}, bolts={"b": bolt(1, {("s", "other"): shuffle()})},
                                               state_spouts={}), {}, "'other'"),
        ("undeclared-field", storm.StormTopology(spouts={"s": s}, bolts={"b": bolt(
            1, {("s", "default"): fields_grouping("nope")})}, state_spouts={}), {}, "'nope'"),
        ("parallelism", storm.StormTopology(spouts={"s": spout(0)}, bolts={}, state_spouts={}), {}, "parallelism"),
        ("non-json-conf", simple_topology(), None, "not valid JSON"),
        ("component-conf", storm.StormTopology(spouts={"s": spout(1, json_conf="[1")}, bolts={}, state_spouts={}),
         {}, "not valid JSON"),
        ("bad-conf-type", simple_topology(), {"topology.workers": "many"}, "topology.workers"),
    ]


@pytest.mark.parametrize("case", _invalid_cases(), ids=lambda c: c[0])
def test_invalid_topologies_are_refused(nimbus_conf: dict[str, Any], state: ClusterState,
                                        case: tuple[str, Any, Any, str]) -> None:
    _kind, topology, conf, match = case
    client = client_for(nimbus_conf)
    try:
        location = upload(client, code_zip())
        json_conf = "{not json" if conf is None else json.dumps(conf)
        with pytest.raises(storm.InvalidTopologyException) as info:
            client.submitTopology("bad", location, json_conf, topology)
        assert match in info.value.msg
    finally:
        client.close()
    assert state.active_storms() == []


@pytest.mark.parametrize("name,match", [("", "empty"), ("a/b", "'/'"), ("   ", "empty")])
def test_invalid_names_are_refused(nimbus_conf: dict[str, Any], name: str, match: str) -> None:
    with pytest.raises(storm.InvalidTopologyException, match=match):
        submit(nimbus_conf, name, simple_topology())


def test_submit_needs_a_finished_upload_of_this_nimbus(nimbus_conf: dict[str, Any]) -> None:
    for location in ("/etc/passwd", "../../x", nimbus_conf["storm.local.dir"] + "/nimbus/inbox/../../x.zip"):
        with pytest.raises(storm.InvalidTopologyException, match="not a finished upload"):
            call(nimbus_conf, "submitTopology", "x", location, "{}", simple_topology())
    client = client_for(nimbus_conf)
    try:
        location = client.beginFileUpload()
        client.uploadChunk(location, b"this is not a zip")
        client.finishFileUpload(location)
        with pytest.raises(storm.InvalidTopologyException, match="not a zip"):
            client.submitTopology("x", location, "{}", simple_topology())
        with pytest.raises(storm.IllegalStateException, match="unknown or expired"):
            client.uploadChunk("/tmp/evil", b"x")
    finally:
        client.close()


def _send_raw(port: int, payload: bytes, read: bool = False) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        try:
            sock.sendall(payload)
            if read:
                sock.recv(100)
        except OSError:
            pass   # Nimbus may close the connection as soon as it sees garbage


def test_garbage_on_the_thrift_port_leaves_nimbus_answering(nimbus: DaemonProcess,
                                                            nimbus_conf: dict[str, Any]) -> None:
    port = nimbus_conf["nimbus.thrift.port"]
    call(nimbus_conf, "getClusterInfo")
    process = psutil.Process(nimbus.pid)
    rss_before = process.memory_info().rss
    valid_call = struct.pack("!I", 0x80010001) + struct.pack("!i", 14) + b"getClusterInfo" + struct.pack("!i", 0) + b"\x00"
    for i in range(30):
        _send_raw(port, os.urandom(4096))                                     # random bytes
        _send_raw(port, struct.pack("!i", 2**31 - 1) + b"\x00" * 64)          # a 2 GiB frame header
        _send_raw(port, struct.pack("!i", 1000) + valid_call)                 # a truncated frame
        _send_raw(port, struct.pack("!i", len(valid_call)) + valid_call[:-1] + b"\x0b", read=True)  # bad struct
        _send_raw(port, struct.pack("!i", 64) + struct.pack("!I", 0x80010001) + struct.pack("!i", 2**30)
                  + b"x" * 56, read=True)                                     # huge method-name length
    summary = call(nimbus_conf, "getClusterInfo")
    assert summary.nimbus_uptime_secs >= 0
    assert nimbus.is_alive()
    growth = process.memory_info().rss - rss_before
    assert growth < 64 * 1024 * 1024, f"Nimbus RSS grew by {growth / 2**20:.1f} MiB on bad input"
